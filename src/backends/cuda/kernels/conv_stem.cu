#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/conv_stem.h"

namespace detforge::cuda {
namespace {

constexpr int kThreads = 128;

// One thread per output pixel, all CO channels in registers; weights (fp32) and bias in shared
// memory laid out [ky][kx][ci][co], read by every thread at the same address (broadcast) four
// output channels per 16-byte load: the first version read one weight per FMA and took 20.8 us
// for r18vd's stem on the H200, bound by those shared-memory reads.
template <class T, int CO>
__global__ void conv_stem_k(const float* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                            T* __restrict__ y, int B, int H, int W, int Ci, int Ho, int Wo, int k, int stride, int pad,
                            graph::Act act) {
  extern __shared__ float sw[];
  const int nw = CO * k * k * Ci;
  const int taps = k * k * Ci;  // w is OHWI: w[co * taps + tap] -> sw[tap * CO + co]
  for (int i = threadIdx.x; i < nw; i += blockDim.x) sw[(i % taps) * CO + i / taps] = ld(w, i);
  float* sb = sw + nw;
  for (int i = threadIdx.x; i < CO; i += blockDim.x) sb[i] = bias ? ld(bias, i) : 0.f;
  __syncthreads();
  const int64_t pix = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (pix >= (int64_t)B * Ho * Wo) return;
  const int ox = static_cast<int>(pix % Wo);
  const int64_t t = pix / Wo;
  const int oy = static_cast<int>(t % Ho);
  const int b = static_cast<int>(t / Ho);
  float acc[CO];
#pragma unroll
  for (int co = 0; co < CO; ++co) acc[co] = sb[co];
  for (int ky = 0; ky < k; ++ky) {
    const int iy = oy * stride - pad + ky;
    if (iy < 0 || iy >= H) continue;
    for (int kx = 0; kx < k; ++kx) {
      const int ix = ox * stride - pad + kx;
      if (ix < 0 || ix >= W) continue;
      const float* xp = x + (((int64_t)b * H + iy) * W + ix) * Ci;
      for (int ci = 0; ci < Ci; ++ci) {
        const float v = xp[ci];
        const float4* wp = reinterpret_cast<const float4*>(sw + ((ky * k + kx) * Ci + ci) * CO);
#pragma unroll
        for (int q = 0; q < CO / 4; ++q) {
          const float4 w4 = wp[q];
          acc[4 * q] = fmaf(v, w4.x, acc[4 * q]);
          acc[4 * q + 1] = fmaf(v, w4.y, acc[4 * q + 1]);
          acc[4 * q + 2] = fmaf(v, w4.z, acc[4 * q + 2]);
          acc[4 * q + 3] = fmaf(v, w4.w, acc[4 * q + 3]);
        }
      }
    }
  }
  using P = Pack<T>;
  P* out = reinterpret_cast<P*>(y + pix * CO);  // CO * sizeof(T) is a multiple of 16 bytes
#pragma unroll
  for (int q = 0; q < CO / P::N; ++q) {
    P p;
#pragma unroll
    for (int j = 0; j < P::N; ++j) {
      const float v = act_f(act, acc[q * P::N + j]);
      if constexpr (sizeof(T) == 2) p.v[j] = __float2half_rn(v); else p.v[j] = v;
    }
    out[q] = p;
  }
}

template <class T>
void launch(const float* x, const T* w, const T* bias, T* y, const ConvShape& s, graph::Act act, cudaStream_t st) {
  const int64_t pixels = (int64_t)s.B * s.Ho * s.Wo;
  const unsigned blocks = static_cast<unsigned>((pixels + kThreads - 1) / kThreads);
  const size_t smem = sizeof(float) * (s.Co * s.kh * s.kw * s.Ci + s.Co);
  auto go = [&](auto kernel) {
    kernel<<<blocks, kThreads, smem, st>>>(x, w, bias, y, s.B, s.H, s.W, s.Ci, s.Ho, s.Wo, s.kh, s.stride, s.pad, act);
  };
  switch (s.Co) {
    case 8: go(conv_stem_k<T, 8>); break;
    case 16: go(conv_stem_k<T, 16>); break;
    case 32: go(conv_stem_k<T, 32>); break;
    default: go(conv_stem_k<T, 64>); break;
  }
}

}  // namespace

bool conv_stem_supported(const ConvShape& s) {
  return s.Ci >= 1 && s.Ci <= 4 && s.kh == s.kw && s.kh <= 7 &&
         (s.Co == 8 || s.Co == 16 || s.Co == 32 || s.Co == 64);
}

void conv_stem(const float* x, const void* w, const void* bias, void* y, const ConvShape& s, graph::Act act, bool half,
               cudaStream_t st) {
  if (!conv_stem_supported(s)) throw Error("conv_stem: unsupported shape (Ci " + std::to_string(s.Ci) + ", Co " +
                                           std::to_string(s.Co) + ")");
  if (!aligned16(y)) throw Error("conv_stem: output not 16-byte aligned");
  if (half)
    launch(x, (const __half*)w, (const __half*)bias, (__half*)y, s, act, st);
  else
    launch(x, (const float*)w, (const float*)bias, (float*)y, s, act, st);
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
