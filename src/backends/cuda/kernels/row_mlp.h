// row_mlp.cu: a chain of up to 3 linears (fp16 storage, fp32 accumulation) run one block of rows
// per cluster of CTAs, the hidden activations kept in shared memory, with an epilogue absorbed from the op
// after the chain (graph/row_chains.h): LayerNorm, box_refine or a broadcast constant add.
//
// Rounding follows the unfused ops exactly in order: each linear's act(x W^T + b (+ res)) is
// rounded to fp16 once, as cuBLASLt's epilogue stores it; the epilogue then reads that fp16 value
// as the separate kernel would (layer_norm.cu: two-pass fp32 statistics; box_refine.cu: fp32
// inverse sigmoid). Only the summation order of the dot products differs.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "graph/ir.h"
#include "graph/row_chains.h"

namespace detforge::cuda {

struct RowMlpLayer {
  const void* w = nullptr;  // [N, K] fp16, 16-byte aligned
  const void* b = nullptr;  // [N] fp16
  int N = 0, K = 0;
  graph::Act act = graph::Act::none;  // none or relu
};

struct RowMlpArgs {
  const void* x = nullptr;  // [M, layers[0].K] fp16
  int64_t M = 0;            // rows: batch * L
  RowMlpLayer layers[3];
  int n_layers = 0;
  const void* res = nullptr;  // [M, N_last] residual of the last linear (before its rounding), or null
  graph::RowEpilogue epi = graph::RowEpilogue::none;
  const void* gamma = nullptr;  // layer_norm
  const void* beta = nullptr;
  float eps = 1e-5f;
  const void* ln_res = nullptr;  // layer_norm residual [M, N_last], or null
  const void* ref = nullptr;     // box_refine [M, 4]
  const void* addc = nullptr;    // add_const [addc_rows, N_last], row m uses m % addc_rows
  int64_t addc_rows = 0;
  void* y = nullptr;  // [M, N_last] fp16
};

// Rows per cluster the launcher would use (16), or 0 when the chain is not supported: widths over
// 512 (over 128 for a last layer whose width is not a multiple of 32), hidden widths not multiples
// of 32, an input width over 1024, more than 4,224 rows (beyond ~2 clusters per SM the weight
// re-reads cost more than the library GEMMs), or misaligned pointers. `why` (optional) says what
// failed.
int row_mlp_block_rows(const RowMlpArgs& a, std::string* why = nullptr);
void row_mlp(const RowMlpArgs& a, cudaStream_t s);  // throws detforge::Error when unsupported

}  // namespace detforge::cuda
