// A smoke run of the bench library on the r18vd-shaped model: engine latency (CUDA events around
// the graph launch) at batch 1 and 32 in fp32 and fp16, the CUPTI kernel breakdown and end-to-end
// detect() latency. Prints one JSON line per configuration ("[ cuda bench ] {...}"); the
// assertions only check that the numbers exist. bench/run_h200.sh is the real benchmark.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "backends/cuda/cuda_engine.h"
#include "bench/engine_bench.h"
#include "bench/environment.h"
#include "bench/kernel_profile.h"
#include "detforge/detector.h"
#include "detforge/image.h"
#include "gpu_test_util.h"
#include "io/bundle_graph.h"
#include "r18_bundle.h"

namespace detforge::test {
namespace {

TEST(CudaBench, R18vdSmoke) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  const std::string bundle = r18_bundle();
  LoadedBundle lb = load_bundle_graph(bundle);
  const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
  const size_t per = static_cast<size_t>(in[0] * in[1] * in[2]);
  std::vector<float> px = random_vec(per * 32, 0, 1, 77);
  nlohmann::json all = nlohmann::json::array();
  for (const char* prec : {"fp16", "fp32"}) {
    EngineOptions eo;
    eo.max_batch = 32;
    eo.precision = prec;
    auto t0 = std::chrono::steady_clock::now();
    auto eng = make_cuda_engine(lb.graph, eo);
    std::cout << "[ cuda bench ] " << prec << " engine load (plans + capture for batch 1 and 32) "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
    for (int b : {1, 32}) {
      auto r = bench::bench_engine(*eng, px.data(), b, b == 1 ? 50 : 10, b == 1 ? 200 : 40);
      auto prof = bench::cuda_profile_forward(*eng, b, 5);
      nlohmann::json j = bench::to_json(r);
      j["profile"] = bench::to_json(prof);
      j["conv_fusion"] = dynamic_cast<cuda::CudaEngine&>(*eng).conv_fusion_summary(b);
      j["arena_mib"] = dynamic_cast<cuda::CudaEngine&>(*eng).arena_bytes() / 1048576.0;
      std::cout << "[ cuda bench ] " << j.dump() << "\n";
      EXPECT_GT(r.images_per_s, 0);
      // The r18vd defaults: three box steps, three layer-norm adds, two upsample concats.
      EXPECT_EQ(j["merged_launches"], (nlohmann::json{{"box_steps", 3}, {"ln_adds", 3}, {"upsample_concats", 2}}));
      all.push_back(j);
    }
  }
  // End to end: decoded image -> detections, host clock.
  DetectorOptions o;
  o.backend = "cuda";
  o.precision = "fp16";
  auto det = Detector::load(bundle, o);
  auto img = load_image((shared_dir() / "data/coco_val80/images/000000005001.jpg").string());
  auto e2e = bench::summarize(bench::time_host([&] { det->detect(img, 0.3f); }, 20, 100));
  nlohmann::json j = {{"e2e_fp16_b1", bench::to_json(e2e)}, {"env", bench::capture_environment()}};
  std::cout << "[ cuda bench ] " << j.dump() << "\n";
  all.push_back(j);
  if (const char* out = std::getenv("DETFORGE_BENCH_OUT")) std::ofstream(out) << all.dump(1) << "\n";
}

}  // namespace
}  // namespace detforge::test
