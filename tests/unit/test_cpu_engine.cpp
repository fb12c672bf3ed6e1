// The CPU executor: memory plan (reuse without clobbering), batch handling, check_finite,
// refusal of unfolded batch_norm, and the planner itself.
#include <algorithm>

#include "graph/memory_plan.h"
#include "test_cpu_common.h"

namespace detforge::cputest {
namespace {

// A small mixed model: conv (s2) -> maxpool -> conv(+res) -> reshape to tokens -> linear(gelu)
// -> layer_norm(+res) -> attention -> linear -> output, plus a second output from the feature map.
Net mixed_net(std::mt19937& rng) {
  Net n;
  TensorId x = n.input("pixels", {12, 10, 3});
  TensorId c1 = n.act("c1", {6, 5, 8}), p1 = n.act("p1", {3, 3, 8}), c2 = n.act("c2", {3, 3, 8});
  n.op(OpKind::conv2d, "stem", {x, n.cst("w1", {8, 3, 3, 3}, rnd(216, rng, -.4f, .4f)), n.cst("b1", {8}, rnd(8, rng))}, {c1},
       {{"stride", 2}, {"pad", 1}, {"act", "relu"}});
  n.op(OpKind::max_pool2d, "pool", {c1}, {p1}, {{"kernel", 3}, {"stride", 2}, {"pad", 1}});
  n.op(OpKind::conv2d, "block", {p1, n.cst("w2", {8, 8, 3, 3}, rnd(576, rng, -.2f, .2f)), n.cst("b2", {8}, rnd(8, rng)), p1}, {c2},
       {{"stride", 1}, {"pad", 1}, {"act", "silu"}});
  TensorId tok = n.act("tok", {9, 8}), f = n.act("f", {9, 16}), ln = n.act("ln", {9, 16}), at = n.act("at", {9, 16}),
           o = n.act("o", {9, 4});
  n.op(OpKind::reshape, "flatten", {c2}, {tok}, {{"shape", {9, 8}}});
  n.op(OpKind::linear, "fc1", {tok, n.cst("wf", {16, 8}, rnd(128, rng)), n.cst("bf", {16}, rnd(16, rng))}, {f}, {{"act", "gelu"}});
  n.op(OpKind::layer_norm, "ln", {f, n.cst("g", {16}, rnd(16, rng, .5f, 1.5f)), n.cst("be", {16}, rnd(16, rng)), f}, {ln},
       {{"eps", 1e-5}});
  n.op(OpKind::attention, "attn", {ln, ln, f}, {at}, {{"heads", 2}, {"scale", 0.35}});
  n.op(OpKind::linear, "head", {at, n.cst("wh", {4, 16}, rnd(64, rng)), n.cst("bh", {4}, rnd(4, rng))}, {o});
  n.output(o);
  n.output(c2);
  return n;
}

TEST(CpuEngine, BatchOfThreeEqualsThreeSingleRuns) {
  std::mt19937 rng(21);
  Net n = mixed_net(rng);
  const int per = 12 * 10 * 3;
  auto pix = rnd(size_t(3) * per, rng);
  EngineOptions opt;
  opt.max_batch = 3;
  cpu::CpuEngine e(n.g, opt);
  auto all = e.run(pix.data(), 3);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].shape, (std::vector<int64_t>{3, 9, 4}));
  EXPECT_EQ(all[1].shape, (std::vector<int64_t>{3, 3, 3, 8}));
  for (int b = 0; b < 3; ++b) {
    auto one = e.run(pix.data() + size_t(b) * per, 1);
    for (size_t k = 0; k < one.size(); ++k) {
      const size_t m = one[k].data.size();
      std::vector<double> want(one[k].data.begin(), one[k].data.end());
      std::vector<float> got(all[k].data.begin() + b * m, all[k].data.begin() + (b + 1) * m);
      expect_close(got, want, 0, 0, "image " + std::to_string(b) + " output " + std::to_string(k));
    }
  }
  EXPECT_THROW(e.run(pix.data(), 4), Error);
  EXPECT_THROW(e.run(pix.data(), 0), Error);
}

TEST(CpuEngine, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(22);
  Net n = mixed_net(rng);
  auto pix = rnd(12 * 10 * 3, rng);
  EngineOptions one;
  one.threads = 1;
  auto a = cpu::CpuEngine(n.g, one).run(pix.data(), 1);
  auto b = cpu::CpuEngine(n.g, {}).run(pix.data(), 1);
  for (size_t k = 0; k < a.size(); ++k)
    expect_close(b[k].data, std::vector<double>(a[k].data.begin(), a[k].data.end()), 1e-6, 1e-6, "threads");
}

