// merge_value_projections: on a hand-built three-layer deformable decoder whose value
// projections all read one memory, the merged graph computes what the separate projections did
// (CPU engine, batch 2); projections that must stay apart do; the value slice is checked at
// load; on r18vd the three value_proj linears become one [8400, 768] linear.
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

// Memory x[17, 8] over three levels (4x3, 2x2, 1x1); 17 queries. Layer i: value_i = linear(x)
// [17, 16]; off_i, aw_i = linear(q_i); out_i = ms_deform_attn(value_i, off_i, aw_i, ref);
// q_0 = x, q_{i+1} = linear(out_i). Random weights in [-1, 1].
constexpr int kL = 17, kK = 8, kC = 16, kHeads = 2, kLevels = 3, kPoints = 4;
constexpr int kOff = kHeads * kLevels * kPoints * 2, kAw = kHeads * kLevels * kPoints;

enum class Variant { plain, value1_also_output, value1_relu, value1_other_input };

Graph make_graph(Variant v) {
  Graph g;
  TensorId x = g.add_activation("x", {kL, kK});
  g.inputs = {x};
  uint32_t seed = 300;
  auto lin = [&](const std::string& n, TensorId in, int N, const char* act = "none") {
    seed += 2;
    return random_linear(g, n, in, N, seed, act);
  };
  TensorId other = v == Variant::value1_other_input ? lin("other", x, kK, "relu") : graph::kNoTensor;
  TensorId ref = add_op(g, OpKind::activation, "ref", {lin("ref_head", x, 4)}, {kL, 4}, {{"act", "sigmoid"}});
  const int lp = kLevels * kPoints;
  TensorId ps = g.add_const("points_scale", {lp}, std::vector<float>(lp, 1.f / kPoints));
  TensorId q = x, out = graph::kNoTensor, value1 = graph::kNoTensor;
  for (int i = 0; i < 3; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const bool odd_one = i == 1 && (v == Variant::value1_relu || v == Variant::value1_other_input);
    TensorId value = lin(p + "value_proj", odd_one && other != graph::kNoTensor ? other : x, kC,
                         odd_one && v == Variant::value1_relu ? "relu" : "none");
    if (i == 1) value1 = value;
    TensorId off = lin(p + "sampling_offsets", q, kOff), aw = lin(p + "attention_weights", q, kAw);
    out = add_op(g, OpKind::ms_deform_attn, p + "encoder_attn", {value, off, aw, ref, ps}, {kL, kC},
                 {{"heads", kHeads}, {"levels", kLevels}, {"points", kPoints}, {"offset_scale", 0.5f},
                  {"spatial_shapes", {{4, 3}, {2, 2}, {1, 1}}}, {"level_start", {0, 12, 16}}});
    if (i < 2) q = lin(p + "next", out, kK, "relu");
  }
  g.outputs = {out};
  if (v == Variant::value1_also_output) g.outputs.push_back(value1);
  g.validate();
  return g;
}

graph::PassStats optimize_with(Graph& g, bool merge) { return optimize_with_extra(g, merge ? "merge_values" : ""); }

std::vector<const Op*> deform_ops(const Graph& g) {
  std::vector<const Op*> r;
  for (const Op& op : g.ops)
    if (op.kind == OpKind::ms_deform_attn) r.push_back(&op);
  return r;
}

