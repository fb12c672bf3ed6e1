// Launchers for detforge's own CUDA kernels. One .cu file per op, named as the CPU backend's
// kernel file (kernels/<op>.cu beside backends/cpu/kernels/<op>.cpp).
//
// Storage: every activation pointer is either fp32 or fp16 (`half` = true), NHWC, batch
// outermost. Arithmetic is fp32 in every kernel; fp16 is storage only. Index tensors are int32.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cudnn_conv.h"
#include "graph/ir.h"

namespace detforge::cuda {

using graph::Act;

// pdl.cu: programmatic dependent launch for the kernels below (process-wide; the engine sets it
// from DETFORGE_CUDA_PDL). Off, every launch is a plain <<<>>> launch. A PdlOff in scope turns it
// off for the launches of the current thread (the engine's same-stream-only mode).
bool pdl_enabled();
void set_pdl_enabled(bool on);
class PdlOff {
 public:
  explicit PdlOff(bool active);
  ~PdlOff();
  PdlOff(const PdlOff&) = delete;
  PdlOff& operator=(const PdlOff&) = delete;

 private:
  bool active_, prev_;
};
// An empty kernel launched without the programmatic attribute and never releasing its
// dependents early: the next kernel on s starts only after every launch before the fence has
// finished, whatever attribute it was launched with.
void pdl_fence(cudaStream_t s);
// While a LibraryFence(true) is in scope, fence_before_library(s) (called by the cuDNN and
// cuBLASLt wrappers before they launch) puts a pdl_fence on s, for the current thread. Why: the
// libraries launch some kernels for an early start that then read their inputs without waiting
// (cuda_settings.h at eager_fence_); CudaEngine::forward holds one in the eager forward.
class LibraryFence {
 public:
  explicit LibraryFence(bool on);
  ~LibraryFence();
  LibraryFence(const LibraryFence&) = delete;
  LibraryFence& operator=(const LibraryFence&) = delete;

