// Elementwise ops: conv epilogue (bias + residual + activation), add, mul_rows, activation,
// storage conversions and the non-finite counter used by check_finite mode.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

template <class T>
__global__ void bias_act_k(const T* x, const T* bias, const T* res, T* y, int64_t n, int C, graph::Act act) {
  pdl_wait_and_release();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = ld(x, i);
    if (bias) v += ld(bias, i % C);
    if (res) v += ld(res, i);
    st(y, i, act_f(act, v));
  }
}

template <class T>
__global__ void add_act_k(const T* a, const T* b, int64_t bn, T* y, int64_t n, graph::Act act) {
  pdl_wait_and_release();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    st(y, i, act_f(act, ld(a, i) + ld(b, bn < n ? i % bn : i)));
}

template <class T>
__global__ void mul_rows_k(const T* x, const T* m, T* y, int64_t rows, int L, int C) {
  pdl_wait_and_release();
  int64_t n = rows * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / C;
    st(y, i, ld(x, i) * ld(m, r % L));
  }
}

template <class T>
__global__ void from_f32_k(const float* x, T* y, int64_t n) {
  pdl_wait_and_release();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    st(y, i, x[i]);
}
// fp32 -> fp16, 8 values per thread (two 16-byte loads, one 16-byte store). The graph input
// (640x640x3 at batch 1) took 6.7 us through the scalar kernel above (H200 CUPTI timeline).
__global__ void from_f32_half8_k(const float4* x, uint4* y, int64_t n8) {
  pdl_wait_and_release();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
    const float4 a = x[2 * i], b = x[2 * i + 1];
    const __half2 h[4] = {__floats2half2_rn(a.x, a.y), __floats2half2_rn(a.z, a.w), __floats2half2_rn(b.x, b.y),
                          __floats2half2_rn(b.z, b.w)};
    y[i] = *reinterpret_cast<const uint4*>(h);
  }
}
// fp32 pixels of c channels -> fp16 pixels of cp channels (zeros past c), one pixel per thread:
// cp = 8 is one 16-byte store, cp = 4 one 8-byte store (DETFORGE_CUDA_PAD_INPUT).
template <int CP>
__global__ void from_f32_padc_k(const float* x, __half* y, int64_t pixels, int c) {
  pdl_wait_and_release();
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pixels; p += (int64_t)gridDim.x * blockDim.x) {
    __align__(16) __half h[CP];
#pragma unroll
    for (int k = 0; k < CP; ++k) h[k] = __float2half_rn(k < c ? x[p * c + k] : 0.f);
    if constexpr (CP == 8)
      reinterpret_cast<uint4*>(y)[p] = *reinterpret_cast<const uint4*>(h);
    else
      reinterpret_cast<uint2*>(y)[p] = *reinterpret_cast<const uint2*>(h);
  }
}
template <class T>
__global__ void to_f32_k(const T* x, float* y, int64_t n) {
  pdl_wait_and_release();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = ld(x, i);
}
__global__ void i32_to_f32_k(const int32_t* x, float* y, int64_t n) {
  pdl_wait_and_release();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = static_cast<float>(x[i]);
}
template <class T>
__global__ void nonfinite_k(const T* x, int64_t n, unsigned long long* count) {
  pdl_wait_and_release();
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    if (!isfinite(ld(x, i))) ++c;
  if (c) atomicAdd(count, c);
}

// 16 bytes per thread (8 halves or 4 floats) when C, n and the pointers allow: the scalar
// version above moved 2-byte elements with an int64 modulo each and took 6.7 of 31.6 ms of the
// fp16 batch-32 forward on the H200 (CUPTI, 111 launches), far from the copy bandwidth.
template <class T>
__global__ void bias_act_vec_k(const Pack<T>* x, const T* bias, const Pack<T>* res, Pack<T>* y, int64_t packs,
                               int C, graph::Act act) {
  pdl_wait_and_release();
  constexpr int N = Pack<T>::N;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < packs; i += (int64_t)gridDim.x * blockDim.x) {
    Pack<T> a = x[i], r;
    if (res) r = res[i];
    const int c0 = static_cast<int>((i * N) % C);
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float v = ld(a.v, k);
      if (bias) v += ld(bias, c0 + k);
      if (res) v += ld(r.v, k);
      st(out.v, k, act_f(act, v));
    }
    y[i] = out;
  }
}
// add_act: b broadcast when bn < n; packs never straddle the broadcast period (bn % N == 0).
template <class T>
__global__ void add_act_vec_k(const Pack<T>* a, const Pack<T>* b, int64_t bpacks, Pack<T>* y, int64_t packs,
                              graph::Act act) {
  pdl_wait_and_release();
  constexpr int N = Pack<T>::N;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < packs; i += (int64_t)gridDim.x * blockDim.x) {
    const Pack<T> x = a[i], z = b[bpacks < packs ? i % bpacks : i];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < N; ++k) st(out.v, k, act_f(act, ld(x.v, k) + ld(z.v, k)));
    y[i] = out;
  }
}

