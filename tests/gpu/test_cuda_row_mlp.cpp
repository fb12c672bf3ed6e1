// The row_mlp kernel (linear chains with their epilogue in one launch) against host loops that
// round as the unfused ops do, for each chain shape of r18vd (query_pos_head, bbox head +
// box_refine, linear + LayerNorm with either residual, the encoder bbox head + anchors on
// 64-row blocks), partial row blocks included; and the r18vd engine with and without it.
#include <cmath>
#include <cstdlib>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/row_mlp.h"
#include "detforge/types.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

using graph::Act;
using graph::RowEpilogue;

float h(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

struct Case {
  const char* name;
  int64_t M;
  std::vector<int> widths;  // K0, N0, N1, ...
  bool relu_hidden;
  bool res;                 // residual on the last linear
  RowEpilogue epi;
  bool ln_res;
  int64_t addc_rows;
  int want_block_rows;
};

struct HostChain {
  std::vector<float> x, res, gamma, beta, ln_res, ref, addc;
  std::vector<std::vector<float>> w, b;
};

std::vector<float> host_run(const Case& c, const HostChain& d) {
  const int L = static_cast<int>(c.widths.size()) - 1;
  const int N = c.widths.back();
  std::vector<float> cur = d.x, out(c.M * N);
  int K = c.widths[0];
  for (int l = 0; l < L; ++l) {
    const int n_l = c.widths[l + 1];
    const bool last = l == L - 1;
    std::vector<float> nxt(c.M * n_l);
    for (int64_t m = 0; m < c.M; ++m)
      for (int n = 0; n < n_l; ++n) {
        double s = d.b[l][n];
        for (int k = 0; k < K; ++k) s += double(cur[m * K + k]) * d.w[l][n * K + k];
        if (last && c.res) s += d.res[m * n_l + n];
        if (!last && c.relu_hidden) s = std::max(s, 0.0);
        nxt[m * n_l + n] = h(static_cast<float>(s));
      }
    cur = std::move(nxt);
    K = n_l;
  }
  for (int64_t m = 0; m < c.M; ++m) {
    const float* r = &cur[m * N];
    if (c.epi == RowEpilogue::layer_norm) {
      std::vector<double> v(N);
      double mean = 0, var = 0;
      for (int n = 0; n < N; ++n) mean += v[n] = r[n] + (c.ln_res ? d.ln_res[m * N + n] : 0.f);
      mean /= N;
      for (int n = 0; n < N; ++n) var += (v[n] - mean) * (v[n] - mean);
      var /= N;
      for (int n = 0; n < N; ++n)
        out[m * N + n] = h(static_cast<float>((v[n] - mean) / std::sqrt(var + 1e-5) * d.gamma[n] + d.beta[n]));
    } else {
      for (int n = 0; n < N; ++n) {
        float v = r[n];
        if (c.epi == RowEpilogue::box_refine) {
          const float x = std::min(std::max(d.ref[m * N + n], 0.f), 1.f);
          v = 1.f / (1.f + std::exp(-(v + std::log(std::max(x, 1e-5f) / std::max(1.f - x, 1e-5f)))));
        } else if (c.epi == RowEpilogue::add_const) {
          v += d.addc[(m % c.addc_rows) * N + n];
        }
        out[m * N + n] = h(v);
      }
    }
  }
  return out;
}

class RowMlp : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { DETFORGE_REQUIRE_GPU(); }
};

