#include "graph/stream_schedule.h"

#include <algorithm>

namespace detforge::graph {

namespace {

bool overlap(const std::vector<ByteRange>& a, const std::vector<ByteRange>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (x.begin < y.end && y.begin < x.end && x.begin < x.end && y.begin < y.end) return true;
  return false;
}

// A set of op indices as a bitset.
struct OpSet {
  std::vector<uint64_t> w;
  explicit OpSet(size_t n = 0) : w((n + 63) / 64, 0) {}
  bool test(int i) const { return (w[i >> 6] >> (i & 63)) & 1u; }
  void set(int i) { w[i >> 6] |= uint64_t{1} << (i & 63); }
  void merge(const OpSet& o) {
    for (size_t k = 0; k < w.size(); ++k) w[k] |= o.w[k];
  }
};

// Ops guaranteed to have finished before each op starts, from stream order and waits.
std::vector<OpSet> happens_before(const StreamSchedule& s, size_t n) {
  std::vector<OpSet> hb(n, OpSet(n));
  std::vector<int> tail(std::max(s.streams, 1), -1);
  for (size_t j = 0; j < n; ++j) {
    const int st = s.stream[j];
    if (tail[st] >= 0) {
      hb[j].merge(hb[tail[st]]);
      hb[j].set(tail[st]);
    }
    for (int d : s.waits[j]) {
      if (d < 0 || static_cast<size_t>(d) >= j) continue;  // a wait on a later op orders nothing
      hb[j].merge(hb[d]);
      hb[j].set(d);
    }
    tail[st] = static_cast<int>(j);
  }
  return hb;
}

}  // namespace

std::vector<std::vector<int>> hazard_deps(const std::vector<OpAccess>& ops) {
  std::vector<std::vector<int>> deps(ops.size());
  for (size_t j = 0; j < ops.size(); ++j)
    for (size_t i = 0; i < j; ++i)
      if (overlap(ops[i].writes, ops[j].reads) || overlap(ops[i].writes, ops[j].writes) ||
          overlap(ops[i].reads, ops[j].writes))
        deps[j].push_back(static_cast<int>(i));
  return deps;
}

StreamSchedule schedule_streams(const std::vector<OpAccess>& ops, int max_streams, const std::vector<char>* pinned) {
  const size_t n = ops.size();
  max_streams = std::max(max_streams, 1);
  StreamSchedule s;
  s.stream.assign(n, 0);
  s.waits.assign(n, {});
  s.record.assign(n, 0);
  auto is_pinned = [&](size_t j) { return pinned && j < pinned->size() && (*pinned)[j]; };
  bool any_pinned = false;
  for (size_t j = 0; j < n; ++j) any_pinned = any_pinned || is_pinned(j);
  if (max_streams == 1 && !any_pinned) return s;
  const auto deps = hazard_deps(ops);
  std::vector<OpSet> anc(n, OpSet(n)), hb(n, OpSet(n));
  std::vector<int> tail;
  constexpr int kPinned = -2;  // numbered after the others once their count is known
  int pinned_tail = -1;
  for (size_t j = 0; j < n; ++j) {
    for (int d : deps[j]) {
      anc[j].merge(anc[d]);
      anc[j].set(d);
    }
    // A pinned op goes to the pinned stream; any other continues the stream whose last op it needs
    // anyway (the latest such op).
    int st = is_pinned(j) ? kPinned : -1, best_tail = -1;
    for (size_t k = 0; k < tail.size() && st != kPinned; ++k)
      if (anc[j].test(tail[k]) && tail[k] > best_tail) st = static_cast<int>(k), best_tail = tail[k];
    if (st == -1) {
      if (static_cast<int>(tail.size()) < max_streams) {
        st = static_cast<int>(tail.size());
        tail.push_back(-1);
      } else {
        st = static_cast<int>(std::min_element(tail.begin(), tail.end()) - tail.begin());
      }
    }
    int& last = st == kPinned ? pinned_tail : tail[st];
    OpSet cur(n);
    if (last >= 0) {
      cur.merge(hb[last]);
      cur.set(last);
    }
    for (auto it = deps[j].rbegin(); it != deps[j].rend(); ++it) {
      const int d = *it;
      if (cur.test(d)) continue;
      s.waits[j].push_back(d);
      s.record[d] = 1;
      cur.merge(hb[d]);
      cur.set(d);
    }
    hb[j] = std::move(cur);
    last = static_cast<int>(j);
    s.stream[j] = st;
  }
  s.streams = std::max<int>(1, static_cast<int>(tail.size()));
  if (any_pinned) {
    // Op 0 is never pinned in practice (the input conversion); when it is, stream 0 stays empty.
    s.pinned_stream = tail.empty() ? 1 : s.streams;
    s.streams = s.pinned_stream + 1;
    for (int& st : s.stream)
      if (st == kPinned) st = s.pinned_stream;
  }
  return s;
}

bool schedule_is_safe(const std::vector<OpAccess>& ops, const StreamSchedule& s, std::string* why) {
  const size_t n = ops.size();
  if (s.stream.size() != n || s.waits.size() != n) {
    if (why) *why = "schedule size differs from the op count";
    return false;
  }
  for (size_t j = 0; j < n; ++j)
    if (s.stream[j] < 0 || s.stream[j] >= s.streams) {
      if (why) *why = "op " + std::to_string(j) + " is on stream " + std::to_string(s.stream[j]);
      return false;
    }
  const auto hb = happens_before(s, n);
  const auto deps = hazard_deps(ops);
  for (size_t j = 0; j < n; ++j)
    for (int d : deps[j])
      if (!hb[j].test(d)) {
        if (why) *why = "op " + std::to_string(j) + " may run before op " + std::to_string(d) + " it depends on";
        return false;
      }
  return true;
}

}  // namespace detforge::graph
