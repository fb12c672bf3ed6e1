#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/conv_stem.h"

namespace detforge::cuda {
namespace {

constexpr int kThreads = 128;

// Both kernels' weights (fp32) and bias in shared memory: w is OHWI, w[co * taps + tap] ->
// sw[tap * CO + co], so a thread reads four output channels of one tap per 16-byte broadcast.
template <class T, int CO>
__device__ __forceinline__ void stage_weights(const T* w, const T* bias, int taps, float* sw, float* sb) {
  for (int i = threadIdx.x; i < taps * CO; i += blockDim.x) sw[(i % taps) * CO + i / taps] = ld(w, i);
  for (int i = threadIdx.x; i < CO; i += blockDim.x) sb[i] = bias ? ld(bias, i) : 0.f;
}

// One output pixel's CO channels, activated and rounded to T, as 16-byte packs (CO * sizeof(T) is
// a multiple of 16 bytes).
template <class T, int CO>
__device__ __forceinline__ void store_pixel(T* y, const float (&acc)[CO], graph::Act act) {
  using Pk = Pack<T>;
  Pk* out = reinterpret_cast<Pk*>(y);
#pragma unroll
  for (int q = 0; q < CO / Pk::N; ++q) {
    Pk pk;
#pragma unroll
    for (int j = 0; j < Pk::N; ++j) {
      const float v = act_f(act, acc[q * Pk::N + j]);
      if constexpr (sizeof(T) == 2) pk.v[j] = __float2half_rn(v); else pk.v[j] = v;
    }
    out[q] = pk;
  }
}

// One thread per output pixel, all CO channels in registers; weights (fp32) and bias in shared
// memory laid out [ky][kx][ci][co], read by every thread at the same address (broadcast) four
// output channels per 16-byte load: the first version read one weight per FMA and took 20.8 us
// for r18vd's stem on the H200, bound by those shared-memory reads.
template <class T, int CO>
__global__ void conv_stem_k(const float* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                            T* __restrict__ y, int B, int H, int W, int Ci, int Ho, int Wo, int k, int stride, int pad,
                            graph::Act act) {
  extern __shared__ float sw[];
  const int taps = k * k * Ci;
  float* sb = sw + taps * CO;
  stage_weights<T, CO>(w, bias, taps, sw, sb);
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
  store_pixel<T, CO>(y + pix * CO, acc, act);
}

// v3, the row kernel (3x3 stride-2 convs of 3 input channels to 32 or 64, as the ResNet-vd
// stems have): one block per output row. Its 3 input rows are staged in shared memory as planes
// (one per channel, zero columns for the padding) by coalesced loads, so a thread reads a pixel
// from shared memory, not 27 scattered 4-byte global loads. Each thread owns P output pixels
// nt apart (nt = ceil(Wo / P) threads), so a warp reads neighbouring pixels (2-way bank
// conflicts at stride 2) and stores 16-byte packs of neighbouring pixels; each 16-byte weight
// read (a broadcast) serves 4 * P FMAs, not 4 as in v2. Accumulation stays fp32 on the fp32
// pixels. Why: r18vd's stem conv is 0.18 GFLOP; cuDNN took 10.5 us for it plus 4.3 us for the
// fp16 conversion of the input (H100 timeline, session 26), against ~3 us of FMA issue.
// Measured (H100, session 27): 19.6-20.2 us in the graph, the per-pixel kernel 17.2 us. One
// block per output row is 320 blocks of 96 threads at r18vd's shape, ~7 warps per SM (ncu:
// 10.9 % achieved occupancy): latency-bound. More rows' worth of threads per SM is the next try.
constexpr int kRowK = 3, kRowS = 2, kRowCi = 3;
template <class T, int CO, int P>
__global__ void __launch_bounds__(256) conv_stem_row_k(const float* __restrict__ x, const T* __restrict__ w,
                                                        const T* __restrict__ bias, T* __restrict__ y, int H, int W,
                                                        int Ho, int Wo, int pad, int wp, bool vec, graph::Act act) {
  extern __shared__ float smem[];
  constexpr int taps = kRowK * kRowK * kRowCi;
  float* sw = smem;                  // [tap][co]
  float* sb = sw + taps * CO;        // [co]
  float* sx = sb + CO;               // [ky][ci][wp]: column c holds input column c - pad
  stage_weights<T, CO>(w, bias, taps, sw, sb);
  const int oy = blockIdx.x % Ho, b = blockIdx.x / Ho;
  pdl_wait_and_release();
  // Padding columns (and rows outside the image, below) are zeros.
  for (int i = threadIdx.x; i < kRowK * kRowCi * 2 * pad; i += blockDim.x) {
    const int r = i / (2 * pad), c = i % (2 * pad);
    sx[r * wp + (c < pad ? c : W + c)] = 0.f;
  }
  // The 3 rows' pixels: every load of a batch issued before any shared store. One load and
  // store after another (v3's first staging) left the kernel waiting on global loads at 10 %
  // occupancy: 58 us under ncu (H100, session 27).
  const int per_row = W * kRowCi;
  if (vec) {  // rows of whole 16-byte packs from a 16-byte aligned x
    const int n4 = per_row / 4, total = kRowK * n4;
    constexpr int U = 8;
    for (int base = 0; base < total; base += U * blockDim.x) {
      float4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * blockDim.x + threadIdx.x;
        const int ky = i / n4, iy = oy * kRowS - pad + ky;
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < total && iy >= 0 && iy < H)
          v[u] = __ldg(reinterpret_cast<const float4*>(x + ((int64_t)b * H + iy) * per_row) + (i - ky * n4));
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * blockDim.x + threadIdx.x;
        if (i >= total) break;
        const int ky = i / n4, e0 = (i - ky * n4) * 4;
        float* row = sx + ky * kRowCi * wp + pad;
        const float e[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) row[((e0 + j) % kRowCi) * wp + (e0 + j) / kRowCi] = e[j];
      }
    }
  } else {
    for (int i = threadIdx.x; i < kRowK * per_row; i += blockDim.x) {
      const int ky = i / per_row, e = i - ky * per_row, iy = oy * kRowS - pad + ky;
      const float v = iy >= 0 && iy < H ? x[((int64_t)b * H + iy) * per_row + e] : 0.f;
      sx[(ky * kRowCi + e % kRowCi) * wp + pad + e / kRowCi] = v;
    }
  }
  __syncthreads();
  const int nt = (Wo + P - 1) / P;
  const int t = threadIdx.x;
  if (t >= nt) return;
  float acc[P][CO];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int co = 0; co < CO; ++co) acc[p][co] = sb[co];
  // The tap loops stay rolled: unrolled, the 27 taps x 4 * P * CO / 4 FMAs were ~4,000
  // instructions per thread and the kernel took 67.6 us (H100, session 27), instruction-fetch
  // bound; rolled, one tap's body (P + CO / 4 shared loads, P * CO FMAs) is the loop.
