// Concurrent schedule of a sequential op list over a few streams, for backends that capture a
// forward into a graph (CUDA). At batch 1 most RT-DETR kernels fill a fraction of the GPU's SMs
// and the 187-kernel forward is a chain of short kernels; independent branches (the ResNet-vd
// shortcut, the encoder input projections, the CSP conv2 branch, the three decoder value
// projections on the fixed memory, q/k beside v) can overlap when they sit on other streams.
//
// Ops are given by the byte ranges they read and write (activation buffers after memory
// planning, which reuses bytes between tensors whose sequential lifetimes do not overlap), so
// every hazard is honoured: read-after-write, write-after-read and write-after-write on
// overlapping bytes. Op 0 comes first on stream 0 (the backend puts its input conversion there).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace detforge::graph {

struct ByteRange {
  uint64_t begin = 0, end = 0;  // [begin, end)
};

struct OpAccess {
  std::vector<ByteRange> reads, writes;
};

struct StreamSchedule {
  int streams = 1;                      // streams used (<= the maximum asked for)
  std::vector<int> stream;              // per op
  std::vector<std::vector<int>> waits;  // per op: ops on other streams to wait for before it runs
  std::vector<char> record;             // per op: 1 when another op waits for it (record an event)
  int pinned_stream = -1;               // the stream of the pinned ops (the last one), -1 when none
};

// For each op, the earlier ops it must follow (hazards on overlapping bytes), ascending.
std::vector<std::vector<int>> hazard_deps(const std::vector<OpAccess>& ops);

// Greedy list schedule in op order: an op continues the stream whose last op it depends on
// (the latest such), else opens a new stream while fewer than max_streams are in use, else
// joins the stream whose last op is oldest. It waits only for dependencies that the stream's
// order and its earlier waits do not already guarantee. max_streams = 1 gives the sequential
// order with no waits.
// pinned (optional, one flag per op): those ops run on one stream of their own, after the others
// (index streams - 1, StreamSchedule::pinned_stream), and no other op joins it; max_streams bounds
// the other streams. Why: the CUDA backend can confine that stream to a few SMs (a green context,
// cuda_green.h), so work off the critical path stops taking the path's SMs.
StreamSchedule schedule_streams(const std::vector<OpAccess>& ops, int max_streams,
                                const std::vector<char>* pinned = nullptr);

// True when every hazard of `ops` is ordered by `s` (same stream in order, or through waits);
// `why` names the first unordered pair. For tests and a debug check.
bool schedule_is_safe(const std::vector<OpAccess>& ops, const StreamSchedule& s, std::string* why = nullptr);

}  // namespace detforge::graph
