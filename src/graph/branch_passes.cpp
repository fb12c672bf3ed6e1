// Passes that shorten the critical path of two-branch blocks: the ResNet-vd shortcut's average
// pool folded into its 1x1 convolution, and the estimate that decides which branch of a residual
// add carries the add (graph/passes.cpp fuse_residual_adds).
#include <algorithm>

#include "graph/passes.h"

#include "graph/pass_util.h"

namespace detforge::graph {

double op_cost(const Graph& g, const Op& op) {
  // One unit per launch plus one per GFLOP of the multiply-adds (per image): at batch 1 on the
  // H200 a small kernel is ~1-2 us and the r18vd convolutions run at ~100-200 TFLOP/s.
  double gflop = 0;
  if ((op.kind == OpKind::conv2d || op.kind == OpKind::linear) && !op.outputs.empty() && op.inputs.size() >= 2) {
    const Tensor& w = g.tensor(op.inputs[1]);
    gflop = 2.0 * static_cast<double>(g.tensor(op.outputs[0]).numel()) * static_cast<double>(w.numel()) /
            static_cast<double>(w.shape[0]) * 1e-9;
  }
  return 1.0 + gflop;
}

std::vector<double> path_costs(const Graph& g) {
  const auto prod = producers(g);
  std::vector<double> cost(g.ops.size(), 0.0);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    double before = 0;
    for (TensorId t : op.inputs)
      if (t != kNoTensor && prod[t] >= 0) before = std::max(before, cost[prod[t]]);
    cost[i] = before + op_cost(g, op);
  }
  return cost;
}

int fold_avg_pool_into_conv(Graph& g) {
  auto cons = consumers(g);
  std::vector<char> dead(g.ops.size(), 0);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& pool = g.ops[i];
    if (pool.kind != OpKind::avg_pool2d) continue;
    const int k = pool.attr_int("kernel");
    if (pool.attr_int_or("stride", k) != k || pool.attr_int_or("pad", 0) != 0) continue;
    const auto& xs = g.tensor(pool.inputs[0]).shape;
    // Whole windows only: then ceil_mode adds none and every divisor is k*k.
    if (xs.size() != 3 || xs[0] % k != 0 || xs[1] % k != 0) continue;
    const TensorId pooled = pool.outputs[0];
    if (cons[pooled].size() != 1 || cons[pooled][0] < 0) continue;
    const int ci = cons[pooled][0];
    Op& conv = g.ops[ci];
    if (conv.kind != OpKind::conv2d || conv.inputs[0] != pooled || conv.attr_int_or("stride", 1) != 1 ||
        conv.attr_int_or("pad", 0) != 0 || conv.attr_int_or("groups", 1) != 1)
      continue;
    Tensor& w = g.tensor(conv.inputs[1]);
    if (!w.is_const || w.shape.size() != 4 || w.shape[2] != 1 || w.shape[3] != 1) continue;
    if (cons[conv.inputs[1]].size() != 1) continue;  // the weights become this conv's own
    // avg_k(x) then 1x1 == a kxk conv of stride k whose every tap is the 1x1 weight / (k*k):
    // one launch fewer, and the shortcut no longer waits for a pool on its way.
    const int64_t O = w.shape[0], I = w.shape[1];
    std::vector<float> wk(static_cast<size_t>(O * I * k * k));
    const double inv = 1.0 / (k * k);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < I; ++c)
        for (int t = 0; t < k * k; ++t) wk[static_cast<size_t>((o * I + c) * k * k + t)] =
            static_cast<float>(w.data[static_cast<size_t>(o * I + c)] * inv);
    w.data = std::move(wk);
    w.shape = {O, I, k, k};
    w.name += "(folded " + pool.name + ")";
    conv.inputs[0] = pool.inputs[0];
    conv.attrs["stride"] = k;
    conv.attrs["pad"] = 0;
    dead[i] = 1;
    ++n;
  }
  erase_ops(g, dead);
  return n;
}

}  // namespace detforge::graph
