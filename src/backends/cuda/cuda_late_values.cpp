// DETFORGE_CUDA_LATE_VALUE=m (default 0, not yet timed): the decoder's value projections (the
// linears read only as an ms_deform_attn's value) start only after an anchor op of the encoder
// heads. Why: in the batch-1 timeline (H200 CUPTI, fp16) the three 8400-row value GEMMs, free to
// start once the memory exists, took the SMs first and the enc_output GEMM on the critical path
// started 9 us late and ran 9.1 us instead of ~5. The anchors, found from the top-k back:
//   1: the enc_output linear (topk <- score linear <- layer_norm <- that linear);
//   2: the score linear; 3: the top-k itself.
// The values move right after the anchor in op order, and the schedule orders them after it
// through a pseudo byte range (below any device address) that the anchor writes and they read.
#include "backends/cuda/cuda_engine.h"
#include "graph/op_order.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;

std::pair<int, std::vector<int>> late_value_ops(const graph::Graph& g, int mode) {
  if (mode <= 0) return {-1, {}};
  const auto cons = graph::consumers(g);
  const auto prod = graph::producers(g);
  int topk = -1;
  for (size_t i = 0; i < g.ops.size() && topk < 0; ++i)
    if (g.ops[i].kind == OpKind::topk_rows) topk = static_cast<int>(i);
  if (topk < 0) return {-1, {}};
  auto producer_of = [&](int op, OpKind kind) {
    const int p = op >= 0 ? prod[g.ops[op].inputs[0]] : -1;
    return p >= 0 && g.ops[p].kind == kind ? p : -1;
  };
  const int score = producer_of(topk, OpKind::linear);
  const int enc = producer_of(producer_of(score, OpKind::layer_norm), OpKind::linear);
  const int anchor = mode == 1 ? enc : mode == 2 ? score : topk;
  if (anchor < 0) return {-1, {}};
  const auto anc = graph::data_ancestors(g);
  std::vector<int> values;
  for (size_t d = 0; d < g.ops.size(); ++d) {
    if (g.ops[d].kind != OpKind::ms_deform_attn) continue;
    const graph::TensorId v = g.ops[d].inputs[0];
    const int l = prod[v];
    if (l < 0 || g.ops[l].kind != OpKind::linear || cons[v].size() != 1 || graph::has_bit(anc[anchor], l)) continue;
    bool inputs_ready = true;  // every input exists before the anchor runs
    for (graph::TensorId t : g.ops[l].inputs)
      if (t != graph::kNoTensor && prod[t] > anchor) inputs_ready = false;
    if (inputs_ready) values.push_back(l);
  }
  if (values.empty()) return {-1, {}};
  return {anchor, values};
}

void CudaEngine::order_late_values() {
  if (late_value_ <= 0) return;
  const auto lv = late_value_ops(g_, late_value_);
  if (lv.first < 0) return;
  graph::reorder_ops(g_, graph::moved_after(g_.ops.size(), {lv}));
}

}  // namespace detforge::cuda
