// The CUDA engine on a small graph that uses every op kind of the IR except attention and the
// deformable/top-k ops (those have kernel tests): against host loops in fp32 and fp16, batch
// consistency, graph replay = eager, check_finite and load-time errors; and a small deformable
// attention graph with and without merge_deform_projections.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "bench/kernel_profile.h"
#include "detforge/types.h"
#include "gpu_test_util.h"
#include "graph/passes.h"
#include "host_ref.h"
#include "unit/test_deform_graph.h"

namespace detforge::test {
namespace {

using graph::Act;
using graph::Graph;
using graph::Op;
using graph::OpKind;

struct Net {
  Graph g;
  std::vector<std::vector<float>> w;  // constants by creation order, for the host reference
};

graph::TensorId add_const(Net& n, const std::string& name, std::vector<int64_t> shape, float lo, float hi,
                          uint32_t seed) {
  int64_t c = 1;
  for (auto d : shape) c *= d;
  n.w.push_back(random_vec(c, lo, hi, seed));
  return n.g.add_const(name, shape, n.w.back());
}

void op(Graph& g, OpKind k, const std::string& name, std::vector<graph::TensorId> in, graph::TensorId out,
        nlohmann::json attrs = nlohmann::json::object()) {
  Op o;
  o.kind = k;
  o.name = name;
  o.inputs = std::move(in);
  o.outputs = {out};
  o.attrs = std::move(attrs);
  g.add_op(o);
}

// pixels[16,16,3] -> conv s2 silu -> conv + residual relu -> {maxpool, avgpool(ceil)} -> upsample,
// channel concat -> tokens -> linear gelu -> linear + residual -> layer norm -> add const sigmoid
// -> mul_rows; avgpool tokens -> linear relu; row concat -> silu.
Net make_net() {
  Net n;
  Graph& g = n.g;
  auto px = g.add_activation("pixels", {16, 16, 3});
  g.inputs = {px};
  auto w1 = add_const(n, "c1.w", {8, 3, 3, 3}, -0.5, 0.5, 21), b1 = add_const(n, "c1.b", {8}, -0.2, 0.2, 22);
  auto c1 = g.add_activation("c1", {8, 8, 8});
  op(g, OpKind::conv2d, "c1", {px, w1, b1}, c1, {{"stride", 2}, {"pad", 1}, {"act", "silu"}});
  auto w2 = add_const(n, "c2.w", {8, 8, 3, 3}, -0.3, 0.3, 23), b2 = add_const(n, "c2.b", {8}, -0.2, 0.2, 24);
  auto c2 = g.add_activation("c2", {8, 8, 8});
  op(g, OpKind::conv2d, "c2", {c1, w2, b2, c1}, c2, {{"stride", 1}, {"pad", 1}, {"act", "relu"}});
  auto mp = g.add_activation("mp", {4, 4, 8});
  op(g, OpKind::max_pool2d, "mp", {c2}, mp, {{"kernel", 3}, {"stride", 2}, {"pad", 1}});
  auto ap = g.add_activation("ap", {3, 3, 8});  // 8x8 -> k3 s3 ceil: 3x3, last window partial
  op(g, OpKind::avg_pool2d, "ap", {c2}, ap, {{"kernel", 3}, {"stride", 3}, {"ceil_mode", true}});
  auto up = g.add_activation("up", {8, 8, 8});
  op(g, OpKind::upsample_nearest2x, "up", {mp}, up);
  auto cat = g.add_activation("cat", {8, 8, 16});
  op(g, OpKind::concat, "cat", {up, c2}, cat, {{"axis", 2}});
  auto tok = g.add_activation("tok", {64, 16});
  op(g, OpKind::reshape, "tok", {cat}, tok, {{"shape", {64, 16}}});
  auto wl1 = add_const(n, "l1.w", {32, 16}, -0.4, 0.4, 25), bl1 = add_const(n, "l1.b", {32}, -0.2, 0.2, 26);
  auto l1 = g.add_activation("l1", {64, 32});
  op(g, OpKind::linear, "l1", {tok, wl1, bl1}, l1, {{"act", "gelu"}});
  auto wl2 = add_const(n, "l2.w", {16, 32}, -0.3, 0.3, 27), bl2 = add_const(n, "l2.b", {16}, -0.2, 0.2, 28);
  auto l2 = g.add_activation("l2", {64, 16});
  op(g, OpKind::linear, "l2", {l1, wl2, bl2, tok}, l2);
  auto gg = add_const(n, "ln.g", {16}, 0.5, 1.5, 29), gb = add_const(n, "ln.b", {16}, -0.3, 0.3, 30);
  auto ln = g.add_activation("ln", {64, 16});
  op(g, OpKind::layer_norm, "ln", {l2, gg, gb}, ln, {{"eps", 1e-5}});
  auto ac = add_const(n, "anch", {64, 16}, -1, 1, 31);
  auto ad = g.add_activation("ad", {64, 16});
  op(g, OpKind::add, "ad", {ln, ac}, ad, {{"act", "sigmoid"}});
  auto m = add_const(n, "mask", {64}, 0, 2, 32);
  auto mr = g.add_activation("mr", {64, 16});
  op(g, OpKind::mul_rows, "mr", {ad, m}, mr);
  auto apt = g.add_activation("apt", {9, 8});
  op(g, OpKind::reshape, "apt", {ap}, apt, {{"shape", {9, 8}}});
  auto wl3 = add_const(n, "l3.w", {16, 8}, -0.5, 0.5, 33), bl3 = add_const(n, "l3.b", {16}, -0.2, 0.2, 34);
  auto l3 = g.add_activation("l3", {9, 16});
  op(g, OpKind::linear, "l3", {apt, wl3, bl3}, l3, {{"act", "relu"}});
  auto rows = g.add_activation("rows", {73, 16});
  op(g, OpKind::concat, "rows", {mr, l3}, rows, {{"axis", 0}});
  auto out = g.add_activation("out", {73, 16});
  op(g, OpKind::activation, "out", {rows}, out, {{"act", "silu"}});
  g.outputs = {out};
  g.validate();
  return n;
}

std::vector<float> host_forward(const Net& n, const std::vector<float>& px) {
  const auto& w = n.w;
  int Ho, Wo;
  auto c1 = ref::conv(px, 16, 16, 3, w[0], 8, 3, 2, 1, w[1], nullptr, Act::silu, &Ho, &Wo);
  auto c2 = ref::conv(c1, 8, 8, 8, w[2], 8, 3, 1, 1, w[3], &c1, Act::relu, &Ho, &Wo);
  auto mp = ref::pool(c2, 8, 8, 8, 3, 2, 1, true, 4, 4);
  auto ap = ref::pool(c2, 8, 8, 8, 3, 3, 0, false, 3, 3);
  auto up = ref::upsample2x(mp, 4, 4, 8);
  std::vector<float> cat(64 * 16);
  for (int p = 0; p < 64; ++p)
    for (int c = 0; c < 16; ++c) cat[p * 16 + c] = c < 8 ? up[p * 8 + c] : c2[p * 8 + c - 8];
  auto l1 = ref::linear(cat, 64, 16, w[4], 32, w[5], nullptr, Act::gelu);
  auto l2 = ref::linear(l1, 64, 32, w[6], 16, w[7], &cat, Act::none);
  auto ln = ref::layer_norm(l2, 64, 16, w[8], w[9], 1e-5f);
  std::vector<float> rows(73 * 16);
  for (int i = 0; i < 64 * 16; ++i) rows[i] = graph::apply_act(Act::sigmoid, ln[i] + w[10][i]) * w[11][i / 16];
  auto l3 = ref::linear(ap, 9, 8, w[12], 16, w[13], nullptr, Act::relu);
  for (int i = 0; i < 9 * 16; ++i) rows[64 * 16 + i] = l3[i];
  for (auto& v : rows) v = graph::apply_act(Act::silu, v);
  return rows;
}

// Each image of `out` (the net's [B, 73, 16] output for the pixels px) against host_forward.
void expect_images_match_host(const Net& n, const std::vector<float>& px, const HostTensor& out, int B, bool half) {
  const int px_n = 16 * 16 * 3;
  for (int b = 0; b < B; ++b) {
    std::vector<float> one(px.begin() + b * px_n, px.begin() + (b + 1) * px_n);
    auto want = host_forward(n, one);
    std::vector<float> got(out.data.begin() + b * 73 * 16, out.data.begin() + (b + 1) * 73 * 16);
    EXPECT_TRUE(close(got, want, half ? 3e-2f : 1e-4f, half ? 2e-2f : 1e-4f)) << "image " << b;
  }
}

class CudaEngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible";
  }
};

