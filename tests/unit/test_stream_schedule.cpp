// The multi-stream schedule (graph/stream_schedule): hazards on overlapping bytes are always
// ordered, independent branches land on different streams, and the safety checker catches a
// schedule with a wait removed.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "graph/stream_schedule.h"

using namespace detforge::graph;

namespace {

OpAccess acc(std::vector<ByteRange> r, std::vector<ByteRange> w) { return {std::move(r), std::move(w)}; }
ByteRange buf(int k) { return {uint64_t(k) * 256, uint64_t(k) * 256 + 256}; }

// 5-44 ops, each reading 0-2 and writing 1-2 random byte ranges of [0, 2300).
std::vector<OpAccess> random_ops(std::mt19937& rng) {
  const int n = 5 + static_cast<int>(rng() % 40);
  std::vector<OpAccess> ops(n);
  for (auto& op : ops) {
    const int nr = rng() % 3, nw = 1 + rng() % 2;
    auto range = [&] {
      const uint64_t b = rng() % 2000, len = 1 + rng() % 300;
      return ByteRange{b, b + len};
    };
    for (int k = 0; k < nr; ++k) op.reads.push_back(range());
    for (int k = 0; k < nw; ++k) op.writes.push_back(range());
  }
  return ops;
}

}  // namespace

TEST(StreamSchedule, ChainStaysOnOneStreamWithoutWaits) {
  std::vector<OpAccess> ops = {acc({}, {buf(0)})};
  for (int i = 1; i < 6; ++i) ops.push_back(acc({buf(i - 1)}, {buf(i)}));
  const auto s = schedule_streams(ops, 4);
  EXPECT_EQ(s.streams, 1);
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(s.stream[i], 0);
    EXPECT_TRUE(s.waits[i].empty());
  }
  EXPECT_TRUE(schedule_is_safe(ops, s));
}

TEST(StreamSchedule, DiamondBranchesRunOnTwoStreamsAndJoin) {
  // 0: x ; 1: x -> y ; 2: x -> z ; 3: y, z -> w
  std::vector<OpAccess> ops = {acc({}, {buf(0)}), acc({buf(0)}, {buf(1)}), acc({buf(0)}, {buf(2)}),
                               acc({buf(1), buf(2)}, {buf(3)})};
  const auto s = schedule_streams(ops, 2);
  EXPECT_EQ(s.streams, 2);
  EXPECT_NE(s.stream[1], s.stream[2]);
  // The join waits for exactly the branch that is not its own stream's.
  ASSERT_EQ(s.waits[3].size(), 1u);
  EXPECT_NE(s.stream[s.waits[3][0]], s.stream[3]);
  EXPECT_TRUE(s.record[s.waits[3][0]]);
  std::string why;
  EXPECT_TRUE(schedule_is_safe(ops, s, &why)) << why;
}

TEST(StreamSchedule, ReusedBytesOrderTheWriterAfterTheLastReader) {
  // 0: writes a ; 1: reads a, writes b ; 2: independent, writes c ; 3: reads c, writes a (reuse)
  std::vector<OpAccess> ops = {acc({}, {buf(0)}), acc({buf(0)}, {buf(1)}), acc({}, {buf(2)}),
                               acc({buf(2)}, {buf(0)})};
  const auto deps = hazard_deps(ops);
  EXPECT_EQ(deps[3], (std::vector<int>{0, 1, 2}));  // WAW on a (0), WAR on a (1), RAW on c (2)
  const auto s = schedule_streams(ops, 3);
  EXPECT_NE(s.stream[2], s.stream[1]);  // 2 is independent of 1
  std::string why;
  EXPECT_TRUE(schedule_is_safe(ops, s, &why)) << why;
}

TEST(StreamSchedule, PartialOverlapIsAHazardAndTouchingIsNot) {
  std::vector<OpAccess> ops = {acc({}, {{0, 100}}), acc({}, {{100, 200}}), acc({{150, 160}}, {{300, 400}})};
  const auto deps = hazard_deps(ops);
  EXPECT_TRUE(deps[1].empty());
  EXPECT_EQ(deps[2], (std::vector<int>{1}));
}

TEST(StreamSchedule, OneStreamIsTheSequentialOrder) {
  std::vector<OpAccess> ops = {acc({}, {buf(0)}), acc({}, {buf(1)}), acc({buf(0), buf(1)}, {buf(2)})};
  const auto s = schedule_streams(ops, 1);
  EXPECT_EQ(s.streams, 1);
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_TRUE(s.waits[i].empty() && s.stream[i] == 0);
  EXPECT_TRUE(schedule_is_safe(ops, s));
}

