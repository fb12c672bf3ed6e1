// topk_rows (the encoder's query selection) against a sorted host reference: ties by lower
// index, NaN rows first, the radix-select and full-sort kernels, 16-byte and scalar row loads, and
// the split path (row-max keys over the whole grid, then the selection). Split out of
// test_cuda_kernels.cpp, which had grown past 600 lines.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "backends/cuda/kernels/kernels.h"
#include "detforge/types.h"
#include "gpu_test_util.h"
#include "r18_settings_check.h"

namespace detforge::test {
namespace {

class CudaTopk : public StorageParamTest {};

// Scores [3, L, N] (N >= 4) of three images: image 0 random; image 1 random with 40 identical rows
// (100-139) whose value ranks inside the top k; image 2 with the k-th value inside 8300 ties (as
// when invalid anchors share one score): rows 5000-5099 at 3, all others at 2, so the lowest-index
// ties must be taken. Rounded as the device stores them (fp16 adds ties).
std::vector<float> tie_scores(int L, int N, bool half, uint32_t seed) {
  auto s = random_vec((size_t)3 * L * N, -8, 4, seed);
  for (int r = 100; r < 140; ++r)
    for (int c = 0; c < N; ++c) s[((size_t)1 * L + r) * N + c] = c == 3 ? 3.99f : -9.f;
  for (int r = 0; r < L; ++r)
    for (int c = 0; c < N; ++c) s[((size_t)2 * L + r) * N + c] = c == 0 ? (r >= 5000 && r < 5100 ? 3.f : 2.f) : -9.f;
  return quantize(s, half);
}

TEST_P(CudaTopk, TopkRowsSortsByRowMaxWithLowerIndexFirstOnTies) {
  const int B = 3, L = 8400, N = 8;
  const auto s = tie_scores(L, N, half(), 12);
  DevBuf ds(s, half());
  for (int k : {300, 1500}) {  // radix selection, and the full-sort path above 1024
  SCOPED_TRACE("k " + std::to_string(k));
  int32_t* didx = nullptr;
  ASSERT_EQ(cudaMalloc(&didx, sizeof(int32_t) * B * k), cudaSuccess);
  cuda::topk_rows(ds.get(), didx, B, L, N, k, half(), nullptr);
  std::vector<int32_t> got(B * k);
  cudaMemcpy(got.data(), didx, sizeof(int32_t) * B * k, cudaMemcpyDeviceToHost);
  cudaFree(didx);
  for (int b = 0; b < B; ++b) {
    std::vector<float> m(L);
    for (int r = 0; r < L; ++r) m[r] = *std::max_element(&s[((size_t)b * L + r) * N], &s[((size_t)b * L + r) * N] + N);
    std::vector<int> order(L);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return m[a] > m[c]; });
    for (int i = 0; i < k; ++i) ASSERT_EQ(got[b * k + i], order[i]) << "image " << b << " rank " << i;
  }
  }
}

// topk_rows as the IR and the CPU kernel define it: row max with NaN winning, rows ordered NaN
// first, then by value descending, equal values by lower index.
std::vector<int32_t> topk_ref(const std::vector<float>& s, int B, int L, int N, int k) {
  std::vector<int32_t> out;
  for (int b = 0; b < B; ++b) {
    std::vector<float> m(L);
    for (int r = 0; r < L; ++r) {
      const float* row = &s[((size_t)b * L + r) * N];
      m[r] = row[0];
      for (int c = 1; c < N; ++c)
        if (row[c] > m[r] || std::isnan(row[c])) m[r] = row[c];
    }
    std::vector<int32_t> order(L);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int c) {
      const bool na = std::isnan(m[a]), nc = std::isnan(m[c]);
      if (na != nc) return na;
      if (!na && m[a] != m[c]) return m[a] > m[c];
      return a < c;
    });
    out.insert(out.end(), order.begin(), order.begin() + k);
  }
  return out;
}

// Which kernels run the selection: one SM per image, the split (row-max keys in a scratch
// buffer, then the one-SM selection), or a cluster of CTAs per image (topk_cluster.cu).
enum class Path { one, split, cluster };
const char* path_name(Path p) { return p == Path::one ? "one kernel" : p == Path::split ? "split" : "cluster"; }
// The paths that take (L, k) on this device: the cluster needs k <= 1024 and compute capability 9.0.
std::vector<Path> paths_for(int L, int k) {
  std::vector<Path> ps = {Path::one, Path::split};
  if (cuda::topk_rows_cluster_supported(L, k)) ps.push_back(Path::cluster);
  return ps;
}

