// LayerNorm over the channel dim, one warp per row, optional residual added first, and an
// optional second output y2 = y + add2 (y as stored, then the sum rounded once: the bytes of a
// separate add kernel). Why the second output: the decoder's self-attention LayerNorm output is
// read plain and plus the query position (the deformable query); the add was its own ~1.5 us
// kernel on the decoder's critical path (H200 CUPTI timeline, fp16 batch 1), three per forward.
// Mean and variance are two-pass fp32 whatever the storage type (a one-pass E[x^2]-E[x]^2 in
// fp16 is where NVIDIA's TensorRT build of this model loses precision; see the family spec §7).
//
// Fast path (layer_norm_vec_k): C = 256, 512, 768 or 1024 with 16-byte aligned pointers. Each
// lane holds C/32 values loaded as 16-byte packs (8 halves / 4 floats), so the row stays in
// registers for the second pass. The generic kernel (kept for the other shapes) walks 32 guarded
// scalar 2-byte loads per lane: ~5 us per call at rows = 300, C = 256 (12 calls, 0.062 ms of the
// 1.0 ms fp16 batch-1 r18vd forward, H200 CUPTI).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

constexpr int kMaxPerLane = 32;  // C up to 1024 stays in registers; wider rows re-read memory

// y[i] = v, and when y2: y2[i] = y[i] (as stored) + add2[i].
template <class T>
__device__ __forceinline__ void store2(T* y, const T* add2, T* y2, int64_t i, float v) {
  st(y, i, v);
  if (y2) st(y2, i, ld(y, i) + ld(add2, i));
}

template <class T>
__global__ void layer_norm_k(const T* x, const T* res, const T* g, const T* b, T* y, int64_t rows, int C, float eps,
                             const T* add2, T* y2) {
  pdl_wait_and_release();
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * C;
  float v[kMaxPerLane];
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    int c = lane + 32 * j;
    float t = 0.f;
    if (c < C) {
      t = ld(x, base + c);
      if (res) t += ld(res, base + c);
    }
    v[j] = t;
    sum += t;
  }
  for (int c = lane + 32 * kMaxPerLane; c < C; c += 32) sum += ld(x, base + c) + (res ? ld(res, base + c) : 0.f);
  const float mean = warp_sum(sum) / C;
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    int c = lane + 32 * j;
    if (c < C) sq += (v[j] - mean) * (v[j] - mean);
  }
  for (int c = lane + 32 * kMaxPerLane; c < C; c += 32) {
    float t = ld(x, base + c) + (res ? ld(res, base + c) : 0.f) - mean;
    sq += t * t;
  }
  const float rstd = rsqrtf(warp_sum(sq) / C + eps);
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    int c = lane + 32 * j;
    if (c < C) store2(y, add2, y2, base + c, (v[j] - mean) * rstd * ld(g, c) + ld(b, c));
  }
  for (int c = lane + 32 * kMaxPerLane; c < C; c += 32) {
    float t = ld(x, base + c) + (res ? ld(res, base + c) : 0.f);
    store2(y, add2, y2, base + c, (t - mean) * rstd * ld(g, c) + ld(b, c));
  }
}

// One row per warp, kFastWarps rows per block (300 rows -> 75 blocks across the SMs). KC = C/256.
// Lane `lane` holds packs lane, lane + 32, ... of the row: coalesced 512-byte warp loads.
constexpr int kFastWarps = 4;

template <class T, int KC>
__global__ void __launch_bounds__(kFastWarps * 32)
    layer_norm_vec_k(const Pack<T>* x, const Pack<T>* res, const Pack<T>* __restrict__ g,
                     const Pack<T>* __restrict__ b, Pack<T>* y, int64_t rows, float eps, const Pack<T>* add2,
                     Pack<T>* y2) {
  pdl_wait_and_release();
  constexpr int N = Pack<T>::N;   // elements per pack
  constexpr int C = 256 * KC;     // elements per row
  constexpr int Cp = C / N;       // packs per row
  constexpr int P = Cp / 32;      // packs per lane: KC (fp16) or 2 KC (fp32)
  const int64_t row = blockIdx.x * (int64_t)kFastWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const Pack<T>* xr = x + row * Cp;
  Pack<T> xv[P], rv[P], gv[P], bv[P];
#pragma unroll
  for (int p = 0; p < P; ++p) xv[p] = xr[p * 32 + lane];
  if (res) {
    const Pack<T>* rr = res + row * Cp;
#pragma unroll
    for (int p = 0; p < P; ++p) rv[p] = rr[p * 32 + lane];
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {  // issued now so their latency hides behind the reductions
    gv[p] = g[p * 32 + lane];
    bv[p] = b[p * 32 + lane];
  }
  float v[P * N];
  float sum = 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int e = 0; e < N; ++e) {
      float t = ld(xv[p].v, e);
      if (res) t += ld(rv[p].v, e);
      v[p * N + e] = t;
      sum += t;
    }
  const float mean = warp_sum(sum) / C;
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < P * N; ++j) sq += (v[j] - mean) * (v[j] - mean);
  const float rstd = rsqrtf(warp_sum(sq) / C + eps);
  Pack<T>* yr = y + row * Cp;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    Pack<T> o;
