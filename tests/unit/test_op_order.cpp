#include <gtest/gtest.h>

#include "detforge/types.h"
#include "graph/op_order.h"
#include "test_graph_util.h"

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

TEST(OpOrder, ReorderRejectsOrdersThatAreNotTopologicalOrPermutations) {
  auto g = late_independent_op();
  EXPECT_THROW(graph::reorder_ops(g, {1, 0, 2, 3, 4}), Error);  // b before a
  EXPECT_THROW(graph::reorder_ops(g, {0, 1, 2, 3}), Error);
  EXPECT_THROW(graph::reorder_ops(g, {0, 0, 2, 3, 4}), Error);
  EXPECT_EQ(g.ops[1].name, "b");  // unchanged after a rejected order
}
