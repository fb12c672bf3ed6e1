// Top-k query selection on a cluster of kC CTAs per image (DETFORGE_CUDA_TOPK_CLUSTER): the same
// result as topk_rows (the k rows with the largest row maximum, by value descending, ties by
// lower index). Why: topk_rows runs each image on one SM, and at batch 1 that kernel took
// 15.6-16.6 us of the fp16 forward's critical path (H100 timelines, sessions 19 and 26), whether
// it read the rows or precomputed keys: the radix passes' shared atomics (most keys of a pass
// share a few bins), the gather and the sort, all on one SM.
// Here CTA r of the cluster owns rows [r * per, (r + 1) * per): it computes their keys into its
// shared memory, and each radix pass builds its local histogram, then every CTA sums the kC
// histograms through distributed shared memory (one cluster barrier per pass; the histograms are
// double-buffered so a pass never overwrites one a peer may still read) and picks the same bin.
// The candidates (rows above the k-th key's prefix, then the lowest-index ties) are written into
// CTA 0's shared memory at offsets from the CTAs' counts (rank order = row order), and CTA 0
// rank-sorts those k.
// Measured (H100, session 27, bench/results/h100/ab-2026-12-07-session27/): 15.9 us in the graph
// against 16.7 us for the one-SM kernel; engine time equal. Beside it the encoder box head
// (three GEMMs over all 8400 rows) holds most SMs until the same moment, and a cluster waits for 8
// free SMs to start (4 us after its predecessor there). Under ncu both take ~24 us; the cluster's
// warps wait at CTA barriers and on the peers' histograms.
#include <algorithm>

#include "backends/cuda/kernels/cluster.cuh"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/topk_common.cuh"

