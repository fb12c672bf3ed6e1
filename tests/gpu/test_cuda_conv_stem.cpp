// The direct stem convolution (backends/cuda/kernels/conv_stem.*), fp32 pixels in, against the
// host double reference: the row kernel (3x3/2, 3 -> 32 or 64 channels) on r18vd's stem shape and
// on rows whose width is not a multiple of a thread's pixels, with and without padding, bias and
// ReLU, batch > 1, fp16 and fp32 outputs; the per-pixel kernel on the same shapes (row_kernel
// false) and on shapes the row kernel does not take. y is poisoned with NaN and guarded past its
// end. The r18vd engine on it: CudaConvStem.R18vdEngine* below.
#include <string>
#include <vector>

#include "backends/cuda/kernels/conv_stem.h"
#include "conv_ref.h"
#include "gpu_test_util.h"
#include "r18_settings_check.h"

namespace detforge::test {
namespace {

using graph::Act;

struct StemCase {
  int B, H, W, Ci, Co, k, stride, pad;
  bool bias;
  Act act;
};

void run_stem_case(const StemCase& c, bool half, bool row_kernel, uint32_t seed) {
  const auto s = make_shape(c.B, c.H, c.W, c.Ci, c.Co, c.k, c.k, c.stride, c.pad);
  SCOPED_TRACE("B " + std::to_string(c.B) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) + "x" +
               std::to_string(c.Ci) + " -> " + std::to_string(c.Co) + " k" + std::to_string(c.k) + " s" +
               std::to_string(c.stride) + " p" + std::to_string(c.pad) + (half ? " fp16" : " fp32") +
               (row_kernel ? " row" : " pixel"));
  const auto x = random_vec(static_cast<size_t>(c.B) * c.H * c.W * c.Ci, 0.f, 1.f, seed);
  const auto w = quantize(random_vec(static_cast<size_t>(c.Co) * c.k * c.k * c.Ci, -0.5f, 0.5f, seed + 1), half);
  const auto b = quantize(random_vec(static_cast<size_t>(c.Co), -0.5f, 0.5f, seed + 2), half);
  const auto want = ref_conv(s, x, w, c.bias ? &b : nullptr, nullptr, c.act);
  DevBuf dx(x, false), dw(w, half), db(b, half);
  const size_t n = want.size();
  DevBuf dy(n + kGuard, half);
  std::vector<float> guard(n + kGuard, kSentinel);
  dy.upload(guard);  // the guard values; the outputs are overwritten below
  cudaMemset(dy.get(), 0xff, n * (half ? 2 : 4));
  auto run = [&] {
    cuda::conv_stem(static_cast<const float*>(dx.get()), dw.get(), c.bias ? db.get() : nullptr, dy.get(), s, c.act,
                    half, nullptr, row_kernel);
    return dy.download();
  };
  const auto got = run();
  const std::vector<float> out(got.begin(), got.begin() + static_cast<long>(n));
  // fp32 accumulation of 27-108 terms against double; fp16 adds the output rounding.
  EXPECT_TRUE(close(out, want, half ? 2e-3f : 2e-5f, half ? 1e-3f : 1e-5f));
  for (size_t i = n; i < n + kGuard; ++i) ASSERT_EQ(got[i], kSentinel) << "guard " << i - n;
  EXPECT_EQ(run(), got) << "a second run differs";
}

const std::vector<StemCase> kRowCases = {
    {1, 640, 640, 3, 32, 3, 2, 1, true, Act::relu},  // r18vd's stem conv
    {2, 37, 45, 3, 32, 3, 2, 1, true, Act::none},    // Wo 23: not a multiple of 4 pixels
    {2, 38, 30, 3, 64, 3, 2, 1, true, Act::relu},    // Co 64: 2 pixels per thread, Wo 15
    {1, 21, 19, 3, 64, 3, 2, 0, false, Act::none},   // no padding, no bias
    {3, 9, 8, 3, 32, 3, 2, 1, true, Act::relu},      // a row narrower than a warp; 16-byte staging (W * 3 % 4 == 0)
};

TEST(CudaConvStem, RowKernelMatchesHostReference) {
  DETFORGE_REQUIRE_GPU();
  uint32_t seed = 300;
  for (const auto& c : kRowCases)
    for (bool half : {true, false}) run_stem_case(c, half, true, seed += 3);
}

TEST(CudaConvStem, PixelKernelMatchesHostReference) {
  DETFORGE_REQUIRE_GPU();
  uint32_t seed = 400;
  for (const auto& c : kRowCases)
    if (c.H < 100)
      for (bool half : {true, false}) run_stem_case(c, half, false, seed += 3);
  // Shapes only the per-pixel kernel takes: 4 channels, stride 1, a 7x7 kernel, Co 16.
  const std::vector<StemCase> other = {{2, 17, 13, 4, 16, 3, 1, 1, true, Act::relu},
                                       {1, 23, 29, 3, 64, 7, 2, 3, true, Act::none},
                                       {1, 12, 12, 1, 8, 3, 2, 1, false, Act::relu}};
  for (const auto& c : other)
    for (bool row : {true, false}) run_stem_case(c, true, row, seed += 3);
}

// The r18vd engine with the direct stem (both kernels) against the default engine (cuDNN on the
// fp16 copy of the input): the graph equals its eager forward and the outputs agree within fp16
// tolerance (the stem now sums the unrounded fp32 pixels).
TEST(CudaConvStem, R18vdEngineOnTheStemKernelsKeepsTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  for (const char* mode : {"1", "2"}) expect_settings_keep_r18vd_outputs(std::string("DETFORGE_CUDA_STEM=") + mode, 61);
}

}  // namespace
}  // namespace detforge::test
