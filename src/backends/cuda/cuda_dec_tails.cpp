// The decoder layers' row-local tails as one dec_tail launch each (kernels/dec_tail.h says what
// and why). Found by data from each box_refine: back through the bbox head (3 linears), the final
// LayerNorm, fc2 (with its residual) and fc1, the encoder_attn LayerNorm and output_proj (with its
// residual); forward, where the refined boxes feed the next layer, through query_pos_head (K 4 ->
// P, relu; P -> 256) and the self_attn.pos add of the final LayerNorm's output and that position.
// As with the box steps, the ops stay in the graph, moved next to each other; the launch sits at
// the tail's last op, which is charged with reading every input of the tail (extra_reads_, so the
// arena keeps each intermediate until the launch and no two share bytes) and with writing every
// output (extra_writes_, so every reader outside waits for the launch). fp16 only.
// DETFORGE_CUDA_DEC_TAIL=1 turns it on (off by default: measured slower, batch 1 0.685 against
// 0.669 ms on an H100; NOTES.md v23) for batches of at
// most DETFORGE_CUDA_DEC_TAIL_MAX_ROWS query rows (default 300, batch 1): each cluster re-reads
// every weight of the tail, and past 33 clusters (528 rows) they no longer fit on an H100 at once
// (34 us per tail at 300 rows, 68 us at 600; H100, session 20 call 4). Above it, and for the
// ops of a tail in a plan where it is off, the ops launch their own kernels.
#include <algorithm>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/dec_tail.h"
#include "graph/dec_tails.h"
#include "graph/op_order.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::Act;
using graph::OpKind;
using graph::TensorId;

namespace {

int64_t n_of(const graph::Graph& g, int i) { return g.tensor(g.ops[i].inputs[1]).shape[0]; }
int64_t k_of(const graph::Graph& g, int i) { return g.tensor(g.ops[i].inputs[1]).shape[1]; }

}  // namespace

void CudaEngine::order_dec_tails() {
  dec_tail_boxes_.clear();
  if (!dec_tail_on_ || !half_ || row_mlp_) return;
  const auto prod = graph::producers(g_);
  std::vector<std::pair<int, std::vector<int>>> groups;
  for (const auto& t : graph::find_decoder_tails(g_)) {
    // The boxes refined here must exist before the tail's first op (the previous layer's).
    if (prod[g_.ops[t.refine].inputs[1]] > t.out_proj) continue;
    auto ops = t.ops();
    groups.push_back({ops[0], std::vector<int>(ops.begin() + 1, ops.end())});
    dec_tail_boxes_.push_back(g_.ops[t.refine].outputs[0]);
  }
  graph::reorder_ops(g_, graph::moved_after(g_.ops.size(), groups));
}

void CudaEngine::setup_dec_tails() {
  const size_t n = g_.ops.size();
  dec_tail_of_.assign(n, -1);
  dec_tail_member_.assign(n, 0);
  dec_tails_.clear();
  if (dec_tail_boxes_.empty()) return;
  for (const auto& t : graph::find_decoder_tails(g_)) {
    const TensorId boxes = g_.ops[t.refine].outputs[0];
    if (std::find(dec_tail_boxes_.begin(), dec_tail_boxes_.end(), boxes) == dec_tail_boxes_.end()) continue;
    const auto ops = t.ops();
    bool ok = true;
    for (size_t k = 0; k < ops.size(); ++k)
      ok = ok && ops[k] == ops[0] + static_cast<int>(k) && !absorbed_[ops[k]] &&
           (box_step_of_.empty() || box_step_of_[ops[k]] < 0);
    if (!ok) continue;
    const int last = ops.back();
    for (int i : ops) {
      if (i != last) absorbed_[i] = 1;
      for (TensorId x : g_.ops[i].inputs)
        if (x != graph::kNoTensor && !g_.tensor(x).is_const) extra_reads_[last].push_back(x);
      if (i != last) extra_writes_[last].push_back(g_.ops[i].outputs[0]);
    }
    dec_tail_of_[last] = static_cast<int>(dec_tails_.size());
    dec_tails_.push_back(t);
  }
  for (const auto& t : dec_tails_)
    for (int i : t.ops()) dec_tail_member_[i] = 1;
}

bool CudaEngine::dec_tail_runs(size_t i, const BatchPlan& p) const {
  return !dec_tail_member_.empty() && dec_tail_member_[i] && p.dec_tail_on;
}

bool CudaEngine::absorbed_in_dec_tail(size_t i) const {
  for (const auto& t : dec_tails_) {
    const auto ops = t.ops();
    if (static_cast<int>(i) != ops.back() && std::find(ops.begin(), ops.end(), static_cast<int>(i)) != ops.end())
      return true;
  }
  return false;
}

bool CudaEngine::launch_dec_tail(size_t i, const BatchPlan& p, int batch, cudaStream_t s) {
  const int k = dec_tail_of_.empty() ? -1 : dec_tail_of_[i];
  if (k < 0 || !p.dec_tail_on) return false;  // off at this batch: the op runs its own way
  const DecTail& t = dec_tails_[k];
  auto gemm = [&](int op, DecTailGemm& d) {
    const graph::Op& o = g_.ops[op];
    d.a = ptr(o.inputs[0]);
    d.K = static_cast<int>(k_of(g_, op));
    d.w = ptr(o.inputs[1]);
    d.bias = ptr(o.inputs[2]);
    d.res = o.has_input(3) ? ptr(o.inputs[3]) : nullptr;
    d.N = static_cast<int>(n_of(g_, op));
    d.relu = o.act() == Act::relu;
    d.y = ptr(o.outputs[0]);
  };
  // A stage that starts with a LayerNorm reads the LayerNorm's input and writes its output.
  auto with_ln = [&](int ln, DecTailGemm& d) {
    const graph::Op& o = g_.ops[ln];
    d.a = ptr(o.inputs[0]);
    d.ln_g = ptr(o.inputs[1]);
    d.ln_b = ptr(o.inputs[2]);
    d.eps = o.attr_float("eps");
    d.ln_out = ptr(o.outputs[0]);
  };
  DecTailArgs a;
  const graph::Op& op0 = g_.ops[t.out_proj];
  a.rows = static_cast<int>(g_.tensor(op0.inputs[0]).numel() / k_of(g_, t.out_proj) * batch);
  gemm(t.out_proj, a.g[0]);
  gemm(t.fc1, a.g[1]);
  with_ln(t.ln1, a.g[1]);
  gemm(t.fc2, a.g[2]);
  gemm(t.bb0, a.g[3]);
  with_ln(t.ln2, a.g[3]);
  gemm(t.bb1, a.g[4]);
  const graph::Op &l3 = g_.ops[t.bb2], &rf = g_.ops[t.refine];
  a.w3 = ptr(l3.inputs[1]);
  a.b3 = ptr(l3.inputs[2]);
  a.ref_in = ptr(rf.inputs[1]);
  a.ref_out = ptr(rf.outputs[0]);
  if (t.pos_add >= 0) {
    const graph::Op& q0 = g_.ops[t.qp0];
    a.wq1 = ptr(q0.inputs[1]);
    a.bq1 = ptr(q0.inputs[2]);
    a.P = static_cast<int>(n_of(g_, t.qp0));
    a.q1 = ptr(q0.outputs[0]);
    gemm(t.qp1, a.gq);
    a.gq.add2 = ptr(g_.ops[t.ln2].outputs[0]);
    a.gq.y2 = ptr(g_.ops[t.pos_add].outputs[0]);
  }
  dec_tail(a, s);
  return true;
}

}  // namespace detforge::cuda
