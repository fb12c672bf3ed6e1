// The fused stem (backends/cuda/kernels/stem_fused.*): three 3x3 convs with bias and ReLU and the
// 3x3/2 max pool in one kernel, against the host double reference with the kernel's fp16 roundings
// (the input and each conv's output): r18vd's 640x640 shape, pooled maps that end inside a tile
// (ragged rows and columns, several images), and a map smaller than one tile. The output is
// poisoned with NaN and guarded past its end. The r18vd engine with it: R18vdEngine* below.
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/stem_fused.h"
#include "conv_ref.h"
#include "gpu_test_util.h"
#include "host_ref.h"
#include "r18_settings_check.h"

namespace detforge::test {
namespace {

using graph::Act;

// NHWC max pool 3x3, stride 2, padding 1, image by image (ref::pool takes one).
std::vector<float> ref_pool(const std::vector<float>& x, int B, int H, int W, int C, int Ho, int Wo) {
  std::vector<float> y;
  const size_t n = static_cast<size_t>(H) * W * C;
  for (int b = 0; b < B; ++b) {
    const auto yb = ref::pool({x.begin() + b * n, x.begin() + (b + 1) * n}, H, W, C, 3, 2, 1, true, Ho, Wo);
    y.insert(y.end(), yb.begin(), yb.end());
  }
  return y;
}

void run_case(int B, int H, int W, uint32_t seed, int mode) {
  SCOPED_TRACE("B " + std::to_string(B) + " " + std::to_string(H) + "x" + std::to_string(W) + " mode " +
               std::to_string(mode));
  const auto s1 = make_shape(B, H, W, 3, 32, 3, 3, 2, 1);
  const auto s2 = make_shape(B, s1.Ho, s1.Wo, 32, 32, 3, 3, 1, 1);
  const auto s3 = make_shape(B, s1.Ho, s1.Wo, 32, 64, 3, 3, 1, 1);
  const int Hp = cuda::stem_fused_out_dim(H), Wp = cuda::stem_fused_out_dim(W);
  ASSERT_EQ(Hp, (s1.Ho - 1) / 2 + 1);
  // Weights of about 1/sqrt(K), so every level keeps values of order 1 and many ReLUs are zero.
  const auto x = random_vec(static_cast<size_t>(B) * H * W * 3, 0.f, 1.f, seed);
  std::vector<std::vector<float>> w, b;
  const cuda::ConvShape* shapes[3] = {&s1, &s2, &s3};
  for (int k = 0; k < 3; ++k) {
    const auto& s = *shapes[k];
    const float r = k == 0 ? 0.4f : 0.12f;
    w.push_back(quantize(random_vec(static_cast<size_t>(s.Co) * 9 * s.Ci, -r, r, seed + 1 + k), true));
    b.push_back(quantize(random_vec(static_cast<size_t>(s.Co), -0.2f, 0.3f, seed + 5 + k), true));
  }
  // The kernel's roundings: fp16 input, fp16 conv outputs; sums in fp32 (here double).
  auto a = quantize(ref_conv(s1, quantize(x, true), w[0], &b[0], nullptr, Act::relu), true);
  a = quantize(ref_conv(s2, a, w[1], &b[1], nullptr, Act::relu), true);
  a = quantize(ref_conv(s3, a, w[2], &b[2], nullptr, Act::relu), true);
  const auto want = ref_pool(a, B, s1.Ho, s1.Wo, 64, Hp, Wp);

  DevBuf dx(x, false), dw1(w[0], true), dw2(w[1], true), dw3(w[2], true), db1(b[0], true), db2(b[1], true),
      db3(b[2], true);
  const size_t n = want.size();
  DevBuf dy(n + kGuard, true);
  dy.upload(std::vector<float>(n + kGuard, kSentinel));
  cudaMemset(dy.get(), 0xff, n * 2);  // NaN where the outputs go
  void* packed = nullptr;
  ASSERT_EQ(cudaMalloc(&packed, cuda::stem_fused_packed_bytes()), cudaSuccess);
  cuda::stem_fused_pack(dw1.get(), dw2.get(), dw3.get(), packed, nullptr);
  auto run = [&] {
    cuda::stem_fused(static_cast<const float*>(dx.get()), packed, db1.get(), db2.get(), db3.get(), dy.get(), B, H, W,
                     nullptr, mode);
    return dy.download();
  };
  const auto got = run();
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> out(got.begin(), got.begin() + static_cast<long>(n));
  // An intermediate may round to the other fp16 neighbour (fp32 against double sums); that moves
  // the output by about one fp16 ulp per level.
  EXPECT_TRUE(close(out, want, 4e-3f, 4e-3f));
  for (size_t i = n; i < n + kGuard; ++i) ASSERT_EQ(got[i], kSentinel) << "guard " << i - n;
  EXPECT_EQ(run(), got) << "a second run differs";
  cudaFree(packed);
}

TEST(CudaStemFused, MatchesHostReference) {
  DETFORGE_REQUIRE_GPU();
  for (int mode : {1, 2, 3}) {
    run_case(1, 640, 640, 700, mode);  // r18vd: 160x160 pooled, 8 x 16 tiles of 20 x 10
    run_case(2, 75, 93, 710, mode);    // pooled 19 x 24: the last tile row and column end inside the tile
    run_case(3, 13, 6, 720, mode);     // pooled 4 x 2: one tile, most of it outside the image
  }
}

// The r18vd engine with the fused stem (every mode) against the engine without it (cuDNN on the
// fp16 copy of the input): the graph equals its eager forward, the outputs agree within fp16
// tolerance, and the stem really runs as one launch.
TEST(CudaStemFused, R18vdEngineKeepsTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  for (const char* mode : {"1", "2", "3"})
    expect_settings_keep_r18vd_outputs(std::string("DETFORGE_CUDA_STEM_FUSED=") + mode, 63, [](cuda::CudaEngine& e) {
      int fused = 0, inside = 0;
      for (size_t i = 0; i < e.graph().ops.size(); ++i) {
        const std::string what = e.op_launch_summary(2, i);
        fused += what.find("own stem_fused") != std::string::npos;  // after "stream N, "
        inside += what.find("in the stem_fused launch") != std::string::npos;
      }
      EXPECT_EQ(fused, 1);
      EXPECT_EQ(inside, 3);
    }, "DETFORGE_CUDA_STEM_FUSED=0");
}

}  // namespace
}  // namespace detforge::test