TEST(MergeValues, ThreeLayersReadSlicesOfOneProjectionAndComputeTheSame) {
  Graph ref = make_graph(Variant::plain), g = make_graph(Variant::plain);
  EXPECT_EQ(optimize_with(ref, false).merged_value_projections, 0) << "off by default";
  EXPECT_EQ(optimize_with(g, true).merged_value_projections, 3);
  EXPECT_EQ(g.ops.size() + 2, ref.ops.size());
  const auto das = deform_ops(g);
  ASSERT_EQ(das.size(), 3u);
  const auto prod = graph::producers(g);
  for (size_t i = 0; i < das.size(); ++i) {
    SCOPED_TRACE(das[i]->name);
    EXPECT_EQ(das[i]->inputs[0], das[0]->inputs[0]) << "one value tensor";
    const auto cols = graph::deform_columns(g, *das[i]);
    EXPECT_EQ(cols.v_col, static_cast<int64_t>(i) * kC);
    EXPECT_EQ(cols.v_ld, 3 * kC);
    EXPECT_EQ(cols.v_width, kC);
    EXPECT_EQ(graph::deform_columns_error(g, *das[i]), "");
  }
  const Op& m = g.ops[prod[das[0]->inputs[0]]];
  EXPECT_EQ(m.name, "layers.0.value_proj(3 value projections)");
  EXPECT_EQ(g.tensor(m.inputs[1]).shape, (std::vector<int64_t>{3 * kC, kK}));
  EXPECT_EQ(g.tensor(m.outputs[0]).shape, (std::vector<int64_t>{kL, 3 * kC}));
  // Layer 1's weights sit in rows 16..31 of the stacked weight.
  const auto& w = g.tensor(m.inputs[1]).data;
  const Op* l1 = nullptr;
  for (const Op& op : ref.ops)
    if (op.name == "layers.1.value_proj") l1 = &op;
  ASSERT_NE(l1, nullptr);
  const auto& w1 = ref.tensor(l1->inputs[1]).data;
  EXPECT_TRUE(std::equal(w1.begin(), w1.end(), w.begin() + kC * kK));
  expect_same_cpu_outputs(ref, g, rnd(kL * kK * 2, 5, -1.5f, 1.5f), 1e-5);
}

TEST(MergeValues, ProjectionsThatDoNotQualifyStayApart) {
  const std::pair<Variant, const char*> cases[] = {
      {Variant::value1_also_output, "layer 1's value also a graph output"},
      {Variant::value1_relu, "layer 1's value with an activation"},
      {Variant::value1_other_input, "layer 1's value of another input"},
  };
  for (const auto& [v, what] : cases) {
    SCOPED_TRACE(what);
    Graph ref = make_graph(v), g = make_graph(v);
    optimize_with(ref, false);
    EXPECT_EQ(optimize_with(g, true).merged_value_projections, 2) << "layers 0 and 2 still merge";
    const auto das = deform_ops(g);
    ASSERT_EQ(das.size(), 3u);
    EXPECT_EQ(das[0]->inputs[0], das[2]->inputs[0]);
    EXPECT_NE(das[1]->inputs[0], das[0]->inputs[0]);
    EXPECT_FALSE(das[1]->attrs.contains("v_col"));
    EXPECT_EQ(graph::deform_columns(g, *das[2]).v_col, kC);
    expect_same_cpu_outputs(ref, g, rnd(kL * kK * 2, 6, -1.5f, 1.5f), 1e-5);
  }
}

TEST(MergeValues, ValueSliceOutsideItsInputIsNamed) {
  Graph g = make_graph(Variant::plain);
  optimize_with(g, true);
  Op* da = nullptr;
  for (Op& op : g.ops)
    if (op.kind == OpKind::ms_deform_attn) da = &op;
  ASSERT_NE(da, nullptr);
  da->attrs["v_col"] = 2 * kC + 1;
  EXPECT_EQ(graph::deform_columns_error(g, *da), "input 0 (value) has 48 columns, the op reads 16 from column 33");
  EXPECT_THROW(make_engine("cpu", g, {}), Error);
}

// r18vd: the three decoder layers' value_proj read the same memory: one [768, 256] linear.
TEST(MergeValues, R18vdDecoderValuesBecomeOneLinear) {
  Graph g = r18vd_unoptimized_graph(), plain = r18vd_unoptimized_graph();
  EXPECT_EQ(optimize_with(g, true).merged_value_projections, 3);
  optimize_with(plain, false);
  EXPECT_EQ(g.ops.size() + 2, plain.ops.size());
  const auto das = deform_ops(g);
  ASSERT_EQ(das.size(), 3u);
  const auto prod = graph::producers(g);
  const Op& m = g.ops[prod[das[0]->inputs[0]]];
  EXPECT_EQ(m.name, "model.decoder.layers.0.encoder_attn.value_proj(3 value projections)");
  EXPECT_EQ(g.tensor(m.outputs[0]).shape, (std::vector<int64_t>{8400, 768}));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(das[i]->inputs[0], m.outputs[0]);
    EXPECT_EQ(graph::deform_columns(g, *das[i]).v_col, 256 * static_cast<int64_t>(i));
    EXPECT_EQ(graph::deform_columns_error(g, *das[i]), "");
  }
}

}  // namespace
}  // namespace detforge::test
