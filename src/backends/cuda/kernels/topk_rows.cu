// Top-k query selection: per image, the k rows with the largest row maximum, sorted by value
// descending, ties by lower index (torch.topk on the GPU gives no tie order; the IR fixes one so
// both backends agree). One block per image.
// Selection (k <= 1024): row maxima as order-preserving 32-bit keys in shared memory, a radix
// select of the k-th largest key (8-bit passes), the rows above it plus the lowest-index ties,
// then a sort of just those k. The first version (kept for k > 1024) bitonic-sorted all 16384
// padded keys: 0.19 ms of the 1.63 ms fp16 batch-1 forward on the H200 (CUPTI).
// v5: the selection kernel took 0.036 ms of the 1.0 ms fp16 batch-1 r18vd forward (H200 CUPTI)
// at L = 8400, N = 8, k = 300: scalar 2-byte row loads, thread 0 scanning each 256-bin histogram
// alone, one block-wide histogram, one warp walking all 8400 rows for ties, a 45-stage bitonic
// sort. Now: 16-byte row loads, 8 rows in flight per thread, per-warp histograms, a warp
// suffix-scan of the histogram, no pass over bits that no key varies in (fp16 scores: the low
// 13) and none once the k-th key's bin is wholly taken, a gather split over the 32 warps, and a
// rank sort (2 barriers) of the k candidates. Everything runs on one SM, so the cost is the
// instructions per row: 4 schedulers for 8400 rows.
// v6, split (key_ws given; DETFORGE_CUDA_TOPK_SPLIT, off by default; measured equal on an H100,
// ab-2026-12-05-session14: the selection still took 14.1 us reading keys, so the rows were not
// the cost; the radix passes, the gather and the sort on one SM are): the row
// maxima come from a grid-wide kernel (one thread per row, ceil(L/256) x B blocks) as 4-byte
// keys, and the select kernel reads those instead of the rows. Why: it took 16.4 us of the fp16
// batch-1 forward (8-class model, H200, ab-2026-12-04-session12) alone on one SM, and for COCO's
// 80 classes every 160-byte row goes through the scalar path (80 2-byte loads, 1.34 MB per
// image on one SM).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/topk_common.cuh"