 private:
  bool prev_;
};
void fence_before_library(cudaStream_t s);

// elementwise.cu
// y[i] = act(x[i] + bias[i % C] (+ res[i])), n elements; bias may be null, res may be null.
void bias_act(const void* x, const void* bias, const void* res, void* y, int64_t n, int C, Act act, bool half,
              cudaStream_t s);
// y = act(a + b); b is broadcast over the batch when b_numel < n (b_numel divides n).
void add_act(const void* a, const void* b, int64_t b_numel, void* y, int64_t n, Act act, bool half, cudaStream_t s);
// y[b,l,c] = x[b,l,c] * m[l]; rows = batch*L.
void mul_rows(const void* x, const void* m, void* y, int64_t rows, int L, int C, bool half, cudaStream_t s);
// Conversions between fp32 and the storage type (a plain copy when half is false).
void f32_to_storage(const float* x, void* y, int64_t n, bool half, cudaStream_t s);
// fp32 NHWC pixels of c channels -> fp16 of cp (4 or 8) channels, zeros past c (cuda_input_conv.cpp).
void f32_to_half_padc(const float* x, void* y, int64_t pixels, int c, int cp, cudaStream_t s);
void storage_to_f32(const void* x, float* y, int64_t n, bool half, cudaStream_t s);
// int32 -> fp32 values (index outputs such as the encoder's top-k, exact below 2^24).
void i32_to_f32(const int32_t* x, float* y, int64_t n, cudaStream_t s);
// Adds the number of non-finite values among n (fp32 or fp16) to *count.
void count_nonfinite(const void* x, int64_t n, bool half, unsigned long long* count, cudaStream_t s);

// late_copy.cu: probes of programmatic launch for tests. late_copy releases its dependents at
// once, spins spin_cycles, then copies bytes (a multiple of 16); plain_copy copies without waiting.
void late_copy(const void* src, void* dst, size_t bytes, long long spin_cycles, cudaStream_t s);
void plain_copy(const void* src, void* dst, size_t bytes, cudaStream_t s);

// layer_norm.cu: y = LN(x (+res)) over the last dim C, rows = batch*L. Statistics in fp32.
// With add2 and y2 (both or neither): also y2 = y + add2, y as stored (the bytes of add_act).
// C in {256, 512, 768, 1024} with 16-byte aligned pointers takes a 16-byte vector kernel, other
// shapes a generic one; layer_norm_fast_path says which (for tests and profiles).
void layer_norm(const void* x, const void* res, const void* gamma, const void* beta, void* y, int64_t rows, int C,
                float eps, bool half, cudaStream_t s, const void* add2 = nullptr, void* y2 = nullptr);
bool layer_norm_fast_path(const void* x, const void* res, const void* gamma, const void* beta, const void* y, int C,
                          const void* add2 = nullptr, const void* y2 = nullptr);

// attention.cu: q[B,L,C], k[B,S,C], v[B,S,C] -> o[B,L,C]; heads split C. Softmax in fp32.
// Row strides in elements (0 = C): q, k and v may be column slices of wider rows, e.g. q and k
// of one merged projection (graph::merge_qk_projections).
struct AttnLd {
  int q = 0, k = 0, v = 0;
};
void attention(const void* q, const void* k, const void* v, void* o, int B, int L, int S, int C, int heads,
               float scale, bool half, cudaStream_t s, AttnLd ld = {});

// ms_deform_attn.cu: see graph/ir.h. value[B,Lv,C], off[B,Q,H*Lv*P*2], logits[B,Q,H*Lv*P],
// ref[B,Q,4], pscale[levels*points] -> out[B,Q,C].
struct DeformShape {
  int heads = 8, levels = 3, points = 4;
  int H[8] = {}, W[8] = {}, start[8] = {};
  float offset_scale = 0.5f;
};
// Row strides of off, logits and value in elements (0 = packed: H*levels*points*2,
// H*levels*points and C): off and logits may be column slices of one merged projection
// (graph::merge_deform_projections), value a column slice of the decoder layers' merged value
// projection (graph::merge_value_projections), the pointers then at their first column.
struct DeformLd {
  int off = 0, logits = 0, value = 0;
};
void ms_deform_attn(const void* value, const void* off, const void* logits, const void* ref, const void* pscale,
                    void* out, int B, int Lv, int Q, int C, const DeformShape& sh, bool half, cudaStream_t s,
                    DeformLd ld = {});
// Whether ms_deform_attn takes its vector kernel for these value/out pointers (for tests and
// profiles): head dim 32 or 64, 16-byte aligned value and out, value rows (v_ld elements, 0 = C)
// a whole number of 16-byte packs. Offsets and logits play no part.
bool ms_deform_attn_vec_path(const void* value, const void* out, int C, int heads, bool half, int v_ld = 0);

// topk_rows.cu: scores[B,L,N] -> idx[B,k] (int32): the k rows with the largest maximum, sorted
// descending, ties by lower index. Needs L <= topk_rows_max_len(). With key_ws (B*L 4-byte keys
// of device scratch), k <= 1024 takes two kernels: the row maxima over the whole grid, then the
// selection from those keys (the same result).
int topk_rows_max_len();
void topk_rows(const void* scores, int32_t* idx, int B, int L, int N, int k, bool half, cudaStream_t s,
               uint32_t* key_ws = nullptr);
// topk_cluster.cu: the same result from a cluster of 8 CTAs per image (rows split among them,
// histograms summed through distributed shared memory). Supported: 1 <= k <= min(L, 1024),
// L <= 16384, compute capability 9.0 or newer; otherwise topk_rows_cluster throws.
bool topk_rows_cluster_supported(int L, int k);
void topk_rows_cluster(const void* scores, int32_t* idx, int B, int L, int N, int k, bool half, cudaStream_t s);

// detect_select.cu (Engine::run_images_selected): per image, the top_k of logits[B, nq * nc] at
// or above logit_floor (NaN never), ranked by logit descending and equal logits by the lower
// flat index, with the boxes[B, nq, 4] (cx, cy, w, h) of their queries as x0, y0, x1, y1 in
// pixels of widths[b] x heights[b] (host pointers). out holds detect_select_words(top_k) 32-bit
// words per image: the count, then top_k flat indices, top_k logits (fp32 bits) and 4 * top_k
// box values, the first `count` of each in rank order. top_k <= kDetectSelectMaxK.
constexpr int kDetectSelectMaxK = 2048;
constexpr int detect_select_words(int top_k) { return 1 + 6 * top_k; }
void detect_select(const float* logits, const float* boxes, int nq, int nc, int top_k, float logit_floor,
                   const int* widths, const int* heights, int batch, uint32_t* out, cudaStream_t s);

// gather_rows.cu: x[B,L,C], idx[B,K] -> y[B,K,C]. Indices out of range give zeros. With
// x_broadcast, x is one [L,C] table read by every image (a graph constant).
void gather_rows(const void* x, const int32_t* idx, void* y, int B, int L, int K, int C, bool half, cudaStream_t s,
                 bool x_broadcast = false);

// box_refine.cu: y = sigmoid(delta + inverse_sigmoid(ref)), n elements, fp32 math.
void box_refine(const void* delta, const void* ref, void* y, int64_t n, bool half, cudaStream_t s);

// im2col.cu: x[B,H,W,Ci] (NHWC) -> y[B*Ho*Wo, kh*kw*Ci], column (ky*kw + kx)*Ci + ci, zeros for
// taps outside the image (ConvShape's Co is not used). Needs im2col_supported (Ci a multiple of
// 16 bytes, x and y 16-byte aligned); im2col throws otherwise. im2col_bytes: the size of y.
bool im2col_supported(const ConvShape& g, bool half, const void* x, const void* y);
size_t im2col_bytes(const ConvShape& g, bool half);
void im2col(const void* x, void* y, const ConvShape& g, bool half, cudaStream_t s);

// box_step.cu: per row of x[rows,K], delta = x W3^T + b3 (W3 [4,K]), ref_out = box_refine(delta,
// ref_in), and when w1 is set y1[rows,N1] = act1(ref_out W1^T + b1) (W1 [N1,4]); the rounding of
// the unfused linear, box_refine and linear ops. Needs box_step_supported (K a multiple of 16
// bytes, N1 of 8, x, y1, w1 and b1 16-byte aligned); box_step throws otherwise.
struct BoxStepArgs {
  const void *x = nullptr, *w3 = nullptr, *b3 = nullptr, *ref_in = nullptr;
  void* ref_out = nullptr;
  const void *w1 = nullptr, *b1 = nullptr;  // null: no next linear
  void* y1 = nullptr;
  int64_t rows = 0;
  int K = 0, N1 = 0;
  graph::Act act1 = graph::Act::none;
};
bool box_step_supported(int K, int N1, bool half, const void* x, const void* y1, const void* w1, const void* b1);
void box_step(const BoxStepArgs& a, bool half, cudaStream_t s);

// small_linear.cu: y[rows,N] = act(x[rows,K] W[N,K]^T + bias (+ res[rows,N])), for the linears
// where a library GEMM is mostly setup: small_k (K <= 8, N % 8 == 0; W, bias, res and y 16-byte
// aligned) and small_n (N <= 8, K a whole number of 16-byte packs; x and W 16-byte aligned).
// bias and res may be null; any act; fp32 accumulation, one rounding at the store.
// small_linear_kind says which one takes the shape and pointers (small_k first), none if neither;
// small_linear throws when `kind` is not what small_linear_kind gives for its arguments.
constexpr int kSmallLinearMaxK = 8, kSmallLinearMaxN = 8;
// tile: the linear runs on tile_linear (below), chosen by the engine, not by small_linear_kind.
enum class SmallLinear { none, small_k, small_n, tile };
SmallLinear small_linear_kind(int64_t rows, int N, int K, bool half, const void* x, const void* w, const void* bias,
                              const void* res, const void* y);
const char* small_linear_name(SmallLinear k);
void small_linear(SmallLinear kind, const void* x, const void* w, const void* bias, const void* res, void* y,
                  int64_t rows, int N, int K, Act act, bool half, cudaStream_t s);

// tile_linear.cu: y[rows,N] = act(x[rows,K] W[N,K]^T + bias (+ res[rows,N])), fp16 only, for the
// latency-bound linears of a few hundred rows (tile_linear.cu says why). K a multiple of 64 up to
// kTileLinearMaxK, N a multiple of 8; x, w, bias, res, y 16-byte aligned; bias and res may be
// null; y may alias res, never x; any act; fp32 accumulation, one rounding at the store.
// tile_linear throws when tile_linear_ok is false for its arguments.
constexpr int kTileLinearMaxK = 1024;
bool tile_linear_ok(int64_t rows, int N, int K, const void* x, const void* w, const void* bias, const void* res,
                    const void* y);
// early: under PDL the launch may start before its producer ends and fetches W meanwhile (its
// blocks then wait on SMs); false: a plain launch.
void tile_linear(const void* x, const void* w, const void* bias, const void* res, void* y, int64_t rows, int N, int K,
                 Act act, bool early, cudaStream_t s);

// pool.cu: NHWC pooling. pad never wins the max; avg divides by the in-bounds count. quad: the
// 3x3/2/1 max-pool with 16-byte channel packs computes 2x2 outputs per thread.
void max_pool2d(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad,
                bool half, cudaStream_t s, bool quad = false);
void avg_pool2d(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad,
                bool half, cudaStream_t s);

// upsample.cu: nearest x2, NHWC.
void upsample_nearest2x(const void* x, void* y, int B, int H, int W, int C, bool half, cudaStream_t s);

// concat.cu: copies x[outer, inner] into y[outer, ld] at column offset `off` (element units).
void concat_part(const void* x, void* y, int64_t outer, int64_t inner, int64_t ld, int64_t off, bool half,
                 cudaStream_t s);
// One launch for a whole concat: part q copies src[outer, inner] into y[:, offset:offset+inner]
// (element units). Parts must not overlap; columns no part covers are left as they are.
// 16-byte copies when every inner, offset, ld and pointer allows, else 2/4-byte ones; more than
// kMaxConcatParts (non-empty) parts fall back to one concat_part per part.
// A part with `up` is its source upsampled x2 (nearest, NHWC): the outer rows are then the
// pixels of an H x W grid per image (pass H and W), the source's those of H/2 x W/2.
struct ConcatPart {
  const void* src;
  int64_t inner;
  int64_t offset;
  bool up = false;
};
constexpr int kMaxConcatParts = 8;
void concat(const ConcatPart* parts, int n_parts, void* y, int64_t outer, int64_t ld, bool half, cudaStream_t s,
            int H = 0, int W = 0);

}  // namespace detforge::cuda
