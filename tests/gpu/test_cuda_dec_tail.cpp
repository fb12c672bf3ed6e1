// The dec_tail kernel (kernels/dec_tail.cu) stage by stage against host loops of the ops it
// replaces, each fed the kernel's own stored input of that stage (so a wrong stage is named, not
// smeared over the ones after it), at the decoder's shapes (256 wide, fc 1024, query_pos 512),
// 1 to 600 rows, with and without the next layer's query_pos_head; launched twice (the second
// must store the same bits); the shapes it refuses; and the r18vd engine with the tails on
// (DETFORGE_CUDA_DEC_TAIL=1) against off, at batch 1 and, above the row limit, batch 2.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/dec_tail.h"
#include "detforge/types.h"
#include "gpu_test_util.h"
#include "host_ref.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

using graph::Act;
using V = std::vector<float>;

V q(const V& v) { return quantize(v, true); }
V rnd(size_t n, float lo, float hi, uint32_t seed) { return q(random_vec(n, lo, hi, seed)); }

// Per-stage times of the launch in `a`: the cudaEvent time of 200 launches, and from the
// %globaltimer stamps of the last launch per stage the median and largest over CTAs of its work
// (barrier passed to work done) and of its cluster barrier wait. No speed assertion (benchmarks
// decide speed); the stamps must be ordered and a timed launch must store what the first did.
void stage_times(cuda::DecTailArgs a, const std::vector<std::vector<float>>& want,
                 const std::function<std::vector<std::vector<float>>()>& outputs) {
  const int n_ev = cuda::kDecTailStamps, ctas = cuda::dec_tail_ctas(a.rows);
  unsigned long long* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(unsigned long long) * ctas * n_ev), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, sizeof(unsigned long long) * ctas * n_ev), cudaSuccess);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const char* names[] = {"output_proj", "fc1 (+LN)", "fc2", "bbox0 (+LN)", "bbox1", "box step", "qpos"};
  a.stamps = nullptr;
  for (int i = 0; i < 10; ++i) cuda::dec_tail(a, nullptr);
  cudaEventRecord(e0);
  for (int i = 0; i < 200; ++i) cuda::dec_tail(a, nullptr);
  cudaEventRecord(e1);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  a.stamps = d;
  cuda::dec_tail(a, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned long long> h(size_t(ctas) * n_ev);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * 8, cudaMemcpyDeviceToHost), cudaSuccess);
  std::printf("dec_tail rows %d, %d CTAs: %.2f us per launch (events, 200 launches)\n", a.rows, ctas, ms * 1e3 / 200);
  // Event k of CTA c; stage s: work from event 2s (start or barrier passed) to 2s + 1 (done),
  // wait from 2s + 1 to 2s + 2. The box step's done is event 11, the qpos stage's 12 and 13.
  auto ev = [&](int c, int k) { return double(h[size_t(c) * n_ev + k]); };
  auto median = [&](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double first = ev(0, 0), last = 0;
  for (int c = 0; c < ctas; ++c) {
    first = std::min(first, ev(c, 0));
    last = std::max(last, ev(c, a.wq1 ? 13 : 11));
  }
  std::printf("  first CTA start to last CTA done: %.2f us\n", (last - first) * 1e-3);
  const int stages = a.wq1 ? 7 : 6;
  for (int st = 0; st < stages; ++st) {
    const int from = st < 6 ? 2 * st : 12, done = st < 5 ? 2 * st + 1 : st == 5 ? 11 : 13;
    const int passed = st < 5 ? 2 * st + 2 : st == 5 && a.wq1 ? 12 : -1;
    std::vector<double> work, wait;
    for (int c = 0; c < ctas; ++c) {
      EXPECT_GE(ev(c, done), ev(c, from)) << "cta " << c << " stage " << st;
      work.push_back((ev(c, done) - ev(c, from)) * 1e-3);
      if (passed >= 0) wait.push_back((ev(c, passed) - ev(c, done)) * 1e-3);
    }
    std::printf("  %-12s work median %6.2f us max %6.2f", names[st], median(work),
                *std::max_element(work.begin(), work.end()));
    if (!wait.empty())
      std::printf("  barrier wait median %6.2f max %6.2f", median(wait), *std::max_element(wait.begin(), wait.end()));
    std::printf("\n");
  }
  const auto got = outputs();
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], want[k]) << "output " << k << " after the timed launches";
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(d);
}