TEST_P(CudaEngineTest, MatchesHostReferenceForEveryImageOfABatch) {
  Net n = make_net();
  EngineOptions opt;
  opt.max_batch = 4;
  opt.precision = GetParam();
  auto e = make_cuda_engine(n.g, opt);
  const int B = 3, px_n = 16 * 16 * 3;
  auto px = random_vec(B * px_n, 0, 1, 40);
  auto out = e->run(px.data(), B);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape, (std::vector<int64_t>{B, 73, 16}));
  expect_images_match_host(n, px, out[0], B, std::string(GetParam()) == "fp16");
}

TEST_P(CudaEngineTest, BatchOfThreeEqualsThreeSingleRunsAndReplayEqualsEager) {
  Net n = make_net();
  EngineOptions opt;
  opt.max_batch = 3;
  opt.precision = GetParam();
  auto eng = make_cuda_engine(n.g, opt);
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->graph_captured(1));
  EXPECT_TRUE(e->graph_captured(3));
  EXPECT_GT(e->graph_nodes(3), 10);
  const int px_n = 16 * 16 * 3;
  auto px = random_vec(3 * px_n, 0, 1, 41);
  auto batch = e->run(px.data(), 3);
  auto eager = e->run_eager(px.data(), 3);
  EXPECT_EQ(batch[0].data, eager[0].data);  // same kernels, same order: bit-identical
  const bool half = std::string(GetParam()) == "fp16";
  for (int b = 0; b < 3; ++b) {
    auto one = e->run(px.data() + b * px_n, 1);
    std::vector<float> part(batch[0].data.begin() + b * 73 * 16, batch[0].data.begin() + (b + 1) * 73 * 16);
    // cuDNN/cuBLASLt may pick other algorithms per batch size: equal up to rounding.
    EXPECT_TRUE(close(one[0].data, part, half ? 4e-3f : 1e-5f, half ? 4e-3f : 1e-5f)) << "image " << b;
  }
  // batch 2 is captured lazily on first use
  auto two = e->run(px.data(), 2);
  EXPECT_TRUE(close(two[0].data, std::vector<float>(batch[0].data.begin(), batch[0].data.begin() + 2 * 73 * 16),
                    half ? 4e-3f : 1e-5f, half ? 4e-3f : 1e-5f));
}

