// Engine timing as the bench command and bench/run_h200.sh report it. On CUDA the engine time
// is CUDA events around the graph launch alone (inputs uploaded once before); on the CPU it is
// the host clock around run().
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "bench/latency.h"

namespace detforge {
class Engine;
}

namespace detforge::bench {

struct BenchResult {
  std::string backend, precision;
  int batch = 1;
  LatencyStats engine;      // ms per forward of `batch` images
  double images_per_s = 0;  // batch / engine p50
  int graph_nodes = 0;      // CUDA: nodes of the captured graph (0 elsewhere)
  int graph_streams = 0;    // CUDA: streams the graph's ops are spread over (DETFORGE_CUDA_STREAMS)
  std::string graph_check;  // CUDA: CudaEngine::graph_check (the graph-versus-eager check at capture)
  int graph_waits = 0;      // CUDA: cross-stream dependencies in it
  int graph_memsets_replaced = 0;  // CUDA: memset nodes run as kernels (DETFORGE_CUDA_MEMSET_KERNELS)
  int small_linears = 0;  // CUDA: linears on the own small-K / small-N kernels (DETFORGE_CUDA_SMALL_LINEAR)
  // CUDA: launches that do several ops' work (DETFORGE_CUDA_BOX_STEP, _LN_ADD, _UPSAMPLE_CONCAT)
  int box_steps = 0, ln_adds = 0, upsample_concats = 0;
  // CUDA: the load-time tunings (DETFORGE_CUDA_TUNE): on or off, choices taken from the tuning
  // cache and choices timed at this load, and the cache file ("" when none).
  bool tuned = false;
  int tune_cached = 0, tune_timed = 0;
  std::string tune_cache;
  // CUDA: DETFORGE_CUDA_GREEN_SMS: the green partition's SMs (0: none) and the ops on it.
  int green_sms = 0, green_ops = 0;
};

// pixels: batch images of the engine's input, NHWC fp32.
BenchResult bench_engine(Engine& engine, const float* pixels, int batch, int warmup, int iters);
nlohmann::json to_json(const BenchResult& r);

}  // namespace detforge::bench
