// The box_step kernel (kernels/box_step.cu) against the host loops of the three ops it replaces
// (linear N = 4, box_refine, linear K = 4), fp32 and fp16, with and without the next linear, at
// the decoder's shapes (300 rows per image, K 256, N1 512), a partial block (37 rows), K of 64
// and 512 (one and several 16-byte chunks per lane); the rules it refuses; and the r18vd engine
// with the box steps on (default) against off (DETFORGE_CUDA_BOX_STEP=0).
#include <cmath>
#include <cstdint>
#include <cstdio>
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

using graph::Act;

class CudaBoxStep : public StorageParamTest {
 protected:
  void check(int64_t rows, int K, int N1, Act act) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " K " + std::to_string(K) + " N1 " + std::to_string(N1));
    const uint32_t seed = static_cast<uint32_t>(rows * 31 + K * 7 + N1);
    const float ws = 1.5f / std::sqrt(static_cast<float>(K));
    auto x = quantize(random_vec(rows * K, -1, 1, seed), half());
    auto w3 = quantize(random_vec(4 * K, -ws, ws, seed + 1), half());
    auto b3 = quantize(random_vec(4, -0.5f, 0.5f, seed + 2), half());
    // Boxes in (0, 1), a few at the clamps of inverse_sigmoid.
    auto ref = quantize(random_vec(rows * 4, 0.f, 1.f, seed + 3), half());
    ref[0] = 0.f;
    if (ref.size() > 5) ref[5] = 1.f;
    auto w1 = quantize(random_vec(static_cast<size_t>(std::max(N1, 1)) * 4, -1, 1, seed + 4), half());
    auto b1 = quantize(random_vec(std::max(N1, 1), -0.5f, 0.5f, seed + 5), half());
    DevBuf dx(x, half()), dw3(w3, half()), db3(b3, half()), dref(ref, half()), dw1(w1, half()), db1(b1, half());
    DevBuf dout(rows * 4, half()), dy(rows * std::max(N1, 1), half());
    cuda::BoxStepArgs a;
    a.x = dx.get();
    a.w3 = dw3.get();
    a.b3 = db3.get();
    a.ref_in = dref.get();
    a.ref_out = dout.get();
    if (N1 > 0) {
      a.w1 = dw1.get();
      a.b1 = db1.get();
      a.y1 = dy.get();
      a.N1 = N1;
      a.act1 = act;
    }
    a.rows = rows;
    a.K = K;
    cuda::box_step(a, half(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // The unfused ops, each result rounded to the storage type as its kernel stores it.
    auto delta = quantize(ref::linear(x, static_cast<int>(rows), K, w3, 4, b3, nullptr, Act::none), half());
    std::vector<float> box(rows * 4);
    for (size_t i = 0; i < box.size(); ++i) {
      const double r = std::min(std::max(static_cast<double>(ref[i]), 0.0), 1.0);
      const double v = delta[i] + std::log(std::max(r, 1e-5) / std::max(1.0 - r, 1e-5));
      box[i] = static_cast<float>(1.0 / (1.0 + std::exp(-v)));
    }
    box = quantize(box, half());
    // delta is rounded on both sides after sums in different orders: one fp16 ulp of delta moves
    // the box by at most a quarter of it (sigmoid' <= 1/4).
    EXPECT_TRUE(close(dout.download(), box, half() ? 2e-3f : 1e-5f, half() ? 2e-3f : 1e-5f));
    if (N1 > 0) {
      const auto want = ref::linear(box, static_cast<int>(rows), 4, w1, N1, b1, nullptr, act);
      EXPECT_TRUE(close(dy.download(), want, half() ? atol() : 2 * atol(), rtol()));
    }
  }
};

TEST_P(CudaBoxStep, MatchesTheUnfusedOpsOnHost) {
  for (const int64_t rows : {1, 37, 300, 600}) {
    check(rows, 256, 512, Act::relu);
    check(rows, 256, 0, Act::none);
  }
  check(37, 64, 64, Act::none);
  check(300, 512, 256, Act::gelu);
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaBoxStep, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "fp16" : "fp32"); });

TEST(CudaBoxStepRules, RefusesWhatItCannotRun) {
  const auto* a = reinterpret_cast<const void*>(uintptr_t{0x10000});
  const auto* a2 = reinterpret_cast<const void*>(uintptr_t{0x10002});
  EXPECT_TRUE(cuda::box_step_supported(256, 512, true, a, a, a, a));
  EXPECT_TRUE(cuda::box_step_supported(256, 0, true, a, nullptr, nullptr, nullptr));
  EXPECT_TRUE(cuda::box_step_supported(4, 8, false, a, a, a, a));     // 4 floats: one pack
  EXPECT_FALSE(cuda::box_step_supported(4, 8, true, a, a, a, a));     // 4 halves: 8 bytes
  EXPECT_FALSE(cuda::box_step_supported(260, 512, true, a, a, a, a));  // 520-byte rows
  EXPECT_FALSE(cuda::box_step_supported(256, 12, true, a, a, a, a));   // N1 not a multiple of 8
  EXPECT_FALSE(cuda::box_step_supported(256, 512, true, a2, a, a, a));
  EXPECT_FALSE(cuda::box_step_supported(256, 512, true, a, a2, a, a));
  EXPECT_FALSE(cuda::box_step_supported(256, 512, true, a, a, a2, a));
  EXPECT_FALSE(cuda::box_step_supported(256, 512, true, a, a, a, a2));
  cuda::BoxStepArgs bad;
  bad.x = a2;
  bad.K = 256;
  bad.rows = 1;
  EXPECT_THROW(cuda::box_step(bad, true, nullptr), Error);
}

// r18vd at batch 2: three box steps (two with the next layer's query_pos_head.layers.0, the last
// without), the outputs those of the separate kernels; the captured graph equals the eager run.
void r18vd_on_equals_off(const char* precision) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 23);
  const bool half = std::string(precision) == "fp16";
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    EngineOptions eo;
    eo.max_batch = 2;
    eo.precision = precision;
    setenv("DETFORGE_CUDA_BOX_STEP", k == 0 ? "0" : "1", 1);
    auto eng = make_cuda_engine(lb.graph, eo);
    unsetenv("DETFORGE_CUDA_BOX_STEP");
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->box_steps(), k == 0 ? 0 : 3);
    EXPECT_TRUE(e->graph_captured(2));
    EXPECT_EQ(e->graph_check(2), "equal");
    std::printf("%s box steps %s: %d\n", precision, k ? "on" : "off", e->box_steps());
    out[k] = e->run(px.data(), 2);
  }
  expect_r18vd_outputs_agree(out[0], out[1], 2, half ? 0.01 : 1e-3, precision);
}

TEST(CudaBoxStepEngine, R18vdFp16OnEqualsOff) { r18vd_on_equals_off("fp16"); }
TEST(CudaBoxStepEngine, R18vdFp32OnEqualsOff) { r18vd_on_equals_off("fp32"); }

}  // namespace
}  // namespace detforge::test