void check(int rows, bool next, bool timing = false) {
  SCOPED_TRACE("rows " + std::to_string(rows) + (next ? " with" : " without") + " the next query_pos_head");
  DETFORGE_REQUIRE_GPU();
  const int D = 256, F = 1024, P = 512;
  uint32_t seed = static_cast<uint32_t>(rows * 13 + next);
  auto w = [&](int n, int k) { return rnd(size_t(n) * k, -1.5f / std::sqrt(float(k)), 1.5f / std::sqrt(float(k)), ++seed); };
  auto b = [&](int n) { return rnd(n, -0.3f, 0.3f, ++seed); };
  const V x = rnd(size_t(rows) * D, -1, 1, ++seed), h0 = rnd(size_t(rows) * D, -1, 1, ++seed);
  V ref = rnd(size_t(rows) * 4, 0.f, 1.f, ++seed);
  ref[0] = 0.f;  // the clamps of inverse_sigmoid
  if (ref.size() > 5) ref[5] = 1.f;
  const V wo = w(D, D), bo = b(D), g1 = rnd(D, 0.5f, 1.5f, ++seed), e1 = b(D), wf1 = w(F, D), bf1 = b(F), wf2 = w(D, F),
          bf2 = b(D), g2 = rnd(D, 0.5f, 1.5f, ++seed), e2 = b(D), wb0 = w(D, D), bb0 = b(D), wb1 = w(D, D), bb1 = b(D),
          wb2 = w(4, D), bb2 = b(4), wq0 = rnd(size_t(P) * 4, -1, 1, ++seed), bq0 = b(P), wq1 = w(D, P), bq1 = b(D);
  const bool H = true;
  DevBuf dx(x, H), dh0(h0, H), dref(ref, H), dwo(wo, H), dbo(bo, H), dg1(g1, H), de1(e1, H), dwf1(wf1, H), dbf1(bf1, H),
      dwf2(wf2, H), dbf2(bf2, H), dg2(g2, H), de2(e2, H), dwb0(wb0, H), dbb0(bb0, H), dwb1(wb1, H), dbb1(bb1, H),
      dwb2(wb2, H), dbb2(bb2, H), dwq0(wq0, H), dbq0(bq0, H), dwq1(wq1, H), dbq1(bq1, H);
  const size_t RD = size_t(rows) * D;
  DevBuf y1(RD, H), h1(RD, H), f(size_t(rows) * F, H), y2(RD, H), h2(RD, H), o0(RD, H), o1(RD, H), box(size_t(rows) * 4, H),
      q1(size_t(rows) * P, H), qpos(RD, H), qk(RD, H);

  cuda::DecTailArgs a;
  a.rows = rows;
  auto gemm = [&](cuda::DecTailGemm& g, const DevBuf& in, int K, const DevBuf& wt, const DevBuf& bias, int N, bool relu,
                  DevBuf& y) {
    g.a = in.get();
    g.K = K;
    g.w = wt.get();
    g.bias = bias.get();
    g.N = N;
    g.relu = relu;
    g.y = y.get();
  };
  auto ln = [](cuda::DecTailGemm& g, const DevBuf& gamma, const DevBuf& beta, DevBuf& out) {
    g.ln_g = gamma.get();
    g.ln_b = beta.get();
    g.eps = 1e-5f;
    g.ln_out = out.get();
  };
  gemm(a.g[0], dx, D, dwo, dbo, D, false, y1);
  a.g[0].res = dh0.get();
  gemm(a.g[1], y1, D, dwf1, dbf1, F, true, f);
  ln(a.g[1], dg1, de1, h1);
  gemm(a.g[2], f, F, dwf2, dbf2, D, false, y2);
  a.g[2].res = h1.get();
  gemm(a.g[3], y2, D, dwb0, dbb0, D, true, o0);
  ln(a.g[3], dg2, de2, h2);
  gemm(a.g[4], o0, D, dwb1, dbb1, D, true, o1);
  a.w3 = dwb2.get();
  a.b3 = dbb2.get();
  a.ref_in = dref.get();
  a.ref_out = box.get();
  if (next) {
    a.wq1 = dwq0.get();
    a.bq1 = dbq0.get();
    a.P = P;
    a.q1 = q1.get();
    gemm(a.gq, q1, P, dwq1, dbq1, D, false, qpos);
    a.gq.add2 = h2.get();
    a.gq.y2 = qk.get();
  }
  ASSERT_STREQ(cuda::dec_tail_unsupported(a), "");
  std::vector<V> first;
  auto outputs = [&] {
    std::vector<V> got = {y1.download(), h1.download(), f.download(), y2.download(), h2.download(), o0.download(),
                          o1.download(), box.download()};
    if (next) got.insert(got.end(), {q1.download(), qpos.download(), qk.download()});
    return got;
  };
  for (int launch = 0; launch < 2; ++launch) {
    cuda::dec_tail(a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<V> got = outputs();
    if (launch == 0) {
      first = got;
    } else {
      for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], first[k]) << "output " << k << " of the second launch";
    }
  }
  if (timing) stage_times(a, first, outputs);
  // Stage by stage; each host op reads the kernel's stored input. One fp16 ulp of difference
  // (sums in another order, rounded at another point) is what the tolerances allow.
  const float at = 4e-3f, rt = 4e-3f;
  const V gy1 = first[0], gh1 = first[1], gf = first[2], gy2 = first[3], gh2 = first[4], go0 = first[5], go1 = first[6];
  EXPECT_TRUE(close(gy1, q(ref::linear(x, rows, D, wo, D, bo, &h0, Act::none)), at, rt)) << "output_proj";
  EXPECT_TRUE(close(gh1, q(ref::layer_norm(gy1, rows, D, g1, e1, 1e-5f)), at, rt)) << "LayerNorm 1";
  EXPECT_TRUE(close(gf, q(ref::linear(gh1, rows, D, wf1, F, bf1, nullptr, Act::relu)), at, rt)) << "fc1";
  EXPECT_TRUE(close(gy2, q(ref::linear(gf, rows, F, wf2, D, bf2, &gh1, Act::none)), at, rt)) << "fc2";
  EXPECT_TRUE(close(gh2, q(ref::layer_norm(gy2, rows, D, g2, e2, 1e-5f)), at, rt)) << "LayerNorm 2";
  EXPECT_TRUE(close(go0, q(ref::linear(gh2, rows, D, wb0, D, bb0, nullptr, Act::relu)), at, rt)) << "bbox layer 0";
  EXPECT_TRUE(close(go1, q(ref::linear(go0, rows, D, wb1, D, bb1, nullptr, Act::relu)), at, rt)) << "bbox layer 1";
  const V delta = q(ref::linear(go1, rows, D, wb2, 4, bb2, nullptr, Act::none));
  V want_box(size_t(rows) * 4);
  for (size_t i = 0; i < want_box.size(); ++i) {
    const double r = std::min(std::max(double(ref[i]), 0.0), 1.0);
    want_box[i] = float(1.0 / (1.0 + std::exp(-(delta[i] + std::log(std::max(r, 1e-5) / std::max(1.0 - r, 1e-5))))));
  }
  // As the box_step test: one ulp of delta moves the box by at most a quarter of it.
  EXPECT_TRUE(close(first[7], q(want_box), 2e-3f, 2e-3f)) << "refined boxes";
  if (!next) return;
  EXPECT_TRUE(close(first[8], q(ref::linear(first[7], rows, 4, wq0, P, bq0, nullptr, Act::relu)), at, rt)) << "qpos 0";
  const V gq = first[9];
  EXPECT_TRUE(close(gq, q(ref::linear(first[8], rows, P, wq1, D, bq1, nullptr, Act::none)), at, rt)) << "qpos 1";
  V sum(RD);
  for (size_t i = 0; i < RD; ++i) sum[i] = gh2[i] + gq[i];
  EXPECT_TRUE(close(first[10], q(sum), 0.f, 0.f)) << "self_attn.pos add";
}

