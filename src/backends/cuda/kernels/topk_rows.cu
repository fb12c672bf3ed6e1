// Top-k query selection: per image, the k rows with the largest row maximum, sorted by value
// descending, ties by lower index (torch.topk on the GPU gives no tie order; the IR fixes one so
// both backends agree). One block per image.
// Selection (k <= 1024): row maxima as order-preserving 32-bit keys in shared memory, a radix
// select of the k-th largest key (8-bit passes), the rows above it plus the lowest-index ties,
// then a sort of just those k. The first version (kept for k > 1024) bitonic-sorted all 16384
// padded keys: 0.19 ms of the 1.63 ms fp16 batch-1 forward on the H200 (CUPTI).
// v5: the selection kernel took 0.036 ms of the 1.0 ms fp16 batch-1 r18vd forward (H200 CUPTI)
// at L = 8400, N = 8, k = 300: scalar 2-byte row loads, thread 0 scanning each 256-bin histogram
// alone, colliding shared atomics, one warp walking all 8400 rows for ties, a 45-stage bitonic
// sort. Now: 16-byte row loads, 8 rows in flight per thread, warp-aggregated histogram atomics,
// a warp suffix-scan of the histogram, an early stop once the k-th key's bin is wholly taken,
// a tie walk split over the 32 warps, and a rank sort (2 barriers) of the k candidates.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

constexpr int kMaxLen = 16384;  // 128 KiB of keys: 8400 anchors at 640x640 fit with room
constexpr int kThreads = 1024;

__device__ __forceinline__ uint32_t order_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if (f != f) u = 0x7fc00000u;                     // NaN sorts as the largest, as torch.topk does
  if (f == 0.f) u = 0u;                            // -0 ties with +0 (equal values, as on the CPU)
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending unsigned == ascending float
}

// The row maximum as the CPU kernel takes it: a NaN anywhere makes the row NaN (fmaxf would
// drop it), so NaN rows rank first.
__device__ __forceinline__ float max_nan(float m, float v) { return (v > m || v != v) ? v : m; }
template <class T>
__device__ __forceinline__ float row_max(const T* r, int N) {
  float m = ld(r, 0);
  for (int c = 1; c < N; ++c) m = max_nan(m, ld(r, c));
  return m;
}

template <class T>
__global__ void topk_rows_k(const T* scores, int32_t* idx, int L, int N, int k, int n2) {
  extern __shared__ unsigned long long keys[];
  const int b = blockIdx.x;
  const T* sb = scores + (int64_t)b * L * N;
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    if (i < L) {
      const float m = row_max(sb + (int64_t)i * N, N);
      // smaller key = better: inverted value bits, then the index (lower index first)
      keys[i] = (static_cast<unsigned long long>(~order_bits(m)) << 32) | static_cast<uint32_t>(i);
    } else {
      keys[i] = ~0ull;
    }
  }
  __syncthreads();
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        int j = i ^ stride;
        if (j > i) {
          bool up = (i & size) == 0;
          unsigned long long a = keys[i], c = keys[j];
          if ((a > c) == up) {
            keys[i] = c;
            keys[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < k; i += blockDim.x) idx[(int64_t)b * k + i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
}

constexpr int kSelMax = 1024;
constexpr uint32_t kNoBin = 0xffffffffu;

// Adds one to H[bin] for every lane whose bin is not kNoBin; all 32 lanes must call it. Lanes
// with the same bin add once through their lowest lane: row maxima cluster in a few top-byte
// bins (logits share sign and exponent), and colliding shared atomics serialise.
__device__ __forceinline__ void hist_add(unsigned* H, uint32_t bin) {
  const unsigned peers = __match_any_sync(0xffffffffu, bin);
  if (bin != kNoBin && (threadIdx.x & 31) == static_cast<unsigned>(__ffs(peers) - 1)) atomicAdd(&H[bin], __popc(peers));
}

// Radix-select state in shared memory; the keys of the k-th largest row share `prefix` under
// `pmask`. `remaining`: how many of the rows matching the prefix belong to the top k; `done`:
// all of them do, so no further pass is needed; `nabove`: the gather's counter.
struct SelState {
  uint32_t prefix, pmask;
  int remaining, done, nabove;
};

// One warp: which bin (of H's 256, for bits shift..shift+7) holds the k-th largest remaining
// key. Lane l owns bins 8l..8l+7; a shuffle suffix-scan gives each lane the count above it.
__device__ __forceinline__ void pick_bin(const unsigned* H, int shift, SelState& st) {
  const int lane = threadIdx.x & 31;
  const int rem = st.remaining;
  const uint4 h0 = reinterpret_cast<const uint4*>(H)[2 * lane], h1 = reinterpret_cast<const uint4*>(H)[2 * lane + 1];
  const int h[8] = {(int)h0.x, (int)h0.y, (int)h0.z, (int)h0.w, (int)h1.x, (int)h1.y, (int)h1.z, (int)h1.w};
  int tot = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) tot += h[e];
  int suf = tot;  // keys in the bins of lanes >= lane
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_down_sync(0xffffffffu, suf, o);
    if (lane + o < 32) suf += t;
  }
  __syncwarp();           // every lane has read st before one of them rewrites it
  int above = suf - tot;  // keys in bins above this lane's
#pragma unroll
  for (int e = 7; e >= 0; --e) {
    if (above < rem && above + h[e] >= rem) {  // exactly one (lane, e) of the warp
      st.prefix |= static_cast<uint32_t>(lane * 8 + e) << shift;
      st.pmask |= 255u << shift;
      st.remaining = rem - above;
      st.done = h[e] == rem - above;
    }
    above += h[e];
  }
}

