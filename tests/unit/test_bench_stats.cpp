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
  // a linear chain with its LayerNorm epilogue counts as GEMM time
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda12_GLOBAL__N_19row_mlp_kILi1ELi8EEEvNS1_6ParamsE"), "gemm");
  EXPECT_EQ(bench::kernel_group("void detforge::cuda::(anonymous namespace)::layer_norm_k<__half>(...)"),
            "normalization");
  EXPECT_EQ(bench::kernel_group("ms_deform_attn_k<float>"), "deformable_sampling");
  EXPECT_EQ(bench::kernel_group("[memcpy]"), "copies");
  EXPECT_EQ(bench::kernel_group("[memcpy HtoD]"), "copies");
  EXPECT_EQ(bench::kernel_group("[memcpy DtoH]"), "copies");
  // The 16-byte pooling kernels were counted as "other" in the first v4 profile.
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda39_GLOBAL__N__0ff1b8d5_7_pool_cu_9414d75c10pool_vec_kI6__halfLb1EiEEvPKNS0_"
                                "4PackIT_EEPS6_iiiiiiiii"),
            "elementwise");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda41_GLOBAL__N__a37b0c07_9_concat_cu_1f7cbe3317concat_part_vec_kIiEEvPK5uint4"),
            "elementwise");
  EXPECT_EQ(bench::kernel_group("attention_mma_k<__half>"), "attention");
  // Kernels added in v5 (names from bench/results/h200/ab-2026-12-02-own-conv/own_b1.json).
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda46_GLOBAL__N__342dcfaf_13_conv_igemm_cu_f9701fc612igemm_kernelILi128ELi32E"
                                "Li32ELi32EEEvNS1_6ParamsE"),
            "convolution");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda46_GLOBAL__N__342dcfaf_13_conv_igemm_cu_f9701fc619igemm_splitk_reduceENS1_"
                                "6ParamsEi"),
            "convolution");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda45_GLOBAL__N__c94f270f_12_conv_stem_cu_443e153911conv_stem_kI6__halfLi32EE"),
            "convolution");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda45_GLOBAL__N__66ef5eed_12_attention_cu_14acdb4d17attention_split_kILi8EEEv"),
            "attention");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda45_GLOBAL__N__b0a72aa3_12_topk_rows_cu_9da2069d13topk_select_kI6__halfLi1EEE"),
            "elementwise");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda41_GLOBAL__N__a37b0c07_9_concat_cu_ec0cd2538concat_kI5uint4iEEvNS1_8PartsArg"),
            "elementwise");
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda46_GLOBAL__N__57977bcf_13_layer_norm_cu_55ef655216layer_norm_vec_kI6__halfLi1EE"),
            "normalization");
  // DETFORGE_CUDA_SMALL_LINEAR's kernels (names as nvcc mangles them; not yet seen in a profile).
  EXPECT_EQ(bench::kernel_group("_ZN8detforge4cuda49_GLOBAL__N__1a2b3c4d_15_small_linear_cu_5e6f708121small_linear_smalln_kI6"
                                "__halfLi4ELi1EEEvPKNS0_4PackIT_EES8_PKS5_SB_PS5_xiiN5graph3ActE"),
            "gemm");
  EXPECT_EQ(bench::kernel_group("small_linear_smallk_k<float, 4, 1>"), "gemm");
}

TEST(BenchKernelGroup, PerOpProfileGoesIntoTheJson) {
  bench::KernelProfile p;
  p.available = true;
  p.forwards = 2;
  p.ops.push_back({-1, "input conversion", "convert", "from_f32_k", 0.005, 1});
  p.ops.push_back({0, "model.backbone.conv", "conv2d", "sm90_xmma_fprop", 0.0108, 1});
  const auto j = bench::to_json(p);
  ASSERT_TRUE(j.contains("ops"));
  ASSERT_EQ(j["ops"].size(), 2u);
  EXPECT_EQ(j["ops"][1]["op"], "model.backbone.conv");
  EXPECT_EQ(j["ops"][1]["kind"], "conv2d");
  EXPECT_DOUBLE_EQ(j["ops"][1]["ms"].get<double>(), 0.0108);
  EXPECT_EQ(j["ops"][0]["index"], -1);
  bench::KernelProfile none;
  none.why = "built without CUPTI";
  EXPECT_FALSE(bench::to_json(none).contains("ops"));
  EXPECT_EQ(bench::to_json(none)["why"], "built without CUPTI");
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