#pragma unroll 1
  for (int ky = 0; ky < kRowK; ++ky)
#pragma unroll 1
    for (int ci = 0; ci < kRowCi; ++ci) {
      const float* row = sx + (ky * kRowCi + ci) * wp;
#pragma unroll 1
      for (int kx = 0; kx < kRowK; ++kx) {
        float v[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const int ox = min(t + p * nt, Wo - 1);  // past Wo: computed, not stored
          v[p] = row[ox * kRowS + kx];
        }
        const float4* wq = reinterpret_cast<const float4*>(sw + ((ky * kRowK + kx) * kRowCi + ci) * CO);
#pragma unroll
        for (int q = 0; q < CO / 4; ++q) {
          const float4 w4 = wq[q];
#pragma unroll
          for (int p = 0; p < P; ++p) {
            acc[p][4 * q] = fmaf(v[p], w4.x, acc[p][4 * q]);
            acc[p][4 * q + 1] = fmaf(v[p], w4.y, acc[p][4 * q + 1]);
            acc[p][4 * q + 2] = fmaf(v[p], w4.z, acc[p][4 * q + 2]);
            acc[p][4 * q + 3] = fmaf(v[p], w4.w, acc[p][4 * q + 3]);
          }
        }
      }
    }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int ox = t + p * nt;
    if (ox >= Wo) break;
    store_pixel<T, CO>(y + (((int64_t)b * Ho + oy) * Wo + ox) * CO, acc[p], act);
  }
}

