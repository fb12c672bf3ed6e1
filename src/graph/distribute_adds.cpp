// distribute_adds_into_linears: RT-DETR's decoder adds the query position embedding, itself the
// output of a plain linear (query_pos_head's second layer), to the queries before the q/k
// projection and again before the deformable offsets/weights projection. Each such add sat on
// the batch-1 critical path of the H200 engine as its own 1.4-1.7 us kernel, and so did the
// position linear before the q/k projection (3.3 us; timeline of bench/results/h200/latest.json,
// 2026-12-04). Linearity moves both off the path: L(a + P(r)) = L(a) + (W_L W_P) r + (W_L b_P + b_L).
#include <algorithm>
#include <string>

#include "graph/pass_util.h"
#include "graph/passes.h"

namespace detforge::graph {
namespace {

// constant_linear (pass_util.h) reading a 2-D input.
bool foldable_linear(const Graph& g, const Op& op) {
  return op.inputs.size() >= 3 && op.inputs[1] != kNoTensor && op.inputs[2] != kNoTensor && constant_linear(g, op) &&
         g.tensor(op.inputs[0]).shape.size() == 2;
}

struct Folded {
  std::vector<float> w, b;  // W_L W_P [N, K_P] and W_L b_P + b_L [N], in double, rounded once
};

Folded fold(const Graph& g, const Op& L, const Op& P) {
  const Tensor &wl = g.tensor(L.inputs[1]), &wp = g.tensor(P.inputs[1]);
  const auto &bl = g.tensor(L.inputs[2]).data, &bp = g.tensor(P.inputs[2]).data;
  const int64_t N = wl.shape[0], D = wl.shape[1], K = wp.shape[1];
  Folded f{std::vector<float>(N * K), std::vector<float>(N)};
  std::vector<double> row(K);
  for (int64_t n = 0; n < N; ++n) {
    std::fill(row.begin(), row.end(), 0.0);
    double bias = bl[n];
    for (int64_t d = 0; d < D; ++d) {
      const double a = wl.data[n * D + d];
      bias += a * bp[d];
      for (int64_t k = 0; k < K; ++k) row[k] += a * wp.data[d * K + k];
    }
    for (int64_t k = 0; k < K; ++k) f.w[n * K + k] = static_cast<float>(row[k]);
    f.b[n] = static_cast<float>(bias);
  }
  return f;
}

Op linear_op(std::string name, TensorId x, TensorId w, TensorId b, TensorId y, const std::string& act) {
  Op op;
  op.kind = OpKind::linear;
  op.name = std::move(name);
  op.inputs = {x, w, b};
  op.outputs = {y};
  op.attrs["act"] = act;
  return op;
}

}  // namespace

int distribute_adds_into_linears(Graph& g) {
  int n = 0;
  for (bool changed = true; changed;) {
    changed = false;
    const auto cons = consumers(g);
    const auto prod = producers(g);
    const std::vector<double> cost = path_costs(g);
    auto cost_of = [&](TensorId t) { return prod[t] < 0 ? 0.0 : cost[prod[t]]; };
    for (size_t i = 0; i < g.ops.size() && !changed; ++i) {
      const Op& add = g.ops[i];
      if (add.kind != OpKind::add || add.act() != Act::none || add.inputs.size() != 2) continue;
      // Fold the later operand's linear first: that takes it off the longer path too.
      const int later = cost_of(add.inputs[0]) >= cost_of(add.inputs[1]) ? 0 : 1;
      for (int o : {later, 1 - later}) {
        if (changed) break;
        const TensorId p = add.inputs[o], a = add.inputs[1 - o];
        const int pi = prod[p];
        if (pi < 0 || !has_no_epilogue(g.ops[pi]) || !foldable_linear(g, g.ops[pi]) || g.tensor(a).is_const ||
            g.tensor(a).shape != g.tensor(p).shape)
          continue;
        const auto& readers = cons[add.outputs[0]];
        bool ok = !readers.empty();
        for (int r : readers)
          ok = ok && r >= 0 && g.ops[r].inputs.size() == 3 && g.ops[r].inputs[0] == add.outputs[0] &&
               foldable_linear(g, g.ops[r]);
        if (!ok) continue;
        const Op P = g.ops[pi];
        const TensorId r_in = P.inputs[0];
        // The operand that is ready later runs in the reader's place; the other one's product
        // becomes its residual, computed beside the long path.
        const bool pos_late = cost_of(r_in) > cost_of(a);
        std::vector<std::pair<int, Op>> early;  // (its reader's op index, op)
        for (int r : readers) {
          Op L = g.ops[r];
          const Folded f = fold(g, L, P);
          const int64_t N = g.tensor(L.inputs[1]).shape[0], K = g.tensor(P.inputs[1]).shape[1];
          const Tensor& y = g.tensor(L.outputs[0]);
          const std::vector<int64_t> yshape = y.shape;
          const DType dt = y.dtype;
          // add_const / add_activation may move g.tensors: no Tensor reference past this point.
          const TensorId fw = g.add_const(L.name + ".weight(folded " + P.name + ")", {N, K}, f.w);
          const TensorId fb = g.add_const(L.name + ".bias(folded " + P.name + ")", {N}, f.b);
          const TensorId zero = g.add_const(L.name + ".bias(zero)", {N}, std::vector<float>(N, 0.f));
          const TensorId part = g.add_activation(L.name + ":early", yshape, dt);
          const std::string act = L.attrs.value("act", std::string("none"));
          Op e, late;
          if (pos_late) {  // L(a) early; the position path carries it
            e = linear_op(L.name + "(early part)", a, L.inputs[1], zero, part, "none");
            late = linear_op(L.name + "(folded " + P.name + ")", r_in, fw, fb, L.outputs[0], act);
          } else {  // the position part early; the queries carry it
            e = linear_op(L.name + "(early part, folded " + P.name + ")", r_in, fw, fb, part, "none");
            late = linear_op(L.name, a, L.inputs[1], zero, L.outputs[0], act);
          }
          late.inputs.push_back(part);
          early.emplace_back(r, std::move(e));
          g.ops[r] = std::move(late);
        }
        // The add is dead now (all its readers rewritten); P too once nothing else reads it (DCE).
        // Each early linear goes right before its reader. A backend that issues ops as soon as
        // their inputs exist (the CUDA engine's asap_order) still starts it early, and where it
        // becomes ready together with ops of the long path those come first: on the H200, early
        // parts placed right after their operand's producer took the long path's stream and put
        // a cross-stream wait on it (b1 timeline, ab-2026-12-04-session11 call 2).
        std::vector<Op> ops;
        ops.reserve(g.ops.size() + early.size());
        for (size_t j = 0; j < g.ops.size(); ++j) {
          for (auto& [at, op] : early)
            if (at == static_cast<int>(j)) ops.push_back(std::move(op));
          if (j != i) ops.push_back(std::move(g.ops[j]));
        }
        g.ops = std::move(ops);
        ++n;
        changed = true;
      }
    }
  }
  return n;
}

}  // namespace detforge::graph
