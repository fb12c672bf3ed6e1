// Own CUDA kernels against plain host loops written from the IR's semantics (graph/ir.h and the
// family spec). Random inputs, fresh per test; fp32 tight, fp16 storage loose.
#include <algorithm>
#include <memory>

#include "backends/cuda/kernels/kernels.h"
#include "detforge/types.h"
#include "attn_ref.h"
#include "gpu_test_util.h"
#include "host_ref.h"

namespace detforge::test {
namespace {

using cuda::DeformShape;

class CudaKernel : public StorageParamTest {};

TEST_P(CudaKernel, LayerNormWithResidualMatchesHostLoop) {
  const int rows = 37, C = 256;
  auto x = quantize(random_vec(rows * C, -3, 3, 1), half()), r = quantize(random_vec(rows * C, -1, 1, 2), half());
  auto g = quantize(random_vec(C, 0.5, 1.5, 3), half()), b = quantize(random_vec(C, -0.5, 0.5, 4), half());
  DevBuf dx(x, half()), dr(r, half()), dg(g, half()), db(b, half()), dy(rows * C, half());
  cuda::layer_norm(dx.get(), dr.get(), dg.get(), db.get(), dy.get(), rows, C, 1e-5f, half(), nullptr);
  std::vector<float> want(rows * C);
  for (int i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[i * C + c] + r[i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += std::pow(x[i * C + c] + r[i * C + c] - m, 2);
    v /= C;
    for (int c = 0; c < C; ++c)
      want[i * C + c] = static_cast<float>((x[i * C + c] + r[i * C + c] - m) / std::sqrt(v + 1e-5) * g[c] + b[c]);
  }
  EXPECT_TRUE(close(dy.download(), want, atol() * 2, rtol()));
}

// LayerNorm over rows of x (+ r when given; the add in fp32 as on the device), double statistics.
std::vector<float> layer_norm_ref(const std::vector<float>& x, const std::vector<float>* r, const std::vector<float>& g,
                                  const std::vector<float>& b, int rows, int C) {
  std::vector<float> xr(x.begin(), x.begin() + (size_t)rows * C);
  if (r)
    for (size_t i = 0; i < xr.size(); ++i) xr[i] += (*r)[i];
  return ref::layer_norm(xr, rows, C, g, b, 1e-5f);
}

TEST_P(CudaKernel, LayerNormVectorAndGenericPathsMatchHostLoop) {
  // (rows, C, residual, element offset of x). C = 256..1024 with aligned pointers take the 16-byte
  // kernel (v5; the decoder's 300 x 256 and the encoder's 8400 x 256 among them), C = 96 / 1280
  // and an x one element off 16-byte alignment the generic one. Rows get different means (up to
  // +-10) so a wrong mean, variance or channel order shows.
  struct Case { int rows, C; bool res; int x_off; bool fast; };
  const Case cases[] = {{300, 256, true, 0, true},  {300, 256, false, 0, true}, {8400, 256, true, 0, true},
                        {37, 512, true, 0, true},   {5, 768, false, 0, true},   {33, 1024, true, 0, true},
                        {33, 1024, false, 0, true}, {41, 96, true, 0, false},   {41, 96, false, 0, false},
                        {19, 1280, true, 0, false}, {300, 256, true, 1, false}, {37, 512, false, 1, false}};
  for (const Case& cs : cases) {
    const int rows = cs.rows, C = cs.C;
    SCOPED_TRACE("rows " + std::to_string(rows) + " C " + std::to_string(C) + (cs.res ? " +res" : "") +
                 " x_off " + std::to_string(cs.x_off));
    auto x = random_vec((size_t)rows * C, -3, 3, 70 + C + rows);
    for (int i = 0; i < rows; ++i)
      for (int c = 0; c < C; ++c) x[(size_t)i * C + c] += static_cast<float>((i * 7) % 21 - 10);
    x = quantize(x, half());
    auto r = quantize(random_vec((size_t)rows * C, -1, 1, 71 + C), half());
    auto g = quantize(random_vec(C, 0.5, 1.5, 72 + C), half()), b = quantize(random_vec(C, -0.5, 0.5, 73 + C), half());
    std::vector<float> xpad(cs.x_off, 0.f);  // x_off leading elements, then x
    xpad.insert(xpad.end(), x.begin(), x.end());
    DevBuf dx(xpad, half()), dr(r, half()), dg(g, half()), db(b, half()), dy((size_t)rows * C, half());
    const void* px = static_cast<const char*>(dx.get()) + cs.x_off * (half() ? 2 : 4);
    const void* pr = cs.res ? dr.get() : nullptr;
    ASSERT_EQ(cuda::layer_norm_fast_path(px, pr, dg.get(), db.get(), dy.get(), C), cs.fast);
    cuda::layer_norm(px, pr, dg.get(), db.get(), dy.get(), rows, C, 1e-5f, half(), nullptr);
    EXPECT_TRUE(close(dy.download(), layer_norm_ref(x, cs.res ? &r : nullptr, g, b, rows, C), atol() * 2, rtol()));
  }
}

TEST_P(CudaKernel, AttentionMatchesHostLoop) {
  // (B, L, S, C, heads). fp32: head dim <= 32 takes the shared-memory path, 48 the fallback.
  // fp16 with head dim 32 takes the tensor-core path (attention.cu, v4): S below one 64-key
  // chunk, S spanning 3 chunks with a partial last one, L not a multiple of the 16-query warp
  // tile, AIFI's real shape (400 keys = 6.25 chunks), the decoder's (300 x 300), and a grid
  // large enough for the 4-warp blocks.
  const int cfg[][5] = {{2, 45, 70, 64, 4},    {2, 33, 50, 96, 2},   {2, 300, 400, 256, 8}, {2, 37, 29, 64, 2},
                        {3, 70, 130, 96, 3},   {2, 300, 300, 256, 8}, {3, 1100, 64, 256, 8}};
  for (const auto& cf : cfg) {
    const int B = cf[0], L = cf[1], S = cf[2], C = cf[3], heads = cf[4], d = C / heads;
    SCOPED_TRACE("B " + std::to_string(B) + " L " + std::to_string(L) + " S " + std::to_string(S) + " d " +
                 std::to_string(d));
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    auto q = quantize(random_vec((size_t)B * L * C, -2, 2, 5 + L), half());
    auto k = quantize(random_vec((size_t)B * S * C, -2, 2, 6 + L), half());
    auto v = quantize(random_vec((size_t)B * S * C, -1, 1, 7 + L), half());
    DevBuf dq(q, half()), dk(k, half()), dv(v, half()), dout((size_t)B * L * C, half());
    cuda::attention(dq.get(), dk.get(), dv.get(), dout.get(), B, L, S, C, heads, scale, half(), nullptr);
    EXPECT_TRUE(close(dout.download(), attention_ref(q, k, v, B, L, S, C, heads, scale), atol(), rtol()));
  }
}

TEST_P(CudaKernel, AttentionWithLargeScoresAndUnalignedRowsMatchesHostLoop) {
  // Key 150 (+image) is built to score ~20 against query 0 (others score a few units), so the
  // online softmax must rescale its running sums when the third 64-key chunk raises the maximum.
  // Then the same data through a q pointer one element off 16-byte alignment (fp16 then takes
  // the shared-memory path, which must agree).
  const int B = 2, L = 50, S = 200, C = 64, heads = 2, d = 32;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  auto q = quantize(random_vec((size_t)B * L * C + 1, -2, 2, 21), half());
  auto k = quantize(random_vec((size_t)B * S * C, -2, 2, 22), half());
  auto v = quantize(random_vec((size_t)B * S * C, -1, 1, 23), half());
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c) k[((size_t)b * S + 150 + b) * C + c] = 4.f * (q[1 + (size_t)b * L * C + c] > 0 ? 1 : -1);
  k = quantize(k, half());
  std::vector<float> q_view(q.begin() + 1, q.end());
  const auto want = attention_ref(q_view, k, v, B, L, S, C, heads, scale);
  DevBuf dqa(q_view, half()), dq(q, half()), dk(k, half()), dv(v, half()), dout((size_t)B * L * C, half());
  cuda::attention(dqa.get(), dk.get(), dv.get(), dout.get(), B, L, S, C, heads, scale, half(), nullptr);
  EXPECT_TRUE(close(dout.download(), want, atol(), rtol())) << "aligned";
  const void* q_off = static_cast<const char*>(dq.get()) + (half() ? 2 : 4);
  DevBuf dout2((size_t)B * L * C, half());
  cuda::attention(q_off, dk.get(), dv.get(), dout2.get(), B, L, S, C, heads, scale, half(), nullptr);
  EXPECT_TRUE(close(dout2.download(), want, atol(), rtol())) << "q off alignment";
}

TEST_P(CudaKernel, AttentionOnColumnSlicesOfOneBufferMatchesContiguousInputs) {
  // graph::merge_qk_projections hands attention q and k as column slices of one [L, 2C] tensor;
  // here q, k and v are slices of one [L, 3C] buffer (row stride 3C). Same kernel, same
  // arithmetic as contiguous inputs, so the outputs must be identical. (B, L = S, C, heads):
  // the key-split path (decoder), AIFI's 400 tokens, the 4-warp mma path (fp16), head dim 48
  // (the fallback kernel).
  const int cfg[][4] = {{1, 300, 256, 8}, {1, 400, 256, 8}, {3, 1100, 256, 8}, {2, 33, 96, 2}};
  for (const auto& cf : cfg) {
    const int B = cf[0], L = cf[1], C = cf[2], heads = cf[3], d = C / heads;
    SCOPED_TRACE("B " + std::to_string(B) + " L " + std::to_string(L) + " C " + std::to_string(C));
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    auto qkv = quantize(random_vec((size_t)B * L * 3 * C, -2, 2, 90 + L), half());
    std::vector<float> q((size_t)B * L * C), k(q.size()), v(q.size());
    for (size_t r = 0; r < (size_t)B * L; ++r)
      for (int c = 0; c < C; ++c) {
        q[r * C + c] = qkv[r * 3 * C + c];
        k[r * C + c] = qkv[r * 3 * C + C + c];
        v[r * C + c] = qkv[r * 3 * C + 2 * C + c];
      }
    DevBuf dqkv(qkv, half()), dq(q, half()), dk(k, half()), dv(v, half());
    DevBuf want((size_t)B * L * C, half()), got((size_t)B * L * C, half());
    cuda::attention(dq.get(), dk.get(), dv.get(), want.get(), B, L, L, C, heads, scale, half(), nullptr);
    const char* base = static_cast<const char*>(dqkv.get());
    const size_t es = half() ? 2 : 4;
    cuda::attention(base, base + C * es, base + 2 * C * es, got.get(), B, L, L, C, heads, scale, half(), nullptr,
                    {3 * C, 3 * C, 3 * C});
    const auto w = want.download(), g = got.download();
    EXPECT_EQ(w, g);
    EXPECT_TRUE(close(g, attention_ref(q, k, v, B, L, L, C, heads, scale), atol(), rtol()));
  }
  // A row stride below the width is refused.
  DevBuf dq(std::vector<float>(64, 0.f), half()), dout((size_t)64, half());
  EXPECT_THROW(cuda::attention(dq.get(), dq.get(), dq.get(), dout.get(), 1, 2, 2, 32, 1, 1.f, half(), nullptr,
                               {16, 32, 32}),
               Error);
}

TEST_P(CudaKernel, InputConversionRoundsLikeTheHostOnVectorAndScalarPaths) {
  // f32_to_storage: 8 values per thread when n % 8 == 0 and both pointers are 16-byte aligned
  // (fp16), the scalar kernel otherwise. Values span fp16's normal, subnormal and overflow range.
  for (size_t n : {size_t{640 * 640 * 3}, size_t{8 * 37}, size_t{8 * 37 + 3}}) {
    for (int off : {0, 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto x = random_vec(n + 1, -70000, 70000, 200 + static_cast<uint32_t>(n));
      for (size_t i = 0; i < n + 1; i += 3) x[i] *= 1e-8f;
      DevBuf dx(x, false), dy(n, half());
      cuda::f32_to_storage(static_cast<const float*>(dx.get()) + off, dy.get(), static_cast<int64_t>(n), half(),
                           nullptr);
      const std::vector<float> want = quantize(std::vector<float>(x.begin() + off, x.begin() + off + n), half());
      const auto got = dy.download();
      ASSERT_EQ(got.size(), want.size());
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (got[i] != want[i]) ++bad;  // infinities compare equal; no NaN in the input
      EXPECT_EQ(bad, 0u);
    }
  }
}

TEST_P(CudaKernel, MsDeformAttnMatchesHostLoop) {
  DeformShape sh;
  sh.heads = 4;
  sh.levels = 3;
  sh.points = 4;
  sh.offset_scale = 0.5f;
  const int hw[3][2] = {{12, 10}, {6, 5}, {3, 3}};
  int start = 0;
  for (int l = 0; l < 3; ++l) {
    sh.H[l] = hw[l][0];
    sh.W[l] = hw[l][1];
    sh.start[l] = start;
    start += hw[l][0] * hw[l][1];
  }
  const int B = 2, Lv = start, Q = 33, C = 64, LP = 12;
  auto value = quantize(random_vec((size_t)B * Lv * C, -1, 1, 8), half());
  auto off = quantize(random_vec((size_t)B * Q * sh.heads * LP * 2, -3, 3, 9), half());  // some fall outside
  auto logits = quantize(random_vec((size_t)B * Q * sh.heads * LP, -2, 2, 10), half());
  auto ref = quantize(random_vec((size_t)B * Q * 4, 0.02f, 0.98f, 11), half());
  std::vector<float> ps(LP, 0.25f);
  DevBuf dv(value, half()), doff(off, half()), dl(logits, half()), dr(ref, half()), dps(ps, half()),
      dout((size_t)B * Q * C, half());
  cuda::ms_deform_attn(dv.get(), doff.get(), dl.get(), dr.get(), dps.get(), dout.get(), B, Lv, Q, C, sh, half(),
                       nullptr);
  EXPECT_TRUE(close(dout.download(), deform_ref(value, off, logits, ref, ps, B, Lv, Q, C, sh), atol(), rtol()));
}

TEST_P(CudaKernel, GatherRowsAndBoxRefine) {
  const int B = 2, L = 50, K = 7, C = 24;
  auto x = quantize(random_vec((size_t)B * L * C, -1, 1, 13), half());
  std::vector<int32_t> idx = {3, 49, 0, 17, 17, 8, 22, 1, 2, 3, 4, 5, 6, 48};
  DevBuf dx(x, half()), dy((size_t)B * K * C, half());
  int32_t* di = nullptr;
  ASSERT_EQ(cudaMalloc(&di, sizeof(int32_t) * idx.size()), cudaSuccess);
  cudaMemcpy(di, idx.data(), sizeof(int32_t) * idx.size(), cudaMemcpyHostToDevice);
  cuda::gather_rows(dx.get(), di, dy.get(), B, L, K, C, half(), nullptr);
  std::vector<float> want((size_t)B * K * C);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < K; ++i)
      for (int c = 0; c < C; ++c) want[((size_t)b * K + i) * C + c] = x[((size_t)b * L + idx[b * K + i]) * C + c];
  EXPECT_TRUE(close(dy.download(), want, 0, 0));
  // A constant table (graph::gather_rows_early's anchors): image b reads rows of the same [L, C].
  cuda::gather_rows(dx.get(), di, dy.get(), B, L, K, C, half(), nullptr, true);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < K; ++i)
      for (int c = 0; c < C; ++c) want[((size_t)b * K + i) * C + c] = x[(size_t)idx[b * K + i] * C + c];
  EXPECT_TRUE(close(dy.download(), want, 0, 0)) << "broadcast table";
  cudaFree(di);

