// The branch passes on hand-built graphs: an average pool folded into the 1x1 conv after it
// (and kept where windows are partial), and a residual add carried by the longer branch, in the
// add's place; each optimised graph computes what the unoptimised one does (CPU engine).
#include <gtest/gtest.h>

#include <cstdlib>

#include "graph/passes.h"
#include "test_graph_util.h"

namespace detforge::test {
namespace {

using graph::Graph;
using graph::OpKind;
using graph::TensorId;

// x[H, W, 3] -> avg_pool(2, 2, ceil_mode) -> conv1x1(3 -> 5) + bias.
Graph pool_conv_graph(int H, int W) {
  Graph g;
  TensorId x = g.add_activation("x", {H, W, 3});
  g.inputs = {x};
  const int Ho = (H + 1) / 2, Wo = (W + 1) / 2;
  TensorId p = add_op(g, OpKind::avg_pool2d, "sc.0", {x}, {Ho, Wo, 3}, {{"kernel", 2}, {"stride", 2}, {"ceil_mode", true}});
  g.outputs = {add_op(g, OpKind::conv2d, "sc.1", {p, g.add_const("sc.1.w", {5, 3, 1, 1}, rnd(15, 50)),
                                                  g.add_const("sc.1.b", {5}, rnd(5, 51))},
                      {Ho, Wo, 5}, {{"stride", 1}, {"pad", 0}, {"act", "none"}})};
  g.validate();
  return g;
}

TEST(BranchPasses, AvgPoolFoldsIntoAStrideTwoConvAndComputesTheSame) {
  Graph ref = pool_conv_graph(6, 4), g = pool_conv_graph(6, 4);
  EXPECT_EQ(graph::optimize(g).folded_avg_pools, 1);
  ASSERT_EQ(g.ops.size(), 1u);
  EXPECT_EQ(g.ops[0].kind, OpKind::conv2d);
  EXPECT_EQ(g.ops[0].attr_int("stride"), 2);
  EXPECT_EQ(g.ops[0].inputs[0], g.inputs[0]);
  EXPECT_EQ(g.tensor(g.ops[0].inputs[1]).shape, (std::vector<int64_t>{5, 3, 2, 2}));
  expect_same_cpu_outputs(ref, g, rnd(6 * 4 * 3 * 2, 52), 2e-5);
}

TEST(BranchPasses, AvgPoolWithAPartialWindowIsKept) {
  // ceil_mode over 5 rows: the last window holds one row and divides by 2, not 4.
  Graph g = pool_conv_graph(5, 4);
  EXPECT_EQ(graph::optimize(g).folded_avg_pools, 0);
  EXPECT_EQ(g.ops.size(), 2u);
}

// ResNet-vd block: relu(conv3x3(relu(conv3x3(x))) + conv1x1(x)), the shortcut built last as
// transformers does. The two 3x3 convs are the long branch: the second one carries the add.
Graph vd_block() {
  const int H = 6, W = 6, C = 4;
  Graph g;
  TensorId x = g.add_activation("x", {H, W, C});
  g.inputs = {x};
  auto conv = [&](const std::string& n, TensorId in, int k, const char* act, uint32_t seed) {
    return add_op(g, OpKind::conv2d, n, {in, g.add_const(n + ".w", {C, C, k, k}, rnd(C * C * k * k, seed)),
                                         g.add_const(n + ".b", {C}, rnd(C, seed + 1))},
                  {H, W, C}, {{"stride", 1}, {"pad", k / 2}, {"act", act}});
  };
  TensorId a = conv("layer.0", x, 3, "relu", 60);
  TensorId b = conv("layer.1", a, 3, "none", 62);
  TensorId s = conv("shortcut", x, 1, "none", 64);
  g.outputs = {add_op(g, OpKind::add, "block", {b, s}, {H, W, C}, {{"act", "relu"}})};
  g.validate();
  return g;
}

TEST(BranchPasses, ResidualAddGoesToTheLongerBranchInTheAddsPlace) {
  Graph ref = vd_block(), g = vd_block();
  EXPECT_EQ(graph::optimize(g).fused_residuals, 1);
  ASSERT_EQ(g.ops.size(), 3u);
  EXPECT_EQ(g.ops[0].name, "layer.0");
  EXPECT_EQ(g.ops[1].name, "shortcut");
  EXPECT_EQ(g.ops[2].name, "layer.1");  // after the shortcut it reads, carrying the add and relu
  ASSERT_EQ(g.ops[2].inputs.size(), 4u);
  EXPECT_EQ(g.ops[2].inputs[3], g.ops[1].outputs[0]);
  EXPECT_EQ(g.ops[2].act(), graph::Act::relu);
  EXPECT_EQ(g.ops[2].outputs[0], g.outputs[0]);
  expect_same_cpu_outputs(ref, g, rnd(6 * 6 * 4 * 2, 66), 2e-5);
}

// CSP block (RT-DETR CCFM): conv3(bottleneck(conv1(x)) + conv2(x)), every conv with SiLU. The
// add of two activated outputs goes into the bottleneck conv (the longer branch) as a residual
// added after its activation.
Graph csp_block(const char* add_act = "none", bool bottleneck_is_output = false) {
  const int H = 5, W = 4, C = 4;
  Graph g;
  TensorId x = g.add_activation("x", {H, W, C});
  g.inputs = {x};
  auto conv = [&](const std::string& n, TensorId in, int k, uint32_t seed) {
    return add_op(g, OpKind::conv2d, n, {in, g.add_const(n + ".w", {C, C, k, k}, rnd(C * C * k * k, seed)),
                                         g.add_const(n + ".b", {C}, rnd(C, seed + 1))},
                  {H, W, C}, {{"stride", 1}, {"pad", k / 2}, {"act", "silu"}});
  };
  TensorId c1 = conv("conv1", x, 1, 70);
  TensorId bn = conv("bottleneck", c1, 3, 72);
  TensorId c2 = conv("conv2", x, 1, 74);
  TensorId sum = add_op(g, OpKind::add, "sum", {bn, c2}, {H, W, C}, {{"act", add_act}});
  g.outputs = {conv("conv3", sum, 1, 76)};
  if (bottleneck_is_output) g.outputs.push_back(bn);
  g.validate();
  return g;
}

TEST(BranchPasses, PostActivationAddGoesIntoTheLongerBranchConv) {
  Graph ref = csp_block(), g = csp_block();
  const auto st = graph::optimize(g);
  EXPECT_EQ(st.fused_post_activation_adds, 1);
  ASSERT_EQ(g.ops.size(), 4u);
  EXPECT_EQ(g.ops[2].name, "bottleneck");  // in the add's place, after conv2
  ASSERT_EQ(g.ops[2].inputs.size(), 4u);
  EXPECT_EQ(g.ops[2].inputs[3], g.ops[1].outputs[0]);
  EXPECT_EQ(g.ops[2].attr_int("res_after_act"), 1);
  EXPECT_EQ(g.ops[2].act(), graph::Act::silu);
  expect_same_cpu_outputs(ref, g, rnd(5 * 4 * 4 * 2, 78), 2e-5);
}

TEST(BranchPasses, PostActivationAddIsKeptWhenItHasAnActivationOrIsSkipped) {
  Graph g = csp_block("relu");
  EXPECT_EQ(graph::optimize(g).fused_post_activation_adds, 0);
  setenv("DETFORGE_SKIP_PASSES", "post_activation_adds", 1);
  Graph h = csp_block();
  const int n = graph::optimize(h).fused_post_activation_adds;
  unsetenv("DETFORGE_SKIP_PASSES");
  EXPECT_EQ(n, 0);
  EXPECT_EQ(h.ops.size(), 5u);
}

TEST(BranchPasses, PostActivationAddIsNeverCarriedByTheShorterBranch) {
  // The bottleneck (longer branch) is also a graph output, so it cannot carry the add; conv2
  // could, but it would then wait for the whole bottleneck chain.
  Graph g = csp_block("none", true);
  EXPECT_EQ(graph::optimize(g).fused_post_activation_adds, 0);
  EXPECT_EQ(g.ops.size(), 5u);
}

TEST(BranchPasses, ResAfterActIsOnlyValidOnAConvWithAResidual) {
  Graph g = csp_block();
  g.ops[0].attrs["res_after_act"] = 1;  // conv1 has no residual input
  EXPECT_THROW(g.validate(), Error);
}

TEST(BranchPasses, PathCostsGrowAlongTheChainAndWithWork) {
  Graph g = vd_block();
  const auto c = graph::path_costs(g);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_GT(c[1], c[0]);  // layer.1 after layer.0
  EXPECT_GT(c[1], c[2]);  // two 3x3 convs against one 1x1
  EXPECT_GT(c[3], c[1]);  // the add after both
}

}  // namespace
}  // namespace detforge::test
