// The CPU Engine: compiles a Graph once (op support check, memory plan, oneDNN primitives with
// reordered weights, own kernels) and runs it with OpenMP over opt.threads cores.
// Every tensor dtype except i32 runs as fp32 here. One arena serves all runs, so run() is not
// reentrant: use one engine per concurrent caller. Images of a batch run one after another
// through batch-1 primitives; each op is parallel over rows/pixels/heads inside an image.
#pragma once
#include <dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/step.h"
#include "backends/engine.h"

namespace detforge::cpu {

class CpuEngine final : public Engine {
 public:
  CpuEngine(const graph::Graph& g, const EngineOptions& opt);
  ~CpuEngine() override;
  std::string backend_name() const override { return "cpu"; }
  int max_batch() const override { return max_batch_; }
  std::vector<HostTensor> run(const float* pixels, int batch) override;
  std::string first_nonfinite_op() const override { return first_nonfinite_; }
  // Graphs with several inputs (unit tests build these): one pointer per graph input, each
  // holding `batch` images of that input back to back. run() is this with the one input.
  std::vector<HostTensor> run_inputs(const std::vector<const float*>& inputs, int batch);

  // Introspection for tests and the bench report.
  size_t arena_bytes() const { return arena_bytes_; }
  size_t scratch_bytes() const { return scratch_bytes_; }
  // Sum of all planned activation buffers (what the arena would be without reuse).
  size_t unshared_bytes() const { return unshared_bytes_; }
  int threads() const { return threads_; }
  // Per-op wall time of the runs since profiling was switched on (ms summed over runs), in
  // graph order; reshape (an alias) has no entry. Off by default: it adds one clock read per op.
  struct OpTime {
    std::string label;  // "name (kind)"
    std::string kind;
    double ms = 0;
  };
  void set_profiling(bool on);
  const std::vector<OpTime>& op_times() const { return op_times_; }
  int profiled_runs() const { return profiled_runs_; }

 private:
  struct OpEntry {
    std::string label;                 // "name (kind)"
    std::string kind;
    std::vector<graph::TensorId> outs;  // f32 outputs to scan with check_finite
    StepPtr step;                      // null for reshape (an alias)
  };
  struct OutputInfo {
    graph::TensorId id;
    std::string name;
    std::vector<int64_t> shape;
    bool is_i32;
  };

  void scan_finite(const OpEntry& e, int batch);

  bool profiling_ = false;
  int profiled_runs_ = 0;
  std::vector<OpTime> op_times_;        // one per op with a step
  std::vector<int> op_time_index_;      // ops_ index -> op_times_ index (-1: none)

  int max_batch_ = 1;
  int threads_ = 1;
  bool check_finite_ = false;
  std::string first_nonfinite_;
  dnnl::engine eng_;
  dnnl::stream stream_;
  float* arena_ = nullptr;
  void* scratch_ = nullptr;
  size_t arena_bytes_ = 0, scratch_bytes_ = 0, unshared_bytes_ = 0;
  std::vector<std::vector<float>> const_store_;
  std::vector<graph::TensorId> inputs_;
  std::vector<const float*> feed_ = std::vector<const float*>(1);  // run()'s one input, no per-run allocation
  std::vector<std::vector<graph::TensorId>> input_aliases_;  // per input: tensors sharing its memory
  ExecCtx ctx_;
  std::vector<OpEntry> ops_;
  std::vector<OutputInfo> outputs_;
};

}  // namespace detforge::cpu
