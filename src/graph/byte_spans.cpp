#include "graph/byte_spans.h"

#include <algorithm>

namespace detforge::graph {

std::vector<Span> spans_inside(const std::vector<ByteRange>& ranges, uint64_t base, uint64_t size) {
  std::vector<Span> v;
  for (const auto& r : ranges) {
    const uint64_t b = std::max(r.begin, base), e = std::min(r.end, base + size);
    if (b < e) v.emplace_back(b - base, e - base);
  }
  std::sort(v.begin(), v.end());
  std::vector<Span> m;
  for (const auto& s : v)
    if (!m.empty() && s.first <= m.back().second)
      m.back().second = std::max(m.back().second, s.second);
    else
      m.push_back(s);
  return m;
}

std::vector<Span> span_gaps(const std::vector<Span>& keep, uint64_t size) {
  std::vector<Span> g;
  uint64_t at = 0;
  for (const auto& s : keep) {
    if (s.first > at) g.emplace_back(at, s.first);
    at = std::max(at, s.second);
  }
  if (at < size) g.emplace_back(at, size);
  return g;
}

}  // namespace detforge::graph