// Runs topk_rows on scores uploaded `elem_off` elements past a 16-byte boundary, on `path`.
std::vector<int32_t> topk_dev(const std::vector<float>& s, int B, int L, int N, int k, bool half, int elem_off = 0,
                              Path path = Path::one) {
  const bool split = path == Path::split;
  std::vector<float> pad(elem_off, 0.f);
  pad.insert(pad.end(), s.begin(), s.end());
  DevBuf ds(pad, half);
  int32_t* didx = nullptr;
  uint32_t* keys = nullptr;
  if (cudaMalloc(&didx, sizeof(int32_t) * B * k) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  if (split && cudaMalloc(&keys, sizeof(uint32_t) * B * L) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  cudaMemset(didx, 0xff, sizeof(int32_t) * B * k);  // poison: -1
  if (keys) cudaMemset(keys, 0xff, sizeof(uint32_t) * B * L);
  const void* x = static_cast<const char*>(ds.get()) + elem_off * (half ? 2 : 4);
  if (path == Path::cluster)
    cuda::topk_rows_cluster(x, didx, B, L, N, k, half, nullptr);
  else
    cuda::topk_rows(x, didx, B, L, N, k, half, nullptr, keys);
  std::vector<int32_t> got((size_t)B * k);
  cudaMemcpy(got.data(), didx, sizeof(int32_t) * B * k, cudaMemcpyDeviceToHost);
  cudaFree(didx);
  cudaFree(keys);
  return got;
}

TEST_P(CudaTopk, TopkRowsWithManyTiesNanAndInfMatchesSortedHostReference) {
  // The encoder's query selection (L = 8400, N = 8, k = 300) at batch 2, scores on a 1/64 grid
  // (exact in fp16) so about 85 rows share each value near the k-th: the lowest-index ties must
  // be taken and ordered. Image 0 has a NaN score (its row ranks first), a +inf and a -0 (ties
  // with +0); image 1 has a whole NaN row and -inf rows. k = 1024 is the largest the selection
  // kernel takes, 1500 the full-sort kernel. N = 8 is one 16-byte pack per fp16 row and two per
  // fp32 row; N = 4 one per fp32 row and the scalar path in fp16; the unaligned pointer the
  // scalar path in both.
  const int B = 2, L = 8400;
  for (int N : {8, 4}) {
    auto s = random_vec((size_t)B * L * N, -8, 4, 80 + N);
    for (auto& v : s) v = std::round(v * 64.f) / 64.f + 0.f;  // + 0: no -0 from rounding
    s[((size_t)0 * L + 4000) * N + N - 1] = NAN;
    s[((size_t)0 * L + 17) * N + 1] = INFINITY;
    for (int c = 0; c < N; ++c) s[((size_t)0 * L + 5) * N + c] = c == 0 ? -0.f : -1.f;  // row max -0
    for (int c = 0; c < N; ++c) s[((size_t)0 * L + 6) * N + c] = c == 0 ? 0.f : -1.f;   // row max +0
    for (int c = 0; c < N; ++c) s[((size_t)1 * L + 8399) * N + c] = NAN;
    for (int r = 200; r < 230; ++r)
      for (int c = 0; c < N; ++c) s[((size_t)1 * L + r) * N + c] = -INFINITY;
    s = quantize(s, half());
    for (int k : {300, 1024, 1500, 8400}) {
      for (int off : {0, 1}) {
        for (Path path : paths_for(L, k)) {
          SCOPED_TRACE("N " + std::to_string(N) + " k " + std::to_string(k) + " offset " + std::to_string(off) + " " +
                       path_name(path));
          const auto want = topk_ref(s, B, L, N, k);
          ASSERT_EQ(want[0], 4000);
          const auto got = topk_dev(s, B, L, N, k, half(), off, path);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(got[i], want[i]) << "image " << i / k << " rank " << i % k;
        }
      }
    }
  }
}

TEST_P(CudaTopk, TopkRowsSmallShapesIncludingKOneAndKAll) {
  // L not a multiple of 32 (nor of the 1024 threads), k = 1 and k = L, a single row, and L = 3
  // with all rows equal. Vector (N = 8) and scalar (N = 3) row loads. In image 0, rows 1 and 2
  // hold -0 and +0 (the L = 3 case ties all three).
  struct Case { int B, L, N; };
  for (const Case& cs : {Case{2, 45, 8}, Case{3, 77, 3}, Case{1, 1, 8}, Case{2, 1061, 8}, Case{1, 3, 3}}) {
    auto s = random_vec((size_t)cs.B * cs.L * cs.N, -2, 2, 90 + cs.L);
    if (cs.L == 3) std::fill(s.begin(), s.end(), 0.5f);
    for (size_t i = 0; i < s.size(); i += 5) s[i] = std::round(s[i] * 4.f) / 4.f + 0.f;  // some ties
    if (cs.L >= 3)  // row maxima -0 (row 1) and +0 (row 2) are equal: row 1 first
      for (int c = 0; c < cs.N; ++c) {
        s[(size_t)1 * cs.N + c] = -0.f;
        s[(size_t)2 * cs.N + c] = 0.f;
      }
    s = quantize(s, half());
    for (int k : {1, cs.L / 2 + 1, cs.L}) {
      if (k > cs.L) continue;
      SCOPED_TRACE("B " + std::to_string(cs.B) + " L " + std::to_string(cs.L) + " N " + std::to_string(cs.N) +
                   " k " + std::to_string(k));
      const auto want = topk_ref(s, cs.B, cs.L, cs.N, k);
      for (Path path : paths_for(cs.L, k)) EXPECT_EQ(topk_dev(s, cs.B, cs.L, cs.N, k, half(), 0, path), want) << path_name(path);
    }
  }
}

TEST_P(CudaTopk, TopkRowsWideRowsSplitEqualsOneKernel) {
  // COCO's 80 classes (10 fp16 / 20 fp32 packs per row: the split's vector row max, the one
  // kernel's scalar path), 91 (odd: element loads in both), at batch 3 with NaN rows and ties.
  const int B = 3, L = 8400;
  for (int N : {80, 91}) {
    auto s = random_vec((size_t)B * L * N, -8, 4, 120 + N);
    for (auto& v : s) v = std::round(v * 32.f) / 32.f + 0.f;
    for (int c = 0; c < N; c += 7) s[((size_t)1 * L + 77) * N + c] = NAN;
    for (int c = 0; c < N; ++c) s[((size_t)2 * L + 8000) * N + c] = 5.f;  // the best row of image 2
    s = quantize(s, half());
    for (int k : {300, 1024}) {
      SCOPED_TRACE("N " + std::to_string(N) + " k " + std::to_string(k));
      const auto want = topk_ref(s, B, L, N, k);
      ASSERT_EQ(want[k], 77);
      ASSERT_EQ(want[2 * k], 8000);
      for (Path path : paths_for(L, k)) EXPECT_EQ(topk_dev(s, B, L, N, k, half(), 0, path), want) << path_name(path);
    }
  }
}

TEST_P(CudaTopk, TopkRowsClusterTakesTheTiesAsTheOneKernelDoes) {
  // The cluster path's gather: the k-th value inside 8300 ties spread over all 8 CTAs' rows (the
  // lowest-index ones taken, in row order), 40 equal rows inside the top k, and random rows; batch
  // 3 (one cluster per image). Unsupported shapes throw.
  if (!cuda::topk_rows_cluster_supported(8400, 300)) GTEST_SKIP() << "no thread-block clusters here";
  const int B = 3, L = 8400, N = 8;
  const auto s = tie_scores(L, N, half(), 13);
  for (int k : {1, 300, 1024}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const auto want = topk_ref(s, B, L, N, k);
    EXPECT_EQ(topk_dev(s, B, L, N, k, half(), 0, Path::cluster), want);
  }
  int32_t* didx = nullptr;
  ASSERT_EQ(cudaMalloc(&didx, sizeof(int32_t) * 2000), cudaSuccess);
  DevBuf ds(s, half());
  EXPECT_THROW(cuda::topk_rows_cluster(ds.get(), didx, 1, L, N, 1025, half(), nullptr), Error);
  EXPECT_THROW(cuda::topk_rows_cluster(ds.get(), didx, 1, 100, N, 101, half(), nullptr), Error);
  EXPECT_THROW(cuda::topk_rows_cluster(ds.get(), didx, 1, 16385, 1, 10, half(), nullptr), Error);
  cudaFree(didx);
}

// The r18vd engine with the cluster selection (DETFORGE_CUDA_TOPK_CLUSTER=1): graph == eager, and
// the outputs agree with the default engine's (the same queries, so the same kernels after).
TEST(CudaTopkEngine, R18vdClusterSelectionKeepsTheOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  if (!cuda::topk_rows_cluster_supported(8400, 300)) GTEST_SKIP() << "no thread-block clusters here";
  expect_settings_keep_r18vd_outputs("DETFORGE_CUDA_TOPK_CLUSTER=1", 62);
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaTopk, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "fp16" : "fp32"; });

}  // namespace
}  // namespace detforge::test
