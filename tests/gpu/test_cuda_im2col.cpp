// im2col (kernels/im2col.cu) against a host loop, fp32 and fp16, at r18vd's stage-3 shapes
// (20x20x512 3x3 stride 1, 40x40x256 3x3 stride 2), a 2-image batch with padding 2 and a 5x5
// kernel, and the rules it refuses; and the r18vd engine with DETFORGE_CUDA_CONV_IM2COL=1600
// (kxk convs of up to 1,600 output pixels as im2col + cuBLASLt) against the default.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/kernels.h"
#include "detforge/types.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

class CudaIm2col : public StorageParamTest {
 protected:
  void check(int B, int H, int W, int Ci, int k, int stride, int pad) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(H) + "x" + std::to_string(W) + "x" + std::to_string(Ci) +
                 " k" + std::to_string(k) + " s" + std::to_string(stride) + " p" + std::to_string(pad));
    cuda::ConvShape g;
    g.B = B, g.H = H, g.W = W, g.Ci = Ci, g.kh = g.kw = k, g.stride = stride, g.pad = pad;
    g.Ho = (H + 2 * pad - k) / stride + 1;
    g.Wo = (W + 2 * pad - k) / stride + 1;
    auto x = quantize(random_vec(static_cast<size_t>(B) * H * W * Ci, -1, 1, 7 + Ci + k), half());
    const size_t n = cuda::im2col_bytes(g, half()) / (half() ? 2 : 4);
    ASSERT_EQ(n, static_cast<size_t>(B) * g.Ho * g.Wo * k * k * Ci);
    DevBuf dx(x, half()), dy(n, half());
    ASSERT_TRUE(cuda::im2col_supported(g, half(), dx.get(), dy.get()));
    cuda::im2col(dx.get(), dy.get(), g, half(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> want(n, 0.f);
    size_t o = 0;
    for (int b = 0; b < B; ++b)
      for (int oy = 0; oy < g.Ho; ++oy)
        for (int ox = 0; ox < g.Wo; ++ox)
          for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx)
              for (int c = 0; c < Ci; ++c, ++o) {
                const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W) want[o] = x[((static_cast<size_t>(b) * H + iy) * W + ix) * Ci + c];
              }
    EXPECT_TRUE(close(dy.download(), want, 0.f, 0.f));  // a copy: exact
  }
};

TEST_P(CudaIm2col, MatchesHostLoop) {
  check(1, 20, 20, 512, 3, 1, 1);
  check(1, 40, 40, 256, 3, 2, 1);
  check(2, 9, 7, 16, 5, 1, 2);
  check(2, 8, 8, 8, 1, 1, 0);
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaIm2col, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "fp16" : "fp32"); });

TEST(CudaIm2colRules, RefusesWhatItCannotRun) {
  const auto* a = reinterpret_cast<const void*>(uintptr_t{0x10000});
  auto* y = reinterpret_cast<void*>(uintptr_t{0x20000});
  const auto* a2 = reinterpret_cast<const void*>(uintptr_t{0x10002});
  cuda::ConvShape g;
  g.H = g.W = g.Ho = g.Wo = 20;
  g.Ci = 512;
  g.kh = g.kw = 3;
  g.pad = 1;
  EXPECT_TRUE(cuda::im2col_supported(g, true, a, y));
  EXPECT_FALSE(cuda::im2col_supported(g, true, a2, y));
  g.Ci = 12;  // 24 bytes per pixel in fp16, 48 in fp32
  EXPECT_FALSE(cuda::im2col_supported(g, true, a, y));
  EXPECT_TRUE(cuda::im2col_supported(g, false, a, y));
  EXPECT_THROW(cuda::im2col(a, y, g, true, nullptr), Error);
}

// r18vd at batch 2: stage 3's 3x3 convs (2 x 400 output pixels) and the CCFM's 20x20 3x3s go
// through im2col + cuBLASLt; the outputs agree with cuDNN's up to fp16 summation order.
TEST(CudaIm2colEngine, R18vdFp16OnEqualsOff) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 41);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(lb.graph, 2, {k == 0 ? "DETFORGE_CUDA_CONV_IM2COL=0" : "DETFORGE_CUDA_CONV_IM2COL=1600"});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(2));
    const std::string summary = e->conv_fusion_summary(2);
    std::printf("im2col %s: %s; graph check %s\n", k ? "on" : "off", summary.c_str(), e->graph_check(2).c_str());
    EXPECT_EQ(summary.find(" 0 kxk convs as im2col") == std::string::npos, k == 1) << summary;
    EXPECT_EQ(e->graph_check(2), "equal");
    out[k] = e->run(px.data(), 2);
  }
  expect_r18vd_outputs_agree(out[0], out[1], 2, 0.01, "fp16 im2col");
}

}  // namespace
}  // namespace detforge::test
