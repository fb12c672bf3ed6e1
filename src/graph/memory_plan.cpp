#include "graph/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "graph/ir.h"

namespace detforge::graph {

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, size_t align,
                       const std::function<bool(size_t, size_t)>& may_share) {
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
      if ((reqs[j].first <= reqs[i].last && reqs[i].first <= reqs[j].last) || (may_share && !may_share(i, j)))
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

ArenaRequests arena_requests(const Graph& g, const std::vector<int>& root, const std::function<size_t(int)>& bytes,
                             const std::vector<std::vector<int32_t>>& extra_reads) {
  ArenaRequests a;
  std::vector<int> index(g.tensors.size(), -1);
  auto touch = [&](TensorId t, int at, bool write) {
    if (t == kNoTensor) return;
    const int r = root[t];
    if (g.tensor(r).is_const) return;
    if (index[r] < 0) {
      index[r] = static_cast<int>(a.reqs.size());
      a.roots.push_back(r);
      a.reqs.push_back({bytes(r), at, at});
      a.users.emplace_back();
    }
    auto& l = a.reqs[index[r]];
    if (write) l.first = std::min(l.first, at);
    l.last = std::max(l.last, at);
    a.users[index[r]].push_back(at);
  };
  const int n = static_cast<int>(g.ops.size());
  for (TensorId t : g.inputs) touch(t, -1, true);
  for (int i = 0; i < n; ++i) {
    for (TensorId t : g.ops[i].inputs) touch(t, i, false);
    if (static_cast<size_t>(i) < extra_reads.size())
      for (TensorId t : extra_reads[i]) touch(t, i, false);
    for (TensorId t : g.ops[i].outputs) touch(t, i, true);
  }
  for (TensorId t : g.outputs) touch(t, n, false);
  return a;
}

}  // namespace detforge::graph
