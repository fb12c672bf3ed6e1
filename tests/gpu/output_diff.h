// Comparing two engines' output sets (the GPU determinism and race-bisect tests): equal bit for
// bit, and a one-line description of where they differ.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/engine.h"

namespace detforge::test {

inline bool same_outputs(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  bool eq = a.size() == b.size();
  for (size_t o = 0; eq && o < a.size(); ++o) eq = a[o].data == b[o].data;
  return eq;
}

// Describes how two output sets differ: per output, the count of differing values and the
// largest |difference| (a race shows as large, scattered differences; a reduction whose order
// varies, as differences of a few ulps).
inline std::string describe_difference(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  std::string s;
  for (size_t o = 0; o < a.size() && o < b.size(); ++o) {
    size_t n = 0;
    double worst = 0;
    for (size_t i = 0; i < a[o].data.size() && i < b[o].data.size(); ++i)
      if (a[o].data[i] != b[o].data[i]) {
        ++n;
        worst = std::max(worst, std::fabs(static_cast<double>(a[o].data[i]) - b[o].data[i]));
      }
    if (n)
      s += " " + a[o].name + ": " + std::to_string(n) + " values differ, max |diff| " + std::to_string(worst) + ";";
  }
  return s;
}

}  // namespace detforge::test