#pragma unroll
    for (int e = 0; e < N; ++e) st(o.v, e, (v[p * N + e] - mean) * rstd * ld(gv[p].v, e) + ld(bv[p].v, e));
    yr[p * 32 + lane] = o;
    if (y2) {
      const Pack<T> a = add2[row * Cp + p * 32 + lane];
      Pack<T> o2;
#pragma unroll
      for (int e = 0; e < N; ++e) st(o2.v, e, ld(o.v, e) + ld(a.v, e));
      y2[row * Cp + p * 32 + lane] = o2;
    }
  }
}

template <class T>
void launch_vec(const void* x, const void* res, const void* gamma, const void* beta, void* y, int64_t rows, int C,
                float eps, const void* add2, void* y2, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((rows + kFastWarps - 1) / kFastWarps);
  const auto* px = static_cast<const Pack<T>*>(x);
  const auto* pr = static_cast<const Pack<T>*>(res);
  const auto* pg = static_cast<const Pack<T>*>(gamma);
  const auto* pb = static_cast<const Pack<T>*>(beta);
  auto* py = static_cast<Pack<T>*>(y);
  const auto* pa = static_cast<const Pack<T>*>(add2);
  auto* py2 = static_cast<Pack<T>*>(y2);
  switch (C / 256) {
    case 1: launch(layer_norm_vec_k<T, 1>, blocks, kFastWarps * 32, 0, s, px, pr, pg, pb, py, rows, eps, pa, py2); break;
    case 2: launch(layer_norm_vec_k<T, 2>, blocks, kFastWarps * 32, 0, s, px, pr, pg, pb, py, rows, eps, pa, py2); break;
    case 3: launch(layer_norm_vec_k<T, 3>, blocks, kFastWarps * 32, 0, s, px, pr, pg, pb, py, rows, eps, pa, py2); break;
    default: launch(layer_norm_vec_k<T, 4>, blocks, kFastWarps * 32, 0, s, px, pr, pg, pb, py, rows, eps, pa, py2); break;
  }
}

}  // namespace

bool layer_norm_fast_path(const void* x, const void* res, const void* gamma, const void* beta, const void* y,
                          int C, const void* add2, const void* y2) {
  return C % 256 == 0 && C >= 256 && C <= 1024 && aligned16(x) && (!res || aligned16(res)) && aligned16(gamma) &&
         aligned16(beta) && aligned16(y) && (!y2 || (aligned16(add2) && aligned16(y2)));
}

void layer_norm(const void* x, const void* res, const void* gamma, const void* beta, void* y, int64_t rows, int C,
                float eps, bool half, cudaStream_t s, const void* add2, void* y2) {
  if (rows <= 0) return;
  if ((add2 == nullptr) != (y2 == nullptr)) throw Error("layer_norm: add2 and y2 go together");
  if (layer_norm_fast_path(x, res, gamma, beta, y, C, add2, y2)) {
    DF_DISPATCH(half, T, launch_vec<T>(x, res, gamma, beta, y, rows, C, eps, add2, y2, s));
    return;
  }
  const int warps = 8;
  unsigned blocks = static_cast<unsigned>((rows + warps - 1) / warps);
  DF_DISPATCH(half, T,
              launch(layer_norm_k<T>, blocks, warps * 32, 0, s, (const T*)x, (const T*)res, (const T*)gamma,
                     (const T*)beta, (T*)y, rows, C, eps, (const T*)add2, (T*)y2));
}

}  // namespace detforge::cuda
