// DETFORGE_CUDA_LT_TUNE (cuda_lt_tune.cpp): the r18vd-shaped model in fp16 at batch 1 with each
// cuBLASLt linear on the fastest of its heuristic's deterministic candidates (timed in a graph),
// against the default engine (the first candidate). Candidates differ in summation order only, so
// outputs agree to the fp16 tolerance of the other tuning tests; the tuned graph must still equal
// its eager forward and replay bit for bit (no candidate with an atomic reduction).
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "detforge/types.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "output_diff.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

TEST(CudaLtTune, R18vdTunedLinearsKeepTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const size_t per = input_values_per_image(lb.graph);
  const std::vector<float> px = random_vec(per, 0, 1, 5);
  std::vector<HostTensor> out[2];
  for (int k = 0; k < 2; ++k) {
    auto eng = fp16_engine(lb.graph, 1, {k == 1 ? "DETFORGE_CUDA_LT_TUNE=8" : ""});
    auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->graph_captured(1));
    int linears = 0, reported = 0, other_than_first = 0;
    // The engine's own graph: its op indices are what op_launch_summary takes (the engine may
    // have rewritten the bundle's graph at load, so lb.graph's names would be off).
    const auto& ops = e->graph().ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string what = e->op_launch_summary(1, i);
      if (what.find("cuBLASLt linear") == std::string::npos) continue;
      ++linears;
      const auto at = what.find("candidate ");
      if (at == std::string::npos) continue;
      ++reported;
      other_than_first += what.compare(at, 12, "candidate 0 ") != 0;
      if (k == 1) std::printf("%s: %s\n", ops[i].name.c_str(), what.c_str());
    }
    EXPECT_GE(linears, 20);
    EXPECT_EQ(reported, k == 1 ? linears : 0);
    std::printf("%s: %d cuBLASLt linears, %d on another candidate than the first; graph check %s\n",
                k ? "DETFORGE_CUDA_LT_TUNE=8" : "default", linears, other_than_first, e->graph_check(1).c_str());
    out[k] = e->run(px.data(), 1);
    if (k == 1) {
      EXPECT_TRUE(same_outputs(out[k], e->run(px.data(), 1))) << "a replay differs";
      EXPECT_TRUE(same_outputs(out[k], e->run_eager(px.data(), 1))) << "the eager forward differs";
    }
  }
  expect_r18vd_outputs_agree(out[0], out[1], 1, 0.01, "fp16");
}

}  // namespace
}  // namespace detforge::test
