// The latency-bound linear kernel (kernels/tile_linear.cu) against the host loop of host_ref.h in
// fp16: the decoder's shapes (300 rows per image: N 256 / 288 / 512 / 1024 at K 256, N 256 at
// K 512 and 1024), AIFI's 400 rows, one row, a partial tile (37 rows, N 40), batch 8 (2,400
// rows), with every activation, with and without bias and residual, and y written over the
// residual; the rules that take a linear; and the r18vd engine with DETFORGE_CUDA_TILE_LINEAR and
// DETFORGE_CUDA_TILE_CONV on against off.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/kernels.h"
#include "engine_settings.h"
#include "detforge/types.h"
#include "gpu_test_util.h"
#include "host_ref.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

using graph::Act;

struct Case {
  int64_t rows;
  int K, N;
  Act act;
  bool bias, res, in_place;  // in_place: y is the residual's buffer
};

void check(const Case& c) {
  SCOPED_TRACE("rows " + std::to_string(c.rows) + " K " + std::to_string(c.K) + " N " + std::to_string(c.N) +
               " act " + graph::act_name(c.act) + (c.bias ? " +bias" : "") + (c.res ? " +res" : "") +
               (c.in_place ? " in place" : ""));
  const uint32_t seed = static_cast<uint32_t>(c.rows * 131 + c.K * 17 + c.N * 7 + c.res);
  const float ws = 1.5f / std::sqrt(static_cast<float>(c.K));  // outputs of order 1 whatever K
  auto x = quantize(random_vec(c.rows * c.K, -1, 1, seed), true);
  auto w = quantize(random_vec(static_cast<size_t>(c.N) * c.K, -ws, ws, seed + 1), true);
  auto b = c.bias ? quantize(random_vec(c.N, -0.5f, 0.5f, seed + 2), true) : std::vector<float>(c.N, 0.f);
  auto r = quantize(random_vec(c.rows * c.N, -1, 1, seed + 3), true);
  DevBuf dx(x, true), dw(w, true), db(b, true), dr(r, true), dy(c.rows * c.N, true);
  const void* bias = c.bias ? db.get() : nullptr;
  const void* res = c.res ? dr.get() : nullptr;
  void* y = c.in_place ? dr.get() : dy.get();
  ASSERT_TRUE(cuda::tile_linear_ok(c.rows, c.N, c.K, dx.get(), dw.get(), bias, res, y));
  cuda::tile_linear(dx.get(), dw.get(), bias, res, y, c.rows, c.N, c.K, c.act, true, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto want = ref::linear(x, static_cast<int>(c.rows), c.K, w, c.N, b, c.res ? &r : nullptr, c.act);
  // One rounding of the output to fp16 (the sums are fp32 in another order than the host's).
  EXPECT_TRUE(close(c.in_place ? dr.download() : dy.download(), want, 2e-2f, 1e-2f));
}

TEST(CudaTileLinear, DecoderAndAifiShapesMatchHostLoop) {
  DETFORGE_REQUIRE_GPU();
  for (const int64_t rows : {300, 400}) {
    check({rows, 256, 256, Act::none, true, false, false});   // v_proj, output_proj
    check({rows, 256, 256, Act::none, true, true, false});    // out_proj + residual
    check({rows, 256, 256, Act::relu, true, false, false});   // bbox head layers
    check({rows, 256, 512, Act::none, true, false, false});   // q+k merged
    check({rows, 256, 288, Act::none, true, false, false});   // offsets + weights merged
    check({rows, 256, 1024, Act::relu, true, false, false});  // decoder fc1
    check({rows, 256, 1024, Act::gelu, true, false, false});  // AIFI fc1
    check({rows, 1024, 256, Act::none, true, true, false});   // fc2 + residual
    check({rows, 512, 256, Act::none, true, false, false});   // query_pos_head.layers.1
  }
}

TEST(CudaTileLinear, EdgeShapesActivationsAndInPlaceMatchHostLoop) {
  DETFORGE_REQUIRE_GPU();
  check({1, 64, 8, Act::none, false, false, false});
  check({37, 128, 40, Act::silu, true, true, false});     // partial row tile and column tile
  check({37, 128, 40, Act::sigmoid, false, true, true});  // y over the residual
  check({300, 256, 256, Act::none, true, true, true});
  check({2400, 256, 256, Act::relu, true, true, false});  // batch 8 of the decoder
  check({33, 1024, 1024, Act::gelu, true, true, false});
}

// Host-side rules only (no device needed).
TEST(CudaTileLinearRules, TakesOnlyTheShapesAndPointersItSupports) {
  const auto* a = reinterpret_cast<const void*>(uintptr_t{0x10000});  // 16-byte aligned
  const auto* a2 = reinterpret_cast<const void*>(uintptr_t{0x10002});  // 2 bytes off
  auto* y = reinterpret_cast<void*>(uintptr_t{0x20000});
  using cuda::tile_linear_ok;
  EXPECT_TRUE(tile_linear_ok(300, 256, 256, a, a, a, a, y));
  EXPECT_TRUE(tile_linear_ok(300, 256, 1024, a, a, nullptr, nullptr, y));
  EXPECT_TRUE(tile_linear_ok(300, 256, 256, a, a, a, y, y));   // y over the residual
  EXPECT_FALSE(tile_linear_ok(300, 256, 256, y, a, a, a, y));  // y over x
  EXPECT_FALSE(tile_linear_ok(300, 256, 2048, a, a, a, a, y));  // K past kTileLinearMaxK
  EXPECT_FALSE(tile_linear_ok(300, 256, 96, a, a, a, a, y));    // K not a multiple of 64
  EXPECT_FALSE(tile_linear_ok(300, 4, 256, a, a, a, a, y));     // N under 8
  EXPECT_FALSE(tile_linear_ok(300, 12, 256, a, a, a, a, y));    // N not a multiple of 8
  EXPECT_FALSE(tile_linear_ok(0, 256, 256, a, a, a, a, y));
  EXPECT_FALSE(tile_linear_ok(300, 256, 256, a2, a, a, a, y));  // x misaligned
  EXPECT_FALSE(tile_linear_ok(300, 256, 256, a, a, a2, a, y));  // bias misaligned
  EXPECT_FALSE(tile_linear_ok(300, 256, 256, a, a, a, a2, y));  // res misaligned
  EXPECT_THROW(cuda::tile_linear(a, a, a, a, y, 300, 256, 96, Act::none, true, nullptr), Error);
}

// The r18vd-shaped model in fp16 at batch 2 (600 decoder rows, 800 AIFI rows) with the tile
// kernel on against off (cuBLASLt). Both sum in fp32 and round once, in different orders:
// tolerances and query matching as in CudaSmallLinearEngine.
TEST(CudaTileLinearEngine, R18vdFp16OnEqualsOff) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 11);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(lb.graph, 2,
                           {k == 0 ? "DETFORGE_CUDA_TILE_LINEAR=0"
                                   : "DETFORGE_CUDA_TILE_LINEAR=4096 DETFORGE_CUDA_TILE_CONV=1 DETFORGE_CUDA_TILE_MAX_K=1024"});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    const int tiles = e->small_linears(2, cuda::SmallLinear::tile);
    // r18vd: AIFI's 5 linears and ~9 per decoder layer have K of 256-1024 and N of 8 or more;
    // the 1x1 convs of 800 and 3,200 pixels (20x20 and 40x40 at batch 2) come on top.
    if (k == 0) EXPECT_EQ(tiles, 0);
    if (k == 1) EXPECT_GE(tiles, 30);
    EXPECT_TRUE(e->graph_captured(2));
    std::printf("tile linears %s: %s; graph check %s\n", k ? "on" : "off", e->conv_fusion_summary(2).c_str(),
                e->graph_check(2).c_str());
    out[k] = e->run(px.data(), 2);
  }
  expect_r18vd_outputs_agree(out[0], out[1], 2, 0.01, "fp16");
}

}  // namespace
}  // namespace detforge::test
