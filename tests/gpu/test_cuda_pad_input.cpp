// DETFORGE_CUDA_PAD_INPUT (cuda_input_conv.cpp): the fp16 input converted to 4 or 8 channels with
// zeros past the image's 3, and the stem conv's weight padded with zeros to match.
// - the conversion kernel against a host loop: the same fp16 bits, zeros in the padding;
// - r18vd engines (batch 2, fp16) with 4 and 8 channels against the default: cuDNN runs another
//   kernel on the padded conv, so the sums differ in rounding only; the outputs agree query by
//   query within the fp16 tolerance of the other engine comparisons;
// - fp32 engines and the direct stem (DETFORGE_CUDA_STEM=1) leave the input as it is.
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/kernels.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

TEST(CudaPadInput, ConversionPadsWithZerosAndRoundsAsTheFlatOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible";
  const int64_t pixels = 1000;
  const int c = 3;
  const auto x = random_vec(static_cast<size_t>(pixels * c), -3, 3, 71);
  DevBuf dx(x, false);
  for (int cp : {4, 8}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    DevBuf dy(static_cast<size_t>(pixels * cp), true);  // poisoned with NaN
    cuda::f32_to_half_padc(static_cast<const float*>(dx.get()), dy.get(), pixels, c, cp, nullptr);
    const auto got = dy.download();
    std::vector<float> want(static_cast<size_t>(pixels * cp), 0.f);
    for (int64_t p = 0; p < pixels; ++p)
      for (int k = 0; k < c; ++k) want[p * cp + k] = fp16_to_fp32(fp32_to_fp16(x[p * c + k]));
    EXPECT_TRUE(close(got, want, 0, 0));
  }
  DevBuf dy(static_cast<size_t>(pixels * 8), true);
  EXPECT_THROW(cuda::f32_to_half_padc(static_cast<const float*>(dx.get()), dy.get(), pixels, 5, 4, nullptr), Error);
}

TEST(CudaPadInput, R18vdPaddedStemConvKeepsTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 47);
  auto base = engine_with(lb.graph, "fp16", 2, {});
  const auto want = base->run(px.data(), 2);
  EXPECT_EQ(dynamic_cast<cuda::CudaEngine*>(base.get())->padded_input_channels(), 0);
  for (const char* p : {"4", "8"}) {
    SCOPED_TRACE(std::string("DETFORGE_CUDA_PAD_INPUT=") + p);
    auto eng = engine_with(lb.graph, "fp16", 2, {std::string("DETFORGE_CUDA_PAD_INPUT=") + p});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->padded_input_channels(), std::stoi(p));
    ASSERT_TRUE(e->graph_captured(2));
    EXPECT_EQ(e->graph_check(2), "equal");
    const auto got = eng->run(px.data(), 2);
    ASSERT_EQ(got.size(), want.size());
    expect_r18vd_outputs_agree(want, got, 2, 1e-2, p);
    const auto eager = e->run_eager(px.data(), 2);
    for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(eager[o].data, got[o].data) << "output " << o;
  }
  auto fp32 = engine_with(lb.graph, "fp32", 1, {"DETFORGE_CUDA_PAD_INPUT=8"});
  EXPECT_EQ(dynamic_cast<cuda::CudaEngine*>(fp32.get())->padded_input_channels(), 0);
  auto stem = engine_with(lb.graph, "fp16", 1, {"DETFORGE_CUDA_PAD_INPUT=8 DETFORGE_CUDA_STEM=1"});
  EXPECT_EQ(dynamic_cast<cuda::CudaEngine*>(stem.get())->padded_input_channels(), 0);
  EXPECT_THROW(engine_with(lb.graph, "fp16", 1, {"DETFORGE_CUDA_PAD_INPUT=5"}), Error);
}

}  // namespace
}  // namespace detforge::test
