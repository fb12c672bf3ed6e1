// The halo-tiled 3x3 conv's launch parameters, shared by its two kernel families: mma.sync
// (conv_direct.cu, sm_80+) and wgmma (conv_halo_wgmma.cu, sm_90a). Internal to those two files.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

// The wgmma family (conv_halo_wgmma.cu): 64-wide output tiles of th rows, nwg warpgroups; for
// (ci, co) in {(32, 32), (32, 64), (64, 64)}. Throws detforge::Error off compute capability 9.0.
void conv_halo_wgmma_launch(const DirectParams& p, int B, int ci, int co, int th, int nwg, cudaStream_t st);

}  // namespace detforge::cuda
