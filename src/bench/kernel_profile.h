// Kernel breakdown of one forward through the CUPTI activity API: every kernel, memcpy and
// memset the replayed CUDA graph runs, grouped by name pattern into convolution, GEMM,
// normalization, attention, deformable sampling, elementwise, quantize and copies.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace detforge {
class Engine;
}

namespace detforge::bench {

// The group a kernel name belongs to (exposed for tests).
std::string kernel_group(const std::string& name);

struct KernelProfile {
  bool available = false;  // false when built without CUPTI or the engine is not CUDA
  std::string why;         // reason when unavailable
  int forwards = 0;
  double kernels_per_forward = 0;
  double gpu_ms_per_forward = 0;  // sum of kernel + copy durations / forwards
  std::map<std::string, double> group_ms;  // per forward
  std::map<std::string, double> group_count;
  std::vector<std::pair<std::string, double>> top_kernels;  // name, ms per forward, largest first
};

// Replays the engine's graph for `batch` `forwards` times under CUPTI (CUDA engines only).
KernelProfile cuda_profile_forward(Engine& engine, int batch, int forwards = 10);
nlohmann::json to_json(const KernelProfile& p);

}  // namespace detforge::bench
