// The CPU backend's small ops: topk_rows (ties), gather_rows, box_refine (clamp/eps), pools
// (avg ceil_mode on odd sizes, max with padding), upsample, concat (axis 0 and 2), add with a
// broadcast constant, mul_rows, activation; each against a scalar reference.
#include <algorithm>
#include <numeric>

#include "test_cpu_common.h"

namespace detforge::cputest {
namespace {

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(CpuTopkRows, TiesGoToTheLowerIndexAndGatherFollows) {
  const int L = 40, N = 5, K = 12, C = 3;
  std::mt19937 rng(1);
  auto scores = rnd(size_t(L) * N, rng, -5.f, 0.f);
  // Ties: rows 3, 17, 30 share the largest maximum; rows 5, 6, 25 tie lower down (in another column).
  for (int r : {3, 17, 30}) scores[r * N + 2] = 2.5f;
  for (int r : {25, 6, 5}) scores[r * N + (r % N)] = 1.0f;
  scores[11 * N + 4] = 1.5f;
  auto x = rnd(size_t(L) * C, rng);
  Net n;
  TensorId ts = n.input("scores", {L, N}), tx = n.input("x", {L, C});
  TensorId ti = n.act("idx", {K}, graph::DType::i32), tg = n.act("g", {K, C});
  n.op(OpKind::topk_rows, "query_select.topk", {ts}, {ti}, {{"k", K}});
  n.op(OpKind::gather_rows, "query_select.gather", {tx, ti}, {tg});
  n.output(ti);
  n.output(tg);
  auto out = run_graph(n.g, {scores, x});
  // Reference: stable sort of the row maxima, descending.
  std::vector<float> mx(L);
  for (int l = 0; l < L; ++l) mx[l] = *std::max_element(scores.begin() + l * N, scores.begin() + (l + 1) * N);
  std::vector<int> order(L);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return mx[a] > mx[b]; });
  ASSERT_EQ(out[0].shape, (std::vector<int64_t>{1, K}));
  for (int i = 0; i < K; ++i) EXPECT_EQ(int(out[0].data[i]), order[i]) << "rank " << i;
  EXPECT_EQ(int(out[0].data[0]), 3);
  EXPECT_EQ(int(out[0].data[1]), 17);
  EXPECT_EQ(int(out[0].data[2]), 30);
  EXPECT_EQ(int(out[0].data[3]), 11);
  EXPECT_EQ(int(out[0].data[4]), 5);
  EXPECT_EQ(int(out[0].data[5]), 6);
  EXPECT_EQ(int(out[0].data[6]), 25);
  std::vector<double> g;
  for (int i = 0; i < K; ++i)
    for (int c = 0; c < C; ++c) g.push_back(x[size_t(order[i]) * C + c]);
  expect_close(out[1].data, g, 0, 0, "gather_rows");
}

TEST(CpuTopkRows, KLargerThanRowsIsAnError) {
  Net n;
  TensorId ts = n.input("scores", {4, 2});
  TensorId ti = n.act("idx", {5}, graph::DType::i32);
  n.op(OpKind::topk_rows, "topk", {ts}, {ti}, {{"k", 5}});
  n.output(ti);
  EXPECT_THROW(cpu::CpuEngine(n.g, {}), Error);
}

TEST(CpuBoxRefine, ClampsLikeTransformers) {
  std::vector<float> ref = {0.f, 1.f, -0.5f, 1.5f, 0.3f, 0.999999f, 1e-7f, 0.5f};
  std::vector<float> delta = {0.1f, -0.2f, 0.3f, 0.f, -1.f, 2.f, 0.5f, -0.5f};
  Net n;
  TensorId td = n.input("delta", {2, 4}), tr = n.input("ref", {2, 4});
  TensorId ty = n.act("y", {2, 4});
  n.op(OpKind::box_refine, "decoder.bbox_embed.0", {td, tr}, {ty});
  n.output(ty);
  auto out = run_graph(n.g, {delta, ref});
  std::vector<double> want;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double x = std::clamp(double(ref[i]), 0.0, 1.0);
    const double inv = std::log(std::max(x, 1e-5) / std::max(1 - x, 1e-5));
    want.push_back(1 / (1 + std::exp(-(delta[i] + inv))));
  }
  expect_close(out[0].data, want, 1e-6, 1e-6, "box_refine");
  EXPECT_NEAR(out[0].data[0], 1 / (1 + std::exp(-(0.1 + std::log(1e-5)))), 1e-9);  // ref 0 -> log(1e-5)
}