// Per image: row maxima -> order keys in shared memory (16-byte loads when a row is NP whole
// packs; NP = 0 is the scalar path) with the first radix histogram folded in; radix passes on
// bits 23..16, 15..8, 7..0 until the k-th key's bin holds only taken rows; the rows above it and
// the lowest-index ties gathered; a rank sort of those k. Same result as sorting all L rows by
// (row max desc, index asc).
template <class T, int NP>
__global__ void __launch_bounds__(kThreads) topk_select_k(const T* scores, int32_t* idx, int L, int N, int k) {
  extern __shared__ uint32_t skey[];  // L keys, larger = better
  __shared__ __align__(16) unsigned hist[2][256];
  __shared__ unsigned long long cand[kSelMax];  // (~key << 32 | row): smaller = better
  __shared__ int rank[kSelMax];
  __shared__ int wties[kThreads / 32];
  __shared__ SelState st;
  const int b = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const T* sb = scores + (int64_t)b * L * N;
  for (int i = tid; i < 512; i += kThreads) (&hist[0][0])[i] = 0;
  for (int i = tid; i < k; i += kThreads) rank[i] = 0;
  if (tid == 0) st = SelState{0u, 0u, k, 0, 0};
  __syncthreads();

  // Pass 0 histogram (bits 31..24) while the keys are in registers.
  if constexpr (NP > 0) {
    constexpr int U = 8 / NP;  // rows in flight per thread: U * NP 16-byte loads
    const Pack<T>* rows = reinterpret_cast<const Pack<T>*>(sb);
    for (int base = 0; base < L; base += kThreads * U) {
      Pack<T> p[U][NP];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * kThreads + tid;
        if (i < L)
#pragma unroll
          for (int q = 0; q < NP; ++q) p[u][q] = rows[(int64_t)i * NP + q];
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * kThreads + tid;
        uint32_t bin = kNoBin;
        if (i < L) {
          float m = ld(p[u][0].v, 0);
#pragma unroll
          for (int q = 0; q < NP; ++q)
#pragma unroll
            for (int e = 0; e < Pack<T>::N; ++e) m = max_nan(m, ld(p[u][q].v, e));
          const uint32_t key = order_bits(m);
          skey[i] = key;
          bin = key >> 24;
        }
        hist_add(hist[0], bin);
      }
    }
  } else {
    for (int base = 0; base < L; base += kThreads) {
      const int i = base + tid;
      uint32_t bin = kNoBin;
      if (i < L) {
        const uint32_t key = order_bits(row_max(sb + (int64_t)i * N, N));
        skey[i] = key;
        bin = key >> 24;
      }
      hist_add(hist[0], bin);
    }
  }
  __syncthreads();
  if (warp == 0) pick_bin(hist[0], 24, st);
  __syncthreads();
  for (int pass = 1; pass < 4 && !st.done; ++pass) {
    const int shift = 24 - 8 * pass;
    unsigned* H = hist[pass & 1];
    if (tid < 256) hist[(pass + 1) & 1][tid] = 0;  // for the next pass; last read before the sync above
    const uint32_t pf = st.prefix, pm = st.pmask;
    for (int base = 0; base < L; base += kThreads) {
      const int i = base + tid;
      uint32_t bin = kNoBin;
      if (i < L) {
        const uint32_t key = skey[i];
        if ((key & pm) == pf) bin = (key >> shift) & 255u;
      }
      hist_add(H, bin);
    }
    __syncthreads();
    if (warp == 0) pick_bin(H, shift, st);
    __syncthreads();
  }

  // Gather: rows above the k-th key's prefix (k - remaining of them) in any order; rows on the
  // prefix (ties) too when all are taken, else the `remaining` lowest-index ones, in order.
  // Warp w walks rows [w * chunk, (w + 1) * chunk) so the tie order follows the warp order.
  const uint32_t pf = st.prefix, pm = st.pmask;
  const bool all_ties = st.done;
  const int nabove = k - st.remaining;
  const int chunk = ((L + kThreads - 1) / kThreads) * 32;
  const int w0 = warp * chunk, w1 = min(L, w0 + chunk);
  const unsigned lt = (1u << lane) - 1u;
  int nties = 0;
  for (int i0 = w0; i0 < w1; i0 += 32) {
    const int i = i0 + lane;
    const uint32_t key = i < w1 ? skey[i] : 0u;
    const bool in = i < w1 && ((key & pm) > pf || (all_ties && (key & pm) == pf));
    const bool tie = i < w1 && (key & pm) == pf;
    const unsigned ball = __ballot_sync(0xffffffffu, in);
    int pos = 0;
    if (lane == 0 && ball) pos = atomicAdd(&st.nabove, __popc(ball));
    pos = __shfl_sync(0xffffffffu, pos, 0) + __popc(ball & lt);
    if (in) cand[pos] = (static_cast<unsigned long long>(~key) << 32) | static_cast<uint32_t>(i);
    nties += __popc(__ballot_sync(0xffffffffu, tie));
  }
  if (!all_ties) {
    if (lane == 0) wties[warp] = nties;
    __syncthreads();
    int off = lane < warp ? wties[lane] : 0;  // ties in the rows of lower warps
    for (int o = 16; o > 0; o >>= 1) off += __shfl_xor_sync(0xffffffffu, off, o);
    const int need = st.remaining;
    for (int i0 = w0; i0 < w1 && off < need; i0 += 32) {
      const int i = i0 + lane;
      const uint32_t key = i < w1 ? skey[i] : 0u;
      const bool tie = i < w1 && (key & pm) == pf;
      const unsigned ball = __ballot_sync(0xffffffffu, tie);
      const int pos = off + __popc(ball & lt);
      if (tie && pos < need) cand[nabove + pos] = (static_cast<unsigned long long>(~key) << 32) | static_cast<uint32_t>(i);
      off += __popc(ball);
    }
  }
  __syncthreads();

  // Rank sort: the keys are unique (the row is in the low bits), so a candidate's place is the
  // number of candidates that beat it. `parts` threads share each candidate's count.
  const int parts = kThreads / k;
  if (tid < parts * k) {
    const int c = tid % k, part = tid / k, per = (k + parts - 1) / parts;
    const int j0 = part * per, j1 = min(k, j0 + per);
    const unsigned long long me = cand[c];
    int r = 0;
#pragma unroll 4
    for (int j = j0; j < j1; ++j) r += cand[j] < me;
    atomicAdd(&rank[c], r);
  }
  __syncthreads();
  for (int i = tid; i < k; i += kThreads) idx[(int64_t)b * k + rank[i]] = static_cast<int32_t>(cand[i] & 0xffffffffu);
}

}  // namespace

