// One thread's share of an implicit-GEMM conv tile load, shared by the two kernel families
// (conv_igemm.cu: mma.sync; conv_wgmma.cu: wgmma): the A rows it gathers from x (im2col, never
// built) and the B rows it reads from w, each one 16-byte chunk per row and K tile.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/conv_igemm_params.cuh"

namespace detforge::cuda {

// Rows m_first + i * step (i < IT) of the im2col matrix, and the K position k <-> (ky, kx, ci) of
// this thread's 8-element chunk, advanced one K tile at a time with no divides in the loop.
template <int IT>
struct ImcolGather {
  const __half* base[IT];  // the row's image in x
  int iy[IT], ix[IT];      // the row's input origin (oy * stride - pad, ox * stride - pad)
  int k, ci, kx, ky;

  __device__ __forceinline__ void init(const IgemmParams& p, int m_first, int step, int k0) {
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      const int m = m_first + i * step;
      if (m < p.M) {
        const int b = m / p.HoWo, r = m - b * p.HoWo;
        const int oy = r / p.Wo, ox = r - oy * p.Wo;
        base[i] = p.x + static_cast<int64_t>(b) * p.H * p.W * p.Ci;
        iy[i] = oy * p.stride - p.pad;
        ix[i] = ox * p.stride - p.pad;
      } else {
        base[i] = p.x;
        iy[i] = -(1 << 29);  // never inside the image: the chunk is zero-filled
        ix[i] = -(1 << 29);
      }
    }
    k = k0;
    ci = k % p.Ci;
    const int t = k / p.Ci;
    kx = t % p.kw;
    ky = t / p.kw;
  }
  // Row i's chunk at the current K; *ok false (the source is then p.x, to be zero-filled) for
  // padding, rows past M and K past the end.
  __device__ __forceinline__ const __half* src(const IgemmParams& p, int i, bool* ok) const {
    const int y = iy[i] + ky, x = ix[i] + kx;
    *ok = k < p.K && static_cast<unsigned>(y) < static_cast<unsigned>(p.H) &&
          static_cast<unsigned>(x) < static_cast<unsigned>(p.W);
    return *ok ? base[i] + ((y * p.W + x) * p.Ci + ci) : p.x;
  }
  __device__ __forceinline__ void advance(const IgemmParams& p, int bk) {
    k += bk;
    ci += bk;
    while (ci >= p.Ci) {
      ci -= p.Ci;
      if (++kx == p.kw) {
        kx = 0;
        ++ky;
      }
    }
  }
};

// Rows n_first + i * step (i < IT) of w (K-contiguous); rows past N read nothing.
template <int IT>
struct WeightRows {
  const __half* row[IT];
  bool in[IT];
  __device__ __forceinline__ void init(const IgemmParams& p, int n_first, int step) {
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      const int n = n_first + i * step;
      in[i] = n < p.N;
      row[i] = p.w + static_cast<int64_t>(in[i] ? n : 0) * p.K;
    }
  }
  __device__ __forceinline__ const __half* src(const IgemmParams& p, int i, int k, bool* ok) const {
    *ok = k < p.K && in[i];
    return *ok ? row[i] + k : p.w;
  }
};

}  // namespace detforge::cuda
