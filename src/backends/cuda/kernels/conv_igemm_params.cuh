// The implicit-GEMM conv's launch parameters, shared by its two kernel families: mma.sync
// (conv_igemm.cu, sm_80+) and wgmma (conv_wgmma.cu, sm_90a). Internal to those two files.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace detforge::cuda {

struct IgemmParams {
  const __half* x;
  const __half* w;
  const __half* bias;  // may be null
  const __half* res;   // may be null; may alias y
  __half* y;
  float* ws;  // split-K partials [gridDim.z][M][N]; null: fused epilogue
  int H, W, Ci, HoWo, Wo, kw, stride, pad;
  int M, N, K;
  int kt_total, kt_per_split;
  int act;  // 0 none, 1 relu, 2 silu
};

// The wgmma family (conv_wgmma.cu). Available only where the sm_90a code runs: a device of
// compute capability 9.0 (H100, H200). bm in {64, 128}, bn in {32, 64, 128}; BK is 64.
bool conv_wgmma_available();
void conv_wgmma_launch(const IgemmParams& p, int bm, int bn, int splits, cudaStream_t st);

}  // namespace detforge::cuda
