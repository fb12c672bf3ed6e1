// The small-K and small-N linear kernels (kernels/small_linear.cu) against the host loop of
// host_ref.h, fp32 and fp16, at the decoder's shapes (300 rows per image), one row, a partial
// block (37) and the encoder's 8400 rows, with and without bias and residual; the shape and
// pointer rules that pick them; and the r18vd engine with DETFORGE_CUDA_SMALL_LINEAR=2 against
// the default (cuBLASLt) engine.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/kernels.h"
#include "detforge/types.h"
#include "gpu_test_util.h"
#include "host_ref.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

using cuda::SmallLinear;
using graph::Act;

struct Case {
  int64_t rows;
  int K, N;
  Act act;
  bool bias, res;
};

std::string describe(const Case& c) {
  return "rows " + std::to_string(c.rows) + " K " + std::to_string(c.K) + " N " + std::to_string(c.N) + " act " +
         graph::act_name(c.act) + (c.bias ? " +bias" : "") + (c.res ? " +res" : "");
}

class CudaSmallLinear : public StorageParamTest {
 protected:
  // Runs one case on the device and compares with the host loop on the same (rounded) inputs.
  void check(const Case& c, SmallLinear want_kind) {
    SCOPED_TRACE(describe(c));
    const uint32_t seed = static_cast<uint32_t>(c.rows * 131 + c.K * 17 + c.N * 7 + c.res);
    const float ws = 1.5f / std::sqrt(static_cast<float>(c.K));  // outputs of order 1 whatever K
    auto x = quantize(random_vec(c.rows * c.K, -1, 1, seed), half());
    auto w = quantize(random_vec(static_cast<size_t>(c.N) * c.K, -ws, ws, seed + 1), half());
    auto b = c.bias ? quantize(random_vec(c.N, -0.5f, 0.5f, seed + 2), half()) : std::vector<float>(c.N, 0.f);
    auto r = quantize(random_vec(c.rows * c.N, -1, 1, seed + 3), half());
    DevBuf dx(x, half()), dw(w, half()), db(b, half()), dr(r, half()), dy(c.rows * c.N, half());
    const void* bias = c.bias ? db.get() : nullptr;
    const void* res = c.res ? dr.get() : nullptr;
    ASSERT_EQ(cuda::small_linear_kind(c.rows, c.N, c.K, half(), dx.get(), dw.get(), bias, res, dy.get()), want_kind);
    cuda::small_linear(want_kind, dx.get(), dw.get(), bias, res, dy.get(), c.rows, c.N, c.K, c.act, half(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto want = ref::linear(x, static_cast<int>(c.rows), c.K, w, c.N, b, c.res ? &r : nullptr, c.act);
    // fp32: the device sums in another order than the host's double loop (~1e-6 at K = 256);
    // fp16: one rounding of the output.
    EXPECT_TRUE(close(dy.download(), want, half() ? atol() : 2 * atol(), rtol()));
  }
};

// query_pos_head.layers.0 is K = 4 -> N = 512 with ReLU; the others cover K = 3 and 8, every
// activation, residual and no bias. 8400 and 8401 rows at K = 4, N = 512 take 4 rows per thread
// (the last block partial for 8401), the rest one.
TEST_P(CudaSmallLinear, SmallKMatchesHostLoop) {
  for (const int64_t rows : {1, 37, 300, 8400}) {
    check({rows, 4, 512, Act::relu, true, false}, SmallLinear::small_k);
    check({rows, 4, 512, Act::relu, true, true}, SmallLinear::small_k);
    check({rows, 3, 64, Act::gelu, true, true}, SmallLinear::small_k);
    check({rows, 3, 64, Act::sigmoid, true, false}, SmallLinear::small_k);
    check({rows, 8, 64, Act::none, false, false}, SmallLinear::small_k);
    check({rows, 8, 64, Act::silu, true, true}, SmallLinear::small_k);
  }
  check({8401, 4, 512, Act::relu, true, true}, SmallLinear::small_k);
}

// The bbox heads' last layer is K = 256 -> N = 4 (300 rows per image in the decoder, 8400 in the
// encoder); the class heads of the shapes model are N = 8. Rows per thread: 4 at 8400 rows in
// fp32 and 16800 in fp16 (batch 2 of the encoder head), one otherwise. Lanes per row: 32 at up
// to 300 rows, 4 to 16 at 8400 (K = 24 in fp32: lanes of 2 and of 1 pack), 1 (fp16) and 2 (fp32)
// at 40000 rows of K = 24.
TEST_P(CudaSmallLinear, SmallNMatchesHostLoop) {
  for (const int64_t rows : {1, 37, 300, 8400}) {
    check({rows, 256, 4, Act::none, true, false}, SmallLinear::small_n);
    check({rows, 256, 4, Act::none, true, true}, SmallLinear::small_n);
    check({rows, 256, 8, Act::none, true, false}, SmallLinear::small_n);
    check({rows, 64, 1, Act::sigmoid, true, false}, SmallLinear::small_n);
    check({rows, 64, 1, Act::none, false, true}, SmallLinear::small_n);
    check({rows, 64, 8, Act::relu, true, true}, SmallLinear::small_n);
    check({rows, 64, 8, Act::gelu, false, false}, SmallLinear::small_n);
    check({rows, 24, 3, Act::silu, true, true}, SmallLinear::small_n);
  }
  check({16800, 256, 4, Act::none, true, true}, SmallLinear::small_n);
  check({40000, 24, 3, Act::silu, true, true}, SmallLinear::small_n);
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaSmallLinear, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "fp16" : "fp32"); });

