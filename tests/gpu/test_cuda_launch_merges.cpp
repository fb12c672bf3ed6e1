// Launches that do two ops' work, and the late value projections:
// - layer_norm's second output (y2 = y + add2) against layer_norm then add_act, bit for bit, on
//   the 16-byte and the generic kernel;
// - a concat with an upsampled part against upsample_nearest2x then concat, bit for bit, on the
//   16-byte and the scalar copies;
// - late_value_ops' anchors and values on r18vd (host only);
// - the r18vd engine with the merges on (default) against off, DETFORGE_CUDA_LATE_VALUE=1..3
//   against 0 and 4, DETFORGE_CUDA_TOPK_SPLIT=1 (the same keys) and DETFORGE_CUDA_POOL_QUAD=1
//   (the same maxima): in fp16 the same outputs
//   bit for bit (the same kernels on the same bytes); in fp32 within 1e-4, since each fp32 engine times cuDNN's conv algorithms (cudnnFind) and two engines
//   may take different ones (1-ulp output differences between merges on and off, call 2 of
//   ab-2026-12-04-session12, where fp16 agreed bit for bit).
#include <cstdio>
#include <memory>
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

class CudaLaunchMerge : public StorageParamTest {};

TEST_P(CudaLaunchMerge, LayerNormSecondOutputEqualsLayerNormThenAdd) {
  DETFORGE_REQUIRE_GPU();
  struct Case { int rows, C; bool res; int off; };  // off: elements before x (1: generic kernel)
  for (const Case cs : {Case{300, 256, true, 0}, Case{600, 256, false, 0}, Case{37, 1024, true, 0},
                        Case{41, 96, true, 0}, Case{300, 256, true, 1}}) {
    SCOPED_TRACE("rows " + std::to_string(cs.rows) + " C " + std::to_string(cs.C) + " off " + std::to_string(cs.off));
    const size_t n = static_cast<size_t>(cs.rows) * cs.C;
    auto x = quantize(random_vec(n, -3, 3, 11 + cs.C), half()), r = quantize(random_vec(n, -1, 1, 12), half());
    auto p = quantize(random_vec(n, -2, 2, 13), half());
    auto g = quantize(random_vec(cs.C, 0.5, 1.5, 14), half()), b = quantize(random_vec(cs.C, -0.5, 0.5, 15), half());
    std::vector<float> xpad(cs.off, 0.f);
    xpad.insert(xpad.end(), x.begin(), x.end());
    DevBuf dx(xpad, half()), dr(r, half()), dp(p, half()), dg(g, half()), db(b, half());
    DevBuf y1(n, half()), y2(n, half()), ref_y(n, half()), ref_y2(n, half());
    const void* px = static_cast<const char*>(dx.get()) + cs.off * (half() ? 2 : 4);
    const void* pr = cs.res ? dr.get() : nullptr;
    EXPECT_EQ(cuda::layer_norm_fast_path(px, pr, dg.get(), db.get(), y1.get(), cs.C, dp.get(), y2.get()),
              cs.C % 256 == 0 && cs.off == 0);
    cuda::layer_norm(px, pr, dg.get(), db.get(), y1.get(), cs.rows, cs.C, 1e-5f, half(), nullptr, dp.get(), y2.get());
    cuda::layer_norm(px, pr, dg.get(), db.get(), ref_y.get(), cs.rows, cs.C, 1e-5f, half(), nullptr);
    cuda::add_act(ref_y.get(), dp.get(), static_cast<int64_t>(n), ref_y2.get(), static_cast<int64_t>(n),
                  graph::Act::none, half(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(close(y1.download(), ref_y.download(), 0, 0)) << "first output";
    EXPECT_TRUE(close(y2.download(), ref_y2.download(), 0, 0)) << "second output";
  }
  DevBuf a(256, half());
  EXPECT_THROW(cuda::layer_norm(a.get(), nullptr, a.get(), a.get(), a.get(), 1, 256, 1e-5f, half(), nullptr, a.get()),
               Error)
      << "add2 without y2";
}

// concat(upsample2x(u), v) over an [H, W] grid at batch B, against the two kernels.
void check_upsampled_concat(int B, int H, int W, int Cu, int Cv, bool up_first, bool half) {
  SCOPED_TRACE("B " + std::to_string(B) + " grid " + std::to_string(H) + "x" + std::to_string(W) + " Cu " +
               std::to_string(Cu) + " Cv " + std::to_string(Cv) + (up_first ? " up first" : " up second"));
  const int64_t outer = static_cast<int64_t>(B) * H * W, ld = Cu + Cv;
  auto u = quantize(random_vec(static_cast<size_t>(outer / 4 * Cu), -4, 4, 21 + Cu), half);
  auto v = quantize(random_vec(static_cast<size_t>(outer * Cv), -4, 4, 22 + Cv), half);
  DevBuf du(u, half), dv(v, half), dup(static_cast<size_t>(outer * Cu), half);
  DevBuf got(static_cast<size_t>(outer * ld), half), want(static_cast<size_t>(outer * ld), half);
  const int64_t ou = up_first ? 0 : Cv, ov = up_first ? Cu : 0;
  cuda::upsample_nearest2x(du.get(), dup.get(), B, H / 2, W / 2, Cu, half, nullptr);
  cuda::ConcatPart ref_parts[2] = {{dup.get(), Cu, ou}, {dv.get(), Cv, ov}};
  cuda::concat(ref_parts, 2, want.get(), outer, ld, half, nullptr);
  cuda::ConcatPart parts[2] = {{du.get(), Cu, ou, true}, {dv.get(), Cv, ov}};
  cuda::concat(parts, 2, got.get(), outer, ld, half, nullptr, H, W);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(close(got.download(), want.download(), 0, 0));
}

TEST_P(CudaLaunchMerge, ConcatWithUpsampledPartEqualsUpsampleThenConcat) {
  DETFORGE_REQUIRE_GPU();
  check_upsampled_concat(1, 40, 40, 256, 256, true, half());  // r18vd's fpn_blocks.0 (16-byte copies)
  check_upsampled_concat(2, 8, 6, 16, 24, true, half());
  check_upsampled_concat(2, 8, 6, 16, 24, false, half());
  check_upsampled_concat(3, 4, 10, 3, 5, true, half());  // scalar copies
  DevBuf a(64, half());
  cuda::ConcatPart parts[1] = {{a.get(), 4, 0, true}};
  EXPECT_THROW(cuda::concat(parts, 1, a.get(), 12, 4, half(), nullptr, 3, 4), Error) << "odd grid";
  EXPECT_THROW(cuda::concat(parts, 1, a.get(), 12, 4, half(), nullptr), Error) << "no grid";
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaLaunchMerge, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "fp16" : "fp32"); });

