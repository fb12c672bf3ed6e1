// The r18vd engine (fp16, batch 2) built with some DETFORGE_* settings, held to the default
// engine: for GPU tests of opt-in engine paths.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {

// On random pixels (seed): the engine with `settings` (engine_with) captures its graph, the graph
// equals its eager forward bit for bit, and its outputs agree with the default engine's within
// 1e-2 (expect_r18vd_outputs_agree). `inspect`, when given, sees the engine first (its counts and
// summaries); `base_settings`, when given, are the compared engine's instead of the defaults. Needs
// a GPU and ../shared (the caller checks).
inline void expect_settings_keep_r18vd_outputs(const std::string& settings, uint32_t seed,
                                               const std::function<void(cuda::CudaEngine&)>& inspect = {},
                                               const std::string& base_settings = "") {
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const std::vector<float> px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]) * 2, 0, 1, seed);
  auto base = engine_with(lb.graph, "fp16", 2, {base_settings});
  const auto want = base->run(px.data(), 2);
  auto eng = engine_with(lb.graph, "fp16", 2, {settings});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  if (inspect) inspect(*e);
  ASSERT_TRUE(e->graph_captured(2));
  EXPECT_EQ(e->graph_check(2), "equal");
  const auto got = eng->run(px.data(), 2);
  ASSERT_EQ(got.size(), want.size());
  expect_r18vd_outputs_agree(want, got, 2, 1e-2, settings.c_str());
  const auto eager = e->run_eager(px.data(), 2);
  for (size_t o = 0; o < got.size(); ++o) EXPECT_EQ(eager[o].data, got[o].data) << settings << ": output " << o;
}

}  // namespace detforge::test
