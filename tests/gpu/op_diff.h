// Op-by-op comparison of two forwards of one CUDA engine, for the determinism and race-bisect
// diagnostics: how many ops' outputs differ and the first three in op order.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "core/half.h"

namespace detforge::test {

// Two DETFORGE_CUDA_SNAPSHOTS sets (op_snapshots): the ops whose copies differ; the first three
// (name, op, how it runs at `batch`, changed bytes) go to *firsts.
inline int changed_ops(cuda::CudaEngine& e, int batch, const std::vector<cuda::CudaEngine::OpSnapshot>& a,
                       const std::vector<cuda::CudaEngine::OpSnapshot>& b, std::string* firsts) {
  EXPECT_EQ(a.size(), b.size());
  int changed = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    EXPECT_EQ(a[k].op, b[k].op);
    if (a[k].bytes == b[k].bytes) continue;
    if (changed++ < 3) {
      size_t bytes = 0;
      for (size_t j = 0; j < a[k].bytes.size(); ++j) bytes += a[k].bytes[j] != b[k].bytes[j];
      *firsts += "\n    " + a[k].name + " (op " + std::to_string(a[k].op) + ", " + e.op_launch_summary(batch, a[k].op) +
                 "): " + std::to_string(bytes) + " of " + std::to_string(a[k].bytes.size()) + " bytes";
    }
  }
  return changed;
}

// Two op_outputs() sets (an engine without arena reuse): the ops whose outputs differ; the first
// three (name, how it runs at `batch`, values that differ, largest |difference|) go to *firsts.
inline int changed_outputs(cuda::CudaEngine& e, int batch, const std::vector<cuda::CudaEngine::OpOutput>& g,
                           const std::vector<cuda::CudaEngine::OpOutput>& x, std::string* firsts) {
  EXPECT_EQ(g.size(), x.size());
  auto value = [](const cuda::CudaEngine::OpOutput& o, size_t k) -> double {
    if (o.i32) return reinterpret_cast<const int32_t*>(o.bytes.data())[k];
    return fp16_to_fp32(reinterpret_cast<const uint16_t*>(o.bytes.data())[k]);
  };
  int changed = 0;
  for (size_t j = 0; j < g.size() && j < x.size(); ++j) {
    if (g[j].bytes == x[j].bytes || changed++ >= 3) continue;
    const size_t n = g[j].bytes.size() / (g[j].i32 ? 4 : 2);
    size_t diff = 0;
    double worst = 0;
    for (size_t q = 0; q < n; ++q) {
      const double a = value(g[j], q), b = value(x[j], q);
      if (a != b) ++diff, worst = std::max(worst, std::fabs(a - b));
    }
    *firsts += "\n    " + e.graph().ops[g[j].op].name + " (" + e.op_launch_summary(batch, g[j].op) + "): " +
               std::to_string(diff) + " of " + std::to_string(n) + " values, max |diff| " + std::to_string(worst);
  }
  return changed;
}

}  // namespace detforge::test
