#include "backends/cuda/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace detforge::cuda {

std::vector<size_t> plan_arena(const std::vector<Lifetime>& lt, size_t align, size_t* total) {
  const size_t n = lt.size();
  std::vector<size_t> order(n), off(n, 0);
  std::iota(order.begin(), order.end(), size_t{0});
  // Largest first, first fit: the usual greedy offset assignment (TFLite, ncnn do the same).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lt[a].bytes > lt[b].bytes; });
  std::vector<size_t> placed;
  size_t end = 0;
  for (size_t i : order) {
    const size_t sz = (lt[i].bytes + align - 1) / align * align;
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed)
      if (lt[j].first <= lt[i].last && lt[i].first <= lt[j].last)
        busy.push_back({off[j], off[j] + (lt[j].bytes + align - 1) / align * align});
    std::sort(busy.begin(), busy.end());
    size_t cand = 0;
    for (auto& [b, e] : busy) {
      if (cand + sz <= b) break;
      cand = std::max(cand, e);
    }
    off[i] = cand;
    end = std::max(end, cand + sz);
    placed.push_back(i);
  }
  *total = end;
  return off;
}

}  // namespace detforge::cuda