TEST(StreamSchedule, NeverMoreStreamsThanAsked) {
  std::vector<OpAccess> ops;
  for (int i = 0; i < 8; ++i) ops.push_back(acc({}, {buf(i)}));
  ops.push_back(acc({buf(0), buf(1), buf(2), buf(3), buf(4), buf(5), buf(6), buf(7)}, {buf(8)}));
  const auto s = schedule_streams(ops, 3);
  EXPECT_EQ(s.streams, 3);
  for (int st : s.stream) EXPECT_LT(st, 3);
  EXPECT_TRUE(schedule_is_safe(ops, s));
}

TEST(StreamSchedule, RandomGraphsAreAlwaysSafeAndADroppedWaitIsCaught) {
  std::mt19937 rng(1234);
  int dropped_checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const auto ops = random_ops(rng);
    const int n = static_cast<int>(ops.size());
    for (int ms = 1; ms <= 4; ++ms) {
      auto s = schedule_streams(ops, ms);
      std::string why;
      ASSERT_TRUE(schedule_is_safe(ops, s, &why)) << "trial " << trial << " streams " << ms << ": " << why;
      EXPECT_LE(s.streams, ms);
      // Removing any wait must leave some hazard unordered (waits are never redundant).
      for (int j = 0; j < n; ++j) {
        if (s.waits[j].empty()) continue;
        auto t = s;
        t.waits[j].erase(t.waits[j].begin());
        EXPECT_FALSE(schedule_is_safe(ops, t)) << "trial " << trial << ": a wait of op " << j << " was redundant";
        ++dropped_checked;
        break;
      }
    }
  }
  EXPECT_GT(dropped_checked, 50);
}

TEST(StreamSchedule, PinnedOpsHaveTheLastStreamToThemselves) {
  // 0: x ; 1: x -> v (pinned) ; 2: x -> y ; 3: y -> z ; 4: v, z -> w ; 5: x -> u (pinned)
  std::vector<OpAccess> ops = {acc({}, {buf(0)}),        acc({buf(0)}, {buf(1)}), acc({buf(0)}, {buf(2)}),
                               acc({buf(2)}, {buf(3)}),  acc({buf(1), buf(3)}, {buf(4)}),
                               acc({buf(0)}, {buf(5)})};
  const std::vector<char> pinned = {0, 1, 0, 0, 0, 1};
  const auto s = schedule_streams(ops, 4, &pinned);
  ASSERT_GE(s.pinned_stream, 1);
  EXPECT_EQ(s.pinned_stream, s.streams - 1);
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(s.stream[i] == s.pinned_stream, pinned[i] != 0) << "op " << i;
  // The join waits for the pinned producer; nothing needs to wait for op 5.
  EXPECT_NE(std::find(s.waits[4].begin(), s.waits[4].end(), 1), s.waits[4].end());
  EXPECT_TRUE(s.record[1]);
  std::string why;
  EXPECT_TRUE(schedule_is_safe(ops, s, &why)) << why;
  // With the two side ops pinned, the others need one stream (a chain); without pins, three.
  EXPECT_EQ(s.streams, 2);
  const auto plain = schedule_streams(ops, 4);
  EXPECT_EQ(plain.pinned_stream, -1);
  EXPECT_EQ(plain.streams, 3);
}

TEST(StreamSchedule, PinnedOpsStayApartOnOneStreamToo) {
  std::vector<OpAccess> ops = {acc({}, {buf(0)}), acc({buf(0)}, {buf(1)}), acc({buf(0)}, {buf(2)}),
                               acc({buf(1), buf(2)}, {buf(3)})};
  const std::vector<char> pinned = {0, 1, 0, 0};
  const auto s = schedule_streams(ops, 1, &pinned);
  EXPECT_EQ(s.streams, 2);
  EXPECT_EQ(s.pinned_stream, 1);
  EXPECT_EQ(s.stream[0], 0);
  EXPECT_EQ(s.stream[1], 1);
  EXPECT_EQ(s.stream[2], 0);
  EXPECT_EQ(s.stream[3], 0);
  std::string why;
  EXPECT_TRUE(schedule_is_safe(ops, s, &why)) << why;
}

TEST(StreamSchedule, RandomGraphsWithPinnedOpsAreSafe) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    const auto ops = random_ops(rng);
    const int n = static_cast<int>(ops.size());
    std::vector<char> pinned(n, 0);
    bool any = false;
    for (int j = 1; j < n; ++j) {
      pinned[j] = rng() % 5 == 0;
      any = any || pinned[j];
    }
    for (int ms = 1; ms <= 4; ++ms) {
      const auto s = schedule_streams(ops, ms, &pinned);
      std::string why;
      ASSERT_TRUE(schedule_is_safe(ops, s, &why)) << "trial " << trial << " streams " << ms << ": " << why;
      EXPECT_EQ(s.pinned_stream >= 0, any);
      EXPECT_LE(s.streams, ms + (any ? 1 : 0));
      for (int j = 0; j < n; ++j) EXPECT_EQ(s.stream[j] == s.pinned_stream, pinned[j] != 0);
    }
  }
}
