#include "graph/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace detforge::graph {

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, size_t align) {
  auto round_up = [align](size_t n) { return (n + align - 1) / align * align; };
  MemoryPlan plan;
  plan.offsets.assign(reqs.size(), 0);
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (reqs[a].bytes != reqs[b].bytes) return reqs[a].bytes > reqs[b].bytes;
    return reqs[a].first < reqs[b].first;
  });
  std::vector<size_t> placed;  // indices into reqs, already given an offset
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of conflicting placed buffers
  for (size_t i : order) {
    const size_t need = round_up(std::max<size_t>(reqs[i].bytes, 1));
    busy.clear();
    for (size_t j : placed)
      if (reqs[j].first <= reqs[i].last && reqs[i].first <= reqs[j].last)
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + round_up(std::max<size_t>(reqs[j].bytes, 1)));
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [b, e] : busy) {
      if (b >= at + need) break;  // the gap before this busy range fits
      at = std::max(at, e);
    }
    plan.offsets[i] = at;
    plan.total_bytes = std::max(plan.total_bytes, at + need);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace detforge::graph
