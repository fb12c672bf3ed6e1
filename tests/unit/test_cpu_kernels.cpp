// The CPU backend's own kernels for layer_norm, attention and ms_deform_attn against
// double-precision scalar references written straight from ir.h and the family spec (3.3, 3.8).
#include <algorithm>

#include "test_cpu_common.h"

namespace detforge::cputest {
namespace {

TEST(CpuLayerNorm, WithResidualMatchesReference) {
  const int L = 9, C = 48, batch = 2;
  std::mt19937 rng(3);
  auto x = rnd(size_t(batch) * L * C, rng, -1.f, 1.f);
  auto r = rnd(size_t(batch) * L * C, rng, 49.f, 51.f);  // large common offset: stats must not cancel
  auto gamma = rnd(C, rng, 0.5f, 1.5f), beta = rnd(C, rng);
  for (bool with_res : {false, true}) {
    Net n;
    TensorId tx = n.input("x", {L, C});
    std::vector<TensorId> ins = {tx, n.cst("g", {C}, gamma), n.cst("b", {C}, beta)};
    std::vector<std::vector<float>> feeds = {x};
    if (with_res) {
      ins.push_back(n.input("r", {L, C}));
      feeds.push_back(r);
    }
    TensorId ty = n.act("y", {L, C});
    n.op(OpKind::layer_norm, "m.ln", ins, {ty}, {{"eps", 1e-5}});
    n.output(ty);
    auto out = run_graph(n.g, feeds, batch);
    std::vector<double> ref(x.size());
    for (int row = 0; row < batch * L; ++row) {
      std::vector<double> v(C);
      double mean = 0, var = 0;
      for (int c = 0; c < C; ++c) {
        // the sum is formed in fp32, as the op's input would be after a fp32 residual add
        v[c] = with_res ? double(x[size_t(row) * C + c] + r[size_t(row) * C + c]) : double(x[size_t(row) * C + c]);
        mean += v[c];
      }
      mean /= C;
      for (int c = 0; c < C; ++c) var += (v[c] - mean) * (v[c] - mean);
      var /= C;
      for (int c = 0; c < C; ++c) ref[size_t(row) * C + c] = (v[c] - mean) / std::sqrt(var + 1e-5) * gamma[c] + beta[c];
    }
    expect_close(out[0].data, ref, 3e-6, 3e-6, with_res ? "layer_norm+res" : "layer_norm");
  }
}

TEST(CpuAttention, SeveralHeadsMatchReference) {
  const int L = 7, S = 11, H = 4, d = 8, C = H * d, batch = 2;
  const float scale = 1.f / std::sqrt(float(d));
  std::mt19937 rng(5);
  auto q = rnd(size_t(batch) * L * C, rng, -2.f, 2.f);
  auto k = rnd(size_t(batch) * S * C, rng, -2.f, 2.f);
  auto v = rnd(size_t(batch) * S * C, rng, -2.f, 2.f);
  Net n;
  TensorId tq = n.input("q", {L, C}), tk = n.input("k", {S, C}), tv = n.input("v", {S, C});
  TensorId ty = n.act("y", {L, C});
  n.op(OpKind::attention, "m.attn", {tq, tk, tv}, {ty}, {{"heads", H}, {"scale", scale}});
  n.output(ty);
  auto out = run_graph(n.g, {q, k, v}, batch);
  std::vector<double> ref(q.size());
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < L; ++i) {
        std::vector<double> s(S);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < S; ++j) {
          double dot = 0;
          for (int e = 0; e < d; ++e)
            dot += double(q[(size_t(b) * L + i) * C + h * d + e]) * k[(size_t(b) * S + j) * C + h * d + e];
          s[j] = scale * dot;
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int e = 0; e < d; ++e) {
          double o = 0;
          for (int j = 0; j < S; ++j) o += s[j] / sum * v[(size_t(b) * S + j) * C + h * d + e];
          ref[(size_t(b) * L + i) * C + h * d + e] = o;
        }
      }
  expect_close(out[0].data, ref, 2e-6, 2e-6, "attention");
}

TEST(CpuAttention, HeadsMustDivideWidth) {
  Net n;
  TensorId tq = n.input("q", {3, 10});
  TensorId ty = n.act("y", {3, 10});
  n.op(OpKind::attention, "dec.self_attn", {tq, tq, tq}, {ty}, {{"heads", 4}, {"scale", 0.5}});
  n.output(ty);
  EXPECT_THROW(cpu::CpuEngine(n.g, {}), Error);
}

// Spec 3.8, written literally in double: loc = ref_xy + off*ps*ref_wh*offset_scale,
// ix = loc_x*W - 0.5, bilinear with zero padding, softmax over levels*points per head.
struct MsdaCounts {
  int all_outside = 0, partly_outside = 0, inside = 0;
};

