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

// Taps first .. first + Nt - 1 along an axis of `size` pixels: each clamped into the axis (at,
// so that every load stays in bounds) and whether it lies inside (ok; outside ones are masked).
template <int Nt>
__device__ __forceinline__ void axis_taps(int first, int size, int (&at)[Nt], bool (&ok)[Nt]) {
#pragma unroll
  for (int d = 0; d < Nt; ++d) {
    const int i = first + d;
    ok[d] = i >= 0 && i < size;
    at[d] = min(max(i, 0), size - 1);
  }
}

// The stem's 3x3 / stride 2 / pad 1 max-pool (the only max-pool of r18vd) with its window fixed:
// the nine 16-byte loads are issued before the first max, from addresses clamped into the image
// (an out-of-bounds tap is loaded from an in-bounds pixel and then masked out), so the same
// fmaxf sequence as pool_vec_k runs on the same values. pool_vec_k's bounds-checked loop took
// 12 us at batch 1 (320x320x64 -> 160x160x64 fp16, H200 timeline), ~3x its L2 traffic time.
template <class T, class I>
__global__ void max_pool3s2_vec_k(const Pack<T>* x, Pack<T>* y, int B, int H, int W, int Cp, int Ho, int Wo) {
  pdl_wait_and_release();
  constexpr int N = Pack<T>::N;
  const I n = (I)B * Ho * Wo * Cp;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const NhwcCoord<I> o = nhwc_coord(i, Ho, Wo, Cp);
    int ys[3], xs[3];
    bool oky[3], okx[3];
    axis_taps(o.y * 2 - 1, H, ys, oky);
    axis_taps(o.x * 2 - 1, W, xs, okx);
    const Pack<T>* img = x + (int64_t)o.b * H * W * Cp + o.c;
    Pack<T> v[9];
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) v[dy * 3 + dx] = img[((int64_t)ys[dy] * W + xs[dx]) * Cp];
    float acc[N];
#pragma unroll
    for (int e = 0; e < N; ++e) acc[e] = -INFINITY;
#pragma unroll
    for (int t = 0; t < 9; ++t) {
      if (!oky[t / 3] || !okx[t % 3]) continue;
#pragma unroll
      for (int e = 0; e < N; ++e) acc[e] = fmaxf(acc[e], ld(v[t].v, e));
    }
    Pack<T> out;
#pragma unroll
    for (int e = 0; e < N; ++e) st(out.v, e, acc[e]);
    y[i] = out;
  }
}

// The same 3x3/2/1 max-pool, one thread per 2x2 block of output pixels (one 16-byte pack of
// channels): their windows cover 5x5 input pixels, 25 loads for 4 outputs instead of 36. Why:
// max_pool3s2_vec_k took 9.2 us at batch 1 (13 MB that the stem's last conv just wrote to L2;
// H200 timeline, ab-2026-12-04-session12), about 3x the time of its bytes. Per output the same
// taps as max_pool3s2_vec_k, masked the same way; the max is order-independent on the same
// values (as fmaxf orders them, ties of -0 and +0 aside, which compare equal). Not yet timed:
// DETFORGE_CUDA_POOL_QUAD=1.
template <class T>
__global__ void max_pool3s2_quad_k(const Pack<T>* x, Pack<T>* y, int B, int H, int W, int Cp, int Ho, int Wo) {
  pdl_wait_and_release();
  constexpr int N = Pack<T>::N;
  const int Hq = (Ho + 1) / 2, Wq = (Wo + 1) / 2;
  const int n = B * Hq * Wq * Cp;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const NhwcCoord<int> q = nhwc_coord(i, Hq, Wq, Cp);
    // Input rows/cols 4q-1 .. 4q+3 of the 2x2 outputs 2q, 2q+1: clamped addresses, masked taps.
    int ys[5], xs[5];
    bool oky[5], okx[5];
    axis_taps(q.y * 4 - 1, H, ys, oky);
    axis_taps(q.x * 4 - 1, W, xs, okx);
    const Pack<T>* img = x + (int64_t)q.b * H * W * Cp + q.c;
    float acc[2][2][N];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int e = 0; e < N; ++e) acc[a][b][e] = -INFINITY;
#pragma unroll
    for (int r = 0; r < 5; ++r) {
      Pack<T> v[5];
#pragma unroll
      for (int c = 0; c < 5; ++c) v[c] = img[((int64_t)ys[r] * W + xs[c]) * Cp];
      if (!oky[r]) continue;
#pragma unroll
      for (int c = 0; c < 5; ++c) {
        if (!okx[c]) continue;
#pragma unroll
        for (int a = 0; a < 2; ++a) {  // output row 2q.y + a takes input rows 2a .. 2a + 2
          if (r < 2 * a || r > 2 * a + 2) continue;
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            if (c < 2 * b || c > 2 * b + 2) continue;
#pragma unroll
            for (int e = 0; e < N; ++e) acc[a][b][e] = fmaxf(acc[a][b][e], ld(v[c].v, e));
          }
        }
      }
    }
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int oy = q.y * 2 + a, ox = q.x * 2 + b;
        if (oy >= Ho || ox >= Wo) continue;
        Pack<T> out;
#pragma unroll
        for (int e = 0; e < N; ++e) st(out.v, e, acc[a][b][e]);
        y[(((int64_t)q.b * Ho + oy) * Wo + ox) * Cp + q.c] = out;
      }
  }
}

template <bool kMax>
void pool(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad, bool half,
          cudaStream_t s, bool quad = false) {
  const int vec = half ? 8 : 4;
  if (C % vec == 0 && aligned16(x) && aligned16(y)) {
    const int Cp = C / vec;
    const int64_t n = (int64_t)B * Ho * Wo * Cp;
    // 2^28: the most threads blocks_for launches (the grid-stride overshoot). Input offsets
    // are computed in int64 either way (multiplies only).
    const bool small = n + (int64_t{1} << 28) < INT32_MAX;
    if (kMax && quad && k == 3 && stride == 2 && pad == 1 && small) {
      const int64_t nq = (int64_t)B * ((Ho + 1) / 2) * ((Wo + 1) / 2) * Cp;
      DF_DISPATCH(half, T,
                  launch(max_pool3s2_quad_k<T>, blocks_for(nq, 128), 128, 0, s, (const Pack<T>*)x, (Pack<T>*)y, B, H,
                         W, Cp, Ho, Wo));
    } else if (kMax && k == 3 && stride == 2 && pad == 1 && small) {
      DF_DISPATCH(half, T,
                  launch(max_pool3s2_vec_k<T, int>, blocks_for(n, 256), 256, 0, s, (const Pack<T>*)x, (Pack<T>*)y, B, H,
                         W, Cp, Ho, Wo));
    } else if (small) {
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
                bool half, cudaStream_t s, bool quad) {
  pool<true>(x, y, B, H, W, C, Ho, Wo, k, stride, pad, half, s, quad);
}
void avg_pool2d(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad,
                bool half, cudaStream_t s) {
  pool<false>(x, y, B, H, W, C, Ho, Wo, k, stride, pad, half, s);
}

}  // namespace detforge::cuda