TEST(CudaLateValueRules, R18vdAnchorsAndValueProjections) {
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const graph::Graph& g = lb.graph;
  EXPECT_TRUE(cuda::late_value_ops(g, 0).empty());
  const char* anchors[] = {"model.enc_output.0", "model.enc_score_head", "model.topk"};
  for (int mode = 1; mode <= 4; ++mode) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    const auto pairs = cuda::late_value_ops(g, mode);
    ASSERT_EQ(pairs.size(), 3u);
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [a, v] = pairs[k];
      const std::string layer = "model.decoder.layers." + std::to_string(k) + ".";
      EXPECT_EQ(g.ops[v].name, layer + "encoder_attn.value_proj");
      // Mode 4: the first value after the top-k, the others after the layer before's sampling.
      const std::string want = mode < 4 ? anchors[mode - 1]
                               : k == 0 ? "model.topk"
                                        : "model.decoder.layers." + std::to_string(k - 1) + ".encoder_attn";
      EXPECT_EQ(g.ops[a].name, want);
    }
  }
}

// r18vd at batch 2 with every merge off, on, and with each late-value mode (3 is the default).
void r18vd_merges_same_outputs(const char* precision) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 41);
  const std::vector<std::vector<std::string>> variants = {
      {"DETFORGE_CUDA_LN_ADD=0", "DETFORGE_CUDA_UPSAMPLE_CONCAT=0"},
      {},
      {"DETFORGE_CUDA_LATE_VALUE=1"},
      {"DETFORGE_CUDA_LATE_VALUE=2"},
      {"DETFORGE_CUDA_LATE_VALUE=3"},
      {"DETFORGE_CUDA_LATE_VALUE=4"},
      {"DETFORGE_CUDA_LATE_VALUE=0"},
      {"DETFORGE_CUDA_TOPK_SPLIT=1"},
      {"DETFORGE_CUDA_POOL_QUAD=1"}};
  std::vector<std::vector<HostTensor>> out;
  for (size_t k = 0; k < variants.size(); ++k) {
    std::string label = precision;
    for (const auto& v : variants[k]) label += " " + v;
    SCOPED_TRACE(label);
    auto eng = engine_with(lb.graph, precision, 2, variants[k]);
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->ln_adds(), k == 0 ? 0 : 3);
    EXPECT_EQ(e->upsample_concats(), k == 0 ? 0 : 2);
    ASSERT_TRUE(e->graph_captured(2));
    EXPECT_EQ(e->graph_check(2), "equal");
    std::printf("%s: %d layer_norm adds, %d upsample concats, %d graph nodes\n", label.c_str(), e->ln_adds(),
                e->upsample_concats(), e->graph_nodes(2));
    out.push_back(e->run(px.data(), 2));
  }
  const bool half = std::string(precision) == "fp16";
  for (size_t k = 1; k < out.size(); ++k) {
    ASSERT_EQ(out[0].size(), out[k].size());
    if (!half) {
      expect_r18vd_outputs_agree(out[0], out[k], 2, 1e-4, precision);
      continue;
    }
    for (size_t o = 0; o < out[0].size(); ++o) EXPECT_EQ(out[0][o].data, out[k][o].data) << "variant " << k << " output " << o;
  }
}

TEST(CudaLaunchMergeEngine, R18vdFp16SameOutputs) { r18vd_merges_same_outputs("fp16"); }
TEST(CudaLaunchMergeEngine, R18vdFp32SameOutputs) { r18vd_merges_same_outputs("fp32"); }

}  // namespace
}  // namespace detforge::test
