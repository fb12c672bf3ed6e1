// graph::find_decoder_tails: which ops the CUDA dec_tail kernel takes per decoder layer, on the
// optimised r18vd graph: three tails, the first two through the next layer's query_pos_head and
// self_attn.pos add, the last ending at the boxes output; moved after their output_proj (as the
// CUDA engine orders them, after its ASAP order) each tail is consecutive and still a valid order.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "graph/dec_tails.h"
#include "graph/op_order.h"
#include "graph/passes.h"
#include "test_r18vd_graph.h"

namespace detforge::test {
namespace {

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

TEST(DecoderTails, R18vdHasOnePerLayerWithTheNextQueryPosBetweenLayers) {
  graph::Graph g = r18vd_graph();
  graph::reorder_ops(g, graph::asap_order(g));
  auto tails = graph::find_decoder_tails(g);
  ASSERT_EQ(tails.size(), 3u);
  for (int l = 0; l < 3; ++l) {
    const auto& t = tails[l];
    const std::string p = "model.decoder.layers." + std::to_string(l);
    EXPECT_EQ(g.ops[t.out_proj].name, p + ".encoder_attn.output_proj");
    EXPECT_EQ(g.ops[t.ln1].name, p + ".encoder_attn_layer_norm");
    EXPECT_EQ(g.ops[t.fc1].name, p + ".fc1");
    EXPECT_EQ(g.ops[t.fc2].name, p + ".fc2");
    EXPECT_EQ(g.ops[t.ln2].name, p + ".final_layer_norm");
    EXPECT_TRUE(ends_with(g.ops[t.bb2].name, "bbox_embed." + std::to_string(l) + ".layers.2"));
    if (l < 2) {
      ASSERT_GE(t.pos_add, 0);
      EXPECT_EQ(g.ops[t.qp0].name, "model.decoder.query_pos_head.layers.0");
      EXPECT_EQ(g.ops[t.qp1].name, "model.decoder.query_pos_head.layers.1");
      EXPECT_EQ(g.ops[t.pos_add].name, "model.decoder.layers." + std::to_string(l + 1) + ".self_attn.pos");
      EXPECT_EQ(t.ops().size(), 12u);
    } else {
      EXPECT_EQ(t.pos_add, -1);
      EXPECT_EQ(t.qp0, -1);
      EXPECT_EQ(g.tensor(g.ops[t.refine].outputs[0]).name, "boxes");
      EXPECT_EQ(t.ops().size(), 9u);
    }
  }
  std::vector<std::pair<int, std::vector<int>>> groups;
  for (const auto& t : tails) {
    auto ops = t.ops();
    groups.push_back({ops[0], std::vector<int>(ops.begin() + 1, ops.end())});
  }
  graph::reorder_ops(g, graph::moved_after(g.ops.size(), groups));  // throws on an invalid order
  g.validate();
  tails = graph::find_decoder_tails(g);
  ASSERT_EQ(tails.size(), 3u);
  for (const auto& t : tails) {
    const auto ops = t.ops();
    for (size_t k = 1; k < ops.size(); ++k) EXPECT_EQ(ops[k], ops[0] + static_cast<int>(k));
  }
}

// A bbox head whose middle output has a second reader is not a tail (the kernel would not
// store what that reader needs in the order it needs it).
TEST(DecoderTails, AnIntermediateReadElsewhereStopsTheMatch) {
  graph::Graph g = r18vd_graph();
  const auto tails = graph::find_decoder_tails(g);
  ASSERT_EQ(tails.size(), 3u);
  const auto t = tails[1];
  const graph::TensorId mid = g.ops[t.bb0].outputs[0];
  graph::TensorId extra = g.add_activation("extra", g.tensor(mid).shape);
  graph::Op op;
  op.kind = graph::OpKind::activation;
  op.name = "extra_reader";
  op.inputs = {mid};
  op.outputs = {extra};
  op.attrs = {{"act", "relu"}};
  g.ops.push_back(op);
  g.outputs.push_back(extra);
  EXPECT_EQ(graph::find_decoder_tails(g).size(), 2u);
}

}  // namespace
}  // namespace detforge::test