TEST(CpuPool, AvgCeilModeOnOddSizes) {
  const int H = 7, W = 5, C = 3, Ho = 4, Wo = 3;
  std::mt19937 rng(2);
  auto x = rnd(size_t(H) * W * C, rng);
  Net n;
  TensorId tx = n.input("x", {H, W, C});
  TensorId ty = n.act("y", {Ho, Wo, C});
  n.op(OpKind::avg_pool2d, "short.pool", {tx}, {ty}, {{"kernel", 2}, {"stride", 2}, {"ceil_mode", true}});
  n.output(ty);
  auto out = run_graph(n.g, {x});
  std::vector<double> want;
  for (int oy = 0; oy < Ho; ++oy)
    for (int ox = 0; ox < Wo; ++ox)
      for (int c = 0; c < C; ++c) {
        double s = 0;
        int cnt = 0;
        for (int iy = 2 * oy; iy < std::min(2 * oy + 2, H); ++iy)
          for (int ix = 2 * ox; ix < std::min(2 * ox + 2, W); ++ix, ++cnt) s += x[(size_t(iy) * W + ix) * C + c];
        want.push_back(s / cnt);
      }
  expect_close(out[0].data, want, 1e-6, 1e-6, "avg_pool2d");
}

TEST(CpuPool, MaxWithPaddingNeverPicksThePad) {
  const int H = 6, W = 5, C = 4, Ho = 3, Wo = 3;
  std::mt19937 rng(4);
  auto x = rnd(size_t(H) * W * C, rng, -3.f, -1.f);  // all negative: a zero pad would win if counted
  Net n;
  TensorId tx = n.input("x", {H, W, C});
  TensorId ty = n.act("y", {Ho, Wo, C});
  n.op(OpKind::max_pool2d, "stem.pool", {tx}, {ty}, {{"kernel", 3}, {"stride", 2}, {"pad", 1}});
  n.output(ty);
  auto out = run_graph(n.g, {x});
  std::vector<double> want;
  for (int oy = 0; oy < Ho; ++oy)
    for (int ox = 0; ox < Wo; ++ox)
      for (int c = 0; c < C; ++c) {
        double m = -1e30;
        for (int iy = 2 * oy - 1; iy <= 2 * oy + 1; ++iy)
          for (int ix = 2 * ox - 1; ix <= 2 * ox + 1; ++ix)
            if (iy >= 0 && iy < H && ix >= 0 && ix < W) m = std::max(m, double(x[(size_t(iy) * W + ix) * C + c]));
        want.push_back(m);
      }
  expect_close(out[0].data, want, 0, 0, "max_pool2d");
}

TEST(CpuUpsample, Nearest2x) {
  const int H = 3, W = 2, C = 5;
  std::mt19937 rng(6);
  auto x = rnd(size_t(H) * W * C, rng);
  Net n;
  TensorId tx = n.input("x", {H, W, C});
  TensorId ty = n.act("y", {2 * H, 2 * W, C});
  n.op(OpKind::upsample_nearest2x, "up", {tx}, {ty});
  n.output(ty);
  auto out = run_graph(n.g, {x});
  std::vector<double> want;
  for (int y = 0; y < 2 * H; ++y)
    for (int xx = 0; xx < 2 * W; ++xx)
      for (int c = 0; c < C; ++c) want.push_back(x[(size_t(y / 2) * W + xx / 2) * C + c]);
  expect_close(out[0].data, want, 0, 0, "upsample");
}

TEST(CpuConcat, TokensAxis0AndChannelsAxis2) {
  std::mt19937 rng(8);
  const int batch = 2;
  auto a = rnd(size_t(batch) * 4 * 3, rng), b = rnd(size_t(batch) * 2 * 3, rng);
  auto p = rnd(size_t(batch) * 2 * 3 * 2, rng), q = rnd(size_t(batch) * 2 * 3 * 5, rng);
  Net n;
  TensorId ta = n.input("a", {4, 3}), tb = n.input("b", {2, 3}), tp = n.input("p", {2, 3, 2}), tq = n.input("q", {2, 3, 5});
  TensorId t0 = n.act("rows", {6, 3}), t2 = n.act("chans", {2, 3, 7});
  n.op(OpKind::concat, "memory", {ta, tb}, {t0}, {{"axis", 0}});
  n.op(OpKind::concat, "fpn.cat", {tp, tq}, {t2}, {{"axis", 2}});
  n.output(t0);
  n.output(t2);
  auto out = run_graph(n.g, {a, b, p, q}, batch);
  std::vector<double> w0, w2;
  for (int bi = 0; bi < batch; ++bi) {
    for (int i = 0; i < 12; ++i) w0.push_back(a[bi * 12 + i]);
    for (int i = 0; i < 6; ++i) w0.push_back(b[bi * 6 + i]);
    for (int pix = 0; pix < 6; ++pix) {
      for (int c = 0; c < 2; ++c) w2.push_back(p[(bi * 6 + pix) * 2 + c]);
      for (int c = 0; c < 5; ++c) w2.push_back(q[(bi * 6 + pix) * 5 + c]);
    }
  }
  expect_close(out[0].data, w0, 0, 0, "concat axis 0");
  expect_close(out[1].data, w2, 0, 0, "concat axis 2");
}