TEST_P(RowMlp, MatchesHostLoopsRoundedAsTheUnfusedOps) {
  const Case& c = GetParam();
  const int L = static_cast<int>(c.widths.size()) - 1, N = c.widths.back();
  HostChain d;
  uint32_t seed = 100;
  d.x = quantize(random_vec(c.M * c.widths[0], -1, 1, seed++), true);
  for (int l = 0; l < L; ++l) {
    const float s = 1.5f / std::sqrt(static_cast<float>(c.widths[l]));
    d.w.push_back(quantize(random_vec(size_t(c.widths[l + 1]) * c.widths[l], -s, s, seed++), true));
    d.b.push_back(quantize(random_vec(c.widths[l + 1], -0.2f, 0.2f, seed++), true));
  }
  d.res = quantize(random_vec(c.M * N, -1, 1, seed++), true);
  d.ln_res = quantize(random_vec(c.M * N, -1, 1, seed++), true);
  d.gamma = quantize(random_vec(N, 0.5f, 1.5f, seed++), true);
  d.beta = quantize(random_vec(N, -0.3f, 0.3f, seed++), true);
  d.ref = quantize(random_vec(c.M * N, -0.1f, 1.1f, seed++), true);  // clamped at both ends
  d.addc = quantize(random_vec(std::max<int64_t>(c.addc_rows, 1) * N, -2, 2, seed++), true);

  DevBuf x(d.x, true), res(d.res, true), ln_res(d.ln_res, true), gamma(d.gamma, true), beta(d.beta, true),
      ref(d.ref, true), addc(d.addc, true), y(c.M * N, true);
  std::vector<std::unique_ptr<DevBuf>> w, b;
  cuda::RowMlpArgs a;
  a.x = x.get();
  a.M = c.M;
  a.n_layers = L;
  for (int l = 0; l < L; ++l) {
    w.push_back(std::make_unique<DevBuf>(d.w[l], true));
    b.push_back(std::make_unique<DevBuf>(d.b[l], true));
    a.layers[l] = {w[l]->get(), b[l]->get(), c.widths[l + 1], c.widths[l],
                   l + 1 < L && c.relu_hidden ? Act::relu : Act::none};
  }
  a.res = c.res ? res.get() : nullptr;
  a.epi = c.epi;
  a.gamma = gamma.get();
  a.beta = beta.get();
  a.ln_res = c.ln_res ? ln_res.get() : nullptr;
  a.ref = ref.get();
  a.addc = addc.get();
  a.addc_rows = c.addc_rows;
  a.y = y.get();
  std::string why;
  ASSERT_EQ(cuda::row_mlp_block_rows(a, &why), c.want_block_rows) << why;
  cuda::row_mlp(a, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // fp16 storage of every layer: a rounding flip in a hidden layer moves the output by ~1e-3 of
  // its scale; LayerNorm outputs are O(1).
  EXPECT_TRUE(close(y.download(), host_run(c, d), 2e-2f, 1e-2f));
}

INSTANTIATE_TEST_SUITE_P(
    Chains, RowMlp,
    ::testing::Values(
        Case{"query_pos_head", 300, {4, 512, 256}, true, false, RowEpilogue::none, false, 0, 16},
        Case{"bbox_head_refine", 300, {256, 256, 256, 4}, true, false, RowEpilogue::box_refine, false, 0, 16},
        Case{"out_proj_res_ln", 300, {256, 256}, false, true, RowEpilogue::layer_norm, false, 0, 16},
        Case{"fc2_ln_res_partial", 37, {1024, 256}, false, false, RowEpilogue::layer_norm, true, 0, 16},
        Case{"enc_bbox_anchors", 600, {256, 256, 256, 4}, true, false, RowEpilogue::add_const, false, 250, 16},
        Case{"ln_unsplit_width_40", 45, {64, 32, 40}, true, true, RowEpilogue::layer_norm, true, 0, 16},
        Case{"wide_hidden_split_128", 33, {96, 512, 96}, true, false, RowEpilogue::add_const, false, 7, 16},
        Case{"two_layers_no_relu", 45, {64, 32, 24}, false, false, RowEpilogue::none, false, 0, 16}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RowMlpLimits, RefusesWhatItCannotRun) {
  DETFORGE_REQUIRE_GPU();
  DevBuf x(300 * 256, true), w(1024 * 256, true), y(300 * 1024, true);
  cuda::RowMlpArgs a;
  a.x = x.get();
  a.M = 300;
  a.n_layers = 1;
  a.layers[0] = {w.get(), nullptr, 1024, 256, Act::none};  // N over 512
  a.y = y.get();
  std::string why;
  EXPECT_EQ(cuda::row_mlp_block_rows(a, &why), 0);
  EXPECT_NE(why.find("width"), std::string::npos) << why;
  EXPECT_THROW(cuda::row_mlp(a, nullptr), Error);
  a.layers[0] = {w.get(), nullptr, 256, 256, Act::gelu};
  EXPECT_EQ(cuda::row_mlp_block_rows(a), 0);
  a.layers[0] = {w.get(), nullptr, 256, 256, Act::none};
  a.M = 16 * 264 + 1;  // beyond 264 clusters of 16 rows
  EXPECT_EQ(cuda::row_mlp_block_rows(a), 0);
  a.M = 300;
  a.layers[0] = {w.get(), nullptr, 136, 256, Act::none};  // unsplit (not a multiple of 32) over 128
  EXPECT_EQ(cuda::row_mlp_block_rows(a), 0);
  a.layers[0] = {w.get(), nullptr, 256, 256, Act::none};
  EXPECT_EQ(cuda::row_mlp_block_rows(a), 16);
  a.epi = RowEpilogue::box_refine;  // needs N = 4
  EXPECT_EQ(cuda::row_mlp_block_rows(a), 0);
}

// On the r18vd-shaped model, fp16: 19 chains (per decoder layer query_pos_head, bbox head,
// three linear + LayerNorm; enc_output + LN, the encoder bbox head; AIFI's two linear + LN); the
// 17 of at most 4,224 rows run fused at batch 1 and 2 (enc_output and the encoder bbox head have
// 8,400 rows per image and stay with the library) and give the unfused engine's outputs up to
// fp16 summation order.
TEST(RowMlpEngine, R18vdFusedEqualsUnfused) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const size_t per = static_cast<size_t>(in[0] * in[1] * in[2]);
  std::vector<float> px = random_vec(per * 2, 0, 1, 5);
  EngineOptions eo;
  eo.max_batch = 2;
  eo.precision = "fp16";
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    setenv("DETFORGE_CUDA_ROW_MLP", k == 0 ? "0" : "1", 1);
    auto eng = make_cuda_engine(lb.graph, eo);
    unsetenv("DETFORGE_CUDA_ROW_MLP");
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    EXPECT_EQ(e->row_chains_found(), k == 0 ? 0 : 19);
    EXPECT_EQ(e->row_chains_fused(1), k == 0 ? 0 : 17);
    EXPECT_EQ(e->row_chains_fused(2), k == 0 ? 0 : 17);
    out[k] = e->run(px.data(), 2);
  }
  expect_r18vd_outputs_agree(out[0], out[1], 2, 0.01, "row_mlp fused vs unfused");
}

}  // namespace
}  // namespace detforge::test