namespace detforge::cuda {
namespace {

using namespace topk;

constexpr int kMaxLen = 16384;  // 128 KiB of keys: 8400 anchors at 640x640 fit with room
constexpr int kThreads = 1024;

// The same maximum over NP whole 16-byte packs. fp16: packed __hmax2_nan (NaN wins there too;
// which zero wins does not matter, order_bits ties them), a quarter of the instructions of the
// scalar loop, which bound this single-SM phase.
template <int NP>
__device__ __forceinline__ float packs_max(const Pack<float> (&p)[NP]) {
  float m = p[0].v[0];
#pragma unroll
  for (int q = 0; q < NP; ++q)
#pragma unroll
    for (int e = 0; e < 4; ++e) m = max_nan(m, p[q].v[e]);
  return m;
}
template <int NP>
__device__ __forceinline__ float packs_max(const Pack<__half> (&p)[NP]) {
  __half2 a = __hmax2_nan(*reinterpret_cast<const __half2*>(&p[0].v[0]), *reinterpret_cast<const __half2*>(&p[0].v[2]));
  a = __hmax2_nan(a, __hmax2_nan(*reinterpret_cast<const __half2*>(&p[0].v[4]),
                                 *reinterpret_cast<const __half2*>(&p[0].v[6])));
#pragma unroll
  for (int q = 1; q < NP; ++q)
#pragma unroll
    for (int e = 0; e < 8; e += 2) a = __hmax2_nan(a, *reinterpret_cast<const __half2*>(&p[q].v[e]));
  return __half2float(__hmax_nan(__low2half(a), __high2half(a)));
}

// v6 split, first kernel: keys[b, i] = order_bits(max of row i of image b), rows of np 16-byte
// packs (np = 0: element loads).
template <class T>
__global__ void topk_keys_k(const T* scores, uint32_t* keys, int L, int N, int np) {
  pdl_wait_and_release();
  const int b = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= L) return;
  const T* row = scores + ((int64_t)b * L + i) * N;
  const float m = np > 0 ? packs_row_max(reinterpret_cast<const Pack<T>*>(row), np) : row_max(row, N);
  keys[(int64_t)b * L + i] = order_bits(m);
}

template <class T>
__global__ void topk_rows_k(const T* scores, int32_t* idx, int L, int N, int k, int n2) {
  pdl_wait_and_release();
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

// Per-warp histograms (summed by sum_hist) and plain shared atomics. Measured on the H200 at
// L = 8400: warp aggregation through __match_any_sync cost more than the collisions it saved
// (select kernel 23.7 us with it, 17.1 us without).
constexpr int kWarps = kThreads / 32;
static_assert(kThreads == 1024, "sum_hist maps 4 threads to each of the 256 bins");
constexpr int kHistStride = 257;  // per-warp histograms; the odd stride keeps the sum conflict-free

// hist[b] = the sum of the warps' histograms: 4 threads per bin, 8 warps each.
__device__ __forceinline__ void sum_hist(const unsigned* whist, unsigned* hist) {
  const int b = threadIdx.x >> 2, q = threadIdx.x & 3;
  unsigned c = 0;
#pragma unroll
  for (int w = 0; w < kWarps / 4; ++w) c += whist[(q * (kWarps / 4) + w) * kHistStride + b];
  c += __shfl_xor_sync(0xffffffffu, c, 1);
  c += __shfl_xor_sync(0xffffffffu, c, 2);
  if (q == 0) hist[b] = c;
}

// Per image: row maxima -> order keys in shared memory (16-byte loads when a row is NP whole
// packs; NP = 0 is the scalar path; NP = -1 reads the keys topk_keys_k wrote to gkeys) with the
// first radix histogram folded in; radix passes on
// bits 23..16, 15..8, 7..0 until the k-th key's bin holds only taken rows; the rows above it and
// the lowest-index ties gathered; a rank sort of those k. Same result as sorting all L rows by
// (row max desc, index asc).
template <class T, int NP>
__global__ void __launch_bounds__(kThreads) topk_select_k(const T* scores, const uint32_t* gkeys, int32_t* idx, int L,
                                                          int N, int k) {
  pdl_wait_and_release();
  extern __shared__ uint32_t skey[];  // L keys, larger = better
  __shared__ __align__(16) unsigned hist[256];
  __shared__ unsigned whist[kWarps * kHistStride];
  __shared__ unsigned long long cand[kSelMax];  // (~key << 32 | row): smaller = better
  __shared__ int rank[kSelMax];
  __shared__ int wabove[kWarps], wties[kWarps];
  __shared__ SelState st;
  const int b = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const T* sb = scores + (int64_t)b * L * N;
  for (int i = lane; i < 256; i += 32) whist[warp * kHistStride + i] = 0;
  for (int i = tid; i < k; i += kThreads) rank[i] = 0;
  if (tid == 0) st = SelState{0u, 0u, k, 0, 0, ~0u, 0u};
  __syncthreads();

  // Pass 0 histogram (bits 31..24) while the keys are in registers.
  uint32_t k_and = ~0u, k_or = 0u;
  if constexpr (NP < 0) {
    constexpr int U = 8;  // keys in flight per thread
    const uint32_t* gk = gkeys + (int64_t)b * L;
    for (int base = 0; base < L; base += kThreads * U) {
      uint32_t kk[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * kThreads + tid;
        kk[u] = i < L ? gk[i] : 0u;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * kThreads + tid;
        uint32_t bin = kNoBin;
        if (i < L) {
          skey[i] = kk[u];
          k_and &= kk[u];
          k_or |= kk[u];
          bin = kk[u] >> 24;
        }
        hist_add(whist + warp * kHistStride, bin);
      }
    }
  } else if constexpr (NP > 0) {
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
          const uint32_t key = order_bits(packs_max<NP>(p[u]));
          skey[i] = key;
          k_and &= key;
          k_or |= key;
          bin = key >> 24;
        }
        hist_add(whist + warp * kHistStride, bin);
      }
    }
  } else {
    for (int base = 0; base < L; base += kThreads) {
      const int i = base + tid;
      uint32_t bin = kNoBin;
      if (i < L) {
        const uint32_t key = order_bits(row_max(sb + (int64_t)i * N, N));
        skey[i] = key;
        k_and &= key;
        k_or |= key;
        bin = key >> 24;
      }
      hist_add(whist + warp * kHistStride, bin);
    }
  }
  fold_and_or(k_and, k_or, &st.all_and, &st.all_or);
  __syncthreads();
  sum_hist(whist, hist);
  __syncthreads();
  if (warp == 0) pick_bin(hist, 24, st);
  __syncthreads();
  for (int pass = 1; pass < 4 && !st.done; ++pass) {
    const int shift = 24 - 8 * pass;
    const uint32_t low = (2u << (shift + 7)) - 1u;  // bits shift + 7 .. 0, still undecided
    if (finish_if_undecided_bits_agree(st, low)) break;  // uniform: st is read after a barrier
    unsigned* H = whist + warp * kHistStride;
    for (int i = lane; i < 256; i += 32) H[i] = 0;  // last read by sum_hist, before two barriers
    __syncwarp();
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
    sum_hist(whist, hist);
    __syncthreads();
    if (warp == 0) pick_bin(hist, shift, st);
    __syncthreads();
  }

  // Gather: rows above the k-th key's prefix (k - remaining of them), then the rows on the prefix
  // (ties): all of them when all are taken, else the `remaining` lowest-index ones. Warp w walks
  // rows [w * chunk, (w + 1) * chunk) twice: to count, then to write at its offset (a shared
  // counter serialised the warps, ~3 us). Ties land in row order.
  const uint32_t pf = st.prefix, pm = st.pmask;
  const bool all_ties = st.done;
  const int need = st.remaining, nabove = k - need;
  const int chunk = ((L + kThreads - 1) / kThreads) * 32;
  const int w0 = warp * chunk, w1 = min(L, w0 + chunk);
  const unsigned lt = (1u << lane) - 1u;
  int n_above = 0, n_tie = 0;
  for (int i0 = w0; i0 < w1; i0 += 32) {
    const int i = i0 + lane;
    const uint32_t key = i < w1 ? skey[i] & pm : 0u;
    n_above += __popc(__ballot_sync(0xffffffffu, i < w1 && key > pf));
    n_tie += __popc(__ballot_sync(0xffffffffu, i < w1 && key == pf));
  }
  if (lane == 0) {
    wabove[warp] = n_above;
    wties[warp] = n_tie;
  }
  __syncthreads();
  int off_above = lane < warp ? wabove[lane] : 0, off_tie = lane < warp ? wties[lane] : 0;
  for (int o = 16; o > 0; o >>= 1) {
    off_above += __shfl_xor_sync(0xffffffffu, off_above, o);
    off_tie += __shfl_xor_sync(0xffffffffu, off_tie, o);
  }
  for (int i0 = w0; i0 < w1 && (n_above > 0 || (n_tie > 0 && off_tie < need)); i0 += 32) {
    const int i = i0 + lane;
    const uint32_t key = i < w1 ? skey[i] : 0u;
    const bool above = i < w1 && (key & pm) > pf, tie = i < w1 && (key & pm) == pf;
    const unsigned ba = __ballot_sync(0xffffffffu, above), bt = __ballot_sync(0xffffffffu, tie);
    const unsigned long long ck = (static_cast<unsigned long long>(~key) << 32) | static_cast<uint32_t>(i);
    if (above) cand[off_above + __popc(ba & lt)] = ck;
    const int pos = off_tie + __popc(bt & lt);
    if (tie && (all_ties || pos < need)) cand[nabove + pos] = ck;
    off_above += __popc(ba);
    off_tie += __popc(bt);
    n_above -= __popc(ba);
    n_tie -= __popc(bt);
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
  // Through shared memory (the keys are no longer needed) so the global store is coalesced.
  for (int i = tid; i < k; i += kThreads) skey[rank[i]] = static_cast<uint32_t>(cand[i] & 0xffffffffu);
  __syncthreads();
  for (int i = tid; i < k; i += kThreads) idx[(int64_t)b * k + i] = static_cast<int32_t>(skey[i]);
}

}  // namespace

