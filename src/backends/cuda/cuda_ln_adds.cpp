// A layer_norm and an add of its output with a tensor that exists before the layer_norm runs, as
// one launch (kernels/layer_norm.cu's second output): r18vd's three decoder self-attention
// LayerNorms, whose output is read plain and plus the query position (the deformable query).
// Why: the add was a ~1.5 us kernel of its own on the decoder's critical path (H200 CUPTI
// timeline, fp16 batch 1). DETFORGE_CUDA_LN_ADD=0 turns it off.
// Like the box steps, both ops stay in the graph, the add right after its layer_norm; the launch
// sits at the add (the later op), which is charged with reading the layer_norm's inputs
// (extra_reads_) and writing its output (extra_writes_), so the arena keeps those bytes and the
// schedule orders every reader after the launch. The layer_norm's own entry launches nothing.
#include <algorithm>

#include "backends/cuda/cuda_engine.h"
#include "graph/op_order.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

namespace {

// (layer_norm, add) pairs by data: the add (no activation, two activations of the layer_norm's
// shape) reads the layer_norm's output and a tensor produced before the layer_norm; the
// layer_norm's output is no graph output (outputs are converted after their producer's launch).
std::vector<std::pair<int, int>> find_ln_adds(const graph::Graph& g) {
  const auto cons = graph::consumers(g);
  const auto prod = graph::producers(g);
  std::vector<char> taken(g.ops.size(), 0);
  std::vector<std::pair<int, int>> r;
  for (size_t l = 0; l < g.ops.size(); ++l) {
    const graph::Op& ln = g.ops[l];
    if (ln.kind != OpKind::layer_norm) continue;
    const TensorId y = ln.outputs[0];
    if (std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end()) continue;
    for (int a : cons[y]) {
      if (a < 0 || taken[a]) continue;
      const graph::Op& add = g.ops[a];
      if (add.kind != OpKind::add || add.act() != graph::Act::none || add.inputs.size() != 2) continue;
      const TensorId other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
      if (other == y || g.tensor(other).is_const || g.tensor(other).shape != g.tensor(y).shape ||
          g.tensor(add.outputs[0]).shape != g.tensor(y).shape || prod[other] > static_cast<int>(l))
        continue;
      taken[a] = 1;
      r.push_back({static_cast<int>(l), a});
      break;
    }
  }
  return r;
}

}  // namespace

void CudaEngine::order_ln_adds() {
  if (!ln_add_on_ || row_mlp_) return;
  std::vector<std::pair<int, std::vector<int>>> groups;
  for (const auto& [l, a] : find_ln_adds(g_)) groups.push_back({l, {a}});
  graph::reorder_ops(g_, graph::moved_after(g_.ops.size(), groups));
}

void CudaEngine::setup_ln_adds() {
  ln_add_of_.assign(g_.ops.size(), -1);
  if (!ln_add_on_ || row_mlp_) return;
  for (const auto& [l, a] : find_ln_adds(g_)) {
    if (a != l + 1 || absorbed_[l] || absorbed_[a] || (!box_step_of_.empty() && (box_step_of_[l] >= 0 || box_step_of_[a] >= 0)))
      continue;
    const graph::Op& ln = g_.ops[l];
    ln_add_of_[a] = l;
    absorbed_[l] = 1;
    for (TensorId t : ln.inputs)
      if (t != graph::kNoTensor && !g_.tensor(t).is_const) extra_reads_[a].push_back(t);
    extra_writes_[a].push_back(ln.outputs[0]);
  }
}

bool CudaEngine::launch_ln_add(size_t i, int batch, cudaStream_t s) {
  const int l = ln_add_of_.empty() ? -1 : ln_add_of_[i];
  if (l < 0) return false;
  const graph::Op &ln = g_.ops[l], &add = g_.ops[i];
  const TensorId y = ln.outputs[0];
  const TensorId other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
  const int C = static_cast<int>(g_.tensor(ln.inputs[0]).shape.back());
  const float eps = ln.attrs.contains("eps") ? ln.attr_float("eps") : 1e-5f;
  const void* res = ln.has_input(3) ? ptr(ln.inputs[3]) : nullptr;
  const int64_t rows = g_.tensor(y).numel() * batch / C;
  layer_norm(ptr(ln.inputs[0]), res, ptr(ln.inputs[1]), ptr(ln.inputs[2]), ptr(y), rows, C, eps, half_, s, ptr(other),
             ptr(add.outputs[0]));
  return true;
}

int CudaEngine::ln_adds() const {
  return static_cast<int>(std::count_if(ln_add_of_.begin(), ln_add_of_.end(), [](int l) { return l >= 0; }));
}

}  // namespace detforge::cuda
