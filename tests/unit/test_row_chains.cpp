// graph::find_row_chains: which linear chains the CUDA row_mlp kernel takes, on hand-built graphs
// (each epilogue, each reason to stop) and on the optimised r18vd graph (19 chains).
#include <gtest/gtest.h>

#include <map>

#include "graph/passes.h"
#include "graph/row_chains.h"
#include "test_graph_util.h"
#include "test_r18vd_graph.h"

namespace detforge::test {
namespace {

using graph::Graph;
using graph::OpKind;
using graph::RowEpilogue;
using graph::TensorId;

struct Builder {
  Graph g;
  TensorId x;
  explicit Builder(int64_t K) {
    x = g.add_activation("x", {300, K});
    g.inputs = {x};
  }
  TensorId op(OpKind k, const std::string& name, std::vector<TensorId> in, std::vector<int64_t> shape,
              nlohmann::json attrs = nlohmann::json::object()) {
    return add_op(g, k, name, std::move(in), std::move(shape), std::move(attrs));
  }
  TensorId linear(TensorId in, int64_t N, const char* act = "none", TensorId res = graph::kNoTensor) {
    const int64_t K = g.tensor(in).shape[1];
    const std::string n = "lin" + std::to_string(g.ops.size());
    TensorId w = g.add_const(n + ".w", {N, K}, std::vector<float>(N * K, 0.f));
    TensorId b = g.add_const(n + ".b", {N}, std::vector<float>(N, 0.f));
    std::vector<TensorId> ins{in, w, b};
    if (res != graph::kNoTensor) ins.push_back(res);
    return op(OpKind::linear, n, ins, {300, N}, {{"act", act}});
  }
  TensorId layer_norm(TensorId in) {
    const int64_t C = g.tensor(in).shape[1];
    TensorId ga = g.add_const("ln.g" + std::to_string(g.ops.size()), {C}, std::vector<float>(C, 1.f));
    TensorId be = g.add_const("ln.b" + std::to_string(g.ops.size()), {C}, std::vector<float>(C, 0.f));
    return op(OpKind::layer_norm, "ln" + std::to_string(g.ops.size()), {in, ga, be}, {300, C}, {{"eps", 1e-5}});
  }
};

TEST(RowChains, BboxHeadWithBoxRefineIsOneChain) {
  Builder b(256);
  TensorId ref = b.g.add_activation("ref", {300, 4});
  b.g.inputs.push_back(ref);
  TensorId h = b.linear(b.linear(b.linear(b.x, 256, "relu"), 256, "relu"), 4);
  b.g.outputs = {b.op(OpKind::box_refine, "refine", {h, ref}, {300, 4})};
  auto cs = graph::find_row_chains(b.g);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].linears, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(cs[0].epilogue, RowEpilogue::box_refine);
  EXPECT_EQ(cs[0].last_op(), 3);
}

TEST(RowChains, LinearWithResidualThenLayerNorm) {
  Builder b(256);
  TensorId y = b.layer_norm(b.linear(b.x, 256, "none", b.x));
  b.g.outputs = {y};
  auto cs = graph::find_row_chains(b.g);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].linears.size(), 1u);
  EXPECT_EQ(cs[0].epilogue, RowEpilogue::layer_norm);
}

TEST(RowChains, ConstantAddIsAnEpilogueAndAnActivationAddIsNot) {
  Builder b(256);
  TensorId c = b.g.add_const("anchors", {300, 4}, std::vector<float>(1200, 0.f));
  TensorId y = b.op(OpKind::add, "anchors", {b.linear(b.linear(b.x, 256, "relu"), 4), c}, {300, 4}, {{"act", "none"}});
  TensorId z = b.op(OpKind::add, "act_add", {b.linear(b.linear(b.x, 256, "relu"), 4), c}, {300, 4}, {{"act", "relu"}});
  b.g.outputs = {y, z};
  auto cs = graph::find_row_chains(b.g);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].epilogue, RowEpilogue::add_const);
  EXPECT_EQ(cs[1].epilogue, RowEpilogue::none);  // two linears, the relu add stays its own op
  EXPECT_EQ(cs[1].linears.size(), 2u);
}

TEST(RowChains, StopsWhereTheKernelCannotFollow) {
  Builder b(256);
  // An intermediate read twice: the chain stops there, a lone linear without epilogue is no chain.
  TensorId h = b.linear(b.x, 256, "relu");
  TensorId u = b.linear(h, 256);
  TensorId v = b.linear(h, 256);
  // A GELU linear, a hidden width not a multiple of 32, and a width over 512 do not chain.
  TensorId g1 = b.linear(b.linear(b.x, 256, "gelu"), 256);
  TensorId w1 = b.linear(b.linear(b.x, 48, "relu"), 256);
  TensorId big = b.linear(b.linear(b.x, 1024, "relu"), 256);
  b.g.outputs = {u, v, g1, w1, big};
  EXPECT_TRUE(graph::find_row_chains(b.g).empty());
  // More than max_layers: the first three chain, the fourth is left alone.
  Builder c(256);
  c.g.outputs = {c.linear(c.linear(c.linear(c.linear(c.x, 256, "relu"), 256, "relu"), 256, "relu"), 256)};
  auto cs = graph::find_row_chains(c.g);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].linears.size(), 3u);
}

TEST(RowChains, R18vdHasNineteenChains) {
  Graph g = r18vd_graph();
  std::map<std::string, int> by;
  for (const auto& c : graph::find_row_chains(g)) {
    const std::string& first = g.ops[c.first_op()].name;
    const bool dec = first.find("model.decoder.") == 0;
    by[std::string(dec ? "decoder " : "encoder ") + std::to_string(c.linears.size()) + " " +
       graph::op_kind_name(g.ops[c.last_op()].kind)]++;
  }
  const std::map<std::string, int> want = {
      {"decoder 2 linear", 3},       // query_pos_head 4 -> 512 -> 256
      {"decoder 3 box_refine", 3},   // bbox_embed + refine
      {"decoder 1 layer_norm", 9},   // out_proj, output_proj, fc2 (+ residual) + LN
      {"encoder 1 layer_norm", 3},   // AIFI out_proj, fc2; enc_output
      {"encoder 3 add", 1}};         // enc_bbox_head + anchors
  EXPECT_EQ(by, want);
}

}  // namespace
}  // namespace detforge::test
