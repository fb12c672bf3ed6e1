// Non-finite scan: counts NaN, +Inf and -Inf in every raw output of every image, remembers where
// they first appeared (image, and the op the backend names with check_finite), and makes the
// stress inputs that provoke overflow in fp16/FP8 paths.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "detforge/detector.h"
#include "detforge/types.h"

namespace detforge::eval {

struct NonFiniteCounts {
  int64_t values = 0;  // values inspected
  int64_t nan = 0;
  int64_t pos_inf = 0;
  int64_t neg_inf = 0;
  int64_t bad() const { return nan + pos_inf + neg_inf; }
  NonFiniteCounts& operator+=(const NonFiniteCounts& o);
};

NonFiniteCounts count_nonfinite(const float* data, size_t n);

struct OutputScan {
  std::string name;  // "logits", "boxes"
  NonFiniteCounts counts;
  int64_t images_with_bad = 0;
  std::string first_bad_image;  // first image (in scan order) with a non-finite value here
};

struct ScanSummary {
  int64_t images = 0;
  int64_t images_with_bad = 0;
  std::vector<OutputScan> outputs;  // logits, boxes
  std::string first_bad_image;
  std::string first_nonfinite_op;   // the backend's first bad op on first_bad_image ("" if unknown)
  bool clean() const { return images_with_bad == 0; }
};

class NonFiniteScanner {
 public:
  NonFiniteScanner();
  // Scans one image's raw outputs; returns true when every value is finite.
  bool add(const std::string& image_name, const RawOutputs& out);
  const ScanSummary& summary() const { return s_; }

 private:
  ScanSummary s_;
};

// Inputs that provoke overflow: all black, all white, saturated noise (every channel 0 or 255,
// seeded), a 1-pixel-wide 1x4000 (width x height) strip and a 4000x1 strip of noise.
std::vector<std::pair<std::string, ImageU8>> stress_images(uint64_t seed = 1);

}  // namespace detforge::eval
