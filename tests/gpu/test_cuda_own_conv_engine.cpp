// The r18vd engine (fp16, batch 2) with its convs on our own kernels, per DETFORGE_CUDA_OWN_CONV
// mode: direct_force (the six convs the halo-tiled 3x3 kernel supports: the stem's 32->32 and
// 32->64, stage 0's four 64->64), force (every conv on the fastest own variant, the wgmma family
// of conv_igemm included), and the timed choices direct and 1 (own kernels only where they beat
// cuDNN's fused plan and match its output). Each keeps the library engine's outputs within the
// fp16 tolerance of the other engine comparisons, and its graph equals its eager forward bit for
// bit.
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

class CudaOwnConvEngine : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaOwnConvEngine, R18vdKeepsTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const std::string mode = GetParam();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 53);
  auto base = engine_with(lb.graph, "fp16", 2, {});
  const auto want = base->run(px.data(), 2);
  auto eng = engine_with(lb.graph, "fp16", 2, {"DETFORGE_CUDA_OWN_CONV=" + mode});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  const std::string summary = e->conv_fusion_summary(2);
  std::printf("%s: %s\n", mode.c_str(), summary.c_str());
  if (mode == "direct_force") EXPECT_EQ(summary.rfind("6 convs on own", 0), 0u) << summary;
  if (mode == "force") EXPECT_EQ(summary.rfind("0 convs on own", 0), std::string::npos) << summary;
  if (mode == "direct_force" || mode == "direct") EXPECT_NE(summary.find(" 0 linears on own"), std::string::npos) << summary;
  ASSERT_TRUE(e->graph_captured(2));
  EXPECT_EQ(e->graph_check(2), "equal");
  const auto got = eng->run(px.data(), 2);
  ASSERT_EQ(got.size(), want.size());
  expect_r18vd_outputs_agree(want, got, 2, 1e-2, mode.c_str());
  const auto eager = e->run_eager(px.data(), 2);
  for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(eager[o].data, got[o].data) << "output " << o;
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaOwnConvEngine, ::testing::Values("direct_force", "direct", "force", "1"));

}  // namespace
}  // namespace detforge::test
