// Pillow's two-pass resampler (libImaging/Resample.c, 8 bits per channel) on the device, plus the
// byte -> pixel table lookup. Integer arithmetic only (int32 accumulate, arithmetic shift, clamp),
// so any summation order gives the host's bytes; weights are non-negative and sum to ~2^22, so
// 255 * sum stays far below 2^31. Grid-stride loops with 64-bit indices: a 1 x 16M image is legal.
#include "backends/cuda/image_input.h"
#include "backends/cuda/kernels/common.cuh"
#include "io/image_resize_coeffs.h"

namespace detforge::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPilPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

template <bool kF32>
__global__ void horizontal_k(const uint8_t* __restrict__ src, int src_w, int row0, int64_t rows, PassTaps t,
                             int out_w, uint8_t* __restrict__ dst_u8, float* __restrict__ dst_f32,
                             const float* __restrict__ table) {
  const int64_t n = rows * out_w;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t y = i / out_w;
    const int x = static_cast<int>(i - y * out_w);
    const uint8_t* p = src + ((row0 + y) * src_w + t.first[x]) * 3;
    const int32_t* w = t.w + int64_t(x) * t.ksize;
    int32_t r = 1 << (kPilPrecisionBits - 1), g = r, b = r;
    const int cnt = t.count[x];
    for (int k = 0; k < cnt; ++k) {
      const int32_t wk = w[k];
      r += p[3 * k] * wk;
      g += p[3 * k + 1] * wk;
      b += p[3 * k + 2] * wk;
    }
    if constexpr (kF32) {
      dst_f32[3 * i] = table[clip8(r)];
      dst_f32[3 * i + 1] = table[256 + clip8(g)];
      dst_f32[3 * i + 2] = table[512 + clip8(b)];
    } else {
      dst_u8[3 * i] = clip8(r);
      dst_u8[3 * i + 1] = clip8(g);
      dst_u8[3 * i + 2] = clip8(b);
    }
  }
}

// One thread per output byte: consecutive threads read and write consecutive bytes of a row.
template <bool kF32>
__global__ void vertical_k(const uint8_t* __restrict__ src, int64_t stride, int row0, PassTaps t, int64_t out_h,
                           uint8_t* __restrict__ dst_u8, float* __restrict__ dst_f32,
                           const float* __restrict__ table) {
  const int64_t n = out_h * stride;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t y = i / stride;
    const int64_t c = i - y * stride;
    const uint8_t* base = src + (t.first[y] - row0) * stride + c;
    const int32_t* w = t.w + y * t.ksize;
    int32_t acc = 1 << (kPilPrecisionBits - 1);
    const int cnt = t.count[y];
    for (int k = 0; k < cnt; ++k) acc += base[k * stride] * w[k];
    if constexpr (kF32)
      dst_f32[i] = table[(c % 3) * 256 + clip8(acc)];
    else
      dst_u8[i] = clip8(acc);
  }
}

__global__ void bytes_to_pixels_k(const uint8_t* __restrict__ src, int64_t n, const float* __restrict__ table,
                                  float* __restrict__ dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = table[(i % 3) * 256 + src[i]];
}

}  // namespace

void pil_pass_horizontal(const uint8_t* src, int src_w, int row0, int rows, PassTaps t, int out_w, uint8_t* dst_u8,
                         float* dst_f32, const float* table, cudaStream_t s) {
  const int64_t n = int64_t(rows) * out_w;
  if (n <= 0) return;
  if (dst_f32)
    horizontal_k<true><<<blocks_for(n, kThreads), kThreads, 0, s>>>(src, src_w, row0, rows, t, out_w, nullptr, dst_f32,
                                                                     table);
  else
    horizontal_k<false><<<blocks_for(n, kThreads), kThreads, 0, s>>>(src, src_w, row0, rows, t, out_w, dst_u8, nullptr,
                                                                      nullptr);
  DF_CUDA(cudaGetLastError());
}

void pil_pass_vertical(const uint8_t* src, int w, int row0, PassTaps t, int out_h, uint8_t* dst_u8, float* dst_f32,
                       const float* table, cudaStream_t s) {
  const int64_t stride = int64_t(w) * 3;
  const int64_t n = stride * out_h;
  if (n <= 0) return;
  if (dst_f32)
    vertical_k<true><<<blocks_for(n, kThreads), kThreads, 0, s>>>(src, stride, row0, t, out_h, nullptr, dst_f32, table);
  else
    vertical_k<false><<<blocks_for(n, kThreads), kThreads, 0, s>>>(src, stride, row0, t, out_h, dst_u8, nullptr,
                                                                    nullptr);
  DF_CUDA(cudaGetLastError());
}

void pil_bytes_to_pixels(const uint8_t* src, int64_t n, const float* table, float* dst, cudaStream_t s) {
  if (n <= 0) return;
  bytes_to_pixels_k<<<blocks_for(n, kThreads), kThreads, 0, s>>>(src, n, table, dst);
  DF_CUDA(cudaGetLastError());
}

}  // namespace detforge::cuda
