// detforge detect model.bundle --image a.jpg [--image b.png ...] [--threshold 0.3]
//                 [--json out.json] [--draw out_dir/] [--backend cpu|cuda]
#include <filesystem>
#include <memory>

#include "core/atomic_file.h"
#include "detforge/detector.h"
#include "detforge/image.h"
#include "tools/detforge/cli_util.h"
#include "tools/detforge/commands.h"

namespace fs = std::filesystem;

namespace detforge::cli {

namespace {
struct DetectArgs {
  std::string bundle, json_out, draw_dir, backend = "cpu";
  std::vector<std::string> images;
  float threshold = 0.5f;
  int threads = 0;
};

// --draw DIR: created when missing, provided its parent exists; never a file.
void prepare_draw_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw Error("--draw " + dir.string() + " is a file, not a folder");
  if (!fs::exists(dir, ec)) {
    fs::path parent = dir.parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec))
      throw Error("--draw " + dir.string() + ": folder " + parent.string() + " does not exist");
    if (!fs::create_directory(dir, ec) && ec) throw Error("--draw " + dir.string() + ": " + ec.message());
  }
}
}  // namespace

void register_detect_command(CLI::App& app) {
  auto a = std::make_shared<DetectArgs>();
  auto* cmd = app.add_subcommand("detect", "Detect objects in images with a bundle; prints JSON per image");
  cmd->add_option("bundle", a->bundle, "bundle file")->required();
  cmd->add_option("--image", a->images, "image file (JPEG or PNG); repeatable")->required();
  cmd->add_option("--threshold", a->threshold, "keep detections with score > threshold")->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--json", a->json_out, "also write all results to this JSON file");
  cmd->add_option("--draw", a->draw_dir, "write each image with labelled boxes into this folder (PNG)");
  cmd->add_option("--backend", a->backend, "cpu | cuda")->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU threads (0 = all cores)");
  cmd->callback([a]() {
    // Check every output path before the slow part, so a typo costs nothing and writes nothing.
    if (!a->json_out.empty()) check_output_path(a->json_out);
    if (!a->draw_dir.empty()) prepare_draw_dir(a->draw_dir);
    std::vector<ImageU8> images;
    for (const auto& p : a->images) images.push_back(load_image(p));
    DetectorOptions opt;
    opt.backend = a->backend;
    opt.threads = a->threads;
    auto det = Detector::load(a->bundle, opt);
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < images.size(); ++i) {
      Detections d = det->detect(images[i], a->threshold);
      nlohmann::json rec = {{"image", a->images[i]}, {"width", d.image_width}, {"height", d.image_height},
                            {"detections", detections_json(d)}};
      std::printf("%s\n", rec.dump().c_str());
      std::fflush(stdout);
      all.push_back(rec);
      if (!a->draw_dir.empty()) {
        fs::path out = fs::path(a->draw_dir) / (fs::path(a->images[i]).stem().string() + ".png");
        save_png(draw_detections(images[i], d), out.string());
      }
    }
    if (!a->json_out.empty()) write_file_atomically(a->json_out, all.dump(1) + "\n");
  });
}

}  // namespace detforge::cli
