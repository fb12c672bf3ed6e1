// graph/byte_spans: the byte sets CudaEngine::stray_reads poisons and restores around each op.
// A span missed here would poison bytes an op declares (a false report) or leave undeclared bytes
// intact (a missed one).
#include <gtest/gtest.h>

#include <vector>

#include "graph/byte_spans.h"

namespace detforge::graph {
namespace {

TEST(ByteSpans, ClipsToTheBufferSortsAndMerges) {
  const uint64_t base = 0x1000;
  const std::vector<ByteRange> rs = {
      {base + 512, base + 768},   // after the next one: sorted
      {base + 0, base + 256},
      {base + 256, base + 300},   // touches the previous: merged
      {base + 700, base + 900},   // overlaps the first: merged
      {base - 64, base + 16},     // starts before the buffer: clipped
      {base + 4000, base + 5000}, // ends after it: clipped
      {1, 2},                     // a pseudo range (the schedule's ordering tokens): dropped
      {base + 100, base + 100},   // empty: dropped
  };
  const auto s = spans_inside(rs, base, 4096);
  const std::vector<Span> want = {{0, 300}, {512, 900}, {4000, 4096}};
  EXPECT_EQ(s, want);
}

TEST(ByteSpans, GapsAreTheComplement) {
  EXPECT_EQ(span_gaps({{0, 300}, {512, 900}, {4000, 4096}}, 4096),
            (std::vector<Span>{{300, 512}, {900, 4000}}));
  EXPECT_EQ(span_gaps({{100, 200}}, 300), (std::vector<Span>{{0, 100}, {200, 300}}));
  EXPECT_EQ(span_gaps({}, 64), (std::vector<Span>{{0, 64}}));
  EXPECT_TRUE(span_gaps({{0, 64}}, 64).empty());
}

TEST(ByteSpans, SpansAndGapsCoverEveryByteOnce) {
  const std::vector<ByteRange> rs = {{10, 20}, {15, 40}, {60, 61}, {90, 200}};
  const auto keep = spans_inside(rs, 0, 100);
  const auto gap = span_gaps(keep, 100);
  std::vector<int> covered(100, 0);
  for (const auto& v : {keep, gap})
    for (const auto& [b, e] : v)
      for (uint64_t k = b; k < e; ++k) ++covered[k];
  for (int k = 0; k < 100; ++k) EXPECT_EQ(covered[k], 1) << "byte " << k;
}

}  // namespace
}  // namespace detforge::graph