// DETFORGE_CUDA_OWN_CONV=force puts every conv our implicit-GEMM kernels support on them (here
// the 8->8 channel 3x3 conv) and DETFORGE_CUDA_STEM=1 the 3-channel conv on the direct stem
// kernel: still the host result.
TEST(CudaEngine, OwnConvKernelsInTheEngineMatchHostReference) {
  DETFORGE_REQUIRE_GPU();
  Net n = make_net();
  EngineOptions opt;
  opt.max_batch = 2;
  opt.precision = "fp16";
  setenv("DETFORGE_CUDA_OWN_CONV", "force", 1);
  setenv("DETFORGE_CUDA_STEM", "1", 1);  // and c1 on the direct stem kernel
  auto eng = make_cuda_engine(n.g, opt);
  unsetenv("DETFORGE_CUDA_OWN_CONV");
  unsetenv("DETFORGE_CUDA_STEM");
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  EXPECT_EQ(e->conv_fusion_summary(2).rfind("1 convs on own implicit-GEMM kernels", 0), 0u) << e->conv_fusion_summary(2);
  const int px_n = 16 * 16 * 3;
  auto px = random_vec(2 * px_n, 0, 1, 44);
  auto out = e->run(px.data(), 2);
  expect_images_match_host(n, px, out[0], 2, true);
  setenv("DETFORGE_CUDA_OWN_CONV", "sometimes", 1);
  EXPECT_THROW(make_cuda_engine(n.g, opt), Error);
  unsetenv("DETFORGE_CUDA_OWN_CONV");
}

// The captured graph spreads independent ops over streams (DETFORGE_CUDA_STREAMS, default 4):
// same kernels on the same bytes, so the outputs equal the one-stream graph's bit for bit.
TEST_P(CudaEngineTest, MultiStreamGraphEqualsOneStreamGraph) {
  Net n = make_net();
  EngineOptions opt;
  opt.max_batch = 3;
  opt.precision = GetParam();
  const int px_n = 16 * 16 * 3;
  auto px = random_vec(3 * px_n, 0, 1, 43);
  std::vector<HostTensor> out[2];
  int streams[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    setenv("DETFORGE_CUDA_STREAMS", k == 0 ? "1" : "4", 1);
    auto eng = make_cuda_engine(n.g, opt);
    unsetenv("DETFORGE_CUDA_STREAMS");
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_TRUE(e->graph_captured(3));
    streams[k] = e->graph_streams(3);
    for (int rep = 0; rep < 3; ++rep) out[k] = e->run(px.data(), 3);  // replays reuse the same bytes
  }
  EXPECT_EQ(streams[0], 1);
  EXPECT_GT(streams[1], 1);  // the pooling branches and the token linear are independent
  ASSERT_EQ(out[0].size(), out[1].size());
  for (size_t o = 0; o < out[0].size(); ++o) EXPECT_EQ(out[0][o].data, out[1][o].data);
}

