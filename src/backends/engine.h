// The one backend interface. A backend compiles a Graph once (memory plan, kernel choices) and
// then runs it many times without allocating. Backends know no model family.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/detection_select.h"
#include "backends/image_input_spec.h"
#include "detforge/types.h"
#include "graph/ir.h"

namespace detforge {

struct EngineOptions {
  int max_batch = 1;          // run() accepts 1..max_batch images
  int threads = 0;            // CPU: 0 = all cores
  std::string precision;      // "" = the graph's own (fp32 | fp16 | fp8); a backend may refuse
  bool check_finite = false;  // record the first op whose output holds NaN/Inf (slower)
  int device = 0;             // CUDA device ordinal
};

// A host-side fp32 result, [batch, ...shape of the graph output].
struct HostTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string backend_name() const = 0;
  virtual int max_batch() const = 0;
  // pixels: batch images of the graph input, NHWC fp32, contiguous. Returns the graph outputs
  // in graph order, each with the batch as first dimension.
  virtual std::vector<HostTensor> run(const float* pixels, int batch) = 0;
  // Optional: the backend preprocesses decoded images itself (PIL-exact resize, rescale,
  // normalize as `spec` says: the same bits as preprocessing on the host) and runs. Returns
  // false, leaving `out` alone, when the backend has no such path (the caller preprocesses).
  virtual bool run_images(const ImageU8* const* images, int batch, const ImageInputSpec& spec,
                          std::vector<HostTensor>& out) {
    (void)images, (void)batch, (void)spec, (void)out;
    return false;
  }
  // Optional: as run_images(), then the selection of `sel` on the device (detection_select.h),
  // out[b] for image b. Returns false, leaving `out` alone, when the backend has no such path or
  // cannot take these outputs (the caller runs run_images() and selects on the host).
  virtual bool run_images_selected(const ImageU8* const* images, int batch, const ImageInputSpec& spec,
                                   const DetectionSelect& sel, std::vector<SelectedDetections>& out) {
    (void)images, (void)batch, (void)spec, (void)sel, (void)out;
    return false;
  }
  // With EngineOptions::check_finite: the name of the first op (checkpoint module name and op
  // kind) whose output held a non-finite value in the last run, or "" when none.
  virtual std::string first_nonfinite_op() const { return ""; }
};

// backend: "cpu" or "cuda". Throws detforge::Error when the backend is not built in or the
// graph holds an op the backend cannot run (the message names the op).
std::unique_ptr<Engine> make_engine(const std::string& backend, const graph::Graph& g,
                                    const EngineOptions& opt);
std::vector<std::string> available_backends();

// Implemented by each backend folder when built.
std::unique_ptr<Engine> make_cpu_engine(const graph::Graph& g, const EngineOptions& opt);
std::unique_ptr<Engine> make_cuda_engine(const graph::Graph& g, const EngineOptions& opt);

}  // namespace detforge