  // box_refine, including saturated references (0, 1 and beyond) where the clamp matters.
  std::vector<float> ref = quantize(random_vec(400, 0.f, 1.f, 14), half());
  ref[0] = 0.f;
  ref[1] = 1.f;
  ref[2] = 0.99999f;
  ref[3] = 1.5f;
  auto delta = quantize(random_vec(400, -3, 3, 15), half());
  ref = quantize(ref, half());
  DevBuf dd(delta, half()), dr(ref, half()), dout(400, half());
  cuda::box_refine(dd.get(), dr.get(), dout.get(), 400, half(), nullptr);
  std::vector<float> wb(400);
  for (int i = 0; i < 400; ++i) {
    double r = std::min(std::max((double)ref[i], 0.0), 1.0);
    double inv = std::log(std::max(r, 1e-5) / std::max(1 - r, 1e-5));
    wb[i] = static_cast<float>(1 / (1 + std::exp(-(delta[i] + inv))));
  }
  EXPECT_TRUE(close(dout.download(), wb, half() ? 2e-3f : 1e-6f, 0));
}

// NHWC pooling as the IR defines it: padding never wins the max, avg divides by the in-bounds count.
std::vector<float> pool_ref(const std::vector<float>& x, int B, int H, int W, int C, int Ho, int Wo, int k, int st,
                            int pad, bool is_max) {
  std::vector<float> y((size_t)B * Ho * Wo * C);
  for (int b = 0; b < B; ++b)
    for (int oy = 0; oy < Ho; ++oy)
      for (int ox = 0; ox < Wo; ++ox)
        for (int c = 0; c < C; ++c) {
          double acc = is_max ? -INFINITY : 0;
          int cnt = 0;
          for (int iy = oy * st - pad; iy < oy * st - pad + k; ++iy)
            for (int ix = ox * st - pad; ix < ox * st - pad + k; ++ix) {
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              const double v = x[(((size_t)b * H + iy) * W + ix) * C + c];
              acc = is_max ? std::max(acc, v) : acc + v;
              ++cnt;
            }
          y[(((size_t)b * Ho + oy) * Wo + ox) * C + c] = static_cast<float>(is_max ? acc : acc / cnt);
        }
  return y;
}

TEST_P(CudaKernel, PoolingMatchesHostLoopOnVectorAndScalarPaths) {
  // C = 24 takes the 16-byte kernels (v4) in fp32 and fp16, C = 6 the scalar ones. Max: 3x3/2
  // pad 1 (the stem's) and 2x2/2; avg: 2x2/2 over odd sizes with partial last windows (ceil mode).
  for (int C : {24, 6}) {
    SCOPED_TRACE("C " + std::to_string(C));
    const int B = 3, H = 9, W = 7;
    auto x = quantize(random_vec((size_t)B * H * W * C, -4, 4, 30 + C), half());
    DevBuf dx(x, half()), dmax((size_t)B * 5 * 4 * C, half()), davg((size_t)B * 5 * 4 * C, half());
    cuda::max_pool2d(dx.get(), dmax.get(), B, H, W, C, 5, 4, 3, 2, 1, half(), nullptr);
    EXPECT_TRUE(close(dmax.download(), pool_ref(x, B, H, W, C, 5, 4, 3, 2, 1, true), 0, 0)) << "max";
    cuda::avg_pool2d(dx.get(), davg.get(), B, H, W, C, 5, 4, 2, 2, 0, half(), nullptr);
    EXPECT_TRUE(close(davg.download(), pool_ref(x, B, H, W, C, 5, 4, 2, 2, 0, false), atol(), rtol())) << "avg";
    // 3x3/2/1 has its own fixed-window kernel; 2x2/2 keeps the general one on the max path.
    cuda::max_pool2d(dx.get(), dmax.get(), B, H, W, C, 4, 3, 2, 2, 0, half(), nullptr);
    auto got = dmax.download();
    got.resize((size_t)B * 4 * 3 * C);
    EXPECT_TRUE(close(got, pool_ref(x, B, H, W, C, 4, 3, 2, 2, 0, true), 0, 0)) << "max 2x2";
  }
}

TEST_P(CudaKernel, MaxPoolQuadMatchesHostLoop) {
  // The 3x3/2/1 max-pool at 2x2 outputs per thread: even and odd output sides (a last quad half
  // outside), inputs of odd and even sides, 1x1; C = 24 and 64 (the stem's) take it, C = 6 falls
  // back to the scalar kernel. Values on a coarse grid, so that many windows tie.
  struct Case { int B, H, W, C; };
  for (const Case cs : {Case{3, 9, 7, 24}, Case{2, 10, 12, 64}, Case{1, 1, 1, 24}, Case{2, 5, 2, 24},
                        Case{1, 40, 40, 64}, Case{2, 9, 7, 6}}) {
    const int Ho = (cs.H + 2 - 3) / 2 + 1, Wo = (cs.W + 2 - 3) / 2 + 1;
    SCOPED_TRACE("B " + std::to_string(cs.B) + " " + std::to_string(cs.H) + "x" + std::to_string(cs.W) + " C " +
                 std::to_string(cs.C) + " -> " + std::to_string(Ho) + "x" + std::to_string(Wo));
    auto x = random_vec((size_t)cs.B * cs.H * cs.W * cs.C, -4, 4, 60 + cs.H + cs.C);
    for (auto& v : x) v = std::round(v * 2.f) / 2.f + 0.f;
    x = quantize(x, half());
    DevBuf dx(x, half()), dq((size_t)cs.B * Ho * Wo * cs.C, half()), d1((size_t)cs.B * Ho * Wo * cs.C, half());
    cuda::max_pool2d(dx.get(), dq.get(), cs.B, cs.H, cs.W, cs.C, Ho, Wo, 3, 2, 1, half(), nullptr, true);
    cuda::max_pool2d(dx.get(), d1.get(), cs.B, cs.H, cs.W, cs.C, Ho, Wo, 3, 2, 1, half(), nullptr);
    const auto want = pool_ref(x, cs.B, cs.H, cs.W, cs.C, Ho, Wo, 3, 2, 1, true);
    EXPECT_TRUE(close(dq.download(), want, 0, 0)) << "quad";
    EXPECT_EQ(dq.download(), d1.download()) << "quad against one output per thread";
  }
}

TEST_P(CudaKernel, UpsampleAndConcatCopyExactlyOnVectorAndScalarPaths) {
  const int B = 2, H = 5, W = 3;
  for (int C : {16, 5}) {  // 16-byte kernel, scalar kernel
    SCOPED_TRACE("upsample C " + std::to_string(C));
    auto x = quantize(random_vec((size_t)B * H * W * C, -4, 4, 40 + C), half());
    DevBuf dx(x, half()), dy((size_t)B * H * W * C * 4, half());
    cuda::upsample_nearest2x(dx.get(), dy.get(), B, H, W, C, half(), nullptr);
    std::vector<float> want((size_t)B * H * W * C * 4);
    for (int b = 0; b < B; ++b)
      for (int oy = 0; oy < 2 * H; ++oy)
        for (int ox = 0; ox < 2 * W; ++ox)
          for (int c = 0; c < C; ++c)
            want[(((size_t)b * 2 * H + oy) * 2 * W + ox) * C + c] = x[(((size_t)b * H + oy / 2) * W + ox / 2) * C + c];
    EXPECT_TRUE(close(dy.download(), want, 0, 0));
  }
  // Channel concat of parts whose widths (and so column offsets) are multiples of 8 (16-byte
  // copies), then parts of widths 3 and 13 (offset 3: the scalar copy for the second part).
  for (const std::vector<int>& widths : {std::vector<int>{16, 8, 24}, std::vector<int>{3, 13}}) {
    const int64_t outer = 37;
    int ld = 0;
    for (int w : widths) ld += w;
    SCOPED_TRACE("concat ld " + std::to_string(ld));
    DevBuf dy((size_t)outer * ld, half());
    std::vector<float> want((size_t)outer * ld);
    int off = 0;
    std::vector<std::unique_ptr<DevBuf>> parts;
    for (size_t p = 0; p < widths.size(); ++p) {
      const int w = widths[p];
      auto x = quantize(random_vec((size_t)outer * w, -4, 4, 50 + (uint32_t)p), half());
      parts.push_back(std::make_unique<DevBuf>(x, half()));
      cuda::concat_part(parts.back()->get(), dy.get(), outer, w, ld, off, half(), nullptr);
      for (int64_t o = 0; o < outer; ++o)
        for (int j = 0; j < w; ++j) want[o * ld + off + j] = x[o * w + j];
      off += w;
    }
    EXPECT_TRUE(close(dy.download(), want, 0, 0));
  }
}

// Runs the one-launch concat of `widths` (element columns, in the order given at `offsets`)
// over y[outer, ld] holding `init`, and checks it against a host copy: covered columns hold
// their part, the others keep `init`. src_off shifts each part's pointer by that many elements.
void check_concat(const std::vector<int64_t>& widths, const std::vector<int64_t>& offsets, int64_t outer, int64_t ld,
                  bool half, const std::vector<int>& src_off, uint32_t seed) {
  auto want = quantize(random_vec((size_t)(outer * ld), -4, 4, seed), half);
  DevBuf dy(want, half);
  std::vector<std::unique_ptr<DevBuf>> bufs;
  std::vector<cuda::ConcatPart> parts;
  for (size_t p = 0; p < widths.size(); ++p) {
    const int64_t w = widths[p], off = offsets[p];
    auto x = quantize(random_vec((size_t)(outer * w), -4, 4, seed + 1 + (uint32_t)p), half);
    std::vector<float> pad(src_off[p], 0.f);
    pad.insert(pad.end(), x.begin(), x.end());
    bufs.push_back(std::make_unique<DevBuf>(pad, half));
    parts.push_back({static_cast<const char*>(bufs.back()->get()) + src_off[p] * (half ? 2 : 4), w, off});
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < w; ++j) want[o * ld + off + j] = x[o * w + j];
  }
  cuda::concat(parts.data(), (int)parts.size(), dy.get(), outer, ld, half, nullptr);
  EXPECT_TRUE(close(dy.download(), want, 0, 0));
}

