// The implicit-GEMM fp16 convolution (backends/cuda/kernels/conv_igemm.*) against a host double
// reference computed from the fp16-rounded inputs, for every supported variant. The shapes hit
// the im2col gather (odd sizes, stride 2, padding on all sides, batch > 1, a 1x3 kernel), K tails
// (K = 8, K = 216), M and N tile tails (Co = 8, 24), split-K (large K) and every epilogue form
// (bias, residual, relu, silu, y aliasing res). The tolerance is near the fp16 output rounding,
// so a single wrong tap or a dropped split shows; y is poisoned with NaN and guarded past its
// end, and the split-K workspace is poisoned with NaN.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/kernels/conv_direct.h"
#include "backends/cuda/kernels/conv_igemm.h"
#include "detforge/types.h"
#include "conv_ref.h"
#include "gpu_test_util.h"

namespace detforge::test {
namespace {

using cuda::ConvShape;
using graph::Act;
using V = std::vector<float>;

struct Case {
  const char* name;
  ConvShape s;
  bool bias, res;
  Act act;
  bool alias;  // y written over res
};

void run_case(const Case& c, uint32_t seed) {
  const ConvShape& s = c.s;
  const size_t nx = static_cast<size_t>(s.B) * s.H * s.W * s.Ci;
  const size_t nw = static_cast<size_t>(s.Co) * s.kh * s.kw * s.Ci;
  const size_t ny = static_cast<size_t>(s.B) * s.Ho * s.Wo * s.Co;
  const float wscale = 1.0f / std::sqrt(static_cast<float>(s.kh * s.kw * s.Ci));
  const V x = quantize(random_vec(nx, -1, 1, seed), true);
  const V w = quantize(random_vec(nw, -wscale, wscale, seed + 1), true);
  const V bias = quantize(random_vec(s.Co, -0.5, 0.5, seed + 2), true);
  const V res = quantize(random_vec(ny, -1, 1, seed + 3), true);
  const V want = ref_conv(s, x, w, c.bias ? &bias : nullptr, c.res ? &res : nullptr, c.act);
  float maxabs = 0;
  for (float v : want) maxabs = std::max(maxabs, std::fabs(v));
  ASSERT_GT(maxabs, 0.1f) << c.name << ": degenerate reference";

  DevBuf dx(x, true), dw(w, true), db(bias, true);
  int tested = 0;
  for (int v = 0; v < cuda::conv_igemm_variants(); ++v) {
    if (!cuda::conv_igemm_supported(s, v) || !cuda::conv_igemm_variant_runs_here(v)) continue;
    ++tested;
    const std::string what = std::string(c.name) + " / " + cuda::conv_igemm_variant_name(v);
    V res_guarded = res;
    res_guarded.resize(ny + kGuard, kSentinel);
    DevBuf dres(res_guarded, true);
    DevBuf dyown(ny + kGuard, true);  // NaN poison
    V guard(kGuard, kSentinel);
    std::vector<uint16_t> gh(kGuard);
    for (int i = 0; i < kGuard; ++i) gh[i] = fp32_to_fp16(guard[i]);
    ASSERT_EQ(cudaMemcpy(static_cast<uint16_t*>(dyown.get()) + ny, gh.data(), kGuard * 2, cudaMemcpyHostToDevice),
              cudaSuccess);
    DevBuf& dy = c.alias ? dres : dyown;

    const size_t wsb = cuda::conv_igemm_workspace(s, v);
    void* ws = nullptr;
    if (wsb) {
      ASSERT_EQ(cudaMalloc(&ws, wsb), cudaSuccess);
      ASSERT_EQ(cudaMemset(ws, 0xff, wsb), cudaSuccess);  // NaN: an unwritten partial shows
    }
    cuda::conv_igemm(dx.get(), dw.get(), c.bias ? db.get() : nullptr, c.res ? dres.get() : nullptr, dy.get(), s,
                     c.act, v, ws, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    V got = dy.download();
    if (ws) cudaFree(ws);
    for (int i = 0; i < kGuard; ++i) ASSERT_EQ(got[ny + i], kSentinel) << what << ": wrote past the end of y";
    got.resize(ny);
    // fp16 output rounding is <= 2^-11 relative; fp32 accumulation error is far below 1e-3.
    EXPECT_TRUE(close(got, want, 2e-3f, 2e-3f)) << what;

    // Same inputs, run again: deterministic (split-K reduces in a fixed order).
    if (!c.alias) {
      if (wsb) ASSERT_EQ(cudaMalloc(&ws, wsb), cudaSuccess);
      cuda::conv_igemm(dx.get(), dw.get(), c.bias ? db.get() : nullptr, c.res ? dres.get() : nullptr, dy.get(), s,
                       c.act, v, ws, nullptr);
      V again = dy.download();
      if (ws) cudaFree(ws);
      again.resize(ny);
      EXPECT_EQ(again, got) << what << ": not deterministic";
    }
  }
  int runs_here = 0;
  for (int v = 0; v < cuda::conv_igemm_variants(); ++v) runs_here += cuda::conv_igemm_variant_runs_here(v);
  EXPECT_EQ(tested, runs_here) << c.name << ": every variant that runs on this device should support this shape";
}

TEST(CudaConvIgemm, VariantTableAndShapeChecksNeedNoDevice) {
  const int n = cuda::conv_igemm_variants();
  ASSERT_GE(n, 4);
  std::set<std::string> names;
  bool has_split = false;
  const ConvShape big = make_shape(1, 20, 20, 512, 512, 3, 3, 1, 1);
  for (int v = 0; v < n; ++v) {
    names.insert(cuda::conv_igemm_variant_name(v));
    EXPECT_TRUE(cuda::conv_igemm_supported(big, v));
    if (cuda::conv_igemm_workspace(big, v) > 0) {
      has_split = true;
      // at least two fp32 partials of the whole output
      EXPECT_GE(cuda::conv_igemm_workspace(big, v), 2u * 400 * 512 * 4) << cuda::conv_igemm_variant_name(v);
    }
  }
  EXPECT_EQ(static_cast<int>(names.size()), n) << "variant names must be unique";
  EXPECT_TRUE(has_split);
  EXPECT_THROW(cuda::conv_igemm_variant_name(-1), Error);
  EXPECT_THROW(cuda::conv_igemm_variant_name(n), Error);
  EXPECT_FALSE(cuda::conv_igemm_supported(big, -1));
  EXPECT_FALSE(cuda::conv_igemm_supported(big, n));
  EXPECT_FALSE(cuda::conv_igemm_variant_runs_here(-1));
  EXPECT_FALSE(cuda::conv_igemm_variant_runs_here(n));
  for (int v = 0; v < n; ++v)  // the mma.sync family runs anywhere; the wgmma one on CC 9.0 only
    if (std::string(cuda::conv_igemm_variant_name(v)).rfind("igemm_", 0) == 0)
      EXPECT_TRUE(cuda::conv_igemm_variant_runs_here(v)) << cuda::conv_igemm_variant_name(v);
  // Throws before touching the device.
  alignas(16) static uint16_t dummy[64];
  EXPECT_THROW(cuda::conv_igemm(dummy, dummy, nullptr, nullptr, dummy + 32, big, Act::none, n, nullptr, nullptr),
               Error);
  EXPECT_THROW(cuda::conv_igemm(dummy, dummy, nullptr, nullptr, dummy + 32, big, Act::none, -1, nullptr, nullptr),
               Error);

  for (int v = 0; v < n; ++v) {
    EXPECT_FALSE(cuda::conv_igemm_supported(make_shape(1, 640, 640, 3, 32, 3, 3, 2, 1), v));  // the stem
    EXPECT_FALSE(cuda::conv_igemm_supported(make_shape(1, 16, 16, 12, 32, 3, 3, 1, 1), v));   // Ci % 8
    EXPECT_FALSE(cuda::conv_igemm_supported(make_shape(1, 16, 16, 32, 12, 3, 3, 1, 1), v));   // Co % 8
    ConvShape bad = make_shape(1, 16, 16, 32, 32, 3, 3, 1, 1);
    bad.Ho = 15;  // inconsistent with the formula
    EXPECT_FALSE(cuda::conv_igemm_supported(bad, v));
    EXPECT_TRUE(cuda::conv_igemm_supported(make_shape(1, 16, 16, 8, 8, 1, 1, 1, 0), v));
    EXPECT_THROW(cuda::conv_igemm(dummy, dummy, nullptr, nullptr, dummy + 32, make_shape(1, 640, 640, 3, 32, 3, 3, 2, 1),
                                  Act::none, v, nullptr, nullptr),
                 Error);
    // misaligned y, unsupported activation
    const ConvShape small = make_shape(1, 4, 4, 8, 8, 1, 1, 1, 0);
    EXPECT_THROW(cuda::conv_igemm(dummy, dummy, nullptr, nullptr, reinterpret_cast<char*>(dummy + 32) + 2, small,
                                  Act::none, v, nullptr, nullptr),
                 Error);
    EXPECT_THROW(
        cuda::conv_igemm(dummy, dummy, nullptr, nullptr, dummy + 32, small, Act::gelu, v, nullptr, nullptr), Error);
  }
}

TEST(CudaConvIgemm, SmallShapesEveryVariant) {
  DETFORGE_REQUIRE_GPU();
  const Case cases[] = {
      {"16x16x32->64 3x3 s1 p1 bias", make_shape(1, 16, 16, 32, 64, 3, 3, 1, 1), true, false, Act::none, false},
      {"b2 15x17x64->32 3x3 s2 p1 bias+res+relu", make_shape(2, 15, 17, 64, 32, 3, 3, 2, 1), true, true, Act::relu,
       false},
      {"13x11x16->8 3x3 s2 p1 bias+res+silu", make_shape(1, 13, 11, 16, 8, 3, 3, 2, 1), true, true, Act::silu, false},
      {"b3 9x7x24->24 3x3 s1 p1 silu (K=216 tail)", make_shape(3, 9, 7, 24, 24, 3, 3, 1, 1), false, false, Act::silu,
       false},
      {"b2 6x5x8->16 1x1 p0 (K=8)", make_shape(2, 6, 5, 8, 16, 1, 1, 1, 0), true, false, Act::relu, false},
      {"9x10x16->24 1x3 p1 res", make_shape(1, 9, 10, 16, 24, 1, 3, 1, 1), false, true, Act::none, false},
      {"b2 12x12x32->40 5x5 s2 p2 bias+res aliased", make_shape(2, 12, 12, 32, 40, 5, 5, 2, 2), true, true,
       Act::relu, true},
      {"7x7x16->16 3x3 s1 p0 (no padding)", make_shape(1, 7, 7, 16, 16, 3, 3, 1, 0), true, false, Act::none, false},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) run_case(c, seed += 10);
}

TEST(CudaConvIgemm, DetectorShapesEveryVariant) {
  DETFORGE_REQUIRE_GPU();
  const Case cases[] = {
      {"20x20x512->512 3x3 bias+silu (K=4608)", make_shape(1, 20, 20, 512, 512, 3, 3, 1, 1), true, false, Act::silu,
       false},
      {"40x40x128->256 1x1 bias+res aliased", make_shape(1, 40, 40, 128, 256, 1, 1, 1, 0), true, true, Act::none,
       true},
      {"160x160x64->64 3x3 bias+res+relu", make_shape(1, 160, 160, 64, 64, 3, 3, 1, 1), true, true, Act::relu, false},
      {"40x40x256->512 3x3 s2 bias+relu", make_shape(1, 40, 40, 256, 512, 3, 3, 2, 1), true, false, Act::relu,
       false},
      {"b2 20x20x128->128 3x3 res", make_shape(2, 20, 20, 128, 128, 3, 3, 1, 1), false, true, Act::none, false},
  };
  uint32_t seed = 500;
  for (const Case& c : cases) run_case(c, seed += 10);
}

// Per-variant kernel time on the RT-DETR r18vd shapes, for tuning (prints, asserts nothing); the
// halo-tiled 3x3 kernels (conv_direct.h) where they apply:
//   detforge_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*Igemm*Timing*'
TEST(CudaConvIgemm, DISABLED_Timing) {
  DETFORGE_REQUIRE_GPU();
  const ConvShape shapes[] = {
      make_shape(1, 320, 320, 32, 32, 3, 3, 1, 1),   make_shape(1, 320, 320, 32, 64, 3, 3, 1, 1),
      make_shape(1, 160, 160, 64, 64, 3, 3, 1, 1),   make_shape(1, 160, 160, 64, 128, 3, 3, 2, 1),
      make_shape(1, 80, 80, 128, 128, 3, 3, 1, 1),   make_shape(1, 80, 80, 64, 128, 1, 1, 1, 0),
      make_shape(1, 80, 80, 128, 256, 3, 3, 2, 1),   make_shape(1, 40, 40, 256, 256, 3, 3, 1, 1),
      make_shape(1, 40, 40, 128, 128, 3, 3, 1, 1),   make_shape(1, 40, 40, 256, 512, 3, 3, 2, 1),
      make_shape(1, 20, 20, 512, 512, 3, 3, 1, 1),   make_shape(1, 20, 20, 128, 128, 3, 3, 1, 1),
      make_shape(1, 40, 40, 512, 128, 1, 1, 1, 0),   make_shape(1, 40, 40, 128, 128, 1, 1, 1, 0),
      make_shape(1, 80, 80, 512, 128, 1, 1, 1, 0),   make_shape(1, 20, 20, 256, 256, 1, 1, 1, 0),
  };
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaStream_t st;
  cudaStreamCreate(&st);
  cudnnHandle_t h;
  ASSERT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnSetStream(h, st);
  // A captured graph of back-to-back launches (kernel time, not host launch overhead), run a few
  // times after a spin-up so the clocks are up; the best run.
  auto time_us = [&](const auto& fn) {
    const int iters = 100;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < iters; ++i) fn();
    cudaStreamEndCapture(st, &g);
    cudaGraphInstantiate(&ge, g, 0);
    float best = 1e30f;
    for (int r = 0; r < 6; ++r) {
      cudaEventRecord(e0, st);
      cudaGraphLaunch(ge, st);
      cudaEventRecord(e1, st);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (r > 0) best = std::min(best, ms * 1000 / iters);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return best;
  };
  for (const ConvShape& s : shapes) {
    const size_t nx = static_cast<size_t>(s.B) * s.H * s.W * s.Ci, nw = static_cast<size_t>(s.Co) * s.kh * s.kw * s.Ci;
    const size_t ny = static_cast<size_t>(s.B) * s.Ho * s.Wo * s.Co;
    DevBuf dx(random_vec(nx, -1, 1, 1), true), dw(random_vec(nw, -0.05f, 0.05f, 2), true),
        db(random_vec(s.Co, -1, 1, 3), true), dr(random_vec(ny, -1, 1, 4), true), dy(ny, true);
    std::string line;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%3dx%3dx%3d->%3d %dx%d s%d:", s.H, s.W, s.Ci, s.Co, s.kh, s.kw, s.stride);
    line = buf;
    float best = 1e9f;
    for (int v = 0; v < cuda::conv_igemm_variants(); ++v) {
      if (!cuda::conv_igemm_supported(s, v) || !cuda::conv_igemm_variant_runs_here(v)) continue;
      void* ws = nullptr;
      if (size_t b = cuda::conv_igemm_workspace(s, v)) cudaMalloc(&ws, b);
      auto run = [&] {
        cuda::conv_igemm(dx.get(), dw.get(), db.get(), dr.get(), dy.get(), s, Act::relu, v, ws, st);
      };
      for (int i = 0; i < 3; ++i) run();  // the smem opt-in happens outside the capture
      const float us = time_us(run);

      best = std::min(best, us);
      std::snprintf(buf, sizeof buf, " %s=%.1f", cuda::conv_igemm_variant_name(v), us);
      line += buf;
      if (ws) cudaFree(ws);
    }
    for (int v = 0; v < cuda::conv_direct_variants(); ++v) {  // the halo-tiled 3x3 kernels
      if (!cuda::conv_direct_supported(s, v) || !cuda::conv_direct_variant_runs_here(v)) continue;
      auto run = [&] { cuda::conv_direct(dx.get(), dw.get(), db.get(), dr.get(), dy.get(), s, Act::relu, v, st); };
      for (int i = 0; i < 3; ++i) run();
      const float us = time_us(run);
      best = std::min(best, us);
      std::snprintf(buf, sizeof buf, " %s=%.1f", cuda::conv_direct_variant_name(v), us);
      line += buf;
    }
    {  // cuDNN's plain conv (no epilogue) under the same timing
      cuda::CudnnConv cc(h, s, true, size_t{256} << 20, "timing");
      void* ws = nullptr;
      if (cc.workspace_bytes()) cudaMalloc(&ws, cc.workspace_bytes());
      auto run = [&] { cc.run(dx.get(), dw.get(), dy.get(), ws, st); };
      run();
      const double gflop = 2.0 * s.B * s.Ho * s.Wo * s.Co * s.kh * s.kw * s.Ci * 1e-9;
      std::snprintf(buf, sizeof buf, "  | best %.1f us (%.0f TFLOP/s), cudnn %.1f", best, gflop / best * 1e3,
                    time_us(run));
      if (ws) cudaFree(ws);
    }
    std::printf("%s%s\n", line.c_str(), buf);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudnnDestroy(h);
  cudaStreamDestroy(st);
}

// Two eager launches of every direct variant, wgmma_128x64_k1 and cuDNN's plain conv on the two
// shapes the halo kernels are for, for a profiler (asserts nothing):
//   ncu -k regex:'halo|conv3x3|wgmma|xmma|cudnn' detforge_gpu_tests --gtest_also_run_disabled_tests \
//     --gtest_filter='*Igemm*ProfileRuns*'
TEST(CudaConvIgemm, DISABLED_ProfileRuns) {
  DETFORGE_REQUIRE_GPU();
  cudnnHandle_t h;
  ASSERT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  for (const ConvShape& s : {make_shape(1, 160, 160, 64, 64, 3, 3, 1, 1), make_shape(1, 320, 320, 32, 32, 3, 3, 1, 1)}) {
    const size_t nx = static_cast<size_t>(s.B) * s.H * s.W * s.Ci, nw = static_cast<size_t>(s.Co) * 9 * s.Ci;
    const size_t ny = static_cast<size_t>(s.B) * s.Ho * s.Wo * s.Co;
    DevBuf dx(random_vec(nx, -1, 1, 1), true), dw(random_vec(nw, -0.05f, 0.05f, 2), true),
        db(random_vec(s.Co, -1, 1, 3), true), dy(ny, true);
    for (int v = 0; v < cuda::conv_direct_variants(); ++v)
      if (cuda::conv_direct_supported(s, v) && cuda::conv_direct_variant_runs_here(v))
        for (int r = 0; r < 2; ++r)
          cuda::conv_direct(dx.get(), dw.get(), db.get(), nullptr, dy.get(), s, Act::relu, v, nullptr);
    for (int v = 0; v < cuda::conv_igemm_variants(); ++v)
      if (std::string(cuda::conv_igemm_variant_name(v)) == "wgmma_128x64_k1" && cuda::conv_igemm_variant_runs_here(v))
        for (int r = 0; r < 2; ++r)
          cuda::conv_igemm(dx.get(), dw.get(), db.get(), nullptr, dy.get(), s, Act::relu, v, nullptr, nullptr);
    cuda::CudnnConv cc(h, s, true, size_t{256} << 20, "profile");
    void* ws = nullptr;
    if (cc.workspace_bytes()) cudaMalloc(&ws, cc.workspace_bytes());
    for (int r = 0; r < 2; ++r) cc.run(dx.get(), dw.get(), dy.get(), ws, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (ws) cudaFree(ws);
  }
  cudnnDestroy(h);
}

}  // namespace
}  // namespace detforge::test
