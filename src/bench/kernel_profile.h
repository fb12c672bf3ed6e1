// Kernel breakdown of one forward through the CUPTI activity API: every kernel, memcpy and
// memset the replayed CUDA graph runs, grouped by name pattern into convolution, GEMM,
// normalization, attention, deformable sampling, elementwise, quantize and copies.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
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
  // Per op (cuda_profile_ops only), in graph order; index -1 is the input conversion.
  struct Op {
    int index = 0;
    std::string name, kind, kernel;  // kernel: the op's longest kernel
    double ms = 0;                   // kernel + copy time per forward
    double kernels = 0;              // per forward
  };
  std::vector<Op> ops;
  // The last replayed forward as a timeline (cuda_profile_forward only): every kernel and copy
  // in start order, times relative to the first start. busy = union of the intervals; what the
  // span has beyond it is time no kernel ran (launch gaps and dependency waits).
  struct Span {
    std::string name;
    double start_us = 0, dur_us = 0;
    uint32_t stream = 0;
  };
  std::vector<Span> timeline;
  double span_us = 0, busy_us = 0;
};

// Replays the engine's graph for `batch` `forwards` times under CUPTI (CUDA engines only).
KernelProfile cuda_profile_forward(Engine& engine, int batch, int forwards = 10);
// Eager forwards (one stream, no graph) with every launch tagged by its op through CUPTI
// external correlation ids: the kernel time of each op. Kernel durations match the graph's;
// what the graph adds (overlap across streams, no launch gaps) shows in cuda_profile_forward.
KernelProfile cuda_profile_ops(Engine& engine, int batch, int forwards = 10);
// Runs `body` `calls` times under CUPTI: every kernel, copy and memset the device runs for it
// (any engine, e.g. a Detector's detect_batch: uploads, preprocessing kernels, the graph, the
// downloads), the last call's as the timeline. The call's wall time beyond the timeline's span is
// host work the device did not overlap.
KernelProfile cuda_profile_calls(const std::function<void()>& body, int calls = 10);
nlohmann::json to_json(const KernelProfile& p);

}  // namespace detforge::bench
