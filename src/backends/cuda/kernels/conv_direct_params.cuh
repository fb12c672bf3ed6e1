// The halo-tiled 3x3 conv's launch parameters, shared by its two kernel families: mma.sync
// (conv_direct.cu, sm_80+) and wgmma (conv_halo_wgmma.cu, sm_90a). Internal to those two files.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/epilogue8.cuh"

namespace detforge::cuda {

struct DirectParams {
  const __half* x;
  const __half* w;
  const __half* bias;  // may be null
  const __half* res;   // may be null; may alias y
  __half* y;
  int H, W;
  int act;  // 0 none, 1 relu, 2 silu
};

// The epilogue of a TH x TW output tile (origin oy0, ox0 of image b) staged in shared memory as
// fp32 [TH*TW pixels][ldc]: threads tid, tid + nt, ... each finish 8 channels (epilogue8.cuh);
// pixels outside the image are skipped.
template <int CO, int TW>
__device__ __forceinline__ void store_staged_tile(const DirectParams& p, const float* sC, int ldc, int th, int oy0,
                                                  int ox0, int b, int tid, int nt) {
  constexpr int CH = CO / 8;
  for (int idx = tid; idx < th * TW * CH; idx += nt) {
    const int pix = idx / CH, c = (idx - pix * CH) * 8;
    const int oy = oy0 + pix / TW, ox = ox0 + pix % TW;
    if (oy >= p.H || ox >= p.W) continue;
    const float4 lo = *reinterpret_cast<const float4*>(sC + pix * ldc + c);
    const float4 hi = *reinterpret_cast<const float4*>(sC + pix * ldc + c + 4);
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int64_t o = ((static_cast<int64_t>(b) * p.H + oy) * p.W + ox) * CO + c;
    store_epilogue8(v, p.bias, p.res, p.y, p.act, c, o);
  }
}

// The wgmma family (conv_halo_wgmma.cu): 64-wide output tiles of th rows, nwg warpgroups; for
// (ci, co) in {(32, 32), (32, 64), (64, 64)}. Throws detforge::Error off compute capability 9.0.
void conv_halo_wgmma_launch(const DirectParams& p, int B, int ci, int co, int th, int nwg, cudaStream_t st);

}  // namespace detforge::cuda
