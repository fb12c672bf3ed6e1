#include "graph/op_order.h"

#include <algorithm>
#include <deque>
#include <string>

#include "detforge/types.h"
#include "graph/passes.h"

namespace detforge::graph {

std::vector<int> asap_order(const Graph& g) {
  const int n = static_cast<int>(g.ops.size());
  const std::vector<int> producer = producers(g);
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

std::vector<OpBits> data_ancestors(const Graph& g, const std::vector<std::vector<TensorId>>& extra_reads) {
  const size_t n = g.ops.size(), words = (n + 63) / 64;
  const std::vector<int> producer = producers(g);
  std::vector<OpBits> anc(n, OpBits(words, 0));
  for (size_t j = 0; j < n; ++j) {
    auto add = [&](TensorId t) {
      if (t == kNoTensor) return;
      const int p = producer[t];
      if (p < 0 || static_cast<size_t>(p) >= j) return;  // inputs, constants (ops are topological)
      for (size_t w = 0; w < words; ++w) anc[j][w] |= anc[p][w];
      anc[j][p >> 6] |= uint64_t{1} << (p & 63);
    };
    for (TensorId t : g.ops[j].inputs) add(t);
    if (j < extra_reads.size())
      for (TensorId t : extra_reads[j]) add(t);
  }
  return anc;
}

std::function<bool(size_t, size_t)> dag_share_rule(const std::vector<BufferRequest>& reqs,
                                                   const std::vector<std::vector<int>>& users,
                                                   const std::vector<OpBits>& anc) {
  return [&reqs, &users, &anc](size_t a, size_t b) {
    const size_t e = reqs[a].last < reqs[b].first ? a : b, l = e == a ? b : a;  // earlier, later
    if (reqs[e].last >= reqs[l].first) return true;  // lifetimes overlap: never shared anyway
    const int w = reqs[l].first;
    if (w < 0 || static_cast<size_t>(w) >= anc.size()) return false;
    for (int u : users[e])
      if (u >= 0 && !has_bit(anc[w], u)) return false;  // every u <= reqs[e].last < w
    return true;
  };
}

std::vector<int> moved_after(size_t n_ops, const std::vector<std::pair<int, std::vector<int>>>& groups) {
  std::vector<int> group_of(n_ops, -1);  // by anchor
  std::vector<char> moved(n_ops, 0);
  auto check = [n_ops](int i) {
    if (i < 0 || static_cast<size_t>(i) >= n_ops) throw Error("moved_after: op " + std::to_string(i) + " out of range");
  };
  for (size_t k = 0; k < groups.size(); ++k) {
    check(groups[k].first);
    if (group_of[groups[k].first] >= 0) throw Error("moved_after: op " + std::to_string(groups[k].first) + " anchors two groups");
    group_of[groups[k].first] = static_cast<int>(k);
    for (int i : groups[k].second) {
      check(i);
      if (moved[i]) throw Error("moved_after: op " + std::to_string(i) + " is moved twice");
      moved[i] = 1;
    }
  }
  for (const auto& gr : groups)
    if (moved[gr.first]) throw Error("moved_after: op " + std::to_string(gr.first) + " is an anchor and moved");
  std::vector<int> order;
  order.reserve(n_ops);
  for (size_t i = 0; i < n_ops; ++i) {
    if (moved[i]) continue;
    order.push_back(static_cast<int>(i));
    if (group_of[i] >= 0)
      for (int m : groups[group_of[i]].second) order.push_back(m);
  }
  return order;
}

std::vector<char> critical_ops(const Graph& g, double slack) {
  const size_t n = g.ops.size();
  const std::vector<double> head = path_costs(g);  // longest path ending with op i, i included
  const std::vector<int> producer = producers(g);
  std::vector<double> own(n), tail(n, 0.0);  // tail: longest path starting with op i
  for (size_t i = 0; i < n; ++i) own[i] = op_cost(g, g.ops[i]);
  for (size_t k = n; k-- > 0;) {
    tail[k] += own[k];
    for (TensorId t : g.ops[k].inputs)
      if (t != kNoTensor && producer[t] >= 0) tail[producer[t]] = std::max(tail[producer[t]], tail[k]);
  }
  double longest = 0;
  for (size_t i = 0; i < n; ++i) longest = std::max(longest, head[i]);
  std::vector<char> crit(n, 0);
  for (size_t i = 0; i < n; ++i) crit[i] = head[i] + tail[i] - own[i] >= longest - slack;
  return crit;
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