// A chain x -> a1 -> a2 -> ... where each step also reads x and the previous value: buffers of
// finished steps get reused, and a reference without reuse must agree bit for bit.
TEST(CpuEngine, ReusedBuffersDoNotClobberLiveValues) {
  const int L = 16, C = 32, steps = 12;
  std::mt19937 rng(23);
  Net n;
  TensorId x = n.input("x", {L, C});
  TensorId prev = x;
  std::vector<TensorId> keep;
  for (int i = 0; i < steps; ++i) {
    TensorId t = n.act("t" + std::to_string(i), {L, C});
    TensorId u = n.act("u" + std::to_string(i), {L, C});
    n.op(OpKind::add, "add" + std::to_string(i), {prev, x}, {t}, {{"act", i % 2 ? "silu" : "relu"}});
    n.op(OpKind::linear, "fc" + std::to_string(i), {t, n.cst("w" + std::to_string(i), {C, C}, rnd(C * C, rng, -.2f, .2f)),
                                                    n.cst("b" + std::to_string(i), {C}, rnd(C, rng)), prev}, {u});
    if (i == 3) keep.push_back(t);  // a value that must survive to the end
    prev = u;
  }
  n.output(prev);
  n.output(keep[0]);
  auto xs = rnd(size_t(L) * C, rng);
  cpu::CpuEngine e(n.g, {});
  EXPECT_LT(e.arena_bytes(), e.unshared_bytes() / 3) << "buffers should be shared along the chain";
  auto got = e.run(xs.data(), 1);
  // Reference: the same graph with every intermediate also a graph output, so nothing is reused.
  Net r = n;
  for (size_t i = 0; i < r.g.tensors.size(); ++i)
    if (!r.g.tensors[i].is_const && int(i) != x) r.g.outputs.push_back(TensorId(i));
  cpu::CpuEngine er(r.g, {});
  EXPECT_EQ(er.arena_bytes(), er.unshared_bytes());
  auto want = er.run(xs.data(), 1);
  for (int k = 0; k < 2; ++k)
    expect_close(got[k].data, std::vector<double>(want[k].data.begin(), want[k].data.end()), 0, 0, "output " + std::to_string(k));
  // Running twice gives the same answer (no state leaks between runs).
  auto again = e.run(xs.data(), 1);
  EXPECT_EQ(again[0].data, got[0].data);
}

TEST(CpuEngine, CheckFiniteNamesTheFirstOpThatMadeAnInf) {
  Net n;
  TensorId x = n.input("x", {2, 4});
  TensorId a = n.act("a", {2, 4}), b = n.act("b", {2, 4}), c = n.act("c", {2, 4});
  n.op(OpKind::add, "model.ok", {x, x}, {a});
  n.op(OpKind::linear, "model.decoder.layers.0.fc1", {a, n.cst("w", {4, 4}, std::vector<float>(16, 3e38f)), n.cst("b", {4}, {0, 0, 0, 0})}, {b});
  n.op(OpKind::add, "model.after", {b, a}, {c});
  n.output(c);
  std::vector<float> xs = {1, 2, 3, 4, 5, 6, 7, 8};
  EngineOptions opt;
  opt.check_finite = true;
  cpu::CpuEngine e(n.g, opt);
  e.run(xs.data(), 1);
  EXPECT_EQ(e.first_nonfinite_op(), "model.decoder.layers.0.fc1 (linear)");
  std::vector<float> zeros(8, 0.f);
  e.run(zeros.data(), 1);
  EXPECT_EQ(e.first_nonfinite_op(), "") << "reset on every run";
  cpu::CpuEngine off(n.g, {});
  off.run(xs.data(), 1);
  EXPECT_EQ(off.first_nonfinite_op(), "");
}

TEST(CpuEngine, RefusesUnfoldedBatchNorm) {
  Net n;
  TensorId x = n.input("x", {2, 2, 3});
  TensorId y = n.act("y", {2, 2, 3});
  std::vector<float> ones(3, 1.f);
  n.op(OpKind::batch_norm, "model.backbone.bn1", {x, n.cst("g", {3}, ones), n.cst("b", {3}, ones), n.cst("m", {3}, ones), n.cst("v", {3}, ones)},
       {y}, {{"eps", 1e-5}});
  n.output(y);
  try {
    make_cpu_engine(n.g, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "CPU backend cannot run op model.backbone.bn1 (batch_norm): run the fold_batch_norm pass first");
  }
}

TEST(CpuEngine, RefusesLowPrecisionAndMissingWeights) {
  std::mt19937 rng(24);
  Net n = mixed_net(rng);
  EngineOptions fp16;
  fp16.precision = "fp16";
  EXPECT_THROW(make_cpu_engine(n.g, fp16), Error);
  n.g.tensor(n.g.find("w2")).data.clear();  // as if the bundle's weights were not loaded
  try {
    make_cpu_engine(n.g, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w2"), std::string::npos) << e.what();
  }
}

TEST(CpuMemoryPlan, OverlappingLifetimesNeverShareBytes) {
  std::mt19937 rng(25);
  std::vector<graph::BufferRequest> reqs;
  for (int i = 0; i < 200; ++i) {
    graph::BufferRequest r;
    r.first = int(rng() % 100);
    r.last = r.first + int(rng() % 15);
    r.bytes = 1 + rng() % 5000;
    reqs.push_back(r);
  }
  auto plan = graph::plan_memory(reqs, 64);
  size_t sum = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % 64, 0u);
    EXPECT_LE(plan.offsets[i] + reqs[i].bytes, plan.total_bytes);
    sum += (reqs[i].bytes + 63) / 64 * 64;
    for (size_t j = 0; j < i; ++j) {
      const bool live_together = reqs[i].first <= reqs[j].last && reqs[j].first <= reqs[i].last;
      const bool overlap = plan.offsets[i] < plan.offsets[j] + reqs[j].bytes && plan.offsets[j] < plan.offsets[i] + reqs[i].bytes;
      EXPECT_FALSE(live_together && overlap) << i << " and " << j;
    }
  }
  EXPECT_LT(plan.total_bytes, sum / 2);
  // Peak of simultaneously live bytes is a lower bound; first-fit should stay near it.
  size_t peak = 0;
  for (int t = 0; t < 120; ++t) {
    size_t live = 0;
    for (const auto& r : reqs)
      if (r.first <= t && t <= r.last) live += (r.bytes + 63) / 64 * 64;
    peak = std::max(peak, live);
  }
  EXPECT_LE(plan.total_bytes, peak * 3 / 2);
}

}  // namespace
}  // namespace detforge::cputest