TEST(CudaDecTail, MatchesTheUnfusedOpsStageByStage) {
  for (int rows : {1, 37, 300, 600}) check(rows, true);
  check(300, false);
}

// Prints where the launch's time goes at the decoder's batch-1 and batch-2 shapes (no speed
// assertion: benchmarks decide speed); asserts the stamps are ordered and that the timed launches
// store what the first launch did.
TEST(CudaDecTail, StageTimesKeepTheOutputs) {
  check(300, true, true);
  check(600, true, true);
}

TEST(CudaDecTailRules, RefusesWhatItCannotRun) {
  auto* p = reinterpret_cast<void*>(uintptr_t{0x10000});
  auto* odd = reinterpret_cast<void*>(uintptr_t{0x10002});
  cuda::DecTailArgs a;
  a.rows = 300;
  for (auto& g : a.g) {
    g.a = g.w = g.bias = p;
    g.y = p;
    g.K = 256;
    g.N = 256;
  }
  a.w3 = a.b3 = a.ref_in = p;
  a.ref_out = p;
  EXPECT_STREQ(cuda::dec_tail_unsupported(a), "");
  auto refused = [&](auto change) {
    cuda::DecTailArgs b = a;
    change(b);
    return *cuda::dec_tail_unsupported(b) != '\0';
  };
  EXPECT_TRUE(refused([](cuda::DecTailArgs& b) { b.rows = 0; }));
  EXPECT_TRUE(refused([](cuda::DecTailArgs& b) {  // N 1024 takes K <= 256
    b.g[1].N = 1024;
    b.g[1].K = 512;
  }));
  EXPECT_TRUE(refused([](cuda::DecTailArgs& b) { b.g[1].N = 512; }));
  EXPECT_TRUE(refused([](cuda::DecTailArgs& b) { b.g[2].K = 1088; }));  // over 1024
  EXPECT_TRUE(refused([](cuda::DecTailArgs& b) { b.g[2].K = 96; }));    // not a multiple of 64
  EXPECT_TRUE(refused([](cuda::DecTailArgs& b) { b.g[1].N = 1000; }));
  EXPECT_FALSE(refused([](cuda::DecTailArgs& b) { b.g[1].N = 1024; }));
  EXPECT_TRUE(refused([&](cuda::DecTailArgs& b) {  // a LayerNorm stage is 256 wide
    b.g[1].ln_g = b.g[1].ln_b = p;
    b.g[1].K = 512;
  }));
  EXPECT_TRUE(refused([&](cuda::DecTailArgs& b) { b.g[0].a = odd; }));
  EXPECT_TRUE(refused([&](cuda::DecTailArgs& b) { b.wq1 = p; }));  // no P, bias or output
  EXPECT_THROW(cuda::dec_tail(cuda::DecTailArgs{}, nullptr), Error);
}

