// conv2d and linear on the CPU backend (oneDNN with fused bias/residual/activation) against
// double-precision scalar loops, and oneDNN's activations against graph::apply_act.
#include "test_cpu_common.h"

namespace detforge::cputest {
namespace {

struct ConvCase {
  int k, stride, pad;
  graph::Act act;
  bool residual;
};

std::string conv_case_name(const testing::TestParamInfo<ConvCase>& i) {
  const auto& c = i.param;
  return "k" + std::to_string(c.k) + "s" + std::to_string(c.stride) + "p" + std::to_string(c.pad) + "_" +
         graph::act_name(c.act) + (c.residual ? "_res" : "");
}

class CpuConv : public testing::TestWithParam<ConvCase> {};

TEST_P(CpuConv, MatchesScalarReference) {
  const ConvCase c = GetParam();
  const int H = 9, W = 7, Ci = 5, Co = 6, batch = 2;
  const int Ho = (H + 2 * c.pad - c.k) / c.stride + 1, Wo = (W + 2 * c.pad - c.k) / c.stride + 1;
  std::mt19937 rng(7 + c.k * 31 + c.stride * 7 + c.pad * 3 + static_cast<int>(c.act));
  auto x = rnd(size_t(batch) * H * W * Ci, rng);
  auto w = rnd(size_t(Co) * Ci * c.k * c.k, rng, -0.5f, 0.5f);
  auto b = rnd(Co, rng);
  auto res = rnd(size_t(batch) * Ho * Wo * Co, rng);
  Net n;
  TensorId tx = n.input("x", {H, W, Ci});
  std::vector<TensorId> ins = {tx, n.cst("w", {Co, Ci, c.k, c.k}, w), n.cst("b", {Co}, b)};
  std::vector<std::vector<float>> feeds = {x};
  if (c.residual) {
    ins.push_back(n.input("res", {Ho, Wo, Co}));
    feeds.push_back(res);
  }
  TensorId ty = n.act("y", {Ho, Wo, Co});
  n.op(OpKind::conv2d, "m.conv", ins, {ty}, {{"stride", c.stride}, {"pad", c.pad}, {"act", graph::act_name(c.act)}});
  n.output(ty);
  auto out = run_graph(n.g, feeds, batch);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{batch, Ho, Wo, Co}));
  std::vector<double> ref(size_t(batch) * Ho * Wo * Co);
  for (int bi = 0; bi < batch; ++bi)
    for (int oy = 0; oy < Ho; ++oy)
      for (int ox = 0; ox < Wo; ++ox)
        for (int o = 0; o < Co; ++o) {
          double s = b[o];
          for (int ky = 0; ky < c.k; ++ky)
            for (int kx = 0; kx < c.k; ++kx) {
              const int iy = oy * c.stride - c.pad + ky, ix = ox * c.stride - c.pad + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int i = 0; i < Ci; ++i)
                s += double(x[((size_t(bi) * H + iy) * W + ix) * Ci + i]) * w[((size_t(o) * Ci + i) * c.k + ky) * c.k + kx];
            }
          const size_t at = ((size_t(bi) * Ho + oy) * Wo + ox) * Co + o;
          if (c.residual) s += res[at];
          ref[at] = act_ref(c.act, s);
        }
  expect_close(out[0].data, ref, 2e-6, 2e-6, "conv2d");
}

std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> v;
  for (graph::Act a : {graph::Act::none, graph::Act::relu, graph::Act::silu, graph::Act::gelu, graph::Act::sigmoid})
    for (bool r : {false, true}) {
      v.push_back({3, 1, 1, a, r});
      v.push_back({3, 2, 1, a, r});
    }
  v.push_back({1, 1, 0, graph::Act::relu, true});
  v.push_back({1, 2, 0, graph::Act::none, false});
  v.push_back({3, 2, 0, graph::Act::silu, false});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, CpuConv, testing::ValuesIn(conv_cases()), conv_case_name);