std::vector<double> msda_reference(const std::vector<float>& value, const std::vector<float>& off,
                                   const std::vector<float>& logit, const std::vector<float>& ref,
                                   const std::vector<float>& ps, const std::vector<std::pair<int, int>>& shapes,
                                   int Q, int H, int P, int dh, float os, MsdaCounts* counts) {
  const int NL = int(shapes.size()), LP = NL * P, C = H * dh;
  std::vector<int> start(NL, 0);
  for (int l = 1; l < NL; ++l) start[l] = start[l - 1] + shapes[l - 1].first * shapes[l - 1].second;
  std::vector<double> out(size_t(Q) * C, 0.0);
  for (int q = 0; q < Q; ++q)
    for (int h = 0; h < H; ++h) {
      std::vector<double> aw(LP);
      double mx = -1e300, sum = 0;
      for (int i = 0; i < LP; ++i) mx = std::max(mx, double(logit[(size_t(q) * H + h) * LP + i]));
      for (int i = 0; i < LP; ++i) sum += (aw[i] = std::exp(logit[(size_t(q) * H + h) * LP + i] - mx));
      for (int l = 0; l < NL; ++l) {
        const int Hl = shapes[l].first, Wl = shapes[l].second;
        for (int p = 0; p < P; ++p) {
          const int i = l * P + p;
          const double ox = off[((size_t(q) * H + h) * LP + i) * 2 + 0], oy = off[((size_t(q) * H + h) * LP + i) * 2 + 1];
          const double lx = ref[q * 4 + 0] + ox * ps[i] * ref[q * 4 + 2] * os;
          const double ly = ref[q * 4 + 1] + oy * ps[i] * ref[q * 4 + 3] * os;
          const double ix = lx * Wl - 0.5, iy = ly * Hl - 0.5;
          const int x0 = int(std::floor(ix)), y0 = int(std::floor(iy));
          const double fx = ix - x0, fy = iy - y0;
          int inside = 0;
          for (int cy = 0; cy < 2; ++cy)
            for (int cx = 0; cx < 2; ++cx) {
              const int xx = x0 + cx, yy = y0 + cy;
              if (xx < 0 || xx >= Wl || yy < 0 || yy >= Hl) continue;
              ++inside;
              const double wgt = (cx ? fx : 1 - fx) * (cy ? fy : 1 - fy) * aw[i] / sum;
              for (int e = 0; e < dh; ++e)
                out[size_t(q) * C + h * dh + e] += wgt * value[(size_t(start[l]) + yy * Wl + xx) * C + h * dh + e];
            }
          if (counts) (inside == 0 ? counts->all_outside : inside < 4 ? counts->partly_outside : counts->inside)++;
        }
      }
    }
  return out;
}

TEST(CpuMsDeformAttn, TwoOddLevelsWithPointsOutsideMatchReference) {
  const int H = 2, P = 3, dh = 4, C = H * dh, Q = 6, batch = 2;
  const std::vector<std::pair<int, int>> shapes = {{5, 7}, {3, 4}};
  const int NL = 2, LP = NL * P, Lv = 5 * 7 + 3 * 4;
  const float os = 0.5f;
  std::mt19937 rng(9);
  auto value = rnd(size_t(batch) * Lv * C, rng);
  auto off = rnd(size_t(batch) * Q * H * LP * 2, rng, -6.f, 6.f);
  auto logit = rnd(size_t(batch) * Q * H * LP, rng, -3.f, 3.f);
  auto ref = rnd(size_t(batch) * Q * 4, rng, 0.f, 1.f);
  for (int r = 0; r < batch * Q; ++r) {
    ref[r * 4 + 2] = 0.2f + 0.7f * ref[r * 4 + 2];
    ref[r * 4 + 3] = 0.2f + 0.7f * ref[r * 4 + 3];
  }
  ref[0] = 0.02f;  // a box hugging the left/top border
  ref[1] = 0.98f;
  std::vector<float> ps = {1.f / 3, 0.5f, 1.f, 1.f / 3, 0.25f, 2.f};

  Net n;
  TensorId tv = n.input("value", {Lv, C}), to = n.input("off", {Q, H * LP * 2}), tl = n.input("logit", {Q, H * LP}),
           tr = n.input("ref", {Q, 4});
  TensorId ty = n.act("y", {Q, C});
  n.op(OpKind::ms_deform_attn, "dec.0.encoder_attn", {tv, to, tl, tr, n.cst("ps", {LP}, ps)}, {ty},
       {{"heads", H}, {"levels", NL}, {"points", P}, {"offset_scale", os},
        {"spatial_shapes", {{5, 7}, {3, 4}}}, {"level_start", {0, 35}}});
  n.output(ty);
  auto out = run_graph(n.g, {value, off, logit, ref}, batch);
  MsdaCounts counts;
  std::vector<double> want;
  for (int b = 0; b < batch; ++b) {
    auto slice = [&](const std::vector<float>& v, size_t per) {
      return std::vector<float>(v.begin() + b * per, v.begin() + (b + 1) * per);
    };
    auto r = msda_reference(slice(value, size_t(Lv) * C), slice(off, size_t(Q) * H * LP * 2), slice(logit, size_t(Q) * H * LP),
                            slice(ref, size_t(Q) * 4), ps, shapes, Q, H, P, dh, os, &counts);
    want.insert(want.end(), r.begin(), r.end());
  }
  // The data must exercise zero padding both fully and partly.
  EXPECT_GT(counts.all_outside, 5);
  EXPECT_GT(counts.partly_outside, 5);
  EXPECT_GT(counts.inside, 5);
  expect_close(out[0].data, want, 2e-6, 2e-6, "ms_deform_attn");
}

TEST(CpuMsDeformAttn, LevelStartMustMatchShapes) {
  Net n;
  TensorId tv = n.input("value", {47, 8}), to = n.input("off", {2, 2 * 6 * 2}), tl = n.input("logit", {2, 12}),
           tr = n.input("ref", {2, 4});
  TensorId ty = n.act("y", {2, 8});
  n.op(OpKind::ms_deform_attn, "dec.0.encoder_attn", {tv, to, tl, tr, n.cst("ps", {6}, std::vector<float>(6, 1.f))}, {ty},
       {{"heads", 2}, {"levels", 2}, {"points", 3}, {"offset_scale", 0.5},
        {"spatial_shapes", {{5, 7}, {3, 4}}}, {"level_start", {0, 36}}});
  n.output(ty);
  try {
    cpu::CpuEngine e(n.g, {});
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("dec.0.encoder_attn (ms_deform_attn)"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace detforge::cputest
