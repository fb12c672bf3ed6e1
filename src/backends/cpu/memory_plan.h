// Arena planning for activations: each buffer has a size and a lifetime [first, last] in op
// indices (inclusive); two buffers may share bytes only when their lifetimes are disjoint.
// Greedy first-fit, largest buffer first: on the RT-DETR r18vd graph this keeps the arena close
// to the peak of simultaneously live bytes.
#pragma once
#include <cstddef>
#include <vector>

namespace detforge::cpu {

struct BufferRequest {
  size_t bytes = 0;
  int first = 0;  // op index that writes it (or -1 for "before the first op")
  int last = 0;   // last op index that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per request, multiples of `align`
  size_t total_bytes = 0;
};

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, size_t align = 64);

}  // namespace detforge::cpu
