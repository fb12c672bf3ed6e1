// DETFORGE_CUDA_LATE_VALUE=m (default 3): the decoder's value projections (the linears read only as
// ms_deform_attn values; one merged linear under graph::merge_value_projections) start only after
// an anchor op of the encoder heads. Why: in the batch-1 timeline (H200 CUPTI, fp16) the three
// 8400-row value GEMMs, free to start once the memory exists, took the SMs first and the enc_output
// GEMM on the critical path started 9 us late and ran 9.1 us instead of ~5. The anchors, found from
// the top-k back:
//   1: the enc_output linear (topk <- score linear <- layer_norm <- that linear);
//   2: the score linear; 3: the top-k itself;
//   4: the first value after the top-k, each later one after the ms_deform_attn before its own
//      (one GEMM at a time beside the decoder instead of three together at its start).
// Each value moves right after its anchor in op order, and the schedule orders it after the
// anchor through a pseudo byte range (below any device address) that the anchor writes and it
// reads.
// Measured (ab-2026-12-04-session12, fp16 b1): call 2 mode 3 0.6695 ms against 0.6760/0.6763
// with none, mode 2 0.6743, mode 1 0.6756; call 3 mode 3 0.6740/0.6755, mode 4 0.6768, none
// 0.6802. Batch 32 0.3 % faster with any mode in call 2, equal in call 3. Default 3.
#include <algorithm>

#include "backends/cuda/cuda_engine.h"
#include "graph/op_order.h"
#include "graph/pass_util.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;

namespace {

// The linear making ms_deform_attn op d's values, when only ms_deform_attn ops read them as values
// (by this op, or under graph::merge_value_projections by every decoder layer as column slices);
// else -1.
int value_linear_of(const graph::Graph& g, const std::vector<std::vector<int>>& cons, const std::vector<int>& prod,
                    size_t d) {
  if (g.ops[d].kind != OpKind::ms_deform_attn) return -1;
  const graph::TensorId v = g.ops[d].inputs[0];
  const int l = prod[v];
  return l >= 0 && g.ops[l].kind == OpKind::linear && graph::read_only_as_deform_values(g, cons, v) ? l : -1;
}

}  // namespace

std::vector<int> decoder_value_linears(const graph::Graph& g) {
  const auto cons = graph::consumers(g);
  const auto prod = graph::producers(g);
  std::vector<int> r;
  for (size_t d = 0; d < g.ops.size(); ++d)
    if (const int l = value_linear_of(g, cons, prod, d); l >= 0) r.push_back(l);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

std::vector<std::pair<int, int>> late_value_ops(const graph::Graph& g, int mode) {
  if (mode <= 0) return {};
  const auto cons = graph::consumers(g);
  const auto prod = graph::producers(g);
  int topk = -1;
  for (size_t i = 0; i < g.ops.size() && topk < 0; ++i)
    if (g.ops[i].kind == OpKind::topk_rows) topk = static_cast<int>(i);
  if (topk < 0) return {};
  auto producer_of = [&](int op, OpKind kind) {
    const int p = op >= 0 ? prod[g.ops[op].inputs[0]] : -1;
    return p >= 0 && g.ops[p].kind == kind ? p : -1;
  };
  const int score = producer_of(topk, OpKind::linear);
  const int enc = producer_of(producer_of(score, OpKind::layer_norm), OpKind::linear);
  const int anchor = mode == 1 ? enc : mode == 2 ? score : topk;
  if (anchor < 0) return {};
  const auto anc = graph::data_ancestors(g);
  std::vector<std::pair<int, int>> r;
  int prev_deform = -1;  // mode 4: the ms_deform_attn before, in op order
  for (size_t d = 0; d < g.ops.size(); ++d) {
    if (g.ops[d].kind != OpKind::ms_deform_attn) continue;
    const int a = mode == 4 && prev_deform >= 0 ? prev_deform : anchor;
    prev_deform = static_cast<int>(d);
    const int l = value_linear_of(g, cons, prod, d);  // a merged value linear is moved once
    if (l < 0 || graph::has_bit(anc[a], l)) continue;
    if (std::any_of(r.begin(), r.end(), [l = l](const auto& p) { return p.second == l; })) continue;
    bool inputs_ready = true;  // every input exists before the anchor runs
    for (graph::TensorId t : g.ops[l].inputs)
      if (t != graph::kNoTensor && prod[t] > a) inputs_ready = false;
    if (inputs_ready) r.push_back({a, l});
  }
  return r;
}

void CudaEngine::order_late_values() {
  if (late_value_ <= 0) return;
  std::vector<std::pair<int, std::vector<int>>> groups;
  for (const auto& [a, v] : late_value_ops(g_, late_value_)) {
    auto it = std::find_if(groups.begin(), groups.end(), [a = a](const auto& gr) { return gr.first == a; });
    if (it == groups.end()) groups.push_back({a, {v}});
    else it->second.push_back(v);
  }
  graph::reorder_ops(g_, graph::moved_after(g_.ops.size(), groups));
}

}  // namespace detforge::cuda
