// DETFORGE_CUDA_CONV_TUNE_GRAPH (cudnn_fused_conv.cpp, tune_in_graph): the r18vd-shaped model in
// fp16 at batch 1 with each fused conv's plan chosen by in-graph timing among heuristic modes A
// and B, against the default engine (the heuristic's first plan). Plans differ in summation order
// only, so outputs agree to the fp16 tolerance of CudaSmallLinearEngine; every fused conv reports
// its timing.
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

TEST(CudaConvTuneGraph, R18vdTunedPlansKeepTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]), 0, 1, 5);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(lb.graph, 1, {k == 1 ? "DETFORGE_CUDA_CONV_TUNE_GRAPH=4" : ""});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(e->graph_captured(1));
    int tuned = 0, fused = 0;
    for (size_t i = 0; i < lb.graph.ops.size(); ++i) {
      const std::string what = e->op_launch_summary(1, i);
      if (what.find("cuDNN fused conv") == std::string::npos) continue;
      ++fused;
      if (what.find("graph-tuned") == std::string::npos) continue;
      ++tuned;
      if (k == 1) std::printf("%s: %s\n", lb.graph.ops[i].name.c_str(), what.c_str());
    }
    // Every fused conv goes through the in-graph timing (its report names how many plans it
    // built); a conv for which none of the K plans builds would fall back to cuDNN's candidate.
    if (k == 0) EXPECT_EQ(tuned, 0);
    if (k == 1) EXPECT_GE(tuned, fused - 2) << "of " << fused << " fused convs";
    EXPECT_GE(fused, 40);
    std::printf("tune in graph %s: %d of %d fused convs tuned; graph check %s\n", k ? "on" : "off", tuned, fused,
                e->graph_check(1).c_str());
    out[k] = e->run(px.data(), 1);
  }
  expect_r18vd_outputs_agree(out[0], out[1], 1, 0.01, "fp16");
}

}  // namespace
}  // namespace detforge::test