// DETFORGE_CUDA_SMALL_LINEAR=1 runs l3 (K = 8 -> N = 16, ReLU) on the own small-K kernel
// (kernels/small_linear.cu); l1 and l2 (K and N of 16 and 32) stay with cuBLASLt. Still the host
// result; the variable takes only 0 or 1.
TEST_P(CudaEngineTest, SmallLinearKernelInTheEngineMatchesHostReference) {
  Net n = make_net();
  EngineOptions opt;
  opt.max_batch = 3;
  opt.precision = GetParam();
  setenv("DETFORGE_CUDA_SMALL_LINEAR", "1", 1);
  auto eng = make_cuda_engine(n.g, opt);
  unsetenv("DETFORGE_CUDA_SMALL_LINEAR");
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->small_linears(3, cuda::SmallLinear::small_k), 1);
  EXPECT_EQ(e->small_linears(3), 1);
  EXPECT_TRUE(e->graph_captured(3));
  const int B = 3, px_n = 16 * 16 * 3;
  auto px = random_vec(B * px_n, 0, 1, 45);
  auto out = e->run(px.data(), B);
  ASSERT_EQ(out.size(), 1u);
  expect_images_match_host(n, px, out[0], B, std::string(GetParam()) == "fp16");
  setenv("DETFORGE_CUDA_SMALL_LINEAR", "3", 1);
  EXPECT_THROW(make_cuda_engine(n.g, opt), Error);
  unsetenv("DETFORGE_CUDA_SMALL_LINEAR");
}

