// One fp32 bundle of ../shared/models/rtdetr_v2_r18vd_shapes per test binary run.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "families/rt_detr_v2/bundle_builder.h"
#include "test_paths.h"

namespace detforge::test {

inline std::string r18_bundle() {
  static std::string path;
  if (!path.empty()) return path;
  auto dir = std::filesystem::temp_directory_path() / ("detforge_gpu_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  rt_detr_v2::BuildOptions opt;
  opt.checkpoint = (shared_dir() / "models" / "rtdetr_v2_r18vd_shapes").string();
  opt.output = (dir / "r18.bundle").string();
  rt_detr_v2::build_bundle(opt);
  return path = opt.output;
}

}  // namespace detforge::test
