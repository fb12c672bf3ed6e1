// The halo-tiled 3x3 fp16 convolution (backends/cuda/kernels/conv_direct.*) against the host
// double reference from the fp16-rounded inputs, for every variant on shapes of its (Ci, Co):
// tiles cut by the image edge on both axes (H, W not multiples of the tile), images smaller than
// one tile, batch > 1, every epilogue form (bias, residual, relu, silu, y aliasing res), and the
// r18vd shapes. y is poisoned with NaN and guarded past its end; a second run must give the same
// bits. The r18vd engine on these kernels: test_cuda_own_conv_engine.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/kernels/conv_direct.h"
#include "conv_ref.h"
#include "detforge/types.h"
#include "gpu_test_util.h"

namespace detforge::test {
namespace {

using cuda::ConvShape;
using graph::Act;
using V = std::vector<float>;

struct Case {
  int B, H, W;
  bool bias, res;
  Act act;
  bool alias;  // y written over res
};

// The variant's channel counts, read back from the shape check.
bool variant_channels(int v, int* ci, int* co) {
  for (int a : {32, 64})
    for (int b : {32, 64})
      if (cuda::conv_direct_supported(make_shape(1, 8, 8, a, b, 3, 3, 1, 1), v)) {
        *ci = a, *co = b;
        return true;
      }
  return false;
}

// The variants of each (Ci, Co) that run on this device (the wgmma family needs compute
// capability 9.0), in table order.
std::vector<std::pair<std::pair<int, int>, std::vector<int>>> variants_by_channels() {
  std::vector<std::pair<std::pair<int, int>, std::vector<int>>> groups;
  for (int v = 0; v < cuda::conv_direct_variants(); ++v) {
    int ci = 0, co = 0;
    if (!variant_channels(v, &ci, &co) || !cuda::conv_direct_variant_runs_here(v)) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == std::make_pair(ci, co); });
    if (it == groups.end()) it = groups.insert(groups.end(), {{ci, co}, {}});
    it->second.push_back(v);
  }
  return groups;
}

