// Our own fp16 NHWC convolution: an implicit GEMM on tensor cores (mma.sync m16n8k16, ldmatrix,
// cp.async multistage pipeline; portable sm_80+ instructions) with the bias + residual +
// activation epilogue fused.
//
// Why: at batch 1 cuDNN runs the small convolutions of RT-DETR r18vd ~3x off the roofline
// (H200 CUPTI: 160x160x64->64 3x3 10.8 us against a ~3 us roofline; 20x20x512->512 3x3 12-15 us,
// where a 64x64 tile gives 56 CTAs for 132 SMs over a 4608-long K loop). Convolutions took
// 0.515 of a 0.99 ms forward. The engine times every supported variant against cuDNN at load
// and keeps the faster one per op.
//
// GEMM view: M = B*Ho*Wo output pixels, N = Co, K = kh*kw*Ci ordered (ky, kx, ci). With
// Ci % 8 == 0 every 8-element K chunk is one contiguous 16-byte load from x (NHWC) and from w
// (OHWI = cuDNN KRSC, a row of w is K-contiguous).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "backends/cuda/cudnn_conv.h"
#include "graph/ir.h"

namespace detforge::cuda {

// Variants = CTA tile shape x split-K count; names like "igemm_64x64_k4" (mma.sync, sm_80+) and
// "wgmma_128x64_k1" (Hopper wgmma, conv_wgmma.cu: compute capability 9.0 only; elsewhere the call
// throws). The wgmma family reduces split-K inside a thread-block cluster and needs no workspace.
int conv_igemm_variants();
const char* conv_igemm_variant_name(int v);  // throws detforge::Error for a bad v

// False when the shape cannot run (Ci % 8 != 0, Co % 8 != 0, inconsistent Ho/Wo, sizes past
// int range) or v is out of range. Pointer alignment (16 bytes) is checked at launch.
bool conv_igemm_supported(const ConvShape& s, int v);

// False for a wgmma variant unless the current device is compute capability 9.0 (H100, H200);
// true for the others. conv_igemm_supported is the shape check alone (no device needed).
bool conv_igemm_variant_runs_here(int v);

// Bytes of scratch the call needs (split-K fp32 partials [split][M][N] of the mma.sync family); 0
// when none.
size_t conv_igemm_workspace(const ConvShape& s, int v);

// x: [B,H,W,Ci] fp16, w: [Co,kh,kw,Ci] fp16, bias: [Co] fp16 or null, res: [B,Ho,Wo,Co] fp16 or
// null, y: [B,Ho,Wo,Co] fp16. y = act(conv(x, w) + bias + res) with act in {none, relu, silu};
// fp32 accumulation and epilogue, rounded to fp16 once. Symmetric padding, dilation 1, groups 1.
// y must not alias x; y may alias res (each element's res is read before its y is written, by
// the same thread). ws: conv_igemm_workspace(s, v) bytes, 16-byte aligned (null when 0).
// Throws detforge::Error for an unsupported shape/variant/activation or misaligned pointers.
void conv_igemm(const void* x, const void* w, const void* bias, const void* res, void* y, const ConvShape& s,
                graph::Act act, int v, void* ws, cudaStream_t st);

}  // namespace detforge::cuda
