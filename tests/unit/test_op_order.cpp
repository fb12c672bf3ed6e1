#include <gtest/gtest.h>

#include <cstdio>

#include "detforge/types.h"
#include "graph/memory_plan.h"
#include "graph/op_order.h"
#include "graph/stream_schedule.h"
#include "test_graph_util.h"
#include "test_r18vd_graph.h"

using namespace detforge;
using graph::OpKind;
using test::add_op;

namespace {

// in -> a -> b -> c -> d(c, v) and v(in) declared last: v only needs the input.
graph::Graph late_independent_op() {
  graph::Graph g;
  const auto in = g.add_activation("pixels", {4, 8});
  g.inputs = {in};
  const auto a = add_op(g, OpKind::activation, "a", {in}, {4, 8});
  const auto b = add_op(g, OpKind::activation, "b", {a}, {4, 8});
  const auto c = add_op(g, OpKind::activation, "c", {b}, {4, 8});
  graph::Op v;
  v.kind = OpKind::activation;
  v.name = "v";
  v.inputs = {in};
  v.outputs = {g.add_activation("v:out", {4, 8})};
  graph::Op d;
  d.kind = OpKind::add;
  d.name = "d";
  d.inputs = {c, v.outputs[0]};
  d.outputs = {g.add_activation("d:out", {4, 8})};
  g.add_op(v);  // builder order: a b c v d
  g.add_op(d);
  g.outputs = {d.outputs[0]};
  return g;
}

}  // namespace

TEST(OpOrder, AsapHoistsAnOpToRightAfterItsInputs) {
  auto g = late_independent_op();
  const auto order = graph::asap_order(g);
  // a and v are both ready at the start: v (index 3) follows a (index 0), before b.
  EXPECT_EQ(order, (std::vector<int>{0, 3, 1, 2, 4}));
  graph::reorder_ops(g, order);
  EXPECT_EQ(g.ops[1].name, "v");
  EXPECT_NO_THROW(g.validate());
}

TEST(OpOrder, AsapKeepsAChainAndTheOldOrderOfTies) {
  graph::Graph g;
  const auto in = g.add_activation("pixels", {2, 2});
  g.inputs = {in};
  auto t = in;
  for (int i = 0; i < 5; ++i) t = add_op(g, OpKind::activation, "op" + std::to_string(i), {t}, {2, 2});
  g.outputs = {t};
  EXPECT_EQ(graph::asap_order(g), (std::vector<int>{0, 1, 2, 3, 4}));
}

// late_independent_op: a b c v d with unit costs; the path a-b-c-d is 4 long, v-d is 2. With a
// slack below 2 only v is off the path; a slack of 2 takes v in too.
TEST(OpOrder, CriticalOpsAreThoseOnTheLongestPath) {
  const auto g = late_independent_op();
  EXPECT_EQ(graph::critical_ops(g, 1.0), (std::vector<char>{1, 1, 1, 0, 1}));
  EXPECT_EQ(graph::critical_ops(g, 2.0), (std::vector<char>{1, 1, 1, 1, 1}));
  EXPECT_EQ(graph::critical_ops(g, 0.0), (std::vector<char>{1, 1, 1, 0, 1}));
}

// r18vd at the engine's slack (0.25): the backbone-to-decoder chain is critical; the decoder's
// value projections (they read only the encoder memory, long before the decoder needs them) and
// the backbone's shortcut convs (2x2 stride-2 after the pool fold, beside a 3x3 conv of 2.25x
// their GFLOP) are not. Of the two encoder heads the model puts the 8400-row bbox MLP (3 GEMMs
// of ~1 GFLOP) on the path, not the class head and top-k.
TEST(OpOrder, CriticalOpsOnR18vd) {
  const auto g = test::r18vd_graph();
  const auto crit = graph::critical_ops(g, 0.25);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    n += crit[i];
    const std::string& name = g.ops[i].name;
    if (name.find("value_proj") != std::string::npos || name.find("shortcut") != std::string::npos)
      EXPECT_FALSE(crit[i]) << name;
    if (name.find("final_layer_norm") != std::string::npos || name.find("enc_bbox_head") != std::string::npos)
      EXPECT_TRUE(crit[i]) << name;
  }
  std::printf("r18vd: %d of %zu ops critical\n", n, g.ops.size());
  EXPECT_GT(n, static_cast<int>(g.ops.size()) / 4);
  EXPECT_LT(n, static_cast<int>(g.ops.size()));
}

