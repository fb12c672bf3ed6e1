#include "graph/op_order.h"

#include <deque>
#include <string>

#include "detforge/types.h"

namespace detforge::graph {

std::vector<int> asap_order(const Graph& g) {
  const int n = static_cast<int>(g.ops.size());
  std::vector<int> producer(g.tensors.size(), -1);
  for (int i = 0; i < n; ++i)
    for (TensorId t : g.ops[i].outputs) producer[t] = i;
  std::vector<std::vector<int>> users(n);
  std::vector<int> pending(n, 0);
  for (int i = 0; i < n; ++i) {
    std::vector<int> seen;
    for (TensorId t : g.ops[i].inputs) {
      if (t == kNoTensor) continue;
      const int p = producer[t];
      if (p < 0 || p == i) continue;
      bool dup = false;
      for (int s : seen) dup = dup || s == p;
      if (dup) continue;
      seen.push_back(p);
      users[p].push_back(i);
      ++pending[i];
    }
  }
  std::deque<int> ready;
  for (int i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push_back(i);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop_front();
    order.push_back(i);
    for (int u : users[i])  // users are in ascending op order: ties keep the old order
      if (--pending[u] == 0) ready.push_back(u);
  }
  if (static_cast<int>(order.size()) != n) throw Error("asap_order: the graph has a cycle");
  return order;
}

void reorder_ops(Graph& g, const std::vector<int>& order) {
  const size_t n = g.ops.size();
  if (order.size() != n) throw Error("reorder_ops: the order has " + std::to_string(order.size()) +
                                     " entries for " + std::to_string(n) + " ops");
  std::vector<char> used(n, 0);
  for (int i : order) {
    if (i < 0 || static_cast<size_t>(i) >= n || used[i]) throw Error("reorder_ops: the order is not a permutation");
    used[i] = 1;
  }
  std::vector<Op> ops;
  ops.reserve(n);
  for (int i : order) ops.push_back(g.ops[i]);
  std::swap(g.ops, ops);
  try {
    g.validate();
  } catch (const Error& e) {
    std::swap(g.ops, ops);
    throw Error(std::string("reorder_ops: the order is not topological: ") + e.what());
  }
}

}  // namespace detforge::graph
