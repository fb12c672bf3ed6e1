// Device helpers shared by the top-k selection kernels (topk_rows.cu: one SM per image;
// topk_cluster.cu: a cluster of CTAs per image): row maxima as order-preserving 32-bit keys and
// the radix-select bin choice.
#pragma once
#include <cstdint>

#include "backends/cuda/kernels/common.cuh"

namespace detforge::cuda::topk {

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

// The same maximum over np whole 16-byte packs (a runtime count: COCO's 80 fp16 classes are 10).
__device__ __forceinline__ float packs_row_max(const Pack<float>* r, int np) {
  float m = r[0].v[0];
  for (int q = 0; q < np; ++q) {
    const Pack<float> p = r[q];
#pragma unroll
    for (int e = 0; e < 4; ++e) m = max_nan(m, p.v[e]);
  }
  return m;
}
__device__ __forceinline__ float packs_row_max(const Pack<__half>* r, int np) {
  const Pack<__half> p0 = r[0];
  __half2 a = *reinterpret_cast<const __half2*>(&p0.v[0]);
  for (int q = 0; q < np; ++q) {
    const Pack<__half> p = r[q];
#pragma unroll
    for (int e = 0; e < 8; e += 2) a = __hmax2_nan(a, *reinterpret_cast<const __half2*>(&p.v[e]));
  }
  return __half2float(__hmax_nan(__low2half(a), __high2half(a)));
}

constexpr uint32_t kNoBin = 0xffffffffu;
__device__ __forceinline__ void hist_add(unsigned* H, uint32_t bin) {
  if (bin != kNoBin) atomicAdd(&H[bin], 1u);
}

// Radix-select state in shared memory; the keys of the k-th largest row share `prefix` under
// `pmask`. `remaining`: how many of the rows matching the prefix belong to the top k; `done`:
// all of them do, so no further pass is needed.
struct SelState {
  uint32_t prefix, pmask;
  int remaining, done, ties;
  uint32_t all_and, all_or;  // AND and OR of every key: bits where they agree need no pass
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
      st.ties = h[e];
      st.done = h[e] == rem - above;
    }
    above += h[e];
  }
}

// The AND and OR of a warp's keys folded into *and_dst and *or_dst (shared memory) by its lane 0:
// bits where every key agrees need no radix pass.
__device__ __forceinline__ void fold_and_or(uint32_t k_and, uint32_t k_or, uint32_t* and_dst, uint32_t* or_dst) {
  for (int o = 16; o > 0; o >>= 1) {
    k_and &= __shfl_xor_sync(0xffffffffu, k_and, o);
    k_or |= __shfl_xor_sync(0xffffffffu, k_or, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAnd(and_dst, k_and);
    atomicOr(or_dst, k_or);
  }
}

// Called by every thread of the block between passes: when no key differs in the bits `low` still
// leaves undecided (fp16 scores leave the low 13 bits zero), every key in the chosen bin equals the
// k-th, so the selection finishes without more histograms. True: finished (st is final).
__device__ __forceinline__ bool finish_if_undecided_bits_agree(SelState& st, uint32_t low) {
  if (((st.all_and ^ st.all_or) & low) != 0u) return false;
  __syncthreads();  // all threads have read st before thread 0 rewrites it
  if (threadIdx.x == 0) {
    st.prefix |= st.all_and & low;
    st.pmask = ~0u;
    st.done = st.ties == st.remaining;
  }
  __syncthreads();
  return true;
}

}  // namespace detforge::cuda::topk
