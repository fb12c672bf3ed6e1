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
#include <cstdint>
#include <functional>
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

// may_share(a, b), when given, must also hold for requests a and b to share bytes (their
// lifetimes disjoint as well): e.g. only when the later buffer's writer already depends on
// every op that touched the earlier one, so that reuse adds no ordering between ops that could
// otherwise run side by side on different streams.
MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, size_t align = 64,
                       const std::function<bool(size_t, size_t)>& may_share = {});

// One request per activation buffer of g, in first-touch order: the graph input (written at
// -1), every op's inputs, extra reads and outputs, the graph outputs (read at ops.size()).
// root[t]: the tensor whose bytes t uses (a reshape output aliases its input; root[t] = t
// otherwise); constants take no request. bytes(r): the size of root r's buffer.
struct ArenaRequests {
  std::vector<int> roots;               // per request: its root tensor
  std::vector<BufferRequest> reqs;
  std::vector<std::vector<int>> users;  // per request: every op index touching it, in order
};
struct Graph;
ArenaRequests arena_requests(const Graph& g, const std::vector<int>& root, const std::function<size_t(int)>& bytes,
                             const std::vector<std::vector<int32_t>>& extra_reads = {});

}  // namespace detforge::graph
