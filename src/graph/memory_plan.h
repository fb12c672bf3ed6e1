// Arena planning for activation buffers, shared by the backends: each buffer has a size and a
// lifetime [first, last] in op indices (inclusive); two buffers may share bytes only when their
// lifetimes are disjoint. Greedy first-fit, largest buffer first (ties: earlier `first` first,
// then request order), as TFLite and ncnn do: on the RT-DETR r18vd graph this keeps the arena
// close to the peak of simultaneously live bytes.
//
// Conventions: `first` is the op index that writes the buffer, -1 for a buffer written before
// the first op (a graph input); `last` is the last op index that reads it, ops.size() for a
// graph output read after the last op. Every buffer occupies its bytes rounded up to `align`,
// and at least `align` bytes (a zero-byte buffer still gets a distinct, aligned slot).
#pragma once
#include <cstddef>
#include <vector>

namespace detforge::graph {

struct BufferRequest {
  size_t bytes = 0;
  int first = 0;  // op index that writes it (or -1 for "before the first op")
  int last = 0;   // last op index that reads it (inclusive; ops.size() for graph outputs)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // per request, multiples of `align`
  size_t total_bytes = 0;
};

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, size_t align = 64);

}  // namespace detforge::graph
