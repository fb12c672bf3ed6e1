// detforge demo: the embedded default job. Builds models/demo into a bundle, draws synthetic
// shape scenes, detects, prints the detections and writes annotated images.
#include <filesystem>
#include <memory>

#include "detforge/detector.h"
#include "detforge/image.h"
#include "demo/scenes.h"
#include "families/rt_detr_v2/bundle_builder.h"
#include "tools/detforge/cli_util.h"
#include "tools/detforge/commands.h"

namespace fs = std::filesystem;

namespace detforge::cli {

namespace {
struct DemoArgs {
  std::string model = DETFORGE_DEMO_MODEL_DIR, out = "demo_out", backend = "cpu";
  int count = 4;
  unsigned seed = 7;
  float threshold = 0.5f;
};

float iou(const Box& a, const Box& b) {
  float ix = std::max(0.f, std::min(a.x1, b.x1) - std::max(a.x0, b.x0));
  float iy = std::max(0.f, std::min(a.y1, b.y1) - std::max(a.y0, b.y0));
  float inter = ix * iy;
  float ua = (a.x1 - a.x0) * (a.y1 - a.y0) + (b.x1 - b.x0) * (b.y1 - b.y0) - inter;
  return ua > 0 ? inter / ua : 0.f;
}
}  // namespace

void register_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  auto* cmd = app.add_subcommand("demo", "Run the embedded demo: build the demo model, detect shapes in generated scenes");
  cmd->add_option("--model", a->model, "checkpoint folder")->capture_default_str();
  cmd->add_option("--out", a->out, "output folder (bundle, scenes, annotated images)")->capture_default_str();
  cmd->add_option("--count", a->count, "number of scenes")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", a->seed, "scene generator seed")->capture_default_str();
  cmd->add_option("--threshold", a->threshold, "score threshold")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--backend", a->backend, "cpu | cuda")->capture_default_str();
  cmd->callback([a]() {
    std::error_code ec;
    if (fs::exists(a->out, ec) && !fs::is_directory(a->out, ec)) throw Error("--out " + a->out + " is a file, not a folder");
    fs::create_directories(a->out, ec);
    if (ec) throw Error("cannot create " + a->out + ": " + ec.message());

    rt_detr_v2::BuildOptions bo;
    bo.checkpoint = a->model;
    bo.output = (fs::path(a->out) / "demo.bundle").string();
    auto rep = rt_detr_v2::build_bundle(bo, [](const std::string& s) { note("demo: " + s); });
    note("demo: bundle " + bo.output + " (" + std::to_string(rep.ops_after) + " ops)");

    DetectorOptions opt;
    opt.backend = a->backend;
    auto det = Detector::load(bo.output, opt);
    auto scenes = demo::make_demo_scenes(a->count, a->seed);
    int found = 0, total = 0;
    for (size_t i = 0; i < scenes.size(); ++i) {
      const auto& sc = scenes[i];
      std::string stem = "scene_" + std::to_string(i);
      save_png(sc.image, (fs::path(a->out) / (stem + ".png")).string());
      Detections d = det->detect(sc.image, a->threshold);
      std::printf("%s\n", nlohmann::json({{"image", stem + ".png"}, {"detections", detections_json(d)}}).dump().c_str());
      std::fflush(stdout);
      save_png(draw_detections(sc.image, d), (fs::path(a->out) / (stem + "_detections.png")).string());
      for (const auto& t : sc.truth) {
        ++total;
        for (const auto& x : d.items)
          if (x.label == t.label && iou(x.box, t.box) >= 0.5f) {
            ++found;
            break;
          }
      }
    }
    std::printf("demo: %d of %d drawn shapes found (same label, IoU >= 0.5, score > %.2f); images in %s/\n", found, total,
                a->threshold, a->out.c_str());
  });
}

}  // namespace detforge::cli