// One case's inputs and host reference, then every variant in `vs` against it (the reference is
// the slow part: computed once per case, not once per variant).
void run_case(const std::vector<int>& vs, const Case& c, int ci, int co, uint32_t seed) {
  const ConvShape s = make_shape(c.B, c.H, c.W, ci, co, 3, 3, 1, 1);
  const std::string shape_name = " b" + std::to_string(c.B) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) +
                                 (c.bias ? " bias" : "") + (c.res ? " res" : "") + " " + graph::act_name(c.act) +
                                 (c.alias ? " aliased" : "");
  const size_t nx = static_cast<size_t>(s.B) * s.H * s.W * s.Ci, nw = static_cast<size_t>(s.Co) * 9 * s.Ci;
  const size_t ny = static_cast<size_t>(s.B) * s.Ho * s.Wo * s.Co;
  const float wscale = 1.0f / std::sqrt(static_cast<float>(9 * s.Ci));
  const V x = quantize(random_vec(nx, -1, 1, seed), true);
  const V w = quantize(random_vec(nw, -wscale, wscale, seed + 1), true);
  const V bias = quantize(random_vec(s.Co, -0.5, 0.5, seed + 2), true);
  V res = quantize(random_vec(ny, -1, 1, seed + 3), true);
  const V want = ref_conv(s, x, w, c.bias ? &bias : nullptr, c.res ? &res : nullptr, c.act);
  float maxabs = 0;
  for (float f : want) maxabs = std::max(maxabs, std::fabs(f));
  ASSERT_GT(maxabs, 0.1f) << shape_name << ": degenerate reference";
  res.resize(ny + kGuard, kSentinel);
  DevBuf dx(x, true), dw(w, true), db(bias, true);

  for (int v : vs) {
    const std::string what = std::string(cuda::conv_direct_variant_name(v)) + shape_name;
    ASSERT_TRUE(cuda::conv_direct_supported(s, v)) << what;
    DevBuf dres(res, true);  // fresh each variant: an aliased run overwrites it
    DevBuf dyown(ny + kGuard, true);  // NaN poison
    {
      std::vector<uint16_t> gh(kGuard, fp32_to_fp16(kSentinel));
      ASSERT_EQ(cudaMemcpy(static_cast<uint16_t*>(dyown.get()) + ny, gh.data(), kGuard * 2, cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    DevBuf& dy = c.alias ? dres : dyown;
    auto run = [&] {
      cuda::conv_direct(dx.get(), dw.get(), c.bias ? db.get() : nullptr, c.res ? dres.get() : nullptr, dy.get(), s,
                        c.act, v, nullptr);
    };
    run();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    V got = dy.download();
    for (int i = 0; i < kGuard; ++i) ASSERT_EQ(got[ny + i], kSentinel) << what << ": wrote past the end of y";
    got.resize(ny);
    // fp16 output rounding is <= 2^-11 relative; fp32 accumulation error is far below 1e-3.
    EXPECT_TRUE(close(got, want, 2e-3f, 2e-3f)) << what;
    if (!c.alias) {  // same inputs again: the same bits
      run();
      V again = dy.download();
      again.resize(ny);
      EXPECT_EQ(again, got) << what << ": not deterministic";
    }
  }
}

TEST(CudaConvDirect, VariantTableAndShapeChecksNeedNoDevice) {
  const int n = cuda::conv_direct_variants();
  ASSERT_GE(n, 4);
  std::set<std::string> names;
  std::set<std::pair<int, int>> channels;
  for (int v = 0; v < n; ++v) {
    names.insert(cuda::conv_direct_variant_name(v));
    int ci = 0, co = 0;
    ASSERT_TRUE(variant_channels(v, &ci, &co)) << cuda::conv_direct_variant_name(v);
    channels.insert({ci, co});
    EXPECT_FALSE(cuda::conv_direct_supported(make_shape(1, 40, 40, ci, co, 3, 3, 2, 1), v));  // stride 2
    EXPECT_FALSE(cuda::conv_direct_supported(make_shape(1, 40, 40, ci, co, 1, 1, 1, 0), v));  // 1x1
    EXPECT_FALSE(cuda::conv_direct_supported(make_shape(1, 40, 40, ci, co, 3, 3, 1, 0), v));  // no padding
    EXPECT_FALSE(cuda::conv_direct_supported(make_shape(1, 40, 40, ci + 8, co, 3, 3, 1, 1), v));
    EXPECT_FALSE(cuda::conv_direct_supported(make_shape(1, 40, 40, ci, co + 8, 3, 3, 1, 1), v));
    ConvShape bad = make_shape(1, 16, 16, ci, co, 3, 3, 1, 1);
    bad.Ho = 15;  // inconsistent with the formula
    EXPECT_FALSE(cuda::conv_direct_supported(bad, v));
    // Throws before touching the device: misaligned y, unsupported activation, y over x, a bad shape.
    alignas(16) static uint16_t dummy[64];
    const ConvShape ok = make_shape(1, 4, 4, ci, co, 3, 3, 1, 1);
    EXPECT_THROW(cuda::conv_direct(dummy, dummy, nullptr, nullptr, reinterpret_cast<char*>(dummy + 32) + 2, ok,
                                   Act::none, v, nullptr),
                 Error);
    EXPECT_THROW(cuda::conv_direct(dummy, dummy, nullptr, nullptr, dummy + 32, ok, Act::gelu, v, nullptr), Error);
    EXPECT_THROW(cuda::conv_direct(dummy, dummy, nullptr, nullptr, dummy, ok, Act::none, v, nullptr), Error);
    EXPECT_THROW(cuda::conv_direct(dummy, dummy, nullptr, nullptr, dummy + 32, bad, Act::none, v, nullptr), Error);
  }
  EXPECT_EQ(static_cast<int>(names.size()), n) << "variant names must be unique";
  // the r18vd layers it is for: the stem's 32->32 and 32->64, stage 0's 64->64
  EXPECT_EQ(channels, (std::set<std::pair<int, int>>{{32, 32}, {32, 64}, {64, 64}}));
  EXPECT_THROW(cuda::conv_direct_variant_name(-1), Error);
  EXPECT_THROW(cuda::conv_direct_variant_name(n), Error);
  EXPECT_FALSE(cuda::conv_direct_supported(make_shape(1, 8, 8, 32, 32, 3, 3, 1, 1), -1));
  EXPECT_FALSE(cuda::conv_direct_supported(make_shape(1, 8, 8, 32, 32, 3, 3, 1, 1), n));
  EXPECT_FALSE(cuda::conv_direct_variant_runs_here(-1));
  EXPECT_FALSE(cuda::conv_direct_variant_runs_here(n));
  for (int v = 0; v < n; ++v)  // the mma.sync family runs anywhere; the wgmma one on CC 9.0 only
    if (std::string(cuda::conv_direct_variant_name(v)).rfind("direct3x3_", 0) == 0)
      EXPECT_TRUE(cuda::conv_direct_variant_runs_here(v)) << cuda::conv_direct_variant_name(v);
}

TEST(CudaConvDirect, EdgeTilesBatchesAndEpiloguesEveryVariant) {
  DETFORGE_REQUIRE_GPU();
  const Case cases[] = {
      {1, 5, 7, true, false, Act::none, false},    // smaller than one tile
      {2, 19, 70, true, true, Act::relu, false},   // tiles cut on both axes, batch 2
      {1, 33, 40, false, true, Act::silu, false},  // odd height
      {3, 17, 33, true, true, Act::relu, true},    // y written over the residual
      {1, 9, 96, false, false, Act::relu, false},
  };
  uint32_t seed = 900;
  for (const auto& [ch, vs] : variants_by_channels())
    for (const Case& c : cases) run_case(vs, c, ch.first, ch.second, seed += 10);
}

TEST(CudaConvDirect, DetectorShapesEveryVariant) {
  DETFORGE_REQUIRE_GPU();
  uint32_t seed = 1700;
  for (const auto& [ch, vs] : variants_by_channels()) {
    const int hw = ch.first == 32 ? 320 : 160;  // the stem's convs at 320x320, stage 0's at 160x160
    run_case(vs, {1, hw, hw, true, ch.first == 64, Act::relu, false}, ch.first, ch.second, seed += 10);
  }
}

}  // namespace
}  // namespace detforge::test