TEST(CpuConcat, LargeRowBlocksSplitIntoChunks) {
  std::mt19937 rng(12);
  auto a = rnd(size_t(2) * 300 * 100, rng), b = rnd(size_t(2) * 201 * 100, rng);
  Net n;
  TensorId ta = n.input("a", {300, 100}), tb = n.input("b", {201, 100});
  TensorId t = n.act("rows", {501, 100});
  n.op(OpKind::concat, "memory", {ta, tb}, {t}, {{"axis", 0}});
  n.output(t);
  auto out = run_graph(n.g, {a, b}, 2);
  std::vector<double> w;
  for (int bi = 0; bi < 2; ++bi) {
    w.insert(w.end(), a.begin() + bi * 30000, a.begin() + (bi + 1) * 30000);
    w.insert(w.end(), b.begin() + bi * 20100, b.begin() + (bi + 1) * 20100);
  }
  expect_close(out[0].data, w, 0, 0, "concat large axis 0");
}

TEST(CpuElementwise, AddBroadcastConstantMulRowsAndActivations) {
  const int L = 6, C = 10, batch = 3;
  std::mt19937 rng(10);
  auto x = rnd(size_t(batch) * L * C, rng, -4.f, 4.f);
  auto y = rnd(size_t(batch) * L * C, rng, -4.f, 4.f);
  auto k = rnd(size_t(L) * C, rng, -4.f, 4.f);
  auto m = std::vector<float>{1, 0, 1, 1, 0, 1};
  for (graph::Act act : {graph::Act::none, graph::Act::relu, graph::Act::silu, graph::Act::gelu, graph::Act::sigmoid}) {
    Net n;
    TensorId tx = n.input("x", {L, C}), ty = n.input("y", {L, C});
    TensorId a1 = n.act("a1", {L, C}), a2 = n.act("a2", {L, C}), a3 = n.act("a3", {L, C}), a4 = n.act("a4", {L, C});
    n.op(OpKind::add, "pos", {tx, n.cst("k", {L, C}, k)}, {a1}, {{"act", graph::act_name(act)}});
    n.op(OpKind::add, "sum", {tx, ty}, {a2}, {{"act", graph::act_name(act)}});
    n.op(OpKind::mul_rows, "mask", {tx, n.cst("m", {L}, m)}, {a3});
    n.op(OpKind::activation, "act", {ty}, {a4}, {{"act", graph::act_name(act)}});
    for (TensorId t : {a1, a2, a3, a4}) n.output(t);
    auto out = run_graph(n.g, {x, y}, batch);
    std::vector<double> w1, w2, w3, w4;
    for (int bi = 0; bi < batch; ++bi)
      for (int i = 0; i < L * C; ++i) {
        const size_t at = size_t(bi) * L * C + i;
        w1.push_back(act_ref(act, double(x[at] + k[i])));
        w2.push_back(act_ref(act, double(x[at] + y[at])));
        w3.push_back(double(x[at]) * m[i / C]);
        w4.push_back(act_ref(act, y[at]));
      }
    const std::string a = graph::act_name(act);
    expect_close(out[0].data, w1, 1e-6, 1e-6, "add const " + a);
    expect_close(out[1].data, w2, 1e-6, 1e-6, "add " + a);
    expect_close(out[2].data, w3, 0, 0, "mul_rows");
    expect_close(out[3].data, w4, 1e-6, 1e-6, "activation " + a);
    // The inline activations equal graph::apply_act bit for bit.
    for (int i = 0; i < L * C; ++i) ASSERT_EQ(out[3].data[i], graph::apply_act(act, y[i])) << a << " at " << i;
  }
}

}  // namespace
}  // namespace detforge::cputest