// Host-side rules only (no device needed): which shapes and pointers each kernel takes.
TEST(CudaSmallLinearKind, TakesOnlyTheShapesAndPointersItSupports) {
  const auto* a = reinterpret_cast<const void*>(uintptr_t{0x10000});  // 16-byte aligned
  const auto* a2 = reinterpret_cast<const void*>(uintptr_t{0x10002});  // 2 bytes off
  using cuda::small_linear_kind;
  EXPECT_EQ(small_linear_kind(300, 512, 4, true, a, a, a, nullptr, a), SmallLinear::small_k);
  EXPECT_EQ(small_linear_kind(300, 512, 4, true, a2, a, a, nullptr, a), SmallLinear::small_k);  // x is read by element
  EXPECT_EQ(small_linear_kind(300, 4, 256, true, a, a, a, nullptr, a), SmallLinear::small_n);
  EXPECT_EQ(small_linear_kind(300, 4, 256, true, a, a, a2, a2, a2), SmallLinear::small_n);  // outputs by element
  EXPECT_EQ(small_linear_kind(300, 256, 256, true, a, a, a, nullptr, a), SmallLinear::none);
  EXPECT_EQ(small_linear_kind(300, 12, 4, true, a, a, a, nullptr, a), SmallLinear::none);   // N not a multiple of 8
  EXPECT_EQ(small_linear_kind(300, 9, 256, true, a, a, a, nullptr, a), SmallLinear::none);  // N over 8
  EXPECT_EQ(small_linear_kind(300, 4, 4, true, a, a, a, nullptr, a), SmallLinear::none);    // K = 4 halves: 8 bytes
  EXPECT_EQ(small_linear_kind(300, 4, 4, false, a, a, a, nullptr, a), SmallLinear::small_n);  // 4 floats: 16 bytes
  EXPECT_EQ(small_linear_kind(300, 4, 260, true, a, a, a, nullptr, a), SmallLinear::none);  // 520 bytes per row
  EXPECT_EQ(small_linear_kind(300, 512, 4, true, a, a, a, nullptr, a2), SmallLinear::none);  // y misaligned
  EXPECT_EQ(small_linear_kind(300, 512, 4, true, a, a, a, a2, a), SmallLinear::none);        // res misaligned
  EXPECT_EQ(small_linear_kind(300, 4, 256, true, a2, a, a, nullptr, a), SmallLinear::none);  // x misaligned
  EXPECT_EQ(small_linear_kind(0, 4, 256, true, a, a, a, nullptr, a), SmallLinear::none);
  // A kind the arguments do not allow throws before anything is launched.
  EXPECT_THROW(cuda::small_linear(SmallLinear::small_k, a, a, a, nullptr, const_cast<void*>(a), 300, 4, 256,
                                  Act::none, true, nullptr),
               Error);
  EXPECT_THROW(cuda::small_linear(SmallLinear::none, a, a, a, nullptr, const_cast<void*>(a), 300, 4, 256, Act::none,
                                  true, nullptr),
               Error);
}