TEST_P(CudaKernel, MultiPartConcatCopiesEveryPartExactlyOnce) {
  const std::vector<int> aligned(10, 0);
  {
    SCOPED_TRACE("channels 256 + 256 (16-byte path)");
    check_concat({256, 256}, {0, 256}, 100, 512, half(), aligned, 100);
  }
  {
    // The encoder's row concat of the three levels at batch 2: outer = B, inner = rows * 256.
    SCOPED_TRACE("rows 6400 + 1600 + 400 of 256, batch 2 (16-byte path)");
    check_concat({6400 * 256, 1600 * 256, 400 * 256}, {0, 6400 * 256, 8000 * 256}, 2, 8400 * 256, half(), aligned,
                 110);
  }
  {
    SCOPED_TRACE("widths 3 + 5 + 7 given out of order (scalar path)");
    check_concat({7, 3, 5}, {8, 0, 3}, 37, 15, half(), aligned, 120);
  }
  {
    SCOPED_TRACE("aligned widths, one source one element off 16 bytes (scalar path)");
    check_concat({16, 8, 24}, {0, 16, 24}, 29, 48, half(), {0, 1, 0}, 130);
  }
  {
    SCOPED_TRACE("columns 8..16 and 40..48 of 48 left alone (16-byte path)");
    check_concat({8, 24}, {0, 16}, 13, 48, half(), aligned, 140);
  }
  {
    SCOPED_TRACE("10 parts of width 4: more than one launch takes");
    std::vector<int64_t> w(10, 4), off(10);
    for (int p = 0; p < 10; ++p) off[p] = 4 * p;
    check_concat(w, off, 11, 40, half(), aligned, 150);
  }
  {
    SCOPED_TRACE("an empty part among three");
    check_concat({8, 0, 8}, {0, 8, 8}, 7, 16, half(), aligned, 160);
  }
  cuda::ConcatPart bad[2] = {{nullptr, 8, 0}, {nullptr, 8, 4}};
  EXPECT_THROW(cuda::concat(bad, 2, nullptr, 4, 16, half(), nullptr), Error) << "overlapping parts";
  bad[1].offset = 12;
  EXPECT_THROW(cuda::concat(bad, 2, nullptr, 4, 16, half(), nullptr), Error) << "part past ld";
}

