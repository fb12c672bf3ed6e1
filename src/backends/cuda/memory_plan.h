// Liveness-based placement of activation buffers in one arena: buffers whose lifetimes (op
// index of first write .. last read) overlap never share bytes; the others may.
#pragma once
#include <cstddef>
#include <vector>

namespace detforge::cuda {

struct Lifetime {
  size_t bytes = 0;
  int first = 0;  // op index that writes it (-1: written before the first op)
  int last = 0;   // last op index that reads it (ops.size(): read after the last op)
};

// Returns one offset per lifetime (multiples of `align`) and the arena size in *total.
std::vector<size_t> plan_arena(const std::vector<Lifetime>& lt, size_t align, size_t* total);

}  // namespace detforge::cuda
