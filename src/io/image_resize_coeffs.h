// The fixed-point coefficient tables and the pass-order rule behind resize_bilinear_pil, exposed
// so another implementation (the CUDA backend's device resize) computes them with the very same
// host arithmetic and so produces the same bytes.
#pragma once
#include <cstdint>
#include <vector>

namespace detforge {

// Weights carry 22 fractional bits (32 - 8 - 2, as Pillow); accumulators start at
// 1 << (kPilPrecisionBits - 1) and the result is clamp(acc >> kPilPrecisionBits, 0, 255).
constexpr int kPilPrecisionBits = 32 - 8 - 2;

// Taps of one pass (one axis) from in_size to out_size: output index i reads `count[i]` source
// indices from `first[i]` with weights weights[i * ksize + k] (zero beyond count[i]).
struct PilTaps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};
PilTaps pil_bilinear_taps(int in_size, int out_size);

// Pillow 13's pass order for in_w x in_h -> out_w x out_h: true when the vertical pass runs
// first (the height shrinks by more than twice what the width shrinks).
bool pil_vertical_first(int in_w, int in_h, int out_w, int out_h);

}  // namespace detforge