// The r18vd-shaped model with DETFORGE_CUDA_SMALL_LINEAR=2 (both kernels) against =0 (all linears
// on cuBLASLt),
// batch 2. Both sum in fp32 and round once, in different orders, so outputs agree up to the
// rounding of those 9 ops and what it moves downstream. Tolerances and the query matching are
// those of RowMlpEngine.R18vdFusedEqualsUnfused (fp16); fp32 to 1e-3 as the fp32 parity test.
void r18vd_on_equals_off(const char* precision) {
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const size_t per = static_cast<size_t>(in[0] * in[1] * in[2]);
  std::vector<float> px = random_vec(per * 2, 0, 1, 7);
  EngineOptions eo;
  eo.max_batch = 2;
  eo.precision = precision;
  const bool half = std::string(precision) == "fp16";
  // The linears the rules take, from the graph's shapes (pointers: the engine's are 256-byte
  // aligned): on this model query_pos_head.layers.0 x 3 (K = 4), bbox_embed.{0,1,2}.layers.2 and
  // enc_bbox_head.layers.2 (N = 4), enc_score_head and class_embed.2 (N = 8 labels).
  int want_k = 0, want_n = 0;
  const auto* a = reinterpret_cast<const void*>(uintptr_t{0x10000});
  for (const auto& op : lb.graph.ops) {
    if (op.kind != graph::OpKind::linear) continue;
    const auto& w = lb.graph.tensor(op.inputs[1]).shape;
    const int64_t rows = lb.graph.tensor(op.inputs[0]).numel() / w[1];
    const auto k = cuda::small_linear_kind(rows, (int)w[0], (int)w[1], half, a, a, a, nullptr, a);
    want_k += k == SmallLinear::small_k;
    want_n += k == SmallLinear::small_n;
  }
  EXPECT_EQ(want_k, 3);
  EXPECT_EQ(want_n, 6);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    // The box steps (on by default) would take the bbox heads' last layers and the
    // query_pos_head first layers: this test is about the separate kernels.
    setenv("DETFORGE_CUDA_SMALL_LINEAR", k == 0 ? "0" : "2", 1);
    setenv("DETFORGE_CUDA_BOX_STEP", "0", 1);
    auto eng = make_cuda_engine(lb.graph, eo);
    unsetenv("DETFORGE_CUDA_SMALL_LINEAR");
    unsetenv("DETFORGE_CUDA_BOX_STEP");
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    for (int b = 1; b <= 2; ++b) {
      EXPECT_EQ(e->small_linears(b, SmallLinear::small_k), k == 0 ? 0 : want_k) << "batch " << b;
      EXPECT_EQ(e->small_linears(b, SmallLinear::small_n), k == 0 ? 0 : want_n) << "batch " << b;
    }
    EXPECT_TRUE(e->graph_captured(2));
    std::printf("%s small linears %s: %s\n", precision, k ? "on" : "off", e->conv_fusion_summary(2).c_str());
    out[k] = e->run(px.data(), 2);
  }
  // enc_score_head (an N = 8 linear) feeds the top-k: queries are matched by anchor index.
  expect_r18vd_outputs_agree(out[0], out[1], 2, half ? 0.01 : 1e-3, precision);
}

TEST(CudaSmallLinearEngine, R18vdFp16OnEqualsOff) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  r18vd_on_equals_off("fp16");
}

TEST(CudaSmallLinearEngine, R18vdFp32OnEqualsOff) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  r18vd_on_equals_off("fp32");
}

}  // namespace
}  // namespace detforge::test
