// The graph passes on hand-built graphs: BatchNorm folding (weights and bias by the formula),
// residual/activation fusion into the producing op, add+LayerNorm fusion, dead-code removal,
// and that the optimised graph computes what the unfused ops would (CPU engine vs scalar math);
// the q/k and deformable offset/weight merges against the unmerged graph (CPU engine), the
// cases they must leave alone, and the merges on the r18vd graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>

#include "backends/engine.h"
#include "graph/passes.h"
#include "test_deform_graph.h"
#include "test_graph_util.h"
#include "test_r18vd_graph.h"

namespace detforge::test {
namespace {

using graph::Graph;
using graph::Op;
using graph::OpKind;
using graph::TensorId;

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
  // Both branches are 1x1 convs of the same input: one conv with the summed kernels remains.
  EXPECT_EQ(st.folded_parallel_convs, 1);
  EXPECT_GE(st.removed_ops, 1);
  ASSERT_EQ(n.g.ops.size(), 1u);
  const Op& fused = n.g.ops[0];
  EXPECT_EQ(fused.kind, OpKind::conv2d);
  EXPECT_EQ(fused.inputs.size(), 3u);
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

// RepVGG: silu(conv3x3(x) + conv1x1(x)) folds into one 3x3 conv (centre tap += the 1x1 kernel,
// biases summed) and still computes the two-branch sum; stride 1 and 2, either conv first.
struct RepVggCase {
  int stride;
  bool small_first;
};
class RepVggFold : public ::testing::TestWithParam<RepVggCase> {};

TEST_P(RepVggFold, OneConvComputesBothBranches) {
  const int H = 6, W = 5, Ci = 4, Co = 6, s = GetParam().stride;
  const int Ho = (H + 2 - 3) / s + 1, Wo = (W + 2 - 3) / s + 1;
  const auto w3 = rnd(Co * Ci * 9, 11), b3 = rnd(Co, 12), w1 = rnd(Co * Ci, 13), b1 = rnd(Co, 14);
  Graph g;
  TensorId x = g.add_activation("x", {H, W, Ci});
  g.inputs = {x};
  auto conv3 = [&] {
    return add_op(g, OpKind::conv2d, "rep.conv1", {x, g.add_const("rep.conv1.w", {Co, Ci, 3, 3}, w3),
                                                     g.add_const("rep.conv1.b", {Co}, b3)},
                  {Ho, Wo, Co}, {{"stride", s}, {"pad", 1}, {"act", "none"}});
  };
  auto conv1 = [&] {
    return add_op(g, OpKind::conv2d, "rep.conv2", {x, g.add_const("rep.conv2.w", {Co, Ci, 1, 1}, w1),
                                                     g.add_const("rep.conv2.b", {Co}, b1)},
                  {Ho, Wo, Co}, {{"stride", s}, {"pad", 0}, {"act", "none"}});
  };
  TensorId a, b;
  if (GetParam().small_first) {
    b = conv1();
    a = conv3();
  } else {
    a = conv3();
    b = conv1();
  }
  TensorId sum = add_op(g, OpKind::add, "rep", {a, b}, {Ho, Wo, Co}, {{"act", "none"}});
  g.outputs = {add_op(g, OpKind::activation, "rep.act", {sum}, {Ho, Wo, Co}, {{"act", "silu"}})};
  auto st = graph::optimize(g);
  EXPECT_EQ(st.folded_parallel_convs, 1);
  ASSERT_EQ(g.ops.size(), 1u);
  EXPECT_EQ(g.ops[0].inputs.size(), 3u);
  EXPECT_EQ(g.tensor(g.ops[0].inputs[1]).shape, (std::vector<int64_t>{Co, Ci, 3, 3}));
  EXPECT_EQ(g.ops[0].act(), graph::Act::silu);

  auto eng = make_engine("cpu", g, {});
  auto xin = rnd(H * W * Ci, 15);
  auto out = eng->run(xin.data(), 1);
  ASSERT_EQ(out[0].data.size(), size_t(Ho * Wo * Co));
  for (int oy = 0; oy < Ho; ++oy)
    for (int ox = 0; ox < Wo; ++ox)
      for (int o = 0; o < Co; ++o) {
        double acc = double(b3[o]) + b1[o];
        for (int ci = 0; ci < Ci; ++ci) {
          acc += double(w1[o * Ci + ci]) * xin[((oy * s) * W + ox * s) * Ci + ci];
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = oy * s - 1 + ky, ix = ox * s - 1 + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              acc += double(w3[((o * Ci + ci) * 3 + ky) * 3 + kx]) * xin[(iy * W + ix) * Ci + ci];
            }
        }
        const double want = acc / (1 + std::exp(-acc));
        EXPECT_NEAR(out[0].data[(oy * Wo + ox) * Co + o], want, 2e-5) << oy << "," << ox << "," << o;
      }
}

INSTANTIATE_TEST_SUITE_P(GraphPasses, RepVggFold,
                         ::testing::Values(RepVggCase{1, false}, RepVggCase{1, true}, RepVggCase{2, false},
                                           RepVggCase{2, true}));

TEST(GraphPasses, ParallelConvsOfDifferentInputsStayApart) {
  Graph g;
  TensorId x = g.add_activation("x", {4, 4, 2});
  g.inputs = {x};
  TensorId y = add_op(g, OpKind::activation, "y", {x}, {4, 4, 2}, {{"act", "relu"}});
  TensorId a = add_op(g, OpKind::conv2d, "a", {x, g.add_const("a.w", {2, 2, 3, 3}, rnd(36, 1)),
                                             g.add_const("a.b", {2}, rnd(2, 2))},
                      {4, 4, 2}, {{"stride", 1}, {"pad", 1}, {"act", "none"}});
  TensorId b = add_op(g, OpKind::conv2d, "b", {y, g.add_const("b.w", {2, 2, 1, 1}, rnd(4, 3)),
                                             g.add_const("b.b", {2}, rnd(2, 4))},
                      {4, 4, 2}, {{"stride", 1}, {"pad", 0}, {"act", "none"}});
  g.outputs = {add_op(g, OpKind::add, "sum", {a, b}, {4, 4, 2}, {{"act", "none"}})};
  auto st = graph::optimize(g);
  EXPECT_EQ(st.fused_residuals, 1);
  EXPECT_EQ(st.folded_parallel_convs, 0);
  EXPECT_EQ(g.ops.size(), 3u);
}

// x[L, K] (+ pos) -> q, k linears of one input, v of another -> attention: the pass stacks Wq and
// Wk into one linear and points the attention at its columns; the CPU engine gives the same
// output as the unmerged graph.
Graph qk_graph(bool q_also_output) {
  const int L = 7, K = 12, C = 8;
  Graph g;
  TensorId x = g.add_activation("x", {L, K});
  g.inputs = {x};
  TensorId xp = add_op(g, OpKind::add, "pos", {x, g.add_const("pos.c", {L, K}, rnd(L * K, 30))}, {L, K},
                       {{"act", "none"}});
  auto lin = [&](const std::string& n, TensorId in, uint32_t seed) {
    return add_op(g, OpKind::linear, n, {in, g.add_const(n + ".w", {C, K}, rnd(C * K, seed)),
                                         g.add_const(n + ".b", {C}, rnd(C, seed + 1))},
                  {L, C}, {{"act", "none"}});
  };
  TensorId q = lin("attn.q_proj", xp, 31), k = lin("attn.k_proj", xp, 33), v = lin("attn.v_proj", x, 35);
  g.outputs = {add_op(g, OpKind::attention, "attn", {q, k, v}, {L, C}, {{"heads", 2}, {"scale", 0.5f}})};
  if (q_also_output) g.outputs.push_back(q);
  g.validate();
  return g;
}

TEST(GraphPasses, QkProjectionsMergeIntoOneLinearAndComputeTheSame) {
  Graph ref = qk_graph(false), g = qk_graph(false);
  const auto st = graph::optimize(g);
  EXPECT_EQ(st.merged_qk_projections, 1);
  ASSERT_EQ(g.ops.size(), 4u);  // pos, q+k, v, attention
  const graph::Op& att = g.ops.back();
  ASSERT_EQ(att.kind, OpKind::attention);
  EXPECT_EQ(att.inputs[0], att.inputs[1]);
  EXPECT_EQ(graph::attention_columns(att).q, 0);
  EXPECT_EQ(graph::attention_columns(att).k, 8);
  const graph::Op& qk = g.ops[1];
  EXPECT_EQ(qk.name, "attn.q_proj+k_proj");
  EXPECT_EQ(g.tensor(qk.inputs[1]).shape, (std::vector<int64_t>{16, 12}));
  EXPECT_EQ(g.tensor(qk.outputs[0]).shape, (std::vector<int64_t>{7, 16}));

  expect_same_cpu_outputs(ref, g, rnd(7 * 12 * 2, 40), 1e-5);
}

TEST(GraphPasses, AttentionColumnsOutsideTheirInputAreNamed) {
  Graph g = qk_graph(false);
  graph::optimize(g);
  graph::Op& att = g.ops.back();
  EXPECT_EQ(graph::attention_columns_error(g, att), "");
  att.attrs["k_col"] = 9;  // 8 channels from column 9 of a 16-column tensor
  EXPECT_EQ(graph::attention_columns_error(g, att), "input 1 has 16 columns, the op reads 8 from column 9");
  EXPECT_THROW(make_engine("cpu", g, {}), Error);
  att.attrs["k_col"] = -1;
  EXPECT_NE(graph::attention_columns_error(g, att), "");
}

TEST(GraphPasses, QkProjectionReadElsewhereIsNotMerged) {
  Graph g = qk_graph(true);
  EXPECT_EQ(graph::optimize(g).merged_qk_projections, 0);
  EXPECT_EQ(g.ops.size(), 5u);
}

// merge_deform_projections on the graph of test_deform_graph.h.
using deform::kAw;   // logits per row (24)
using deform::kK;    // the projections' input width (8)
using deform::kOff;  // offsets per row (48)
using deform::kQ;    // queries (17)

const Op& only_op(const Graph& g, OpKind k) {
  const Op* found = nullptr;
  for (const Op& op : g.ops)
    if (op.kind == k) {
      EXPECT_EQ(found, nullptr) << "more than one " << graph::op_kind_name(k);
      found = &op;
    }
  if (!found) throw Error(std::string("no ") + graph::op_kind_name(k));
  return *found;
}

// Outputs of both graphs on the same two images (batch 2: the row stride must hold per image).
void expect_same_outputs(const Graph& want_g, const Graph& got_g) {
  expect_same_cpu_outputs(want_g, got_g, rnd(kQ * kK * 2, 70, -1.5f, 1.5f), 1e-5);
}

TEST(GraphPasses, DeformProjectionsMergeIntoOneLinearAndComputeTheSame) {
  for (auto v : {deform::Variant::plain, deform::Variant::aw_first}) {
    SCOPED_TRACE(v == deform::Variant::plain ? "offsets first" : "attention weights first");
    Graph ref = deform::make_graph(v), g = deform::make_graph(v);
    const auto st = graph::optimize(g);
    EXPECT_EQ(st.merged_deform_projections, 1);
    ASSERT_EQ(g.ops.size(), 5u);  // ref (+ sigmoid), pos, offsets+weights, value, ms_deform_attn
    const Op& da = only_op(g, OpKind::ms_deform_attn);
    EXPECT_EQ(da.inputs[1], da.inputs[2]);
    const auto cols = graph::deform_columns(g, da);
    EXPECT_EQ(cols.off_col, 0);
    EXPECT_EQ(cols.aw_col, kOff);
    EXPECT_EQ(cols.off_ld, kOff + kAw);
    EXPECT_EQ(cols.aw_ld, kOff + kAw);
    // The stacked linear, [W_off; W_aw] whichever ran first, sits where the first of the two
    // was: before the value projection.
    const Op& m = g.ops[2];
    EXPECT_EQ(m.name, "dec.encoder_attn.sampling_offsets+attention_weights");
    EXPECT_EQ(g.ops[3].name, "dec.value_proj");
    EXPECT_EQ(m.outputs[0], da.inputs[1]);
    EXPECT_EQ(g.tensor(m.inputs[1]).shape, (std::vector<int64_t>{kOff + kAw, kK}));
    EXPECT_EQ(g.tensor(m.outputs[0]).shape, (std::vector<int64_t>{kQ, kOff + kAw}));
    EXPECT_EQ(graph::deform_columns_error(g, da), "");
    expect_same_outputs(ref, g);
  }
}

// The CPU kernel takes any column order and row stride: the merged linear rewritten by hand as
// [W_aw; 3 zero rows; W_off] (logits at column 0, offsets at 27, rows 75 wide) reads the same.
TEST(GraphPasses, DeformColumnsInAnyOrderWithPaddingComputeTheSame) {
  Graph ref = deform::make_graph(deform::Variant::plain), g = deform::make_graph(deform::Variant::plain);
  graph::optimize(g);
  Op& da = g.ops.back();
  ASSERT_EQ(da.kind, OpKind::ms_deform_attn);
  Op& m = g.ops[graph::producers(g)[da.inputs[1]]];
  ASSERT_EQ(m.kind, OpKind::linear);
  graph::Tensor& w = g.tensor(m.inputs[1]);
  graph::Tensor& b = g.tensor(m.inputs[2]);
  const int pad = 3, N = kAw + pad + kOff;
  std::vector<float> w2(size_t(N) * kK, 0.f), b2(N, 0.f);
  std::copy(w.data.begin() + kOff * kK, w.data.end(), w2.begin());
  std::copy(w.data.begin(), w.data.begin() + kOff * kK, w2.begin() + (kAw + pad) * kK);
  std::copy(b.data.begin() + kOff, b.data.end(), b2.begin());
  std::copy(b.data.begin(), b.data.begin() + kOff, b2.begin() + kAw + pad);
  w.data = w2;
  w.shape = {N, kK};
  b.data = b2;
  b.shape = {N};
  g.tensor(m.outputs[0]).shape = {kQ, N};
  da.attrs["aw_col"] = 0;
  da.attrs["off_col"] = kAw + pad;
  ASSERT_EQ(graph::deform_columns_error(g, da), "");
  expect_same_outputs(ref, g);
}

TEST(GraphPasses, DeformColumnsOutsideTheirInputAreNamed) {
  Graph g = deform::make_graph(deform::Variant::plain);
  graph::optimize(g);
  Op& da = g.ops.back();
  ASSERT_EQ(da.kind, OpKind::ms_deform_attn);
  EXPECT_EQ(graph::deform_columns_error(g, da), "");
  da.attrs["aw_col"] = kOff + 1;  // 24 logits from column 49 of a 72-column tensor
  EXPECT_EQ(graph::deform_columns_error(g, da), "input 2 (logits) has 72 columns, the op reads 24 from column 49");
  EXPECT_THROW(make_engine("cpu", g, {}), Error);
  da.attrs["aw_col"] = kOff;
  da.attrs["off_col"] = -1;
  EXPECT_EQ(graph::deform_columns_error(g, da), "input 1 (offsets) has 72 columns, the op reads 48 from column -1");
  EXPECT_THROW(make_engine("cpu", g, {}), Error);
  // Unmerged: each input packed, its width exactly what the op reads.
  Graph u = deform::make_graph(deform::Variant::plain);
  Op& ud = u.ops.back();
  EXPECT_EQ(graph::deform_columns_error(u, ud), "");
  ud.attrs["off_col"] = 1;
  EXPECT_EQ(graph::deform_columns_error(u, ud), "input 1 (offsets) has 48 columns, the op reads 48 from column 1");
}

TEST(GraphPasses, DeformProjectionsThatDoNotQualifyStayApart) {
  const std::pair<deform::Variant, const char*> cases[] = {
      {deform::Variant::off_also_output, "offsets also a graph output"},
      {deform::Variant::aw_also_read, "attention_weights also read by another op"},
      {deform::Variant::aw_relu, "attention_weights with an activation"},
      {deform::Variant::aw_residual, "attention_weights with a residual"},
      {deform::Variant::aw_other_input, "attention_weights of another input"},
      {deform::Variant::aw_f16, "outputs of different dtypes"},
  };
  for (const auto& [v, what] : cases) {
    SCOPED_TRACE(what);
    Graph g = deform::make_graph(v);
    EXPECT_EQ(graph::optimize(g).merged_deform_projections, 0);
    const Op& da = only_op(g, OpKind::ms_deform_attn);
    EXPECT_NE(da.inputs[1], da.inputs[2]);
    EXPECT_FALSE(da.attrs.contains("off_col") || da.attrs.contains("aw_col"));
    for (const Op& op : g.ops) EXPECT_EQ(op.name.find('+'), std::string::npos) << op.name;
  }
}

// r18vd's three decoder layers each read their offsets and attention logits from two linears of
// one input: three pairs merge, three ops fewer than with the pass skipped.
TEST(GraphPasses, R18vdMergesTheThreeDecoderOffsetAndWeightProjections) {
  Graph g = r18vd_unoptimized_graph(), skipped = r18vd_unoptimized_graph(), both = r18vd_unoptimized_graph();
  const auto st = graph::optimize(g);
  EXPECT_EQ(st.merged_deform_projections, 3);
  EXPECT_EQ(st.merged_qk_projections, 4);
  {
    ScopedEnv env("DETFORGE_SKIP_PASSES", "merge_deform_projections");
    const auto sk = graph::optimize(skipped);
    EXPECT_EQ(sk.merged_deform_projections, 0);
    EXPECT_EQ(sk.merged_qk_projections, 4);
  }
  EXPECT_EQ(skipped.ops.size(), g.ops.size() + 3);
  {
    ScopedEnv env("DETFORGE_SKIP_PASSES", "merge_qk_projections,merge_deform_projections");
    const auto sk = graph::optimize(both);
    EXPECT_EQ(sk.merged_deform_projections + sk.merged_qk_projections, 0);
  }
  EXPECT_EQ(both.ops.size(), g.ops.size() + 7);
  std::printf("r18vd: %zu ops, %zu without merge_deform_projections, %zu without either merge\n", g.ops.size(),
              skipped.ops.size(), both.ops.size());
  int seen = 0;
  for (const Op& da : g.ops) {
    if (da.kind != OpKind::ms_deform_attn) continue;
    SCOPED_TRACE(da.name);
    ++seen;
    ASSERT_EQ(da.inputs[1], da.inputs[2]);
    const auto cols = graph::deform_columns(g, da);
    EXPECT_EQ(cols.off_col, 0);
    EXPECT_EQ(cols.aw_col, 192);
    EXPECT_EQ(cols.off_ld, 288);
    EXPECT_EQ(graph::deform_columns_error(g, da), "");
    const auto prod = graph::producers(g);
    const Op& m = g.ops[prod[da.inputs[1]]];
    EXPECT_EQ(m.name, da.name + ".sampling_offsets+attention_weights");
    EXPECT_EQ(g.tensor(m.inputs[1]).shape, (std::vector<int64_t>{288, 256}));
    EXPECT_EQ(g.tensor(m.outputs[0]).shape, (std::vector<int64_t>{300, 288}));
  }
  EXPECT_EQ(seen, 3);
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

// A misspelled pass in DETFORGE_SKIP_PASSES or DETFORGE_EXTRA_PASSES would build the default graph
// without a word; it is refused, naming the passes the list may hold. Empty items are fine.
TEST(GraphPasses, UnknownPassNamesInTheEnvironmentAreRefused) {
  {
    ScopedEnv env("DETFORGE_EXTRA_PASSES", "gather_erly");
    Graph g = r18vd_unoptimized_graph();
    try {
      graph::optimize(g);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "DETFORGE_EXTRA_PASSES: no pass is named 'gather_erly' (known: distribute_adds, "
                                       "gather_early, merge_values, split_concats)");
    }
  }
  {
    ScopedEnv env("DETFORGE_SKIP_PASSES", "merge_qk_projections,fold_bn");
    Graph g = r18vd_unoptimized_graph();
    EXPECT_THROW(graph::optimize(g), Error);
  }
  {
    ScopedEnv skip("DETFORGE_SKIP_PASSES", "merge_qk_projections,,");
    ScopedEnv extra("DETFORGE_EXTRA_PASSES", "");
    Graph g = r18vd_unoptimized_graph();
    EXPECT_EQ(graph::optimize(g).merged_qk_projections, 0);
  }
}

}  // namespace
}  // namespace detforge::test
