// The graph passes on hand-built graphs: BatchNorm folding (weights and bias by the formula),
// residual/activation fusion into the producing op, add+LayerNorm fusion, dead-code removal,
// and that the optimised graph computes what the unfused ops would (CPU engine vs scalar math).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/engine.h"
#include "graph/passes.h"

namespace detforge::test {
namespace {

using graph::Graph;
using graph::Op;
using graph::OpKind;
using graph::TensorId;

std::vector<float> rnd(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TensorId add_op(Graph& g, OpKind k, const std::string& name, std::vector<TensorId> in, std::vector<int64_t> shape,
                nlohmann::json attrs = nlohmann::json::object()) {
  TensorId out = g.add_activation(name + ":out", std::move(shape));
  Op op;
  op.kind = k;
  op.name = name;
  op.inputs = std::move(in);
  op.outputs = {out};
  op.attrs = std::move(attrs);
  g.add_op(std::move(op));
  return out;
}

// x[2,2,3] -> conv1x1(3->4) -> BN -> add(shortcut conv1x1 + BN) -> relu; plus a dead conv.
struct ResidualNet {
  Graph g;
  std::vector<float> w1, w2, gamma, beta, mean, var;
};

ResidualNet make_net() {
  ResidualNet n;
  Graph& g = n.g;
  TensorId x = g.add_activation("pixels", {2, 2, 3});
  g.inputs = {x};
  n.w1 = rnd(12, 1);
  n.w2 = rnd(12, 2);
  n.gamma = rnd(4, 3, 0.5f, 2.f);
  n.beta = rnd(4, 4);
  n.mean = rnd(4, 5);
  n.var = rnd(4, 6, 0.1f, 2.f);
  auto conv_bn = [&](const std::string& name, const std::vector<float>& w) {
    TensorId wt = g.add_const(name + ".weight", {4, 3, 1, 1}, w);
    TensorId b = g.add_const(name + ".bias", {4}, std::vector<float>(4, 0.f));
    TensorId y = add_op(g, OpKind::conv2d, name, {x, wt, b}, {2, 2, 4}, {{"stride", 1}, {"pad", 0}, {"act", "none"}});
    TensorId ga = g.add_const(name + ".bn.gamma", {4}, n.gamma), be = g.add_const(name + ".bn.beta", {4}, n.beta);
    TensorId me = g.add_const(name + ".bn.mean", {4}, n.mean), va = g.add_const(name + ".bn.var", {4}, n.var);
    return add_op(g, OpKind::batch_norm, name + ".bn", {y, ga, be, me, va}, {2, 2, 4}, {{"eps", 1e-5f}});
  };
  TensorId a = conv_bn("main", n.w1);
  TensorId s = conv_bn("shortcut", n.w2);
  TensorId sum = add_op(g, OpKind::add, "block", {a, s}, {2, 2, 4}, {{"act", "none"}});
  TensorId out = add_op(g, OpKind::activation, "block.relu", {sum}, {2, 2, 4}, {{"act", "relu"}});
  conv_bn("dead", n.w1);  // reaches no output
  g.outputs = {out};
  g.validate();
  return n;
}

float bn_ref(const ResidualNet& n, const std::vector<float>& w, const float* px, int o) {
  double c = 0;
  for (int i = 0; i < 3; ++i) c += double(w[o * 3 + i]) * px[i];
  return float((c - n.mean[o]) / std::sqrt(double(n.var[o]) + 1e-5) * n.gamma[o] + n.beta[o]);
}

TEST(GraphPasses, FoldFuseAndPruneAResidualBlock) {
  ResidualNet n = make_net();
  graph::PassStats st = graph::optimize(n.g);
  EXPECT_EQ(st.folded_batch_norms, 3);
  EXPECT_EQ(st.fused_residuals, 1);
  EXPECT_EQ(st.fused_activations, 1);  // the relu after the add, now after the conv that took the add
  EXPECT_GE(st.removed_ops, 1);
  // Two convs remain: one plain, one with the residual input and relu.
  ASSERT_EQ(n.g.ops.size(), 2u);
  for (const auto& op : n.g.ops) EXPECT_EQ(op.kind, OpKind::conv2d);
  const Op& fused = n.g.ops[1];
  EXPECT_EQ(fused.inputs.size(), 4u);
  EXPECT_EQ(fused.act(), graph::Act::relu);
  EXPECT_EQ(n.g.find("dead.weight"), graph::kNoTensor);

  // The folded graph computes relu(BN(conv1 x) + BN(conv2 x)).
  auto eng = make_engine("cpu", n.g, {});
  auto x = rnd(12, 9);
  auto out = eng->run(x.data(), 1);
  ASSERT_EQ(out[0].data.size(), 16u);
  for (int p = 0; p < 4; ++p)
    for (int o = 0; o < 4; ++o) {
      float want = std::max(0.f, bn_ref(n, n.w1, &x[p * 3], o) + bn_ref(n, n.w2, &x[p * 3], o));
      EXPECT_NEAR(out[0].data[p * 4 + o], want, 1e-5f) << "pixel " << p << " channel " << o;
    }
}

TEST(GraphPasses, LinearActivationAndAddLayerNormFuse) {
  Graph g;
  TensorId x = g.add_activation("x", {3, 4});
  g.inputs = {x};
  TensorId w = g.add_const("fc.weight", {4, 4}, rnd(16, 1));
  TensorId b = g.add_const("fc.bias", {4}, rnd(4, 2));
  TensorId h = add_op(g, OpKind::linear, "fc", {x, w, b}, {3, 4}, {{"act", "none"}});
  TensorId r = add_op(g, OpKind::activation, "fc.act", {h}, {3, 4}, {{"act", "gelu"}});
  // x feeds the add too, so the add cannot go into the linear (whose act is now gelu).
  TensorId s = add_op(g, OpKind::add, "res", {r, x}, {3, 4}, {{"act", "none"}});
  TensorId ga = g.add_const("ln.weight", {4}, rnd(4, 3)), be = g.add_const("ln.bias", {4}, rnd(4, 4));
  TensorId y = add_op(g, OpKind::layer_norm, "ln", {s, ga, be}, {3, 4}, {{"eps", 1e-5f}});
  g.outputs = {y};
  auto st = graph::optimize(g);
  EXPECT_EQ(st.fused_activations, 1);
  EXPECT_EQ(st.fused_layer_norm_adds, 1);
  ASSERT_EQ(g.ops.size(), 2u);
  EXPECT_EQ(g.ops[0].act(), graph::Act::gelu);
  EXPECT_EQ(g.ops[1].kind, OpKind::layer_norm);
  EXPECT_EQ(g.ops[1].inputs.size(), 4u);
}

TEST(GraphPasses, BatchNormNotAfterAConvIsRefused) {
  Graph g;
  TensorId x = g.add_activation("x", {2, 2, 4});
  g.inputs = {x};
  std::vector<TensorId> p;
  for (const char* nm : {"g", "b", "m", "v"}) p.push_back(g.add_const(nm, {4}, std::vector<float>(4, 1.f)));
  TensorId y = add_op(g, OpKind::batch_norm, "lonely.bn", {x, p[0], p[1], p[2], p[3]}, {2, 2, 4}, {{"eps", 1e-5f}});
  g.outputs = {y};
  try {
    graph::optimize(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lonely.bn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace detforge::test
