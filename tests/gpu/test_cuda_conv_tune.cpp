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

// The default engine against one whose fused convs are tuned in the graph under `setting`;
// returns how many fused convs the tuned engine reports as graph-tuned, and of those how many
// report knob variants.
struct Tuned {
  int fused = 0, tuned = 0, knob_reports = 0;
};

Tuned tuned_against_default(const std::string& setting) {
  Tuned t;
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]), 0, 1, 5);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(lb.graph, 1, {k == 1 ? setting : ""});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    EXPECT_NE(e, nullptr);
    if (!e) return t;
    EXPECT_TRUE(e->graph_captured(1));
    int tuned = 0, fused = 0, knobs = 0;
    for (size_t i = 0; i < lb.graph.ops.size(); ++i) {
      const std::string what = e->op_launch_summary(1, i);
      if (what.find("cuDNN fused conv") == std::string::npos) continue;
      ++fused;
      if (what.find("graph-tuned") == std::string::npos) continue;
      ++tuned;
      knobs += what.find("knob variants built") != std::string::npos;
      if (k == 1) std::printf("%s: %s\n", lb.graph.ops[i].name.c_str(), what.c_str());
    }
    if (k == 0) EXPECT_EQ(tuned, 0);
    EXPECT_GE(fused, 40);
    std::printf("%s: %d of %d fused convs tuned; graph check %s\n", k ? setting.c_str() : "default", tuned, fused,
                e->graph_check(1).c_str());
    if (k == 1) t = {fused, tuned, knobs};
    out[k] = e->run(px.data(), 1);
  }
  expect_r18vd_outputs_agree(out[0], out[1], 1, 0.01, "fp16");
  return t;
}

TEST(CudaConvTuneGraph, R18vdTunedPlansKeepTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const Tuned t = tuned_against_default("DETFORGE_CUDA_CONV_TUNE_GRAPH=4");
  // Every fused conv goes through the in-graph timing (its report names how many plans it
  // built); a conv for which none of the K plans builds would fall back to cuDNN's candidate.
  EXPECT_GE(t.tuned, t.fused - 2) << "of " << t.fused << " fused convs";
  EXPECT_EQ(t.knob_reports, 0);
}

// DETFORGE_CUDA_CONV_KNOBS: the convs of at most 40x40 output pixels time split/tile-knob variants of
// the heuristic's first plan; whichever is taken, the outputs stay within the fp16 tolerance.
TEST(CudaConvTuneGraph, R18vdSplitKnobVariantsKeepTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const Tuned t = tuned_against_default("DETFORGE_CUDA_CONV_KNOBS=1600");
  EXPECT_GE(t.knob_reports, 10) << "convs at 40x40 and below that report knob variants";
}

}  // namespace
}  // namespace detforge::test
