// dec_tail.cu: the row-local tail of an RT-DETR decoder layer as ONE launch: a cluster of 8 CTAs
// per block of 16 rows runs every stage for those rows, with cluster barriers between the stages
// instead of kernel boundaries (fp16 only):
//   y1 = x Wo^T + bo + h0            (encoder_attn.output_proj with its residual)
//   h1 = LN1(y1); f = relu(h1 W1^T + b1); y2 = f W2^T + b2 + h1      (fc1, fc2)
//   h2 = LN2(y2); bb1 = relu(h2 Wb1^T + ..); bb2 = relu(bb1 Wb2^T + ..)   (bbox head layers 0, 1)
//   delta = bb2 Wb3^T + bb3; ref_out = box_refine(delta, ref_in)     (bbox head layer 2, refine)
//   and, between two layers: q1 = relu(ref_out Wq1^T + bq1); qpos = q1 Wq2^T + bq2;
//   qk_in = h2 + qpos                (the next layer's query_pos_head and self_attn.pos add)
// Why: at batch 1 these are 10-12 kernels of 1.4-4.5 us on the critical path per decoder layer
// (~31 us; H100 timeline of bench/results/h100/ab-2026-12-06-session19/call2/ab/default_b1.json),
// each a 300-row GEMM, LayerNorm or add whose cost is its launch and ramp, not its arithmetic.
// Every intermediate is still stored (rounded to fp16 as the unfused ops round it), so the
// engine's other readers (class head, next v_proj, the LN add) see the same tensors.
// v1 (one cooperative grid, grid-wide barriers, 16x64 tiles) took 47 us per layer against ~31
// for the separate kernels (H100, bench/results/h100/ab-2026-12-06-session20/call3): ~2 us per
// tile round, ~1.3 us per grid barrier, and 1-8 us of waiting for the slowest CTA (fc1 needed
// 2-3 tile rounds). Every stage is row-local, so a block of rows needs only its own CTAs:
// clusters remove the grid-wide wait, and the barrier is the cluster's. v2 (this): 33-34 us per
// layer, still no faster than the separate kernels (engine b1 0.685 against 0.669 ms), so the
// engine leaves it off; dec_tail.cu's header says where its time goes.
#pragma once
#include <cuda_runtime.h>

namespace detforge::cuda {

// One GEMM stage: y = act(A' W^T + bias (+ res)) with A' = LN(A) when ln_g is set (then ln_out,
// when set, receives LN(A)); y2 = y + add2 when add2 is set. A [rows, K], W [N, K], fp16.
struct DecTailGemm {
  const void* a = nullptr;
  int K = 0;
  const void* ln_g = nullptr;
  const void* ln_b = nullptr;
  float eps = 0.f;
  void* ln_out = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  const void* res = nullptr;
  int N = 0;
  bool relu = false;
  void* y = nullptr;
  const void* add2 = nullptr;
  void* y2 = nullptr;
};

struct DecTailArgs {
  int rows = 0;
  DecTailGemm g[5];  // output_proj, fc1, fc2, bbox layer 0, bbox layer 1
  // bbox layer 2 (N = 4) and box_refine; x is g[4].y
  const void* w3 = nullptr;
  const void* b3 = nullptr;
  const void* ref_in = nullptr;
  void* ref_out = nullptr;
  // optional: query_pos_head layer 0 (K = 4, relu), its layer 1 and the add (gq: a = q1)
  const void* wq1 = nullptr;
  const void* bq1 = nullptr;
  int P = 0;
  void* q1 = nullptr;
  DecTailGemm gq;
  // Measurement aid (tests only): %globaltimer per CTA at kDecTailStamps points (start, then per
  // stage its work done and, but after the last, the cluster barrier after it passed).
  unsigned long long* stamps = nullptr;
};
constexpr int kDecTailStamps = 16;

// Why the arguments do not fit the kernel ("" when they do): LN rows of 256, K a multiple of 64
// up to 1024, N 256 or 1024 (split over the 8 CTAs of a cluster), 16-byte aligned pointers.
const char* dec_tail_unsupported(const DecTailArgs& a);
void dec_tail(const DecTailArgs& a, cudaStream_t s);
int dec_tail_ctas(int rows);  // the grid of a launch over `rows` rows (8 CTAs per 16 rows)

}  // namespace detforge::cuda