TEST(OpOrder, ReorderRejectsOrdersThatAreNotTopologicalOrPermutations) {
  auto g = late_independent_op();
  EXPECT_THROW(graph::reorder_ops(g, {1, 0, 2, 3, 4}), Error);  // b before a
  EXPECT_THROW(graph::reorder_ops(g, {0, 1, 2, 3}), Error);
  EXPECT_THROW(graph::reorder_ops(g, {0, 0, 2, 3, 4}), Error);
  EXPECT_EQ(g.ops[1].name, "b");  // unchanged after a rejected order
}

// a b c v d: v moved right after c (and after a), two ops after one anchor, and the misuses.
TEST(OpOrder, MovedAfterPutsEachGroupRightAfterItsAnchor) {
  auto g = late_independent_op();
  EXPECT_EQ(graph::moved_after(5, {{2, {3}}}), (std::vector<int>{0, 1, 2, 3, 4}));  // already there
  EXPECT_EQ(graph::moved_after(5, {{0, {3}}}), (std::vector<int>{0, 3, 1, 2, 4}));
  EXPECT_EQ(graph::moved_after(5, {{0, {2, 1}}}), (std::vector<int>{0, 2, 1, 3, 4}));
  EXPECT_EQ(graph::moved_after(5, {}), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(graph::moved_after(5, {{0, {3}}, {2, {4}}}), (std::vector<int>{0, 3, 1, 2, 4}));
  graph::reorder_ops(g, graph::moved_after(5, {{0, {3}}}));
  EXPECT_EQ(g.ops[1].name, "v");
  EXPECT_THROW(graph::moved_after(5, {{0, {3}}, {1, {3}}}), Error);  // moved twice
  EXPECT_THROW(graph::moved_after(5, {{0, {1}}, {1, {3}}}), Error);  // an anchor moved
  EXPECT_THROW(graph::moved_after(5, {{0, {1}}, {0, {3}}}), Error);  // two groups, one anchor
  EXPECT_THROW(graph::moved_after(5, {{0, {7}}}), Error);
  // Moving d (which reads c) before c is caught by reorder_ops, not here.
  auto g2 = late_independent_op();
  EXPECT_THROW(graph::reorder_ops(g2, graph::moved_after(5, {{0, {4}}})), Error);
}

// x -> a -> b -> d(b, c); x -> c: c's branch is independent of a and b.
TEST(OpOrder, DataAncestorsFollowInputsAndExtraReads) {
  graph::Graph g;
  const auto x = g.add_activation("pixels", {2, 2});
  g.inputs = {x};
  const auto a = add_op(g, OpKind::activation, "a", {x}, {2, 2});
  const auto b = add_op(g, OpKind::activation, "b", {a}, {2, 2});
  const auto c = add_op(g, OpKind::activation, "c", {x}, {2, 2});
  const auto d = add_op(g, OpKind::add, "d", {b, c}, {2, 2});
  g.outputs = {d};
  auto anc = graph::data_ancestors(g);
  ASSERT_EQ(anc.size(), 4u);
  EXPECT_FALSE(graph::has_bit(anc[0], 0));
  EXPECT_TRUE(graph::has_bit(anc[1], 0));
  EXPECT_FALSE(graph::has_bit(anc[2], 0));  // c does not need a
  EXPECT_FALSE(graph::has_bit(anc[2], 1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(graph::has_bit(anc[3], i)) << i;
  // An extra read of a's output by c makes a an ancestor of c.
  anc = graph::data_ancestors(g, {{}, {}, {a}, {}});
  EXPECT_TRUE(graph::has_bit(anc[2], 0));
}

// Buffer 0 is written by op 0 and read by op 1; buffer 1 is written by op 2 and read by op 3.
// Lifetimes are disjoint, so plain reuse shares their bytes; the DAG rule shares them only when
// op 2 already depends on ops 0 and 1.
TEST(OpOrder, DagShareRuleReusesBytesOnlyAfterEveryEarlierUser) {
  const std::vector<graph::BufferRequest> reqs = {{1024, 0, 1}, {1024, 2, 3}};
  const std::vector<std::vector<int>> users = {{0, 1}, {2, 3}};
  EXPECT_EQ(graph::plan_memory(reqs, 256).total_bytes, 1024u);
  std::vector<graph::OpBits> anc(4, graph::OpBits(1, 0));
  anc[1][0] = 0b1;
  anc[2][0] = 0b1;  // op 2 depends on op 0 only: op 1 may still be reading buffer 0
  anc[3][0] = 0b111;
  auto rule = graph::dag_share_rule(reqs, users, anc);
  EXPECT_FALSE(rule(0, 1));
  EXPECT_FALSE(rule(1, 0));
  const auto apart = graph::plan_memory(reqs, 256, rule);
  EXPECT_EQ(apart.total_bytes, 2048u);
  EXPECT_NE(apart.offsets[0], apart.offsets[1]);
  anc[2][0] = 0b11;  // now op 2 follows op 1 as well
  EXPECT_TRUE(rule(0, 1));
  const auto shared = graph::plan_memory(reqs, 256, rule);
  EXPECT_EQ(shared.total_bytes, 1024u);
  EXPECT_EQ(shared.offsets[0], shared.offsets[1]);
}

// The r18vd graph in ASAP order, planned as the CUDA engine plans its arena (fp16, batch 1):
// plain lifetime reuse makes some ops touch bytes another op touched without any data path
// between them, a hazard the stream schedule must then order (a false dependency between ops
// that could run side by side). With the DAG rule every hazard is a data dependency.
TEST(OpOrder, DagReuseOnR18vdAddsNoHazardBeyondTheDataDependencies) {
  graph::Graph g = test::r18vd_graph();
  graph::reorder_ops(g, graph::asap_order(g));
  std::vector<int> root(g.tensors.size());
  for (size_t i = 0; i < root.size(); ++i) root[i] = static_cast<int>(i);
  for (const auto& op : g.ops)
    if (op.kind == OpKind::reshape) root[op.outputs[0]] = root[op.inputs[0]];
  const auto ar = graph::arena_requests(g, root, [&](int r) { return static_cast<size_t>(g.tensor(r).numel()) * 2; });
  const auto anc = graph::data_ancestors(g);
  std::vector<int> req_of(g.tensors.size(), -1);
  for (size_t k = 0; k < ar.roots.size(); ++k) req_of[ar.roots[k]] = static_cast<int>(k);
  auto false_deps = [&](const graph::MemoryPlan& plan) {
    auto range = [&](graph::TensorId t) {
      const int k = req_of[root[t]];
      const uint64_t b = plan.offsets[k];
      return graph::ByteRange{b, b + ar.reqs[k].bytes};
    };
    std::vector<graph::OpAccess> acc(g.ops.size());
    for (size_t i = 0; i < g.ops.size(); ++i) {
      for (auto t : g.ops[i].inputs)
        if (!g.tensor(root[t]).is_const) acc[i].reads.push_back(range(t));
      if (g.ops[i].kind != OpKind::reshape)
        for (auto t : g.ops[i].outputs) acc[i].writes.push_back(range(t));
    }
    const auto deps = graph::hazard_deps(acc);
    int n = 0;
    for (size_t j = 0; j < deps.size(); ++j)
      for (int d : deps[j]) n += !graph::has_bit(anc[j], d);
    return n;
  };
  const auto plain = graph::plan_memory(ar.reqs, 256);
  const auto dag = graph::plan_memory(ar.reqs, 256, graph::dag_share_rule(ar.reqs, ar.users, anc));
  EXPECT_GT(false_deps(plain), 0);
  EXPECT_EQ(false_deps(dag), 0);
  // The price is arena bytes; print it for the notes (fp16, batch 1).
  std::printf("r18vd fp16 arena per image: plain reuse %.1f MiB, DAG-aware %.1f MiB, %d false deps before\n",
              plain.total_bytes / 1048576.0, dag.total_bytes / 1048576.0, false_deps(plain));
  EXPECT_LE(dag.total_bytes, 4 * plain.total_bytes);
}
