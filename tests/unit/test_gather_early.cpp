// gather_rows_early: on a hand-built query selection (RT-DETR's encoder heads in small) the box
// head runs on the gathered rows and computes what it did on all rows (CPU engine, batch 2, so
// the gathered constant must broadcast); the existing gather of the same rows is shared; heads
// that must stay on all rows do; on r18vd the encoder box head reads the 300 selected rows.
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

constexpr int kL = 23, kD = 8, kCls = 5, kK = 6;

enum class Variant { plain, head_also_output, head_after_attention };

// x[23, 8] -> om = layer_norm(linear(x)); cls = linear(om) [23, 5]; idx = topk_rows(cls, 6);
// coord = linear(relu(linear(om))) [23, 4] + anchors (constant [23, 4]); ref = gather(coord, idx),
// target = gather(om, idx) (after ref in op order, as the r18vd builder has it); outputs
// sigmoid(ref) and linear(target).
Graph make_graph(Variant v) {
  Graph g;
  TensorId x = g.add_activation("x", {kL, kD});
  g.inputs = {x};
  uint32_t seed = 700;
  auto lin = [&](const std::string& n, TensorId in, int N, const char* act = "none") {
    seed += 2;
    return random_linear(g, n, in, N, seed, act);
  };
  TensorId e = lin("enc_output", x, kD);
  TensorId om = add_op(g, OpKind::layer_norm, "enc_norm",
                       {e, g.add_const("enc_norm.g", {kD}, rnd(kD, 1, 0.5f, 1.5f)), g.add_const("enc_norm.b", {kD}, rnd(kD, 2))},
                       {kL, kD}, {{"eps", 1e-5f}});
  TensorId cls = lin("score_head", om, kCls);
  TensorId h0 = om;
  if (v == Variant::head_after_attention)  // attention mixes rows: the head input is not row-wise
    h0 = add_op(g, OpKind::attention, "mix", {om, om, om}, {kL, kD}, {{"heads", 2}, {"scale", 0.5f}});
  TensorId hid = add_op(g, OpKind::activation, "bbox_head.0.relu", {lin("bbox_head.0", h0, kD)}, {kL, kD},
                        {{"act", "relu"}});
  TensorId anchors = g.add_const("anchors", {kL, 4}, rnd(kL * 4, 3, -4.f, 4.f));
  TensorId coord = add_op(g, OpKind::add, "bbox_head.anchors", {lin("bbox_head.1", hid, 4), anchors}, {kL, 4},
                          {{"act", "none"}});
  TensorId idx = add_op(g, OpKind::topk_rows, "topk", {cls}, {kK}, {{"k", kK}});
  g.tensor(idx).dtype = graph::DType::i32;
  TensorId ref = add_op(g, OpKind::gather_rows, "topk.reference_points", {coord, idx}, {kK, 4});
  TensorId target = add_op(g, OpKind::gather_rows, "topk.target", {om, idx}, {kK, kD});
  g.outputs = {add_op(g, OpKind::activation, "ref.sigmoid", {ref}, {kK, 4}, {{"act", "sigmoid"}}),
               lin("decoder", target, kD)};
  if (v == Variant::head_also_output) g.outputs.push_back(coord);
  g.validate();
  return g;
}

graph::PassStats optimize_with(Graph& g, bool early) { return optimize_with_extra(g, early ? "gather_early" : ""); }

TEST(GatherEarly, BoxHeadRunsOnTheSelectedRowsAndComputesTheSame) {
  Graph ref = make_graph(Variant::plain), g = make_graph(Variant::plain);
  EXPECT_EQ(optimize_with(ref, false).gathered_early, 0) << "off by default";
  // The add, bbox_head.1, the relu and bbox_head.0 move behind the gather.
  EXPECT_EQ(optimize_with(g, true).gathered_early, 4);
  for (const char* name : {"bbox_head.0", "bbox_head.1"}) {
    SCOPED_TRACE(name);
    const Op* l = find_op(g, name);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(g.tensor(l->outputs[0]).shape[0], kK) << "runs on the gathered rows";
  }
  // Two gathers: om (shared by the target and the head) and the anchors; none of coord.
  EXPECT_EQ(count_kind(g, OpKind::gather_rows), 2);
  const Op* target = find_op(g, "topk.target");
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(find_op(g, "bbox_head.0")->inputs[0], target->outputs[0]) << "the gather of om is shared";
  const Op* anchors = find_op(g, "topk.reference_points[anchors]");
  ASSERT_NE(anchors, nullptr);
  EXPECT_TRUE(g.tensor(anchors->inputs[0]).is_const);
  EXPECT_FALSE(g.tensor(anchors->outputs[0]).is_const);
  // The anchor add became bbox_head.1's residual, and the sigmoid its activation.
  const Op* last = find_op(g, "bbox_head.1");
  ASSERT_EQ(last->inputs.size(), 4u);
  EXPECT_EQ(last->inputs[3], anchors->outputs[0]);
  EXPECT_EQ(last->act(), graph::Act::sigmoid);
  EXPECT_EQ(count_kind(g, OpKind::add), 0);
  expect_same_cpu_outputs(ref, g, rnd(kL * kD * 2, 9, -2.f, 2.f), 1e-5);
}

