// Bundles built once per GPU test binary run, in a folder of this process's own.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "families/rt_detr_v2/bundle_builder.h"
#include "test_paths.h"

namespace detforge::test {

// This process's scratch folder for bundles (and checkpoints written to build them).
inline std::filesystem::path gpu_test_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("detforge_gpu_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// The fp32 bundle of `checkpoint` as gpu_test_dir()/name.
inline std::string build_test_bundle(const std::filesystem::path& checkpoint, const std::string& name) {
  rt_detr_v2::BuildOptions opt;
  opt.checkpoint = checkpoint.string();
  opt.output = (gpu_test_dir() / name).string();
  rt_detr_v2::build_bundle(opt);
  return opt.output;
}

// ../shared/models/rtdetr_v2_r18vd_shapes.
inline std::string r18_bundle() {
  static const std::string path = build_test_bundle(shared_dir() / "models" / "rtdetr_v2_r18vd_shapes", "r18.bundle");
  return path;
}

}  // namespace detforge::test
