// Diagnostic for the graph-versus-eager defect of session 22 (NOTES.md v25: the default 4-stream
// batch-1 graph differed from the eager forward on ~1 in 60 fresh inputs, replays of one input
// never did). Disabled: run with --gtest_also_run_disabled_tests; DETFORGE_RACE_INPUTS inputs
// (default 200). Per input k, three forwards:
//   G1 = graph(k), the forward before it ran on input k-1;
//   E  = eager(k), the reference;
//   G2 = graph(k), the forward before it (E) ran on the same input.
// A graph that reads bytes before this forward wrote them sees the previous forward's values:
// G1 differs now and then, G2 never (its stale bytes are this input's). A kernel whose result
// depends on timing alone differs in both. With DETFORGE_CUDA_ARENA_REUSE=0 every op's output
// survives the forward, so a differing G1 is read back op by op and the first ops that differ
// from E are named (the reader of stale bytes is the first).
// Session 23, call 1 (H200, 240 inputs each): default 4 streams 4 inputs differ, each in G1 and G2
// alike and equal to its rerun (not a race: deterministic per input and schedule); ARENA_REUSE=0
// none; STREAMS=1 2 other inputs (there the graph launches eager's kernel sequence on one stream,
// so only timing, PDL or the graph's own rewrites differ: the PDL=0 and MEMSET_KERNELS=0 settings
// below tell those apart).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "op_diff.h"
#include "output_diff.h"
#include "r18_bundle.h"

namespace detforge::test {
namespace {

// DETFORGE_RACE_INPUTS, default 200.
int race_inputs() {
  const char* v = std::getenv("DETFORGE_RACE_INPUTS");
  return v ? std::max(1, std::atoi(v)) : 200;
}

class CudaRaceBisect : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaRaceBisect, DISABLED_R18vdGraphAfterAnotherInputAndAfterTheSame) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const int n_inputs = race_inputs();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const size_t per = input_values_per_image(lb.graph);
  const std::string setting = GetParam();
  const bool by_op = setting.find("ARENA_REUSE=0") != std::string::npos;
  auto eng = fp16_engine(lb.graph, 1, {setting});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(1));
  std::unique_ptr<Engine> ref_engine;
  int after_other = 0, after_same = 0, rerun_differs = 0;
  std::string report, which;  // which: every input where G1 differed (clustered in time?)
  std::vector<float> px;
  for (int k = 0; k < n_inputs; ++k) {
    px = random_vec(per, 0, 1, 5000 + k);
    const auto g1 = e->run(px.data(), 1);
    std::vector<cuda::CudaEngine::OpOutput> g1_ops;
    if (by_op) g1_ops = e->op_outputs(1);
    const auto x = e->run_eager(px.data(), 1);
    const bool bad1 = !same_outputs(g1, x);
    if (bad1) which += " " + std::to_string(k);
    if (bad1 && after_other++ < 4) {
      std::vector<cuda::CudaEngine::OpOutput> x_ops;  // the eager forward's, before anything else runs
      if (by_op) x_ops = e->op_outputs(1);
      report += "\n  input " + std::to_string(k) + ", graph after another input:" + describe_difference(x, g1);
      // Bound to the input or to a stretch of time: the graph once more after a pause.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const auto g3 = e->run(px.data(), 1);
      report += std::string("\n    the graph again 300 ms later ") + (same_outputs(g3, x) ? "equals" : "differs from") +
                " eager";
      // Is eager the odd one (a library kernel's early start in the eager forward, test_cuda_eager_fence.cpp)?
      const auto x2 = e->run_eager(px.data(), 1);
      report += std::string("\n    eager again ") + (same_outputs(x2, x) ? "equals" : "differs from") +
                " the first eager, " + (same_outputs(x2, g1) ? "equals" : "differs from") + " the graph";
      // Which side is off: the eager forward of an engine without arena reuse (every tensor in
      // bytes of its own) against each.
      // The same settings (the PDL switch is process-wide: an engine sets it when created).
      if (!ref_engine) ref_engine = fp16_engine(lb.graph, 1, {setting + " DETFORGE_CUDA_ARENA_REUSE=0"});
      const auto r = dynamic_cast<cuda::CudaEngine*>(ref_engine.get())->run_eager(px.data(), 1);
      report += std::string("\n    eager without reuse ") + (same_outputs(r, x) ? "equals" : "differs from") +
                " this eager, " + (same_outputs(r, g1) ? "equals" : "differs from") + " this graph";
      if (after_other == 1) {  // data-dependent writes outside an op's outputs, on this input (eager)
        std::string list;
        for (const auto& w : e->stray_writes(1)) list += "\n      " + w;
        report += "\n    stray writes on this input: " + (list.empty() ? std::string("none") : list);
      }
      if (by_op) {
        std::string firsts;
        const int ops = changed_outputs(*e, 1, g1_ops, x_ops, &firsts);
        report += "\n    " + std::to_string(ops) + " ops differ, first:" + firsts;
      }
    }
    const auto g2 = e->run(px.data(), 1);
    if (!same_outputs(g2, x) && after_same++ < 4)
      report += "\n  input " + std::to_string(k) + ", graph after eager on the same input:" +
                describe_difference(x, g2);
    if (bad1 && !same_outputs(g2, g1)) ++rerun_differs;
  }
  std::printf("race bisect (%s, streams %d, graph check %s): of %d inputs the graph differed from eager on %d after "
              "another input (inputs%s), on %d after eager on the same input (%d of the first kind differed from their "
              "rerun)%s\n",
              setting.empty() ? "default" : setting.c_str(), e->graph_streams(1), e->graph_check(1).c_str(), n_inputs,
              after_other, which.c_str(), after_same, rerun_differs, report.c_str());
  EXPECT_EQ(after_other, 0);
  EXPECT_EQ(after_same, 0);
}