// mul_rows: a pack lies inside one row (C % N == 0).
template <class T>
__global__ void mul_rows_vec_k(const Pack<T>* x, const T* m, Pack<T>* y, int64_t packs, int L, int Cp) {
  pdl_wait_and_release();
  constexpr int N = Pack<T>::N;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < packs; i += (int64_t)gridDim.x * blockDim.x) {
    const float f = ld(m, (i / Cp) % L);
    const Pack<T> a = x[i];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < N; ++k) st(out.v, k, ld(a.v, k) * f);
    y[i] = out;
  }
}

}  // namespace

void bias_act(const void* x, const void* bias, const void* res, void* y, int64_t n, int C, Act act, bool half,
              cudaStream_t s) {
  const int vec = half ? 8 : 4;
  if (C % vec == 0 && n % vec == 0 && aligned16(x) && aligned16(y) && (!res || aligned16(res)) &&
      (!bias || aligned16(bias))) {
    const int64_t packs = n / vec;
    DF_DISPATCH(half, T,
                launch(bias_act_vec_k<T>, blocks_for(packs, 256), 256, 0, s, (const Pack<T>*)x, (const T*)bias,
                       (const Pack<T>*)res, (Pack<T>*)y, packs, C, act));
    return;
  }
  DF_DISPATCH(half, T,
              launch(bias_act_k<T>, blocks_for(n, 256), 256, 0, s, (const T*)x, (const T*)bias, (const T*)res, (T*)y, n,
                     C, act));
}
void add_act(const void* a, const void* b, int64_t bn, void* y, int64_t n, Act act, bool half, cudaStream_t s) {
  const int vec = half ? 8 : 4;
  if (n % vec == 0 && bn % vec == 0 && aligned16(a) && aligned16(b) && aligned16(y)) {
    const int64_t packs = n / vec, bpacks = bn / vec;
    DF_DISPATCH(half, T,
                launch(add_act_vec_k<T>, blocks_for(packs, 256), 256, 0, s, (const Pack<T>*)a, (const Pack<T>*)b,
                       bpacks, (Pack<T>*)y, packs, act));
    return;
  }
  DF_DISPATCH(half, T,
              launch(add_act_k<T>, blocks_for(n, 256), 256, 0, s, (const T*)a, (const T*)b, bn, (T*)y, n, act));
}
void mul_rows(const void* x, const void* m, void* y, int64_t rows, int L, int C, bool half, cudaStream_t s) {
  const int vec = half ? 8 : 4;
  if (C % vec == 0 && aligned16(x) && aligned16(y)) {
    const int64_t packs = rows * C / vec;
    DF_DISPATCH(half, T,
                launch(mul_rows_vec_k<T>, blocks_for(packs, 256), 256, 0, s, (const Pack<T>*)x, (const T*)m,
                       (Pack<T>*)y, packs, L, C / vec));
    return;
  }
  DF_DISPATCH(half, T,
              launch(mul_rows_k<T>, blocks_for(rows * C, 256), 256, 0, s, (const T*)x, (const T*)m, (T*)y, rows, L, C));
}
void f32_to_storage(const float* x, void* y, int64_t n, bool half, cudaStream_t s) {
  if (half && n % 8 == 0 && aligned16(x) && aligned16(y)) {
    launch(from_f32_half8_k, blocks_for(n / 8, 256), 256, 0, s, reinterpret_cast<const float4*>(x),
           static_cast<uint4*>(y), n / 8);
    return;
  }
  DF_DISPATCH(half, T, launch(from_f32_k<T>, blocks_for(n, 256), 256, 0, s, x, (T*)y, n));
}
void f32_to_half_padc(const float* x, void* y, int64_t pixels, int c, int cp, cudaStream_t s) {
  if (c > cp || (cp != 4 && cp != 8))
    throw Error("f32_to_half_padc: cannot pad " + std::to_string(c) + " channels to " + std::to_string(cp));
  if (cp == 8)
    launch(from_f32_padc_k<8>, blocks_for(pixels, 256), 256, 0, s, x, static_cast<__half*>(y), pixels, c);
  else
    launch(from_f32_padc_k<4>, blocks_for(pixels, 256), 256, 0, s, x, static_cast<__half*>(y), pixels, c);
}
void storage_to_f32(const void* x, float* y, int64_t n, bool half, cudaStream_t s) {
  DF_DISPATCH(half, T, launch(to_f32_k<T>, blocks_for(n, 256), 256, 0, s, (const T*)x, y, n));
}
void i32_to_f32(const int32_t* x, float* y, int64_t n, cudaStream_t s) {
  launch(i32_to_f32_k, blocks_for(n, 256), 256, 0, s, x, y, n);
}
void count_nonfinite(const void* x, int64_t n, bool half, unsigned long long* count, cudaStream_t s) {
  DF_DISPATCH(half, T, launch(nonfinite_k<T>, blocks_for(n, 256), 256, 0, s, (const T*)x, n, count));
}

}  // namespace detforge::cuda