// r18vd fp16: three tails (two with the next layer's query_pos_head), run as dec_tail at batch 1
// (300 query rows, the default row limit) and as their separate kernels at batch 2; at both the
// outputs are those of the engine without tails within the fp16 parity tolerance, and the
// captured graph equals the eager run.
TEST(CudaDecTailEngine, R18vdFp16OnEqualsOff) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 29);
  std::vector<HostTensor> out[2][2];
  for (int k = 0; k < 2; ++k) {
    EngineOptions eo;
    eo.max_batch = 2;
    eo.precision = "fp16";
    setenv("DETFORGE_CUDA_DEC_TAIL", k == 0 ? "0" : "1", 1);
    auto eng = make_cuda_engine(lb.graph, eo);
    unsetenv("DETFORGE_CUDA_DEC_TAIL");
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->dec_tails(), k == 0 ? 0 : 3);
    EXPECT_EQ(e->box_steps(), k == 0 ? 3 : 0);
    for (int b : {1, 2}) {
      EXPECT_TRUE(e->graph_captured(b));
      EXPECT_EQ(e->graph_check(b), "equal") << "batch " << b;
      out[k][b - 1] = e->run(px.data(), b);
    }
    std::printf("dec_tail %s: %d tails\n", k ? "on" : "off", e->dec_tails());
  }
  expect_r18vd_outputs_agree(out[0][0], out[1][0], 1, 0.01, "fp16 dec_tail batch 1");
  expect_r18vd_outputs_agree(out[0][1], out[1][1], 2, 0.01, "fp16 dec_tail off at batch 2");
}

}  // namespace
}  // namespace detforge::test