int topk_rows_max_len() { return kMaxLen; }

void topk_rows(const void* scores, int32_t* idx, int B, int L, int N, int k, bool half, cudaStream_t s) {
  if (L > kMaxLen) throw Error("topk_rows: " + std::to_string(L) + " rows exceed the CUDA limit of " +
                               std::to_string(kMaxLen));
  if (k > L) throw Error("topk_rows: k = " + std::to_string(k) + " exceeds the " + std::to_string(L) + " rows");
  if (k < 0 || N < 1) throw Error("topk_rows: k = " + std::to_string(k) + ", N = " + std::to_string(N));
  if (k == 0 || B <= 0) return;
  if (k <= kSelMax) {
    const size_t smem = sizeof(uint32_t) * L;
    const size_t row_bytes = static_cast<size_t>(N) * (half ? 2 : 4);
    const int np = aligned16(scores) && (row_bytes == 16 || row_bytes == 32) ? static_cast<int>(row_bytes / 16) : 0;
    DF_DISPATCH(half, T, {
      auto kern = np == 1 ? topk_select_k<T, 1> : np == 2 ? topk_select_k<T, 2> : topk_select_k<T, 0>;
      DF_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(sizeof(uint32_t) * kMaxLen)));
      kern<<<B, kThreads, smem, s>>>((const T*)scores, idx, L, N, k);
    });
    DF_CUDA_LAUNCH();
    return;
  }
  int n2 = 1;
  while (n2 < L) n2 <<= 1;
  size_t smem = sizeof(unsigned long long) * n2;
  DF_DISPATCH(half, T, {
    DF_CUDA(cudaFuncSetAttribute(topk_rows_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(sizeof(unsigned long long) * kMaxLen)));
    topk_rows_k<T><<<B, kThreads, smem, s>>>((const T*)scores, idx, L, N, k, n2);
  });
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
