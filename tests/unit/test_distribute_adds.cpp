// distribute_adds_into_linears: on a hand-built graph with both cases of RT-DETR's decoder (the
// position path ready later than the queries, and the queries later than the position path) the
// rewrite computes what the adds did (CPU engine), the adds and the position linear go, and each
// early linear sits right before its reader; graphs that must stay alone do; on r18vd
// the six position adds go.
#include <gtest/gtest.h>

#include <algorithm>
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

constexpr int kL = 7, kD = 8, kR = 12;

enum class Variant { both_cases, pos_also_output, reader_with_residual, sum_also_output };

// x[7,8] -> h = linear(x); r = relu(linear(relu(linear(x)))) [7,12]; p = linear(r) [7,8];
// s1 = h + p read by q = linear(s1) and k = relu(linear(s1)) (the relu keeps them from merging);
// a = attention(q, k, h); t = three relu linears after a; s2 = t + p; out = linear(s2). Every
// operand of the adds has a second reader or an activation, so no earlier pass takes them.
Graph make_graph(Variant v) {
  Graph g;
  TensorId x = g.add_activation("x", {kL, kD});
  g.inputs = {x};
  uint32_t seed = 100;
  auto lin = [&](const std::string& n, TensorId in, int N, const char* act = "none") {
    const int64_t K = g.tensor(in).shape[1];
    return add_op(g, OpKind::linear, n,
                  {in, g.add_const(n + ".w", {N, K}, rnd(N * K, seed++, -0.5f, 0.5f)),
                   g.add_const(n + ".b", {N}, rnd(N, seed++, -0.5f, 0.5f))},
                  {kL, N}, {{"act", act}});
  };
  auto add = [&](const std::string& n, TensorId a, TensorId b) {
    return add_op(g, OpKind::add, n, {a, b}, g.tensor(a).shape, {{"act", "none"}});
  };
  TensorId h = lin("h", x, kD);
  TensorId r = lin("pos.1", lin("pos.0", x, kR, "relu"), kR, "relu");
  TensorId p = lin("pos.2", r, kD);
  TensorId s1 = add("s1", h, p);
  TensorId q = lin("q", s1, kD);
  TensorId k = lin("k", s1, kD, "relu");
  if (v == Variant::reader_with_residual) g.ops.back().inputs.push_back(h);
  TensorId a = add_op(g, OpKind::attention, "att", {q, k, h}, {kL, kD}, {{"heads", 2}, {"scale", 0.5f}});
  TensorId t = lin("t.2", lin("t.1", lin("t.0", a, kD, "relu"), kD, "relu"), kD, "relu");
  TensorId s2 = add("s2", t, p);
  g.outputs = {lin("out", s2, 4)};
  if (v == Variant::pos_also_output) g.outputs.push_back(p);
  if (v == Variant::sum_also_output) g.outputs.push_back(s2);
  g.validate();
  return g;
}

// optimize() with the pass opted in (it is off by default) and the passes in `skip` left out.
graph::PassStats optimize_with(Graph& g, const char* skip) {
  ScopedEnv extra("DETFORGE_EXTRA_PASSES", "distribute_adds");
  ScopedEnv env("DETFORGE_SKIP_PASSES", skip);
  return graph::optimize(g);
}

int index_of(const Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].name == name) return static_cast<int>(i);
  return -1;
}

// The op named `late` comes right after the early linear `early`, which reads the output of the
// op named `operand`; returns late's index (-1 after a failed expectation).
int late_after_early(const Graph& g, const std::string& late, const std::string& early, const std::string& operand) {
  const int li = index_of(g, late), oi = index_of(g, operand);
  EXPECT_GE(li, 1) << late;
  EXPECT_GE(oi, 0) << operand;
  if (li < 1 || oi < 0) return -1;
  EXPECT_EQ(g.ops[li - 1].name, early);
  EXPECT_EQ(g.ops[li - 1].inputs[0], g.ops[oi].outputs[0]) << early << " reads " << operand;
  return li;
}

