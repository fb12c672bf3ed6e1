// detforge build for the rt_detr_v2 family: checkpoint → Graph → passes → bundle file.
#pragma once
#include <functional>
#include <string>

#include "graph/passes.h"

namespace detforge::rt_detr_v2 {

struct BuildOptions {
  std::string checkpoint;  // a folder or a hub id found in the local HF cache
  std::string revision;    // hub revision (commit hash or ref), optional
  std::string output;      // bundle path
  std::string precision = "fp32";  // fp32 | fp16: the engine's default precision, fp16 also stores matrices in fp16
};

struct BuildReport {
  std::string checkpoint_id, revision;
  int ops_before = 0, ops_after = 0;
  graph::PassStats passes;
  size_t bundle_bytes = 0;
  double seconds = 0;
};

// Throws detforge::Error (bad checkpoint, unsupported config, missing tensor, unwritable output).
// `progress` receives one-line stage messages ("reading weights", ...).
BuildReport build_bundle(const BuildOptions& opt, const std::function<void(const std::string&)>& progress = {});

}  // namespace detforge::rt_detr_v2
