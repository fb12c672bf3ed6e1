// ParallelCopy: every byte copied, ready(i) in order and only once part i is complete, an
// exception from ready() surfacing after the copies, and no race across many small jobs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel_copy.h"

namespace detforge {
namespace {

struct Job {
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<ParallelCopy::Part> parts;
};

Job make_job(const std::vector<size_t>& sizes, uint32_t seed) {
  Job j;
  std::mt19937 rng(seed);
  for (size_t n : sizes) {
    std::vector<uint8_t> s(n);
    for (auto& b : s) b = static_cast<uint8_t>(rng());
    j.src.push_back(std::move(s));
    j.dst.emplace_back(n, 0xAB);
  }
  for (size_t i = 0; i < sizes.size(); ++i) j.parts.push_back({j.dst[i].data(), j.src[i].data(), sizes[i]});
  return j;
}

const std::vector<size_t> kSizes = {921600, 0, 1, ParallelCopy::kChunk - 1, ParallelCopy::kChunk,
                                    ParallelCopy::kChunk + 1, 3 * ParallelCopy::kChunk + 17, 5};

TEST(ParallelCopy, CopiesEveryPartAndHandsThemOverInOrderOnceComplete) {
  for (int threads : {1, 2, 4, 7}) {
    ParallelCopy pc(threads);
    EXPECT_EQ(pc.threads(), threads);
    Job j = make_job(kSizes, 11 + threads);
    std::vector<int> order;
    pc.run(j.parts, [&](int i) {
      order.push_back(i);
      EXPECT_EQ(j.dst[i], j.src[i]) << "part " << i << " handed over before it was complete, threads " << threads;
    });
    ASSERT_EQ(order.size(), kSizes.size());
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i));
    for (size_t i = 0; i < kSizes.size(); ++i) EXPECT_EQ(j.dst[i], j.src[i]) << "part " << i;
  }
}

TEST(ParallelCopy, AnExceptionFromReadyIsRethrownAfterEveryCopy) {
  for (int threads : {1, 4}) {  // the caller alone follows the same rule
    ParallelCopy pc(threads);
    Job j = make_job(kSizes, 3);
    std::vector<int> called;
    EXPECT_THROW(pc.run(j.parts,
                        [&](int i) {
                          called.push_back(i);
                          if (i == 2) throw std::runtime_error("upload failed");
                        }),
                 std::runtime_error);
    EXPECT_EQ(called, (std::vector<int>{0, 1, 2})) << threads << " threads";  // nothing handed over after it
    for (size_t i = 0; i < kSizes.size(); ++i) EXPECT_EQ(j.dst[i], j.src[i]) << "part " << i << ", " << threads << " threads";
    // The object stays usable.
    Job k = make_job({200000, 7}, 4);
    int n = 0;
    pc.run(k.parts, [&](int) { ++n; });
    EXPECT_EQ(n, 2);
    EXPECT_EQ(k.dst[0], k.src[0]);
  }
}

TEST(ParallelCopy, ManySmallJobsAndTwoCallersStayExact) {
  ParallelCopy pc(4);
  auto caller = [&](uint32_t seed, int rounds, int* bad) {
    std::mt19937 rng(seed);
    for (int r = 0; r < rounds; ++r) {
      std::vector<size_t> sizes(1 + rng() % 5);
      for (auto& s : sizes) s = rng() % (3 * ParallelCopy::kChunk);
      Job j = make_job(sizes, rng());
      int next = 0;
      pc.run(j.parts, [&](int i) {
        if (i != next++ || j.dst[i] != j.src[i]) ++*bad;
      });
      if (next != static_cast<int>(sizes.size())) ++*bad;
      for (size_t i = 0; i < sizes.size(); ++i) *bad += j.dst[i] != j.src[i];
    }
  };
  int bad1 = 0, bad2 = 0;
  std::thread other(caller, 99u, 150, &bad2);
  caller(7u, 150, &bad1);
  other.join();
  EXPECT_EQ(bad1, 0);
  EXPECT_EQ(bad2, 0);
}

}  // namespace
}  // namespace detforge
