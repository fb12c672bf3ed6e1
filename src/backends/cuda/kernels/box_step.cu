// The decoder's step between two layers as one launch: the bbox head's last linear (K -> 4),
// box_refine, and the next layer's query_pos_head.layers.0 (4 -> N1, with its activation).
// Why: at batch 1 fp16 on the H200 these ran as three kernels on the critical path, a cutlass
// wmma GEMM of 3.5-3.9 us (a GEMM tile for an N of 4), box_refine 1.3 us and small_linear_smallk
// 2.3 us, back to back between every two decoder layers (timeline of
// bench/results/h200/ab-2026-12-04-session11/call2/neither_b1.json). Together now 4.0-4.4 us
// (call 3: b1 0.6780 -> 0.6708 ms). Here a warp owns a row: its K
// inputs as 16-byte packs, four warp-reduced dot products, the refined box in registers, and the
// N1 outputs 8 per lane. The stored values match the unfused ops' rounding: delta is rounded to
// the storage type before the refinement (the linear stores it), the box before the next linear
// reads it, and that linear sums its 4 products in order from 0 before adding the bias
// (small_linear_smallk's order).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

constexpr int kThreads = 256;  // 8 rows per block

template <class T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (sizeof(T) == 2) return __half2float(__float2half_rn(v));
  return v;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    box_step_k(const T* __restrict__ x, const T* __restrict__ w3, const T* __restrict__ b3, const T* __restrict__ ref_in,
               T* __restrict__ ref_out, const T* __restrict__ w1, const T* __restrict__ b1, T* __restrict__ y1,
               int64_t rows, int K, int N1, graph::Act act1) {
  constexpr int P = Pack<T>::N;
  constexpr int WP = 32 / P;  // packs of W1 per 8 outputs (8 rows of 4)
  constexpr int BP = 8 / P;   // packs of b1 per 8 outputs
  const int lane = threadIdx.x & 31;
  const int64_t row = (blockIdx.x * (int64_t)kThreads + threadIdx.x) >> 5;
  // The weights are constants, never written by a kernel: the first chunk of W3 and this lane's
  // first 8 rows of W1 and b1 are fetched before the wait for the previous kernel, so they
  // overlap its tail. (v1 read W1 by scalar loads after the wait: 7.7-7.9 us per launch at
  // batch 1, slower than the three kernels it replaced.)
  Pack<T> wfirst[4], w1first[WP], b1first[BP];
  const bool first = lane * P < K;
  if (first)
#pragma unroll
    for (int j = 0; j < 4; ++j) wfirst[j] = ldg_pack(w3 + (int64_t)j * K + lane * P);
  const bool first1 = w1 && lane * 8 < N1;
  if (first1) {
#pragma unroll
    for (int q = 0; q < WP; ++q) w1first[q] = ldg_pack(w1 + (int64_t)lane * 32 + q * P);
#pragma unroll
    for (int q = 0; q < BP; ++q) b1first[q] = ldg_pack(b1 + (int64_t)lane * 8 + q * P);
  }
  pdl_wait_and_release();
  if (row >= rows) return;  // whole warps: rows are warp-uniform
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = lane * P; k0 < K; k0 += 32 * P) {
    const Pack<T> xp = ldg_pack(x + row * K + k0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const Pack<T> wp = k0 == lane * P ? wfirst[j] : ldg_pack(w3 + (int64_t)j * K + k0);
#pragma unroll
      for (int e = 0; e < P; ++e) s[j] = fmaf(ld(xp.v, e), ld(wp.v, e), s[j]);
    }
  }
  float box[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float delta = round_to<T>(warp_sum(s[j]) + ld(b3, j));
    const float r = fminf(fmaxf(ld(ref_in, row * 4 + j), 0.f), 1.f);
    const float v = delta + logf(fmaxf(r, 1e-5f) / fmaxf(1.f - r, 1e-5f));
    box[j] = round_to<T>(1.f / (1.f + expf(-v)));
  }
  if (lane < 4) st(ref_out, row * 4 + lane, lane == 0 ? box[0] : lane == 1 ? box[1] : lane == 2 ? box[2] : box[3]);
  if (!w1) return;
  for (int o0 = lane * 8; o0 < N1; o0 += 32 * 8) {
    Pack<T> wp[WP], bp[BP];
#pragma unroll
    for (int q = 0; q < WP; ++q) wp[q] = o0 == lane * 8 ? w1first[q] : ldg_pack(w1 + (int64_t)o0 * 4 + q * P);
#pragma unroll
    for (int q = 0; q < BP; ++q) bp[q] = o0 == lane * 8 ? b1first[q] : ldg_pack(b1 + o0 + q * P);
    Pack<T> out[BP];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float a = 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) a = fmaf(box[k], ld(wp[(e * 4 + k) / P].v, (e * 4 + k) % P), a);
      st(out[e / P].v, e % P, act_f(act1, a + ld(bp[e / P].v, e % P)));
    }
    Pack<T>* dst = reinterpret_cast<Pack<T>*>(y1 + row * N1 + o0);
#pragma unroll
    for (int q = 0; q < BP; ++q) dst[q] = out[q];
  }
}

}  // namespace

bool box_step_supported(int K, int N1, bool half, const void* x, const void* y1, const void* w1, const void* b1) {
  const int P = half ? 8 : 4;
  return K > 0 && K % P == 0 && aligned16(x) &&
         (N1 == 0 || (N1 % 8 == 0 && aligned16(y1) && aligned16(w1) && aligned16(b1)));
}

void box_step(const BoxStepArgs& a, bool half, cudaStream_t s) {
  if (!box_step_supported(a.K, a.w1 ? a.N1 : 0, half, a.x, a.y1, a.w1, a.b1))
    throw Error("box_step: unsupported shape or alignment (K " + std::to_string(a.K) + ", N1 " + std::to_string(a.N1) +
                ")");
  const unsigned blocks = blocks_for(a.rows * 32, kThreads);
  DF_DISPATCH(half, T,
              launch(box_step_k<T>, blocks, kThreads, 0, s, (const T*)a.x, (const T*)a.w3, (const T*)a.b3,
                     (const T*)a.ref_in, (T*)a.ref_out, (const T*)a.w1, (const T*)a.b1, (T*)a.y1, a.rows, a.K,
                     a.w1 ? a.N1 : 0, a.act1));
}

}  // namespace detforge::cuda
