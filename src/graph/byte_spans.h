// Byte spans of one buffer (the CUDA engine's activation arena), for debugging aids that treat
// an op's declared accesses as a set of bytes: CudaEngine::stray_reads poisons every byte outside
// an op's reads and writes, then restores every byte outside its writes.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "graph/stream_schedule.h"

namespace detforge::graph {

using Span = std::pair<uint64_t, uint64_t>;  // [begin, end) in bytes from the buffer's start

// The parts of `ranges` (absolute addresses) inside [base, base + size), as offsets from base,
// sorted and merged (overlapping or touching spans become one; ranges outside drop out).
std::vector<Span> spans_inside(const std::vector<ByteRange>& ranges, uint64_t base, uint64_t size);

// The complement of sorted, merged spans in [0, size).
std::vector<Span> span_gaps(const std::vector<Span>& keep, uint64_t size);

}  // namespace detforge::graph
