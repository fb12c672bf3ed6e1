// The tuning cache (cuda_tune_cache.cpp) with the r18vd engine in fp16 at batch 1: the tuned
// engine (DETFORGE_CUDA_TUNE=1) times its kernel choices at a first load and keeps them; a
// second load takes every choice from the cache, times none, and gives the first load's outputs
// bit for bit; entries that no longer apply (a plan that does not build, an own kernel of
// another name) are timed again; and the tuned outputs stay within the fp16 tolerance of the
// untuned engine's.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "engine_settings.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"
#include "r18_compare.h"

namespace detforge::test {
namespace {

namespace fs = std::filesystem;

struct Load {
  std::vector<HostTensor> out;
  cuda::CudaEngine::TuneStats stats;
  int fused = 0, cached_plans = 0;  // fused convs, and those whose plan came from the cache
};

// One engine of `g` with the settings given (DETFORGE_CUDA_TUNE=1 and a cache folder), run once on `px`.
Load load(const graph::Graph& g, const std::vector<float>& px, const std::string& settings) {
  Load l;
  auto eng = fp16_engine(g, 1, {settings});
  auto* e = dynamic_cast<cuda::CudaEngine*>(eng.get());
  EXPECT_NE(e, nullptr);
  if (!e) return l;
  l.out = eng->run(px.data(), 1);
  EXPECT_TRUE(e->graph_captured(1));
  EXPECT_EQ(e->graph_check(1), "equal");
  l.stats = e->tune_stats();
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const std::string what = e->op_launch_summary(1, i);
    if (what.find("cuDNN fused conv") == std::string::npos) continue;
    ++l.fused;
    l.cached_plans += what.find("cached tuning") != std::string::npos;
  }
  std::printf("%s: %d cached, %d timed, %d of %d fused convs on cached plans; %s\n", settings.c_str(),
              l.stats.cached, l.stats.timed, l.cached_plans, l.fused, l.stats.file.c_str());
  return l;
}

// The r18vd bundle's graph and one random image (seed).
struct R18Input {
  LoadedBundle lb;
  std::vector<float> px;
  explicit R18Input(uint32_t seed) : lb(load_bundle_graph(r18_bundle())) {
    const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
    px = random_vec(static_cast<size_t>(in[0] * in[1] * in[2]), 0, 1, seed);
  }
};

struct TempCache {
  fs::path dir = fs::temp_directory_path() / ("detforge-tune-cache-" + std::to_string(::getpid()));
  TempCache() { fs::remove_all(dir); }
  ~TempCache() { fs::remove_all(dir); }
  std::string setting() const { return "DETFORGE_CUDA_TUNE=1 DETFORGE_CUDA_TUNE_CACHE=" + dir.string(); }
};

// A tuned first load of r18vd on image `seed`, into an empty cache folder of its own.
struct FirstLoad {
  R18Input r;
  TempCache tc;
  Load first;
  explicit FirstLoad(uint32_t seed) : r(seed), first(load(r.lb.graph, r.px, tc.setting())) {}
};

TEST(CudaTuneCache, R18vdSecondLoadTakesEveryChoiceFromTheCache) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const FirstLoad f(61);
  const auto& g = f.r.lb.graph;
  const auto& px = f.r.px;
  const TempCache& tc = f.tc;
  const Load& first = f.first;
  ASSERT_TRUE(first.stats.on) << "DETFORGE_CUDA_TUNE=1 must tune";
  EXPECT_GE(first.stats.timed, 30) << "the first load times the fused convs' plans and the own-kernel choices";
  ASSERT_TRUE(fs::exists(first.stats.file)) << first.stats.file << ": " << first.stats.problem;
  EXPECT_EQ(fs::path(first.stats.file).parent_path(), tc.dir);

