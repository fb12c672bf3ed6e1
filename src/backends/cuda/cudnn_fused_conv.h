// fp16 NHWC convolution with its epilogue fused through the cuDNN 9 graph API (header-only
// cudnn-frontend): y = act(conv(x, w) + b (+ residual)), act in {none, relu, silu}. Built only
// when CMake found the frontend headers (DETFORGE_CUDNN_FRONTEND_INCLUDE); otherwise, or when
// cuDNN has no engine for the pattern, the engine falls back to CudnnConv + bias_act.
// fp32 stays on the legacy path: its FMA-only math type is the guarantee of "no TF32".
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cudnn_conv.h"
#include "graph/ir.h"

namespace detforge::cuda {

class FusedConv {
 public:
  virtual ~FusedConv() = default;
  virtual size_t workspace_bytes() const = 0;
  // The chosen engine's name (cuDNN's plan name: engine and knobs) and whether cuDNN compiles its
  // kernel at run time (behavior note RUNTIME_COMPILATION; the "cudnn_generated_fort_native"
  // kernels). The engine orders convs by these (DETFORGE_CUDA_CONV_HANDLES 3 and 4).
  virtual const std::string& plan_name() const = 0;
  virtual bool runtime_compiled() const = 0;
  // Behavior note CUBLASLT_DEPENDENCY: cuDNN runs the engine through cuBLASLt.
  virtual bool uses_cublaslt() const = 0;
  virtual void run(const void* x, const void* w, const void* bias, const void* residual, void* y, void* ws,
                   cudaStream_t s) const = 0;
};

// Autotuning: with max_plans > 0, the first max_plans of cuDNN's heuristic (mode A) plans are
// built and timed on these device buffers (contents are irrelevant to the time) and the
// fastest is kept; otherwise the heuristic's first supported plan is used.
// in_graph: the candidates are heuristic modes A and B's plans (B adds engines A does not list),
// each timed inside a captured graph (conv_select.h, graph_time_us) on random x and residual
// written into these buffers, and one is taken over the first only when at least 2 % faster and
// its output matches the first's (halves_close). Why: cuDNN's own autotune times each plan from
// the host, where the frontend's per-call host work counts for the small convs of r18vd (5-16 us
// at batch 1), and CONV_TUNE=4 measured no faster (NOTES.md v9).
// One cuDNN plan by its engine and knob choices (the frontend's get_engine_and_knobs_at_index), in
// a form the engine's tuning cache stores: "engine;type:value,type:value".
struct PlanPick {
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;  // (cudnn_frontend KnobType_t, value), sorted
  std::string text() const;
  static bool parse(const std::string& text, PlanPick* out);  // false for anything malformed
  bool operator==(const PlanPick&) const = default;
};

struct ConvTune {
  int max_plans = 0;
  const void *x = nullptr, *w = nullptr, *bias = nullptr, *residual = nullptr;
  void* y = nullptr;
  void* ws = nullptr;
  cudaStream_t stream = nullptr;
  bool in_graph = false;
  // With in_graph: convs of at most this many output pixels (batch x Ho x Wo) also time plans
  // whose split or tile knobs differ from the heuristics' choice (cudnn_fused_conv.cpp,
  // add_knob_plans). 0 = off. DETFORGE_CUDA_CONV_KNOBS sets it.
  int64_t knob_max_pixels = 0;
  // A plan chosen at an earlier load (the engine's tuning cache): only it is built, with no
  // heuristics query and no timing. make_fused_conv returns nullptr (`why` says so) when it no
  // longer builds or fits, and the caller tunes again.
  const PlanPick* pick = nullptr;
  // Out, with in_graph or pick: the plan taken.
  PlanPick* taken = nullptr;
};

// nullptr when unavailable (no frontend, unsupported pattern, or workspace above ws_limit);
// `why` then says so. `plan_name`, when given, receives the chosen engine's name.
// res_after_act: y = act(conv(x, w) + b) + residual (conv2d attr res_after_act).
std::unique_ptr<FusedConv> make_fused_conv(cudnnHandle_t h, const ConvShape& s, bool has_bias, bool has_residual,
                                           graph::Act act, size_t ws_limit, std::string* why,
                                           const ConvTune* tune = nullptr, std::string* plan_name = nullptr,
                                           bool res_after_act = false);

}  // namespace detforge::cuda
