// A linear of N = 256 outputs and the LayerNorm of its output as one launch, on Hopper's wgmma
// (kernels/linear_ln_wgmma.cu, compute capability 9.0 only): r18vd's twelve linear + LayerNorm
// pairs (each decoder layer's self-attention out_proj, deformable output_proj and fc2, AIFI's
// out_proj and fc2, the encoder's enc_output).
//
// Why: at batch 1 each pair was a cuBLASLt GEMM of 3.2-4.8 us and a layer_norm kernel of
// 1.6-1.9 us, one after the other on the critical path (H100 timeline, session 16:
// bench/results/h100/ab-2026-12-05-session16/call2/ab/default_b1.json). A LayerNorm needs whole
// rows, so a GEMM that owns all 256 columns of its rows can finish them itself: one CTA per 64
// rows holds every column, and the K dimension is split over a thread-block cluster whose CTAs
// sum their partial tiles through distributed shared memory (as kernels/conv_wgmma.cu does) and
// each normalise a share of the rows. The weight is requested before the programmatic-launch
// wait. Session 18 (H100): correct, but 8-11 us per pair against ~5 us for cuBLASLt +
// layer_norm, so it is opt-in (NOTES v21).
//
// Rounding follows the unfused ops: the linear's act(x W^T + b (+ res)) is rounded to fp16 once
// (as cuBLASLt's epilogue stores it), then layer_norm.cu's fast path runs on that value in the
// same order (a lane's 8 consecutive columns, two-pass fp32 statistics, warp butterfly sums).
// Only the dot products' summation order differs from cuBLASLt's.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace detforge::cuda {

constexpr int kLinearLnN = 256;  // the only output width: one CTA holds whole rows

struct LinearLnArgs {
  const void* x = nullptr;     // [M, K] fp16
  const void* w = nullptr;     // [N, K] fp16
  const void* bias = nullptr;  // [N] fp16, or null
  const void* res = nullptr;   // [M, N] fp16, or null: added before the linear's rounding
  graph::Act act = graph::Act::none;  // none or relu, after bias and res
  const void* ln_res = nullptr;  // [M, N] fp16, or null: the layer norm's residual, LN(y + ln_res)
  const void* gamma = nullptr;   // [N] fp16
  const void* beta = nullptr;    // [N] fp16
  float eps = 1e-5f;
  const void* add2 = nullptr;  // [M, N] fp16, or null: a second output y2 = y (as stored) + add2
  void* y2 = nullptr;
  void* y = nullptr;  // [M, N] fp16: the layer norm's output; may alias res, ln_res or add2
  int64_t M = 0;
  int K = 0, N = 0;
};

// The cluster sizes (split-K) the kernel can run K with: S such that K / 64 / S is 1, 2 or 4
// and S <= 8 (K = 256: 1, 2, 4; K = 1024: 4, 8). Empty when K is not a multiple of 64.
std::vector<int> linear_ln_splits(int K);
// The launcher's choice when no split is given: the largest allowed S whose grid
// (ceil(M / 64) x S CTAs) stays within two per SM of a 132-SM GPU, else the smallest.
int linear_ln_auto_split(int64_t M, int K);
// Empty when linear_ln runs `a` with `split` (0: automatic), else what is wrong (shapes,
// activation, null or misaligned pointers, y aliasing x). No device needed.
std::string linear_ln_unsupported(const LinearLnArgs& a, int split = 0);
// True on compute capability 9.0 (H100, H200): the sm_90a code runs nowhere else.
bool linear_ln_runs_here();
// Launches it (with programmatic dependent launch when `pdl` and PDL is on, kernels.h). Throws
// detforge::Error when unsupported or off compute capability 9.0.
void linear_ln(const LinearLnArgs& a, cudaStream_t s, int split = 0, bool pdl = true);

}  // namespace detforge::cuda