TEST(DistributeAdds, BothCasesComputeTheSameWithoutTheAdds) {
  Graph ref = make_graph(Variant::both_cases), g = make_graph(Variant::both_cases);
  optimize_with(ref, "distribute_adds");
  const auto st = optimize_with(g, "");
  EXPECT_EQ(st.distributed_adds, 2);
  for (const Op& op : g.ops) {
    EXPECT_NE(op.name, "s1");
    EXPECT_NE(op.name, "s2");
    EXPECT_NE(op.name, "pos.2") << "the position linear has no reader left";
  }
  // q and k: the position path (3 linears from x) is longer than h's (1), so they read r with
  // folded weights and carry h's part, computed by a linear right before each.
  const int qi = late_after_early(g, "q(folded pos.2)", "q(early part)", "h");
  ASSERT_GE(qi, 1);
  const Op& qf = g.ops[qi];
  ASSERT_EQ(qf.inputs.size(), 4u);
  EXPECT_EQ(g.tensor(qf.inputs[1]).shape, (std::vector<int64_t>{kD, kR}));
  EXPECT_EQ(qf.inputs[3], g.ops[qi - 1].outputs[0]);
  const int ki = late_after_early(g, "k(folded pos.2)", "k(early part)", "h");
  ASSERT_GE(ki, 1);
  EXPECT_EQ(g.ops[ki].act(), graph::Act::relu);
  // s2: t is six ops deep, r two: the position part is the early linear (reading pos.1's
  // output), and the reader keeps its weights on t with a zero bias.
  const int oi = late_after_early(g, "out", "out(early part, folded pos.2)", "pos.1");
  ASSERT_GE(oi, 1);
  const Op& out = g.ops[oi];
  ASSERT_EQ(out.inputs.size(), 4u);
  for (float b : g.tensor(out.inputs[2]).data) EXPECT_EQ(b, 0.f);
  EXPECT_EQ(g.ops.size(), ref.ops.size());  // 2 adds and pos.2 gone, 3 early linears in
  expect_same_cpu_outputs(ref, g, rnd(kL * kD * 2, 7, -1.5f, 1.5f), 1e-4);
}

TEST(DistributeAdds, GraphsThatDoNotQualifyStayAlone) {
  {
    SCOPED_TRACE("the position linear also a graph output: the adds go, the linear stays");
    Graph ref = make_graph(Variant::pos_also_output), g = make_graph(Variant::pos_also_output);
    optimize_with(ref, "distribute_adds");
    EXPECT_EQ(optimize_with(g, "").distributed_adds, 2);
    EXPECT_GE(index_of(g, "pos.2"), 0);
    expect_same_cpu_outputs(ref, g, rnd(kL * kD * 2, 8, -1.5f, 1.5f), 1e-4);
  }
  {
    SCOPED_TRACE("a reader of s1 with a residual: s1 stays, s2 goes");
    Graph g = make_graph(Variant::reader_with_residual);
    EXPECT_EQ(optimize_with(g, "").distributed_adds, 1);
    EXPECT_GE(index_of(g, "s1"), 0);
    EXPECT_LT(index_of(g, "s2"), 0);
  }
  {
    SCOPED_TRACE("the sum s2 also a graph output: s2 stays");
    Graph g = make_graph(Variant::sum_also_output);
    EXPECT_EQ(optimize_with(g, "").distributed_adds, 1);
    EXPECT_GE(index_of(g, "s2"), 0);
  }
}

// r18vd: per decoder layer the queries + query_pos_head before the q/k projection and before the
// offsets/weights projection; the three query_pos_head second layers go with them.
TEST(DistributeAdds, R18vdDecoderPositionAddsGo) {
  Graph g = r18vd_unoptimized_graph(), skipped = r18vd_unoptimized_graph();
  EXPECT_EQ(optimize_with(g, "").distributed_adds, 6);
  EXPECT_EQ(optimize_with(skipped, "distribute_adds").distributed_adds, 0);
  Graph plain = r18vd_unoptimized_graph();  // the default: not run
  EXPECT_EQ(graph::optimize(plain).distributed_adds, 0);
  EXPECT_EQ(plain.ops.size(), skipped.ops.size());
  EXPECT_EQ(g.ops.size() + 3, skipped.ops.size());
  int pos_adds = 0, folded = 0;
  auto decoder_pos_add = [](const Op& op) {
    return op.kind == OpKind::add && op.name.rfind("model.decoder.", 0) == 0 && op.name.find(".pos") != std::string::npos;
  };
  for (const Op& op : skipped.ops) pos_adds += decoder_pos_add(op);
  EXPECT_EQ(pos_adds, 6);
  for (const Op& op : g.ops) {
    EXPECT_FALSE(decoder_pos_add(op)) << op.name;
    folded += op.name.find("folded model.decoder.query_pos_head.layers.1)") != std::string::npos;
  }
  EXPECT_EQ(folded, 6);
}

}  // namespace
}  // namespace detforge::test
