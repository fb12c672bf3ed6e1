// The public face of detforge: load a bundle, detect objects in images.
#pragma once
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "detforge/types.h"

namespace detforge {

struct DetectorOptions {
  std::string backend = "cpu";  // "cpu" | "cuda"
  int max_batch = 1;            // largest batch detect_batch accepts (1..64)
  int threads = 0;              // CPU threads, 0 = all cores
  std::string precision;        // "" = the bundle's precision
  bool check_finite = false;    // record the first op that produced a non-finite value
};

// Raw model outputs for one image, before post-processing (used by `scan` and the tests).
struct RawOutputs {
  int num_queries = 0;
  int num_classes = 0;
  std::vector<float> logits;  // [num_queries, num_classes]
  std::vector<float> boxes;   // [num_queries, 4] cx, cy, w, h normalised to [0, 1]
  std::vector<int> query_indices;  // [num_queries] encoder tokens chosen by top-k, in query order
  std::string first_nonfinite_op;  // with check_finite: first op whose output was non-finite
};

class Detector {
 public:
  static std::unique_ptr<Detector> load(const std::string& bundle_path, const DetectorOptions& opt = {});
  virtual ~Detector() = default;

  // Detections in original-image pixels, sorted by score, keeping score > threshold.
  virtual Detections detect(const ImageU8& image, float threshold = 0.5f) = 0;
  virtual std::vector<Detections> detect_batch(const std::vector<ImageU8>& images, float threshold = 0.5f) = 0;
  // Runs detect() on a worker thread; the Detector must outlive the future.
  std::future<Detections> detect_async(ImageU8 image, float threshold = 0.5f);

  virtual RawOutputs run_raw(const ImageU8& image) = 0;
  // The model's input (resized, rescaled) pixels, NHWC fp32, as the engine sees them.
  virtual std::vector<float> preprocess(const ImageU8& image) const = 0;

  virtual const std::vector<std::string>& labels() const = 0;  // id2label, by label id
  virtual std::string backend() const = 0;
  virtual int input_height() const = 0;
  virtual int input_width() const = 0;
};

}  // namespace detforge
