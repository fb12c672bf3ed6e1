// NHWC max and average pooling. Max: padding never wins. Average: the divisor is the number of
// in-bounds elements (PyTorch's AvgPool2d(2,2,ceil_mode=True) at an odd edge divides by 2 or 1).
//
// v4: a thread takes 16 bytes of channels (8 halves / 4 floats) of one output pixel when C and
// the pointers allow. The scalar kernel (kept for the rest) took 1.24 ms of the 13.3 ms fp16
// batch-32 forward on the H200 (CUPTI; the stem's 3x3/2 max-pool over 32x320x320x64): a 2-byte
// load and an int64 index decomposition per element of each window.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {
template <class T, bool kMax>
__global__ void pool_k(const T* x, T* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad) {
  pdl_wait_and_release();
  const int64_t n = (int64_t)B * Ho * Wo * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const NhwcCoord<int64_t> o = nhwc_coord(i, Ho, Wo, C);
    const int c = o.c, ox = o.x, oy = o.y, b = o.b;
    float acc = kMax ? -INFINITY : 0.f;
    int cnt = 0;
    for (int dy = 0; dy < k; ++dy) {
      const int iy = oy * stride - pad + dy;
      if (iy < 0 || iy >= H) continue;
      for (int dx = 0; dx < k; ++dx) {
        const int ix = ox * stride - pad + dx;
        if (ix < 0 || ix >= W) continue;
        const float v = ld(x, (((int64_t)b * H + iy) * W + ix) * C + c);
        acc = kMax ? fmaxf(acc, v) : acc + v;
        ++cnt;
      }
    }
    st(y, i, kMax ? acc : (cnt ? acc / cnt : 0.f));
  }
}

// Same arithmetic per channel as pool_k (fp32 max / sum in the same window order), so both
// paths give identical results. Cp = C / Pack<T>::N packs per pixel. I: the index type (int when
// the output's packs plus the grid-stride overshoot stay below 2^31: int64 divides are slow).
template <class T, bool kMax, class I>
__global__ void pool_vec_k(const Pack<T>* x, Pack<T>* y, int B, int H, int W, int Cp, int Ho, int Wo, int k,
                           int stride, int pad) {
  pdl_wait_and_release();
  constexpr int N = Pack<T>::N;
  const I n = (I)B * Ho * Wo * Cp;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const NhwcCoord<I> o = nhwc_coord(i, Ho, Wo, Cp);
    const int c = o.c, ox = o.x, oy = o.y, b = o.b;
    float acc[N];
#pragma unroll
    for (int e = 0; e < N; ++e) acc[e] = kMax ? -INFINITY : 0.f;
    int cnt = 0;
    for (int dy = 0; dy < k; ++dy) {
      const int iy = oy * stride - pad + dy;
      if (iy < 0 || iy >= H) continue;
      for (int dx = 0; dx < k; ++dx) {
        const int ix = ox * stride - pad + dx;
        if (ix < 0 || ix >= W) continue;
        const Pack<T> v = x[(((int64_t)b * H + iy) * W + ix) * Cp + c];
#pragma unroll
        for (int e = 0; e < N; ++e) acc[e] = kMax ? fmaxf(acc[e], ld(v.v, e)) : acc[e] + ld(v.v, e);
        ++cnt;
      }
    }
    Pack<T> out;
#pragma unroll
    for (int e = 0; e < N; ++e) st(out.v, e, kMax ? acc[e] : (cnt ? acc[e] / cnt : 0.f));
    y[i] = out;
  }
}

template <bool kMax>
void pool(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad, bool half,
          cudaStream_t s) {
  const int vec = half ? 8 : 4;
  if (C % vec == 0 && aligned16(x) && aligned16(y)) {
    const int Cp = C / vec;
    const int64_t n = (int64_t)B * Ho * Wo * Cp;
    // 2^28: the most threads blocks_for launches (the grid-stride overshoot). Input offsets
    // are computed in int64 either way (multiplies only).
    const bool small = n + (int64_t{1} << 28) < INT32_MAX;
    if (small) {
      DF_DISPATCH(half, T,
                  launch(pool_vec_k<T, kMax, int>, blocks_for(n, 256), 256, 0, s, (const Pack<T>*)x, (Pack<T>*)y, B, H,
                         W, Cp, Ho, Wo, k, stride, pad));
    } else {
      DF_DISPATCH(half, T,
                  launch(pool_vec_k<T, kMax, int64_t>, blocks_for(n, 256), 256, 0, s, (const Pack<T>*)x, (Pack<T>*)y, B,
                         H, W, Cp, Ho, Wo, k, stride, pad));
    }
  } else {
    DF_DISPATCH(half, T,
                launch(pool_k<T, kMax>, blocks_for((int64_t)B * Ho * Wo * C, 256), 256, 0, s, (const T*)x, (T*)y, B, H,
                       W, C, Ho, Wo, k, stride, pad));
  }
}
}  // namespace

void max_pool2d(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad,
                bool half, cudaStream_t s) {
  pool<true>(x, y, B, H, W, C, Ho, Wo, k, stride, pad, half, s);
}
void avg_pool2d(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad,
                bool half, cudaStream_t s) {
  pool<false>(x, y, B, H, W, C, Ho, Wo, k, stride, pad, half, s);
}

}  // namespace detforge::cuda
