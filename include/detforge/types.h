// Public value types shared by every part of detforge: images, detections, errors.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace detforge {

// Every user-facing failure is a detforge::Error with one line that names the problem
// (file, field, value). The CLI prints it and exits non-zero.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Packed 8-bit RGB, row-major, stride = 3 * width.
struct ImageU8 {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
  bool empty() const { return width <= 0 || height <= 0; }
};

// Axis-aligned box in original-image pixels (x0, y0, x1, y1); not clipped, as transformers does.
struct Box {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

struct Detection {
  Box box;
  float score = 0;
  int label = 0;           // model label id (index into id2label)
  std::string label_name;  // id2label[label], empty when the model has no name for it
};

// Detections of one image, sorted by score, descending.
struct Detections {
  int image_width = 0;
  int image_height = 0;
  std::vector<Detection> items;
};

}  // namespace detforge
