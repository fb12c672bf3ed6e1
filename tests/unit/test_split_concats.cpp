// split_concat_convs: on a hand-built CSP-style block (a channel concat of a late and an early
// tensor read by two 1x1 convs) the split graph computes what the concat did (CPU engine, batch
// 2) and the early part reads the early operand; concats that must stay do; on r18vd the four
// CCFM concats go and each late part reads the tensor made last.
#include <gtest/gtest.h>

#include <string>

#include "graph/passes.h"
#include "test_graph_util.h"
#include "test_r18vd_graph.h"

namespace detforge::test {
namespace {

using graph::Graph;
using graph::Op;
using graph::OpKind;
using graph::TensorId;

constexpr int kH = 5, kW = 4, kCin = 3;

enum class Variant { late_first, early_first, consumer_3x3, concat_also_output, consumer_with_residual };

TensorId conv(Graph& g, const std::string& n, TensorId x, int co, int k, uint32_t seed, const char* act,
              TensorId residual = graph::kNoTensor) {
  const int64_t ci = g.tensor(x).shape[2];
  std::vector<TensorId> in = {x, g.add_const(n + ".w", {co, ci, k, k}, rnd(co * ci * k * k, seed, -0.5f, 0.5f)),
                              g.add_const(n + ".b", {co}, rnd(co, seed + 1))};
  if (residual != graph::kNoTensor) in.push_back(residual);
  return add_op(g, OpKind::conv2d, n, in, {kH, kW, co}, {{"stride", 1}, {"pad", k / 2}, {"act", act}});
}

// x[5, 4, 3]: early = conv1x1(x) [.., 6]; late = three 3x3 convs of x [.., 4]; cat = concat of
// the two (late first unless early_first) [.., 10]; outputs conv1x1(cat) silu [.., 7] and
// conv1x1(cat) relu [.., 5] (the second a 3x3 or with a residual in those variants).
Graph make_graph(Variant v) {
  Graph g;
  TensorId x = g.add_activation("x", {kH, kW, kCin});
  g.inputs = {x};
  TensorId early = conv(g, "early", x, 6, 1, 10, "relu");
  TensorId late = x;
  for (int i = 0; i < 3; ++i) late = conv(g, "late." + std::to_string(i), late, 4, 3, 20 + 2 * i, "silu");
  const bool ef = v == Variant::early_first;
  TensorId cat = add_op(g, OpKind::concat, "cat", {ef ? early : late, ef ? late : early}, {kH, kW, 10}, {{"axis", 2}});
  TensorId a = conv(g, "conv1", cat, 7, 1, 30, "silu");
  const TensorId res = v == Variant::consumer_with_residual ? conv(g, "res", x, 5, 1, 40, "none") : graph::kNoTensor;
  TensorId b = conv(g, "conv2", cat, 5, v == Variant::consumer_3x3 ? 3 : 1, 32, "relu", res);
  g.outputs = {a, b};
  if (v == Variant::concat_also_output) g.outputs.push_back(cat);
  g.validate();
  return g;
}

graph::PassStats optimize_with(Graph& g, bool split) { return optimize_with_extra(g, split ? "split_concats" : ""); }

TEST(SplitConcats, BothOperandOrdersComputeTheSameWithTheEarlyHalfOffThePath) {
  for (Variant v : {Variant::late_first, Variant::early_first}) {
    SCOPED_TRACE(v == Variant::late_first ? "late operand first" : "early operand first");
    Graph ref = make_graph(v), g = make_graph(v);
    EXPECT_EQ(optimize_with(ref, false).split_concat_convs, 0) << "off by default";
    EXPECT_EQ(optimize_with(g, true).split_concat_convs, 1);
    EXPECT_EQ(count_kind(g, OpKind::concat), 0);
    EXPECT_EQ(count_kind(g, OpKind::conv2d), count_kind(ref, OpKind::conv2d) + 2);
    for (const char* c : {"conv1", "conv2"}) {
      SCOPED_TRACE(c);
      const Op* path = find_op(g, c);
      const Op* early = find_op(g, std::string(c) + "(early part)");
      ASSERT_NE(path, nullptr);
      ASSERT_NE(early, nullptr);
      EXPECT_EQ(g.tensor(path->inputs[0]).name, "late.2:out");
      EXPECT_EQ(g.tensor(early->inputs[0]).name, "early:out");
      EXPECT_EQ(g.tensor(path->inputs[1]).shape[1], 4);
      EXPECT_EQ(g.tensor(early->inputs[1]).shape[1], 6);
      ASSERT_EQ(path->inputs.size(), 4u);
      EXPECT_EQ(path->inputs[3], early->outputs[0]) << "the early half is the late conv's residual";
      EXPECT_EQ(early->act(), graph::Act::none);
      EXPECT_EQ(path->act(), find_op(ref, c)->act());
      EXPECT_FALSE(path->res_after_act());
    }
    expect_same_cpu_outputs(ref, g, rnd(kH * kW * kCin * 2, 7, -1.5f, 1.5f), 1e-5);
  }
}

TEST(SplitConcats, ConcatsThatDoNotQualifyStay) {
  const std::pair<Variant, const char*> cases[] = {
      {Variant::consumer_3x3, "a reader is a 3x3 conv"},
      {Variant::concat_also_output, "the concat is a graph output"},
      {Variant::consumer_with_residual, "a reader has a residual already"},
  };
  for (const auto& [v, what] : cases) {
    SCOPED_TRACE(what);
    Graph g = make_graph(v);
    EXPECT_EQ(optimize_with(g, true).split_concat_convs, 0);
    EXPECT_EQ(count_kind(g, OpKind::concat), 1);
  }
}

// r18vd: the CCFM's two FPN and two PAN concats, each read by its CSP block's conv1 and conv2.
TEST(SplitConcats, R18vdCcfmConcatsBecomeSplitConvs) {
  Graph g = r18vd_unoptimized_graph(), plain = r18vd_unoptimized_graph();
  EXPECT_EQ(optimize_with(g, true).split_concat_convs, 4);
  optimize_with(plain, false);
  EXPECT_EQ(count_kind(plain, OpKind::concat) - count_kind(g, OpKind::concat), 4);
  EXPECT_EQ(g.ops.size(), plain.ops.size() + 4) << "8 convs more, 4 concats fewer";
  const auto prod = graph::producers(g);
  for (const char* block : {"fpn_blocks.0", "fpn_blocks.1", "pan_blocks.0", "pan_blocks.1"}) {
    for (const char* c : {".conv1.conv", ".conv2.conv"}) {
      const std::string name = std::string("model.encoder.") + block + c;
      SCOPED_TRACE(name);
      const Op* path = find_op(g, name);
      const Op* early = find_op(g, name + "(early part)");
      ASSERT_NE(path, nullptr);
      ASSERT_NE(early, nullptr);
      ASSERT_EQ(path->inputs.size(), 4u);
      EXPECT_EQ(path->inputs[3], early->outputs[0]);
      // The late operand is the upsampled lateral (FPN) or the stride-2 downsample (PAN).
      const Op& late_producer = g.ops[prod[path->inputs[0]]];
      EXPECT_EQ(late_producer.kind, block[0] == 'f' ? OpKind::upsample_nearest2x : OpKind::conv2d);
      if (block[0] == 'p') EXPECT_NE(late_producer.name.find("downsample_convs"), std::string::npos) << late_producer.name;
    }
  }
}

}  // namespace
}  // namespace detforge::test
