// The opt-in graph passes on the CUDA engine (r18vd, batch 2, fp32 and fp16):
// - gather_rows_early: the encoder box head on the 300 selected rows, the anchors a constant
//   gathered per image (gather_rows with a broadcast table);
// - merge_value_projections: the decoder's three values as column slices of one [8400, 768]
//   linear (ms_deform_attn's value row stride), held back as one GEMM by DETFORGE_CUDA_LATE_VALUE;
// - split_concat_convs: the CCFM's 1x1 convs over a concat as an early half (off the path) and a
//   late half that adds it as its residual;
// against the bundle's graph. Their GEMMs have other shapes, so cuBLASLt may pick other
// kernels: outputs agree query by query within rounding, not bit for bit.
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "graph/passes.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

// The bundle's graph and `g` (the bundle's graph after some passes) on one random batch of 2.
void r18vd_graphs_agree(const LoadedBundle& lb, const graph::Graph& g, const char* precision) {
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 43);
  auto base = engine_with(lb.graph, precision, 2, {});
  auto opt = engine_with(g, precision, 2, {});
  auto* e = dynamic_cast<cuda::CudaEngine*>(opt.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(2));
  EXPECT_EQ(e->graph_check(2), "equal");
  const auto want = base->run(px.data(), 2);
  const auto got = opt->run(px.data(), 2);
  ASSERT_EQ(got.size(), want.size());
  const bool half = std::string(precision) == "fp16";
  expect_r18vd_outputs_agree(want, got, 2, half ? 1e-2 : 1e-3, precision);  // as the other kernel swaps
}

void r18vd_opt_in_passes_agree(const char* precision) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  graph::Graph g = lb.graph;
  // The passes alone (optimize() ran when the bundle was built; these work on its graph too).
  EXPECT_EQ(graph::gather_rows_early(g), 4);  // the anchor add, layers.2, .1, .0 (relus fused)
  EXPECT_EQ(graph::merge_value_projections(g), 3);
  graph::eliminate_dead_code(g);
  g.validate();
  const auto late = cuda::late_value_ops(g, 3);
  ASSERT_EQ(late.size(), 1u) << "one merged value GEMM held back";
  EXPECT_EQ(g.ops[late[0].first].kind, graph::OpKind::topk_rows);
  r18vd_graphs_agree(lb, g, precision);
}

void r18vd_split_concats_agree(const char* precision) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  graph::Graph g = lb.graph;
  EXPECT_EQ(graph::split_concat_convs(g), 4);
  graph::eliminate_dead_code(g);
  g.validate();
  r18vd_graphs_agree(lb, g, precision);
}

TEST(CudaOptInPasses, R18vdGatherEarlyAndMergedValuesFp32) { r18vd_opt_in_passes_agree("fp32"); }
TEST(CudaOptInPasses, R18vdGatherEarlyAndMergedValuesFp16) { r18vd_opt_in_passes_agree("fp16"); }
TEST(CudaOptInPasses, R18vdSplitConcatsFp32) { r18vd_split_concats_agree("fp32"); }
TEST(CudaOptInPasses, R18vdSplitConcatsFp16) { r18vd_split_concats_agree("fp16"); }

}  // namespace
}  // namespace detforge::test
