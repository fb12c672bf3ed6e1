// gather_rows_early: RT-DETR's encoder box head (enc_bbox_head, a 256-256-256-4 MLP plus the
// anchors) runs on all 8400 memory rows, and only the 300 rows the top-k picks are ever read
// (gather_rows "model.topk.reference_points"). Row-wise ops commute with a row gather, so the
// head can run on the 300 gathered rows instead: 28x fewer rows, 2.2 of the ~61.5 GFLOP per
// image (spec: 8400 x (2 x 256 x 256 + 256 x 4) multiply-adds). On the H200 at batch 1 its three
// 8400-row GEMMs (8.5 + 6.0 + 5.3 us) ran beside the score head and the top-k as a chain as long
// as theirs (ab-2026-12-04-session12, call 2 timeline); on the 300 rows the head runs after the
// top-k instead. Measured (H100, bench/results/h100/ab-2026-12-05-session14): batch 1 0.6697 ->
// 0.6821 ms, since those three GEMMs now follow the top-k on the path; batch 32 6.72 -> 6.46 ms.
// Opt-in: DETFORGE_EXTRA_PASSES=gather_early.
#include <algorithm>
#include <string>

#include "graph/pass_util.h"
#include "graph/passes.h"

namespace detforge::graph {
namespace {

// The input slots of `op` that are per-row operands when `op` is row-wise on [L, *] tensors
// (each output row depends only on the same row of these inputs); empty otherwise.
std::vector<size_t> row_slots(const Graph& g, const Op& op) {
  std::vector<size_t> slots;
  switch (op.kind) {
    case OpKind::linear:
    case OpKind::layer_norm:
      slots = {0};
      if (op.inputs.size() == 4) slots.push_back(3);
      break;
    case OpKind::activation: slots = {0}; break;
    case OpKind::add: slots = {0, 1}; break;
    default: return {};
  }
  if (op.outputs.size() != 1) return {};
  const auto& out = g.tensor(op.outputs[0]).shape;
  if (out.size() != 2) return {};
  for (size_t s : slots) {
    if (s >= op.inputs.size() || op.inputs[s] == kNoTensor) return {};
    const auto& in = g.tensor(op.inputs[s]).shape;
    if (in.size() != 2 || in[0] != out[0]) return {};
  }
  return slots;
}

int find_gather(const Graph& g, TensorId x, TensorId idx) {
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == OpKind::gather_rows && g.ops[i].inputs.size() == 2 && g.ops[i].inputs[0] == x &&
        g.ops[i].inputs[1] == idx)
      return static_cast<int>(i);
  return -1;
}

}  // namespace

int gather_rows_early(Graph& g) {
  int n = 0;
  for (bool changed = true; changed;) {
    changed = false;
    const auto cons = consumers(g);
    const auto prod = producers(g);
    for (size_t gi = 0; gi < g.ops.size() && !changed; ++gi) {
      const Op& gop = g.ops[gi];
      if (gop.kind != OpKind::gather_rows || gop.inputs.size() != 2 || gop.outputs.size() != 1) continue;
      const TensorId x = gop.inputs[0], idx = gop.inputs[1];
      const int pi = prod[x];
      if (pi < 0 || !is_sole_consumer(cons, x, static_cast<int>(gi))) continue;
      const std::vector<size_t> slots = row_slots(g, g.ops[pi]);
      if (slots.empty()) continue;
      const int64_t K = g.tensor(gop.outputs[0]).shape[0];
      Op p = g.ops[pi];  // the row-wise op, now on the gathered rows, writing the gather's output
      p.outputs = gop.outputs;
      std::vector<Op> before;      // gathers of p's row operands, new or moved up from later
      std::vector<char> drop(g.ops.size(), 0);
      drop[pi] = 1;
      for (size_t s : slots) {
        const TensorId t = p.inputs[s];
        const int e = find_gather(g, t, idx);
        if (e >= 0) {  // the same rows of t are gathered already: share them
          p.inputs[s] = g.ops[e].outputs[0];
          if (e > static_cast<int>(gi)) {  // reads only t and idx, both ready before gi: move it up
            before.push_back(g.ops[e]);
            drop[e] = 1;
          }
          continue;
        }
        const Tensor& tt = g.tensor(t);
        Op ga;
        ga.kind = OpKind::gather_rows;
        ga.name = gop.name + "[" + tt.name + "]";
        ga.inputs = {t, idx};
        // A constant operand (the anchors) broadcasts over the batch; its gathered rows do not.
        const DType dt = tt.is_const ? g.tensor(x).dtype : tt.dtype;
        const std::vector<int64_t> shape{K, tt.shape[1]};
        ga.outputs = {g.add_activation(ga.name + ":out", shape, dt)};
        p.inputs[s] = ga.outputs[0];
        before.push_back(std::move(ga));
      }
      std::vector<Op> ops;
      ops.reserve(g.ops.size() + before.size());
      for (size_t j = 0; j < g.ops.size(); ++j) {
        if (j == gi) {
          for (Op& b : before) ops.push_back(std::move(b));
          ops.push_back(std::move(p));
        } else if (!drop[j]) {
          ops.push_back(std::move(g.ops[j]));
        }
      }
      g.ops = std::move(ops);
      ++n;
      changed = true;
    }
  }
  return n;
}

}  // namespace detforge::graph
