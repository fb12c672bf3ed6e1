// Host-side pieces of the benchmark library: kernel grouping by name (names as CUPTI reported
// them on the H200, bench/results/h200/latest.json) and latency statistics.
#include <gtest/gtest.h>

#include "bench/kernel_profile.h"
#include "bench/latency.h"

namespace detforge::test {

TEST(BenchKernelGroup, GroupsTheKernelsOfAnH200Profile) {
  EXPECT_EQ(bench::kernel_group("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32"), "convolution");
  EXPECT_EQ(bench::kernel_group("cudnn_generated_fort_native_sm90_convFwd_pointwise_pointwise_knob_40_128x128x64_5_0"),
            "convolution");
  EXPECT_EQ(bench::kernel_group("nvjet_hsh_128x64_64x4_1x2_h_bz_coopA_NNT"), "gemm");
  EXPECT_EQ(bench::kernel_group("void detforge::cuda::(anonymous namespace)::layer_norm_k<__half>(...)"),
            "normalization");
  EXPECT_EQ(bench::kernel_group("ms_deform_attn_k<float>"), "deformable_sampling");
  EXPECT_EQ(bench::kernel_group("[memcpy]"), "copies");
  // The 16-byte pooling kernels were counted as "other" in the first v4 profile.
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda39_GLOBAL__N__0ff1b8d5_7_pool_cu_9414d75c10pool_vec_kI6__halfLb1EiEEvPKNS0_"
                                "4PackIT_EEPS6_iiiiiiiii"),
            "elementwise");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda41_GLOBAL__N__a37b0c07_9_concat_cu_1f7cbe3317concat_part_vec_kIiEEvPK5uint4"),
            "elementwise");
  EXPECT_EQ(bench::kernel_group("attention_mma_k<__half>"), "attention");
}

TEST(BenchLatency, PercentilesAndStability) {
  auto s = bench::summarize({1, 2, 3, 4, 100, 1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.max, 100);
  auto steady = bench::summarize({2, 2, 2, 2, 2, 2.01, 2, 2});
  EXPECT_TRUE(steady.stable);
  auto drifting = bench::summarize({1, 1, 1, 1, 2, 2, 2, 2});
  EXPECT_FALSE(drifting.stable);
}

}  // namespace detforge::test