TEST(GatherEarly, HeadsThatMustSeeEveryRowStay) {
  const std::pair<Variant, const char*> cases[] = {
      {Variant::head_also_output, "the box head's output also a graph output"},
      {Variant::head_after_attention, "the head's first input mixes rows (attention)"},
  };
  for (const auto& [v, what] : cases) {
    SCOPED_TRACE(what);
    Graph ref = make_graph(v), g = make_graph(v);
    optimize_with(ref, false);
    const auto st = optimize_with(g, true);
    const Op* l0 = find_op(g, "bbox_head.0");
    ASSERT_NE(l0, nullptr);
    if (v == Variant::head_also_output) {
      EXPECT_EQ(st.gathered_early, 0);
      EXPECT_EQ(g.tensor(l0->outputs[0]).shape[0], kL);
    } else {  // the head moves up to the attention, which stays on every row
      EXPECT_EQ(st.gathered_early, 4);
      EXPECT_EQ(g.tensor(l0->outputs[0]).shape[0], kK);
      const Op* mix = find_op(g, "mix");
      ASSERT_NE(mix, nullptr);
      EXPECT_EQ(g.tensor(mix->outputs[0]).shape[0], kL);
      EXPECT_EQ(count_kind(g, OpKind::gather_rows), 3) << "om, mix and the anchors";
    }
    expect_same_cpu_outputs(ref, g, rnd(kL * kD * 2, 10, -2.f, 2.f), 1e-5);
  }
}

// r18vd: enc_bbox_head (3 linears, 2 relus) and the anchor add run on the 300 selected rows; the
// target gather of the enc_output rows feeds both the decoder and the head.
TEST(GatherEarly, R18vdEncoderBoxHeadRunsOnTheSelectedQueries) {
  Graph g = r18vd_unoptimized_graph(), plain = r18vd_unoptimized_graph();
  EXPECT_EQ(optimize_with(g, true).gathered_early, 6);
  optimize_with(plain, false);
  for (int i = 0; i < 3; ++i) {
    const std::string name = "model.enc_bbox_head.layers." + std::to_string(i);
    SCOPED_TRACE(name);
    const Op *l = find_op(g, name), *p = find_op(plain, name);
    ASSERT_NE(l, nullptr);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(g.tensor(l->outputs[0]).shape[0], 300);
    EXPECT_EQ(plain.tensor(p->outputs[0]).shape[0], 8400);
  }
  const Op* target = find_op(g, "model.topk.target");
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(find_op(g, "model.enc_bbox_head.layers.0")->inputs[0], target->outputs[0]);
  const Op* anchors = find_op(g, "model.topk.reference_points[model.anchors]");
  ASSERT_NE(anchors, nullptr);
  EXPECT_EQ(g.tensor(anchors->outputs[0]).shape, (std::vector<int64_t>{300, 4}));
  // The anchor gather replaces the reference-point gather; the anchor add (now of an activation)
  // and the init_reference_points sigmoid fuse into the last linear.
  const Op* last = find_op(g, "model.enc_bbox_head.layers.2");
  ASSERT_EQ(last->inputs.size(), 4u);
  EXPECT_EQ(last->inputs[3], anchors->outputs[0]);
  EXPECT_EQ(last->act(), graph::Act::sigmoid);
  EXPECT_EQ(g.ops.size() + 2, plain.ops.size());
}

// The passes also apply to a graph already optimized (as a bundle holds it; the CUDA GPU test
// CudaOptInPasses runs them so): there the relus are fused into the linears, so 4 ops move, and
// the anchor add stays an add of two gathered operands.
TEST(GatherEarly, R18vdBundleGraphTakesBothPassesAfterOptimize) {
  Graph g = r18vd_graph();
  EXPECT_EQ(graph::gather_rows_early(g), 4);
  EXPECT_EQ(graph::merge_value_projections(g), 3);
  graph::eliminate_dead_code(g);
  EXPECT_NO_THROW(g.validate());
  const Op* add = find_op(g, "model.enc_bbox_head.anchors");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->kind, OpKind::add);
  EXPECT_EQ(g.tensor(add->outputs[0]).shape, (std::vector<int64_t>{300, 4}));
  EXPECT_NO_THROW(make_engine("cpu", g, {}));
}

}  // namespace
}  // namespace detforge::test