  const Load second = load(g, px, tc.setting());
  EXPECT_EQ(second.stats.timed, 0) << "every choice should come from " << second.stats.file;
  EXPECT_EQ(second.stats.cached, first.stats.cached + first.stats.timed);
  EXPECT_GE(second.cached_plans, second.fused - 2) << "fused convs rebuilt from the cached engine and knobs";
  ASSERT_EQ(second.out.size(), first.out.size());
  for (size_t o = 0; o < first.out.size(); ++o)
    EXPECT_EQ(second.out[o].data, first.out[o].data) << "output " << o << ": the same kernels, the same bits";

  // The tuned engine against the untuned one (the suite's pin).
  const auto untuned = fp16_engine(g, 1, {"DETFORGE_CUDA_TUNE=0"})->run(px.data(), 1);
  expect_r18vd_outputs_agree(untuned, first.out, 1, 1e-2, "tuned vs untuned");

  // DETFORGE_CUDA_TUNE_CACHE=0: timed again, nothing kept.
  const Load uncached = load(g, px, "DETFORGE_CUDA_TUNE=1 DETFORGE_CUDA_TUNE_CACHE=0");
  EXPECT_EQ(uncached.stats.cached + uncached.stats.timed, second.stats.cached);
  EXPECT_GT(uncached.stats.timed, 0);
  EXPECT_TRUE(uncached.stats.file.empty());
}

TEST(CudaTuneCache, R18vdStaleEntriesAreTimedAgain) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const FirstLoad f(62);
  const auto& g = f.r.lb.graph;
  const auto& px = f.r.px;
  const TempCache& tc = f.tc;
  const Load& first = f.first;
  ASSERT_TRUE(fs::exists(first.stats.file));
  // Every cached plan names an engine cuDNN does not have, every own choice a kernel that does not exist.
  nlohmann::json j;
  std::ifstream(first.stats.file) >> j;
  int plans = 0, owns = 0;
  for (auto& [key, e] : j["entries"].items()) {
    if (e.contains("plan") && e["plan"] != "heuristic") e["plan"] = "987654;", ++plans;
    if (e.contains("variant") && e["variant"] != "library") e["variant"] = "no_such_kernel", ++owns;
  }
  std::printf("made %d plans and %d own choices stale\n", plans, owns);
  ASSERT_GT(plans, 10);
  std::ofstream(first.stats.file) << j.dump(1);
  const Load again = load(g, px, tc.setting());
  EXPECT_EQ(again.stats.timed, plans + owns) << "the stale entries, each once, are timed again";
  expect_r18vd_outputs_agree(first.out, again.out, 1, 1e-2, "retimed vs first");
  // ... and the file holds working entries again.
  const Load third = load(g, px, tc.setting());
  EXPECT_EQ(third.stats.timed, 0);
}

// A cached plan's text (no device needed): it round-trips, and anything malformed is refused, so a
// hand-edited or truncated cache file leads to timing again, never to a half-read plan.
TEST(CudaPlanPick, TextRoundTripsAndMalformedTextIsRefused) {
  cuda::PlanPick p;
  p.engine = 41;
  p.knobs = {{1, 3}, {5, 0}, {12, -1}};
  EXPECT_EQ(p.text(), "41;1:3,5:0,12:-1");
  cuda::PlanPick q;
  ASSERT_TRUE(cuda::PlanPick::parse(p.text(), &q));
  EXPECT_EQ(q.engine, 41);
  EXPECT_EQ(q.knobs, p.knobs);
  ASSERT_TRUE(cuda::PlanPick::parse("7;", &q));
  EXPECT_EQ(q.engine, 7);
  EXPECT_TRUE(q.knobs.empty());
  for (const char* bad : {"", "41", ";1:3", "-1;", "x;", "41;1", "41;1:", "41;:3", "41;1:3,", "41;1:3,,2:2", "41;1:3x",
                          "41;1:99999999999999999999", "heuristic"})
    EXPECT_FALSE(cuda::PlanPick::parse(bad, &q)) << bad;
}

}  // namespace
}  // namespace detforge::test