namespace detforge::cuda {
namespace {

using namespace topk;

constexpr int kC = 8;          // CTAs per image: the portable cluster size
constexpr int kT = 512;        // threads per CTA
constexpr int kW = kT / 32;
constexpr int kRowsMax = 2048; // rows per CTA: L <= kC * kRowsMax = 16384
constexpr int kSelMax = 1024;
constexpr int kHistStride = 257;  // per-warp histograms; the odd stride keeps the sum conflict-free

struct Shared {
  uint32_t key[kRowsMax];             // this CTA's keys; CTA 0 stages the sorted rows here at the end
  unsigned whist[kW * kHistStride];   // per-warp histograms of the current pass
  unsigned hist[2][256];              // this CTA's histogram of pass p in [p & 1], read by the cluster
  unsigned ghist[256];                // the cluster's sum
  unsigned long long cand[kSelMax];   // CTA 0: (~key << 32 | row), smaller = better
  uint32_t kand, kor;                 // AND and OR of this CTA's keys
  int n_above, n_tie;                 // this CTA's candidate counts, read by the cluster
  int wabove[kW], wties[kW];
  SelState st;
};


// sh.hist[buf] = the sum of the warps' histograms (2 threads per bin, 8 warps each).
__device__ __forceinline__ void sum_warp_hists(Shared& sh, int buf) {
  static_assert(kT == 512 && kW == 16, "2 threads per bin, 8 warps each");
  const int b = threadIdx.x >> 1, q = threadIdx.x & 1;
  unsigned c = 0;
#pragma unroll
  for (int w = 0; w < kW / 2; ++w) c += sh.whist[(q * (kW / 2) + w) * kHistStride + b];
  c += __shfl_xor_sync(0xffffffffu, c, 1);
  if (q == 0) sh.hist[buf][b] = c;
}

// After a cluster barrier: ghist = the sum of every CTA's hist[buf], in rank order.
__device__ __forceinline__ void gather_hists(Shared& sh, int buf) {
  if (threadIdx.x < 256) {
    unsigned c = 0;
#pragma unroll
    for (int r = 0; r < kC; ++r) c += cluster_peer(&sh.hist[buf][threadIdx.x], r)[0];
    sh.ghist[threadIdx.x] = c;
  }
}

template <class T>
__global__ void __cluster_dims__(kC, 1, 1) __launch_bounds__(kT)
    topk_cluster_k(const T* scores, int32_t* idx, int L, int N, int np, int k) {
  __shared__ Shared sh;
  const unsigned me = cluster_rank();
  const int b = blockIdx.x / kC;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = (L + kC - 1) / kC;
  const int r0 = static_cast<int>(me) * per;
  const int n = max(0, min(L, r0 + per) - r0);
  for (int i = lane; i < 256; i += 32) sh.whist[warp * kHistStride + i] = 0;
  if (tid == 0) {
    sh.st = SelState{0u, 0u, k, 0, 0, ~0u, 0u};
    sh.kand = ~0u;
    sh.kor = 0u;
  }
  __syncthreads();
  pdl_wait_and_release();

  // Keys and the pass-0 histogram (bits 31..24); U rows' loads in flight per thread.
  constexpr int U = 4;
  uint32_t k_and = ~0u, k_or = 0u;
  const T* sb = scores + ((int64_t)b * L + r0) * N;
  for (int base = 0; base < n; base += kT * U) {
    float m[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * kT + tid;
      m[u] = 0.f;
      if (i < n)
        m[u] = np > 0 ? packs_row_max(reinterpret_cast<const Pack<T>*>(sb + (int64_t)i * N), np)
                      : row_max(sb + (int64_t)i * N, N);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * kT + tid;
      uint32_t bin = kNoBin;
      if (i < n) {
        const uint32_t key = order_bits(m[u]);
        sh.key[i] = key;
        k_and &= key;
        k_or |= key;
        bin = key >> 24;
      }
      hist_add(sh.whist + warp * kHistStride, bin);
    }
  }
  fold_and_or(k_and, k_or, &sh.kand, &sh.kor);
  __syncthreads();
  sum_warp_hists(sh, 0);
  __syncthreads();
  cluster_sync();
  gather_hists(sh, 0);
  if (tid == 256) {  // the cluster's AND and OR (a CTA without rows contributes ~0 and 0)
    uint32_t a = ~0u, o = 0u;
    for (int r = 0; r < kC; ++r) {
      a &= cluster_peer(&sh.kand, r)[0];
      o |= cluster_peer(&sh.kor, r)[0];
    }
    sh.st.all_and = a;
    sh.st.all_or = o;
  }
  __syncthreads();
  if (warp == 0) pick_bin(sh.ghist, 24, sh.st);
  __syncthreads();

  // Passes on bits 23..16, 15..8, 7..0 until the k-th key's bin holds only taken rows. Every CTA
  // holds the same state (the same sums), so all take the same branches and barriers.
  for (int pass = 1; pass < 4 && !sh.st.done; ++pass) {
    const int shift = 24 - 8 * pass;
    const uint32_t low = (2u << (shift + 7)) - 1u;
    if (finish_if_undecided_bits_agree(sh.st, low)) break;  // the cluster-wide AND and OR
    unsigned* H = sh.whist + warp * kHistStride;
    for (int i = lane; i < 256; i += 32) H[i] = 0;  // last read by sum_warp_hists, before two barriers
    __syncwarp();
    const uint32_t pf = sh.st.prefix, pm = sh.st.pmask;
    for (int i0 = 0; i0 < n; i0 += kT) {
      const int i = i0 + tid;
      uint32_t bin = kNoBin;
      if (i < n) {
        const uint32_t key = sh.key[i];
        if ((key & pm) == pf) bin = (key >> shift) & 255u;
      }
      hist_add(H, bin);
    }
    __syncthreads();
    sum_warp_hists(sh, pass & 1);  // hist[pass & 1] was last read by peers before the previous barrier
    __syncthreads();
    cluster_sync();
    gather_hists(sh, pass & 1);
    __syncthreads();
    if (warp == 0) pick_bin(sh.ghist, shift, sh.st);
    __syncthreads();
  }

  // Gather into CTA 0: the rows above the k-th key's prefix (k - remaining of them) at offsets
  // from the lower ranks' counts, then the ties in row order (all of them when all are taken,
  // else the `remaining` lowest-index ones). Warp w walks this CTA's rows [w * chunk, ...) twice.
  const uint32_t pf = sh.st.prefix, pm = sh.st.pmask;
  const bool all_ties = sh.st.done;
  const int need = sh.st.remaining, nabove = k - need;
  const int chunk = ((n + kT - 1) / kT) * 32;
  const int w0 = min(n, warp * chunk), w1 = min(n, w0 + chunk);
  const unsigned lt = (1u << lane) - 1u;
  int n_above = 0, n_tie = 0;
  for (int i0 = w0; i0 < w1; i0 += 32) {
    const int i = i0 + lane;
    const uint32_t key = i < w1 ? sh.key[i] & pm : 0u;
    n_above += __popc(__ballot_sync(0xffffffffu, i < w1 && key > pf));
    n_tie += __popc(__ballot_sync(0xffffffffu, i < w1 && key == pf));
  }
  if (lane == 0) {
    sh.wabove[warp] = n_above;
    sh.wties[warp] = n_tie;
  }
  __syncthreads();
  if (tid == 0) {
    int a = 0, t = 0;
    for (int w = 0; w < kW; ++w) a += sh.wabove[w], t += sh.wties[w];
    sh.n_above = a;
    sh.n_tie = t;
  }
  __syncthreads();
  cluster_sync();
  int off_above = 0, off_tie = 0;
  for (unsigned r = 0; r < me; ++r) {
    off_above += cluster_peer(&sh.n_above, r)[0];
    off_tie += cluster_peer(&sh.n_tie, r)[0];
  }
  for (int w = 0; w < warp; ++w) off_above += sh.wabove[w], off_tie += sh.wties[w];
  unsigned long long* cand0 = cluster_peer(sh.cand, 0);
  for (int i0 = w0; i0 < w1 && (n_above > 0 || (n_tie > 0 && off_tie < need)); i0 += 32) {
    const int i = i0 + lane;
    const uint32_t key = i < w1 ? sh.key[i] : 0u;
    const bool above = i < w1 && (key & pm) > pf, tie = i < w1 && (key & pm) == pf;
    const unsigned ba = __ballot_sync(0xffffffffu, above), bt = __ballot_sync(0xffffffffu, tie);
    const unsigned long long ck = (static_cast<unsigned long long>(~key) << 32) | static_cast<uint32_t>(r0 + i);
    if (above) cand0[off_above + __popc(ba & lt)] = ck;
    const int pos = off_tie + __popc(bt & lt);
    if (tie && (all_ties || pos < need)) cand0[nabove + pos] = ck;
    off_above += __popc(ba);
    off_tie += __popc(bt);
    n_above -= __popc(ba);
    n_tie -= __popc(bt);
  }
  cluster_sync();  // the candidates are in CTA 0; no CTA reads a peer after this
  if (me != 0) return;

  // Rank sort: the keys are unique (the row is in the low bits), so a candidate's place is the
  // number of candidates that beat it.
  for (int c = tid; c < k; c += kT) {
    const unsigned long long mine = sh.cand[c];
    int r = 0;
#pragma unroll 4
    for (int j = 0; j < k; ++j) r += sh.cand[j] < mine;
    sh.key[r] = static_cast<uint32_t>(mine & 0xffffffffu);
  }
  __syncthreads();
  for (int i = tid; i < k; i += kT) idx[(int64_t)b * k + i] = static_cast<int32_t>(sh.key[i]);
}

}  // namespace

bool topk_rows_cluster_supported(int L, int k) {
  if (L < 1 || L > kC * kRowsMax || k < 1 || k > kSelMax || k > L) return false;
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  return major >= 9;  // thread-block clusters
}

void topk_rows_cluster(const void* scores, int32_t* idx, int B, int L, int N, int k, bool half, cudaStream_t s) {
  if (!topk_rows_cluster_supported(L, k))
    throw Error("topk_rows_cluster: L = " + std::to_string(L) + ", k = " + std::to_string(k) +
                " (needs 1 <= k <= min(L, " + std::to_string(kSelMax) + "), L <= " + std::to_string(kC * kRowsMax) +
                " and compute capability 9.0 or newer)");
  if (N < 1) throw Error("topk_rows_cluster: N = " + std::to_string(N));
  if (B <= 0) return;
  const size_t row_bytes = static_cast<size_t>(N) * (half ? 2 : 4);
  const int np = aligned16(scores) && row_bytes % 16 == 0 ? static_cast<int>(row_bytes / 16) : 0;
  DF_DISPATCH(half, T, {
    launch(topk_cluster_k<T>, dim3(static_cast<unsigned>(B * kC)), kT, 0, s, (const T*)scores, idx, L, N, np, k);
  });
}

}  // namespace detforge::cuda