TEST_P(CudaKernel, AddBroadcastAndMulRowsMatchHostLoop) {
  // add with b broadcast over the batch (b_numel divides n) and with full b; mul_rows with C = 32
  // (16-byte kernels) and C = 6 (scalar).
  const int64_t n = 3 * 40 * 32;
  auto a = quantize(random_vec(n, -3, 3, 60), half()), b = quantize(random_vec(n, -3, 3, 61), half());
  for (int64_t bn : {n, int64_t{40 * 32}}) {
    SCOPED_TRACE("add b_numel " + std::to_string(bn));
    DevBuf da(a, half()), db(std::vector<float>(b.begin(), b.begin() + bn), half()), dy(n, half());
    cuda::add_act(da.get(), db.get(), bn, dy.get(), n, graph::Act::sigmoid, half(), nullptr);
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<float>(1 / (1 + std::exp(-((double)a[i] + b[i % bn]))));
    EXPECT_TRUE(close(dy.download(), want, half() ? 2e-3f : 1e-6f, 0));
  }
  for (int C : {32, 6}) {
    SCOPED_TRACE("mul_rows C " + std::to_string(C));
    const int B = 3, L = 17;
    auto x = quantize(random_vec((size_t)B * L * C, -3, 3, 62 + C), half());
    auto m = quantize(random_vec(L, 0, 1, 63), half());
    DevBuf dx(x, half()), dm(m, half()), dy((size_t)B * L * C, half());
    cuda::mul_rows(dx.get(), dm.get(), dy.get(), (int64_t)B * L, L, C, half(), nullptr);
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * m[(i / C) % L];
    EXPECT_TRUE(close(dy.download(), want, atol(), rtol()));
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaKernel, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "fp16" : "fp32"; });

}  // namespace
}  // namespace detforge::test