int topk_rows_max_len() { return kMaxLen; }

void topk_rows(const void* scores, int32_t* idx, int B, int L, int N, int k, bool half, cudaStream_t s,
               uint32_t* key_ws) {
  if (L > kMaxLen) throw Error("topk_rows: " + std::to_string(L) + " rows exceed the CUDA limit of " +
                               std::to_string(kMaxLen));
  if (k > L) throw Error("topk_rows: k = " + std::to_string(k) + " exceeds the " + std::to_string(L) + " rows");
  if (k < 0 || N < 1) throw Error("topk_rows: k = " + std::to_string(k) + ", N = " + std::to_string(N));
  if (k == 0 || B <= 0) return;
  if (k <= kSelMax) {
    const size_t smem = sizeof(uint32_t) * L;
    const size_t row_bytes = static_cast<size_t>(N) * (half ? 2 : 4);
    if (key_ws) {
      const int np = aligned16(scores) && row_bytes % 16 == 0 ? static_cast<int>(row_bytes / 16) : 0;
      DF_DISPATCH(half, T, {
        launch(topk_keys_k<T>, dim3((L + 255) / 256, B), 256, 0, s, (const T*)scores, key_ws, L, N, np);
        DF_CUDA(cudaFuncSetAttribute(topk_select_k<T, -1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(sizeof(uint32_t) * kMaxLen)));
        launch(topk_select_k<T, -1>, B, kThreads, smem, s, (const T*)scores, (const uint32_t*)key_ws, idx, L, N, k);
      });
      return;
    }
    const int np = aligned16(scores) && (row_bytes == 16 || row_bytes == 32) ? static_cast<int>(row_bytes / 16) : 0;
    DF_DISPATCH(half, T, {
      auto kern = np == 1 ? topk_select_k<T, 1> : np == 2 ? topk_select_k<T, 2> : topk_select_k<T, 0>;
      DF_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(sizeof(uint32_t) * kMaxLen)));
      launch(kern, B, kThreads, smem, s, (const T*)scores, (const uint32_t*)nullptr, idx, L, N, k);
    });
    return;
  }
  int n2 = 1;
  while (n2 < L) n2 <<= 1;
  size_t smem = sizeof(unsigned long long) * n2;
  DF_DISPATCH(half, T, {
    DF_CUDA(cudaFuncSetAttribute(topk_rows_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(sizeof(unsigned long long) * kMaxLen)));
    launch(topk_rows_k<T>, B, kThreads, smem, s, (const T*)scores, idx, L, N, k, n2);
  });
}

}  // namespace detforge::cuda