// oneDNN's eltwise forms (swish alpha=1, gelu_erf, logistic, relu) must agree with the scalar
// formulas of graph::apply_act that the rest of the stack (and the own kernels) use: 1e-6
// relative, plus 1e-7*|x| absolute. The absolute term is for GELU's negative tail (x < -3):
// 0.5*x*(1+erf(x/sqrt2)) cancels in fp32 (1+erf ~ 1e-4..1e-5 against a spacing of 6e-8 at 1),
// so apply_act, oneDNN and torch's CPU gelu are each only good to ~0.5*|x|*6e-8 there and
// differ from one another (and from the exact value) by up to 2.2e-7 (measured at x = -3.66).
TEST(CpuDnnlAct, MatchesApplyAct) {
  const int N = 2001;
  std::vector<float> x(N);
  for (int i = 0; i < N; ++i) x[i] = -12.f + 24.f * float(i) / float(N - 1);
  for (graph::Act a : {graph::Act::relu, graph::Act::silu, graph::Act::gelu, graph::Act::sigmoid}) {
    Net n;
    TensorId tx = n.input("x", {1, N, 1});
    TensorId ty = n.act("y", {1, N, 1});
    n.op(OpKind::conv2d, "id", {tx, n.cst("w", {1, 1, 1, 1}, {1.f}), n.cst("b", {1}, {0.f})}, {ty},
         {{"stride", 1}, {"pad", 0}, {"act", graph::act_name(a)}});
    n.output(ty);
    auto out = run_graph(n.g, {x});
    int bad = 0;
    for (int i = 0; i < N; ++i) {
      const float want = graph::apply_act(a, x[i]);
      if (std::fabs(out[0].data[i] - want) > 1e-6f * std::fabs(want) + 1e-7f * std::fabs(x[i]) && ++bad <= 5)
        ADD_FAILURE() << graph::act_name(a) << "(" << x[i] << "): oneDNN " << out[0].data[i] << " apply_act " << want;
    }
    EXPECT_EQ(bad, 0) << graph::act_name(a);
  }
}

struct LinCase {
  graph::Act act;
  bool residual;
  bool bias;
};

class CpuLinear : public testing::TestWithParam<LinCase> {};

TEST_P(CpuLinear, MatchesScalarReference) {
  const LinCase c = GetParam();
  const int L = 13, K = 40, N = 24, batch = 3;
  std::mt19937 rng(11 + static_cast<int>(c.act) * 5 + c.residual);
  auto x = rnd(size_t(batch) * L * K, rng);
  auto w = rnd(size_t(N) * K, rng, -0.3f, 0.3f);
  auto b = rnd(N, rng);
  auto res = rnd(size_t(batch) * L * N, rng);
  Net n;
  std::vector<TensorId> ins = {n.input("x", {L, K}), n.cst("w", {N, K}, w),
                               n.cst("b", {N}, b)};
  std::vector<std::vector<float>> feeds = {x};
  if (c.residual) {
    ins.push_back(n.input("r", {L, N}));
    feeds.push_back(res);
  }
  TensorId ty = n.act("y", {L, N});
  n.op(OpKind::linear, "m.fc", ins, {ty}, {{"act", graph::act_name(c.act)}});
  n.output(ty);
  auto out = run_graph(n.g, feeds, batch);
  std::vector<double> ref(size_t(batch) * L * N);
  for (int bi = 0; bi < batch; ++bi)
    for (int l = 0; l < L; ++l)
      for (int o = 0; o < N; ++o) {
        double s = c.bias ? b[o] : 0.0;
        for (int k = 0; k < K; ++k) s += double(x[(size_t(bi) * L + l) * K + k]) * w[size_t(o) * K + k];
        const size_t at = (size_t(bi) * L + l) * N + o;
        if (c.residual) s += res[at];
        ref[at] = act_ref(c.act, s);
      }
  expect_close(out[0].data, ref, 2e-6, 2e-6, "linear");
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuLinear,
                         testing::Values(LinCase{graph::Act::none, false, true}, LinCase{graph::Act::relu, true, true},
                                         LinCase{graph::Act::gelu, false, true}, LinCase{graph::Act::gelu, true, true},
                                         LinCase{graph::Act::silu, true, true}, LinCase{graph::Act::sigmoid, false, true}));

TEST(CpuConv, WrongDeclaredShapeNamesTheOp) {
  Net n;
  TensorId tx = n.input("x", {8, 8, 3});
  TensorId ty = n.act("y", {8, 8, 4});  // stride 2 gives 4x4
  n.op(OpKind::conv2d, "backbone.stem.0", {tx, n.cst("w", {4, 3, 3, 3}, std::vector<float>(108, 0.f)), n.cst("b", {4}, {0, 0, 0, 0})},
       {ty}, {{"stride", 2}, {"pad", 1}});
  n.output(ty);
  try {
    cpu::CpuEngine e(n.g, {});
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("backbone.stem.0 (conv2d)"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace detforge::cputest
