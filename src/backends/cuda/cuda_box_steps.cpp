// The decoder's box steps as one box_step launch each (kernels/box_step.cu): the bbox head's
// last linear (N = 4) read only by a box_refine, and, when there is one, the linear (K = 4)
// that reads the refined boxes next (query_pos_head.layers.0 of the next layer).
// The ops stay in the graph, moved next to each other (the launch must come before any other
// reader of the refined boxes): the schedule and the arena still see them. The launch sits at
// the step's last op, which is charged with reading the step's inputs (extra_reads_) and, when
// that is the next linear, with writing the refined boxes (extra_writes_), so that every reader
// of those waits for the launch and nothing reuses the bytes before it runs.
// DETFORGE_CUDA_BOX_STEP=0 turns it off (separate kernels); off under DETFORGE_CUDA_ROW_MLP=1,
// whose chains take the same ops.
#include <algorithm>

#include "backends/cuda/cuda_engine.h"
#include "graph/op_order.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

namespace {

bool plain_linear(const graph::Graph& g, const graph::Op& op) {
  return op.kind == OpKind::linear && op.inputs.size() == 3 && op.inputs[2] != graph::kNoTensor &&
         g.tensor(op.inputs[1]).shape.size() == 2;
}

// Box steps by data: (last linear, box_refine, next linear or -1), in op order of the box_refine.
std::vector<CudaEngine::BoxStep> find_box_steps(const graph::Graph& g) {
  const auto cons = graph::consumers(g);
  const auto prod = graph::producers(g);
  std::vector<CudaEngine::BoxStep> r;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const graph::Op& rf = g.ops[i];
    if (rf.kind != OpKind::box_refine) continue;
    const TensorId delta = rf.inputs[0];
    const int l3 = prod[delta];
    if (l3 < 0 || cons[delta].size() != 1 || !plain_linear(g, g.ops[l3]) || g.ops[l3].act() != graph::Act::none ||
        g.tensor(g.ops[l3].inputs[1]).shape[0] != 4)
      continue;
    const TensorId ref_out = rf.outputs[0];
    const bool is_output = std::find(g.outputs.begin(), g.outputs.end(), ref_out) != g.outputs.end();
    int l1 = -1;
    for (int c : cons[ref_out])
      if (!is_output && c >= 0 && plain_linear(g, g.ops[c]) && g.ops[c].inputs[0] == ref_out &&
          g.tensor(g.ops[c].inputs[1]).shape[1] == 4 && g.tensor(g.ops[c].inputs[1]).shape[0] % 8 == 0) {
        l1 = c;
        break;
      }
    r.push_back({l3, static_cast<int>(i), l1});
  }
  return r;
}

}  // namespace

void CudaEngine::setup_box_steps() {
  const size_t n = g_.ops.size();
  box_step_of_.assign(n, -1);
  extra_writes_.assign(n, {});
  box_steps_.clear();
  if (!box_step_on_ || row_mlp_) return;
  // Move each step's box_refine and next linear right after its last linear. Valid when the
  // box_refine's other input (the previous boxes) exists by then.
  auto steps = find_box_steps(g_);
  const auto prod = graph::producers(g_);
  std::vector<std::pair<int, std::vector<int>>> groups;
  auto in_dec_tail = [&](const BoxStep& s) {  // cuda_dec_tails.cpp runs these
    return std::find(dec_tail_boxes_.begin(), dec_tail_boxes_.end(), g_.ops[s.refine].outputs[0]) !=
           dec_tail_boxes_.end();
  };
  for (const auto& s : steps) {
    if (prod[g_.ops[s.refine].inputs[1]] > s.linear || in_dec_tail(s)) continue;
    groups.push_back({s.linear, {s.refine}});
    if (s.next >= 0) groups.back().second.push_back(s.next);
  }
  graph::reorder_ops(g_, graph::moved_after(n, groups));
  for (const auto& s : find_box_steps(g_)) {
    if (s.refine != s.linear + 1 || (s.next >= 0 && s.next != s.refine + 1) || in_dec_tail(s)) continue;
    const graph::Op& l3 = g_.ops[s.linear];
    const int K = static_cast<int>(g_.tensor(l3.inputs[1]).shape[1]);
    const int N1 = s.next >= 0 ? static_cast<int>(g_.tensor(g_.ops[s.next].inputs[1]).shape[0]) : 0;
    if ((K * (half_ ? 2 : 4)) % 16 != 0 || N1 % 8 != 0) continue;
    const int last = s.next >= 0 ? s.next : s.refine;
    for (int i = s.linear; i <= last; ++i) box_step_of_[i] = static_cast<int>(box_steps_.size());
    auto& extra = extra_reads_[last];
    extra.push_back(l3.inputs[0]);
    if (s.next >= 0) {
      extra.push_back(g_.ops[s.refine].inputs[1]);
      extra_writes_[last].push_back(g_.ops[s.refine].outputs[0]);
    }
    box_steps_.push_back(s);
  }
}

bool CudaEngine::launch_box_step(size_t i, int batch, cudaStream_t s) {
  const int k = box_step_of_.empty() ? -1 : box_step_of_[i];
  if (k < 0) return false;
  const BoxStep& st = box_steps_[k];
  if (static_cast<int>(i) != (st.next >= 0 ? st.next : st.refine)) return true;
  const graph::Op &l3 = g_.ops[st.linear], &rf = g_.ops[st.refine];
  BoxStepArgs a;
  a.x = ptr(l3.inputs[0]);
  a.w3 = ptr(l3.inputs[1]);
  a.b3 = ptr(l3.inputs[2]);
  a.ref_in = ptr(rf.inputs[1]);
  a.ref_out = ptr(rf.outputs[0]);
  a.K = static_cast<int>(g_.tensor(l3.inputs[1]).shape[1]);
  a.rows = g_.tensor(l3.inputs[0]).numel() / a.K * batch;
  if (st.next >= 0) {
    const graph::Op& l1 = g_.ops[st.next];
    a.w1 = ptr(l1.inputs[1]);
    a.b1 = ptr(l1.inputs[2]);
    a.y1 = ptr(l1.outputs[0]);
    a.N1 = static_cast<int>(g_.tensor(l1.inputs[1]).shape[0]);
    a.act1 = l1.act();
  }
  box_step(a, half_, s);
  return true;
}

bool CudaEngine::absorbed_in_box_step(size_t i) const {
  const int k = box_step_of_.empty() ? -1 : box_step_of_[i];
  if (k < 0) return false;
  const BoxStep& st = box_steps_[k];
  return static_cast<int>(i) != (st.next >= 0 ? st.next : st.refine);
}

}  // namespace detforge::cuda
