// 1x1 convs as cuBLASLt linears (DETFORGE_CUDA_CONV_LINEAR; cuda_settings.h at conv_linear_ says
// why): each mode takes the convs its rule names and gives the outputs of the engine that runs
// every conv through cuDNN (mode 0), within fp16 rounding.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "detforge/types.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

TEST(CudaConvLinear, R18vdModesTakeTheirConvsAndKeepTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& g = lb.graph;
  const auto& in = g.tensor(g.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 21);
  // From the graph: 1x1 stride-1 unpadded convs, and those without an activation or with ReLU.
  int all_1x1 = 0, plain_1x1 = 0;
  for (const auto& op : g.ops) {
    if (op.kind != graph::OpKind::conv2d) continue;
    const auto& w = g.tensor(op.inputs[1]).shape;
    if (w[2] != 1 || w[3] != 1 || op.attr_int_or("stride", 1) != 1 || op.attr_int_or("pad", 0) != 0) continue;
    ++all_1x1;
    plain_1x1 += op.act() == graph::Act::none || op.act() == graph::Act::relu;
  }
  std::vector<HostTensor> out[4];
  int taken[4] = {0, 0, 0, 0};
  for (int m = 0; m < 4; ++m) {
    auto eng = fp16_engine(g, 2, {"DETFORGE_CUDA_CONV_LINEAR=" + std::to_string(m)});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(2));
    taken[m] = e->convs_as_linears(2);
    std::printf("mode %d: %s; graph check: %s\n", m, e->conv_fusion_summary(2).c_str(), e->graph_check(2).c_str());
    out[m] = e->run(px.data(), 2);
  }
  EXPECT_EQ(taken[0], 0);
  EXPECT_EQ(taken[1], plain_1x1);
  EXPECT_GT(taken[2], taken[1]) << "r18vd's CSP conv2s (SiLU, feeding only a residual) are mode 2's";
  EXPECT_EQ(taken[3], all_1x1);
  EXPECT_GT(plain_1x1, 0);
  for (int m = 1; m < 4; ++m)
    expect_r18vd_outputs_agree(out[0], out[m], 2, 0.01, ("conv linear mode " + std::to_string(m)).c_str());
}

// DETFORGE_CUDA_OFFCHAIN_OWN=1 (cuda_settings.h at offchain_own_): the convs that only feed a
// residual and are not 1x1 (r18vd: backbone stages 1-3's shortcuts) run on own kernels, and the
// outputs stay those of the engine without it, within fp16 rounding.
TEST(CudaConvLinear, R18vdOffChainConvsOnOwnKernelsKeepTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& g = lb.graph;
  const auto& in = g.tensor(g.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, 22);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(g, 2, {std::string("DETFORGE_CUDA_OFFCHAIN_OWN=") + (k ? "1" : "0")});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(2));
    int own = 0;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      if (g.ops[i].kind != graph::OpKind::conv2d) continue;
      const std::string how = e->op_launch_summary(2, i);
      if (how.find("own conv") == std::string::npos) continue;
      ++own;
      std::printf("off-chain own %d: %s: %s\n", k, g.ops[i].name.c_str(), how.c_str());
    }
    EXPECT_EQ(own > 0, k == 1);
    out[k] = e->run(px.data(), 2);
  }
  expect_r18vd_outputs_agree(out[0], out[1], 2, 0.01, "off-chain own convs");
}

}  // namespace
}  // namespace detforge::test