// The same inputs with DETFORGE_CUDA_SNAPSHOTS=1 (every op's output copied inside the graph, and
// in the eager forward): on an input where the graph differs, the first ops whose snapshots
// differ. In call 1 of session 23 a rerun right after repeated the difference bit for bit (after
// another input or the same), so the copies should not hide it as they would hide a race.
TEST(CudaRaceBisectSnapshots, DISABLED_R18vdFirstOpsThatDiffer) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const int n_inputs = race_inputs();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const size_t per = input_values_per_image(lb.graph);
  auto eng = fp16_engine(lb.graph, 1, {"DETFORGE_CUDA_SNAPSHOTS=1 DETFORGE_CUDA_GRAPH_CHECK=0"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->graph_captured(1));
  int differing = 0;
  std::string report;
  for (int k = 0; k < n_inputs; ++k) {
    const std::vector<float> px = random_vec(per, 0, 1, 5000 + k);
    const auto g = e->run(px.data(), 1);
    const auto gs = e->op_snapshots(1);
    const auto x = e->run_eager(px.data(), 1);
    if (same_outputs(g, x)) continue;
    std::string firsts;
    const int ops = changed_ops(*e, 1, e->op_snapshots(1), gs, &firsts);
    if (differing++ < 6)
      report += "\n  input " + std::to_string(k) + ":" + describe_difference(x, g) + "\n    " + std::to_string(ops) +
                " ops differ, first:" + firsts;
  }
  std::printf("race bisect with snapshots (streams %d): of %d inputs the graph differed from eager on %d%s\n",
              e->graph_streams(1), n_inputs, differing, report.c_str());
  EXPECT_EQ(differing, 0);
}

// CudaEngine::stray_reads on the inputs where call 1 of session 23 saw the graph differ (seeds
// 5168 and 5183 of the four on 4 streams, 5039 and 5127 on one) and one where it did not: no op may
// read arena bytes outside its declared inputs and outputs.
TEST(CudaRaceBisectStrayReads, DISABLED_R18vdOnTheInputsThatDiffered) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  LoadedBundle lb = load_bundle_graph(r18_bundle());
  const size_t per = input_values_per_image(lb.graph);
  auto eng = fp16_engine(lb.graph, 1, {"DETFORGE_CUDA_GRAPH_CHECK=0"});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  ASSERT_NE(e, nullptr);
  int with = 0;
  for (uint32_t seed : {5168u, 5183u, 5039u, 5127u, 5000u}) {
    const std::vector<float> px = random_vec(per, 0, 1, seed);
    // Does the graph differ on this seed again, in a fresh process? (Call 1's four differing
    // inputs were 168-191 of 240: bound to the input, or to a stretch of time?)
    const auto g = e->run(px.data(), 1);
    const bool differs = !same_outputs(g, e->run_eager(px.data(), 1));
    const auto found = e->stray_reads(1);  // on the inputs run_eager left in place
    std::string list;
    for (size_t k = 0; k < found.size() && k < 6; ++k) list += "\n    " + found[k];
    std::printf("stray reads, seed %u (graph %s eager): %zu ops%s\n", seed, differs ? "differs from" : "equals",
                found.size(), list.c_str());
    with += !found.empty();
  }
  EXPECT_EQ(with, 0);
}

// 0 is the default (the eager forward fenced, DETFORGE_CUDA_EAGER_FENCE=1 since session 24); the
// others without the fence, as sessions 22-23 ran: 1 their default, 2 no arena reuse, 3 one stream,
// 4 one stream without PDL, 5 one stream without the memset rewrite.
INSTANTIATE_TEST_SUITE_P(R18vd, CudaRaceBisect,
                         ::testing::Values("DETFORGE_CUDA_GRAPH_CHECK=0",
                                           "DETFORGE_CUDA_EAGER_FENCE=0 DETFORGE_CUDA_GRAPH_CHECK=0",
                                           "DETFORGE_CUDA_EAGER_FENCE=0 DETFORGE_CUDA_ARENA_REUSE=0 "
                                           "DETFORGE_CUDA_GRAPH_CHECK=0",
                                           "DETFORGE_CUDA_EAGER_FENCE=0 DETFORGE_CUDA_STREAMS=1 DETFORGE_CUDA_GRAPH_CHECK=0",
                                           "DETFORGE_CUDA_EAGER_FENCE=0 DETFORGE_CUDA_STREAMS=1 DETFORGE_CUDA_PDL=0 "
                                           "DETFORGE_CUDA_GRAPH_CHECK=0",
                                           "DETFORGE_CUDA_EAGER_FENCE=0 DETFORGE_CUDA_STREAMS=1 "
                                           "DETFORGE_CUDA_MEMSET_KERNELS=0 DETFORGE_CUDA_GRAPH_CHECK=0"));

}  // namespace
}  // namespace detforge::test