// The row kernel's shared memory: weights, bias and 3 staged rows of wp = W + 2 pad columns
// ((Wo - 1) * stride + 3 <= W + 2 pad, so every tap lands inside).
int row_width(const ConvShape& s) { return s.W + 2 * s.pad; }
size_t row_smem(const ConvShape& s) {
  return sizeof(float) * (kRowK * kRowK * kRowCi * s.Co + s.Co + kRowK * kRowCi * row_width(s));
}
constexpr size_t kRowSmemMax = 96 * 1024;

// Output pixels per thread: P * CO = 128 accumulators.
constexpr int row_pixels(int co) { return co == 32 ? 4 : 2; }

bool row_kernel_fits(const ConvShape& s) {
  if (s.Ci != kRowCi || s.kh != kRowK || s.kw != kRowK || s.stride != kRowS || (s.Co != 32 && s.Co != 64)) return false;
  const int P = row_pixels(s.Co);
  return (s.Wo + P - 1) / P <= 256 && row_smem(s) <= kRowSmemMax;
}

template <class T>
void launch_row(const float* x, const T* w, const T* bias, T* y, const ConvShape& s, graph::Act act, cudaStream_t st) {
  const int wp = row_width(s);
  const size_t smem = row_smem(s);
  const bool vec = aligned16(x) && (s.W * kRowCi) % 4 == 0;
  auto go = [&](auto kernel) {
    const int P = row_pixels(s.Co);
    const int nt = (s.Wo + P - 1) / P;
    const int threads = (nt + 31) / 32 * 32;
    launch(kernel, dim3(static_cast<unsigned>(s.B * s.Ho)), dim3(threads), smem, st, x, w, bias, y, s.H, s.W, s.Ho,
           s.Wo, s.pad, wp, vec, act);
  };
  if (s.Co == 32) {
    opt_in_smem<conv_stem_row_k<T, 32, row_pixels(32)>>(smem);
    go(conv_stem_row_k<T, 32, row_pixels(32)>);
  } else {
    opt_in_smem<conv_stem_row_k<T, 64, row_pixels(64)>>(smem);
    go(conv_stem_row_k<T, 64, row_pixels(64)>);
  }
}

template <class T>
void launch_pixel(const float* x, const T* w, const T* bias, T* y, const ConvShape& s, graph::Act act, cudaStream_t st) {
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
               cudaStream_t st, bool row_kernel) {
  if (!conv_stem_supported(s)) throw Error("conv_stem: unsupported shape (Ci " + std::to_string(s.Ci) + ", Co " +
                                           std::to_string(s.Co) + ")");
  if (!aligned16(y)) throw Error("conv_stem: output not 16-byte aligned");
  const bool row = row_kernel && row_kernel_fits(s);
  if (half) {
    if (row) launch_row(x, (const __half*)w, (const __half*)bias, (__half*)y, s, act, st);
    else launch_pixel(x, (const __half*)w, (const __half*)bias, (__half*)y, s, act, st);
  } else {
    if (row) launch_row(x, (const float*)w, (const float*)bias, (float*)y, s, act, st);
    else launch_pixel(x, (const float*)w, (const float*)bias, (float*)y, s, act, st);
  }
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
