// Our own fp16 NHWC 3x3 stride-1 convolution for the narrow, large-image layers of r18vd: the
// stem's 320x320x32->32 and ->64 convs and stage 0's 160x160x64->64 convs (four of them). cuDNN
// ran these at 105-220 TFLOP/s (H100 CUPTI, session 14: 17.9, 16.9 and 10.9-12.0 us; 81 us of
// the batch-1 path), far below the tensor cores. The guess behind this kernel was that each cuDNN
// CTA waits on global memory at every stage of its K loop; the measurement below refuted it.
//
// Here one CTA owns a TH x TW output tile and all Co channels. It loads the whole (TH+2) x (TW+2)
// input halo and the whole weight (Co x 9*Ci, <= 75 KiB) into shared memory once, then runs every
// tap from shared memory: A fragments come straight from the halo by ldmatrix row addresses (no
// im2col copy, each input pixel fetched once per CTA), B fragments from the resident weight.
// The weight is a constant, so it is requested before the programmatic-launch wait and arrives
// while the producer of x finishes; the halo comes in three cp.async groups (kernel rows), so the
// first kernel row's MMAs start while the last halo row is in flight.
// Measured (H100, session 15): 14.4 / 25.5 / 11.5 us against cuDNN's 15.2 / 18.8 / 11.1 on those
// three shapes, so level with cuDNN: bound by ldmatrix + mma.sync issue, not by load latency.
// A second family (names "direct3x3w_*", conv_halo_wgmma.cu, compute capability 9.0 only) keeps
// the halo and the weight in wgmma's core-matrix layout and lets the tensor cores read both from
// shared memory. It is correct but slower (session 16, H100: 18.3 / 35.6 / 16.5 us on those shapes):
// ncu shows its single wave loading 124 KiB per CTA, computing, then storing, with no overlap
// (NOTES v19). Opt-in through DETFORGE_CUDA_OWN_CONV=direct (conv_select.h).
#pragma once
#include <cuda_runtime.h>

#include "backends/cuda/cudnn_conv.h"
#include "graph/ir.h"

namespace detforge::cuda {

// Variants = (Ci, Co) x output tile; names like "direct3x3_c64x64_4x32" (TH x TW) and, for the
// wgmma family, "direct3x3w_c64x64_4x64_g2" (g = warpgroups); on a device other than compute
// capability 9.0 a wgmma variant throws.
int conv_direct_variants();
const char* conv_direct_variant_name(int v);  // throws detforge::Error for a bad v

// True when v runs s: a 3x3 kernel, stride 1, padding 1 (Ho = H, Wo = W), the variant's Ci and
// Co, and sizes inside the kernel's int arithmetic and grid limits.
bool conv_direct_supported(const ConvShape& s, int v);
// False for a wgmma variant unless the current device is compute capability 9.0 (H100, H200);
// true for the others (conv_direct_supported is the shape check alone, no device needed).
bool conv_direct_variant_runs_here(int v);

// x: [B,H,W,Ci] fp16, w: [Co,3,3,Ci] fp16, bias: [Co] fp16 or null, res: [B,H,W,Co] fp16 or
// null, y: [B,H,W,Co] fp16. y = act(conv(x, w) + bias + res), act in {none, relu, silu}, fp32
// accumulation and epilogue, one fp16 rounding. y must not alias x; y may alias res. No
// workspace. Launched with programmatic dependent launch when it is on (kernels.h).
// Throws detforge::Error for an unsupported shape/variant/activation or misaligned pointers.
void conv_direct(const void* x, const void* w, const void* bias, const void* res, void* y, const ConvShape& s,
                 graph::Act act, int v, cudaStream_t st);

}  // namespace detforge::cuda