// bench --profile-ops: every kernel of an eager forward is attributed to the op that launched it.
TEST(CudaEngine, OpProfileAttributesEveryKernelToItsOp) {
  DETFORGE_REQUIRE_GPU();
  Net n = make_net();
  EngineOptions opt;
  opt.max_batch = 2;
  opt.precision = "fp16";
  setenv("DETFORGE_CUDA_STEM", "1", 1);
  setenv("DETFORGE_CUDA_ROW_MLP", "0", 1);  // each op launches its own kernels (a chain's first ops none)
  setenv("DETFORGE_CUDA_UPSAMPLE_CONCAT", "0", 1);  // ... and the upsample its own, not the concat's
  auto e = make_cuda_engine(n.g, opt);
  unsetenv("DETFORGE_CUDA_STEM");
  unsetenv("DETFORGE_CUDA_ROW_MLP");
  unsetenv("DETFORGE_CUDA_UPSAMPLE_CONCAT");
  auto p = bench::cuda_profile_ops(*e, 2, 3);
  ASSERT_TRUE(p.available) << p.why;
  ASSERT_EQ(p.ops.size(), n.g.ops.size() + 1);
  EXPECT_EQ(p.ops[0].index, -1);
  // No input conversion: c1 (3 -> 8 channels) reads the fp32 pixels itself (kernels/conv_stem).
  EXPECT_EQ(p.ops[0].kernels, 0.0);
  double sum = 0;
  // The profile lists ops in the engine's issue order (ASAP by default): each graph op once.
  std::vector<std::string> want, got;
  for (const auto& op : n.g.ops) want.push_back(op.name);
  for (size_t i = 1; i < p.ops.size(); ++i) {
    const auto& o = p.ops[i];
    got.push_back(o.name);
    if (o.kind == "reshape") EXPECT_EQ(o.kernels, 0) << o.name;
    if (o.kind == "conv2d" || o.kind == "linear" || o.kind == "layer_norm") EXPECT_GE(o.kernels, 1.0) << o.name;
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  for (const auto& o : p.ops) sum += o.ms;
  // Only the output conversions (after the last op) are outside every op.
  EXPECT_GT(sum, 0.0);
  EXPECT_LE(sum, p.gpu_ms_per_forward * 1.0001);
  EXPECT_GE(p.kernels_per_forward, 1.0 * n.g.ops.size() - 2);
}

TEST(CudaEngine, StreamCountOutsideOneToEightIsRefused) {
  DETFORGE_REQUIRE_GPU();
  Net n = make_net();
  setenv("DETFORGE_CUDA_STREAMS", "9", 1);
  EXPECT_THROW(make_cuda_engine(n.g, {}), Error);
  setenv("DETFORGE_CUDA_STREAMS", "two", 1);
  EXPECT_THROW(make_cuda_engine(n.g, {}), Error);
  unsetenv("DETFORGE_CUDA_STREAMS");
}

// graph::merge_deform_projections in the engine: offsets and logits as column slices of one
// [17, 72] tensor (cuda_ops.cpp points the kernel at their columns, row stride 72) give the
// unmerged graph's outputs for both images of a batch of 2 (the two graphs' linears may take
// other cuBLASLt algorithms: equal up to rounding). A slice past its tensor is refused at load.
TEST_P(CudaEngineTest, MergedDeformProjectionsGiveTheUnmergedOutputs) {
  graph::Graph unmerged = deform::make_graph(deform::Variant::plain), merged = unmerged;
  // The pass alone (optimize() would heed DETFORGE_SKIP_PASSES), then its dead tensors dropped.
  ASSERT_EQ(graph::merge_deform_projections(merged), 1);
  graph::eliminate_dead_code(merged);
  EngineOptions opt;
  opt.max_batch = 2;
  opt.precision = GetParam();
  const auto x = random_vec(2 * deform::kQ * deform::kK, -1.5f, 1.5f, 45);
  const auto want = make_cuda_engine(unmerged, opt)->run(x.data(), 2);
  const auto got = make_cuda_engine(merged, opt)->run(x.data(), 2);
  ASSERT_EQ(got[0].shape, (std::vector<int64_t>{2, deform::kQ, deform::kC}));
  const bool half = std::string(GetParam()) == "fp16";
  EXPECT_TRUE(close(got[0].data, want[0].data, half ? 2e-2f : 1e-4f, half ? 1e-2f : 1e-4f));

  graph::Op& da = merged.ops.back();
  ASSERT_EQ(da.kind, OpKind::ms_deform_attn);
  da.attrs["aw_col"] = deform::kOff + 1;
  try {
    make_cuda_engine(merged, opt);
    FAIL() << "expected a load error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 2 (logits) has 72 columns, the op reads 24 from column 49"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Precision, CudaEngineTest, ::testing::Values("fp32", "fp16"),
                         [](const auto& info) { return std::string(info.param); });

TEST(CudaEngine, CheckFiniteNamesTheFirstOverflowingOp) {
  DETFORGE_REQUIRE_GPU();
  Graph g;
  auto px = g.add_activation("pixels", {4, 4});
  g.inputs = {px};
  auto big = g.add_const("big", {4, 4}, std::vector<float>(16, 3e38f));
  auto a = g.add_activation("a", {4, 4}), b = g.add_activation("b", {4, 4});
  op(g, OpKind::add, "model.fine", {px, big}, a);
  op(g, OpKind::add, "model.boom", {a, a}, b);  // 6e38: inf in fp32
  g.outputs = {b};
  EngineOptions opt;
  opt.check_finite = true;
  auto e = make_cuda_engine(g, opt);
  std::vector<float> x(16, 1.f);
  e->run(x.data(), 1);
  EXPECT_EQ(e->first_nonfinite_op(), "model.boom (add)");
}

TEST(CudaEngine, RejectsUnfoldedBatchNormAndBadBatch) {
  DETFORGE_REQUIRE_GPU();
  Graph g;
  auto px = g.add_activation("pixels", {2, 2, 4});
  g.inputs = {px};
  std::vector<graph::TensorId> p;
  for (const char* nm : {"g", "b", "m", "v"}) p.push_back(g.add_const(nm, {4}, std::vector<float>(4, 1.f)));
  auto y = g.add_activation("y", {2, 2, 4});
  op(g, OpKind::batch_norm, "model.bn", {px, p[0], p[1], p[2], p[3]}, y, {{"eps", 1e-5}});
  g.outputs = {y};
  EXPECT_THROW(make_cuda_engine(g, {}), Error);

  Net n = make_net();
  auto e = make_cuda_engine(n.g, {});
  std::vector<float> x(2 * 16 * 16 * 3, 0.5f);
  EXPECT_THROW(e->run(x.data(), 2), Error);
}

}  // namespace
}  // namespace detforge::test
