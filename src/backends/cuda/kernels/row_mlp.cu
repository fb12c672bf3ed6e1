// A linear chain run one block of 16 rows per cluster of 4 CTAs (see row_mlp.h). Each CTA owns a
// quarter of every layer's columns (the weights it reads are a quarter of the layer's) and pushes
// its slice of a hidden activation into all four CTAs' next-layer input through distributed shared
// memory; the LayerNorm epilogue exchanges per-row (mean, M2) the same way, behind one cluster
// barrier. Measured why (H200, ncu, M = 300, 256 -> 256 + LN): the first version ran the whole
// row block in one CTA of 8 warps, 19 CTAs in all; it issued ~3,900 instructions per warp at
// ~6.6 cycles each (latency-bound, L2 at 3 % of its throughput) and took 16 us against the
// unfused ~5 us. Splitting the columns 4 ways cuts each warp's serial work by ~4x and puts 76 SMs
// to work. It is still slower than the unfused ops (NOTES.md v7), so the engine leaves it off.
//  * Everything a CTA reads is requested with cp.async at kernel start: X and the epilogue
//    operands with layer 0's weight slice, each later layer's slice ([rows][Kp + 8] fp16:
//    conflict-free ldmatrix) in a group of its own, so layer 0 computes while the rest streams.
//  * The layer input X [16][Kp] (Kp = K rounded up to 32, zero-filled) and the next layer's
//    input ping-pong between two smem buffers; the final fp32 tile (the CTA's columns) overlays
//    them for the epilogue, one warp per row.
//  * A last layer whose width is not a multiple of 32 (a box head's 4) is not split: rank 0
//    computes it alone.
#include "backends/cuda/kernels/row_mlp.h"

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "detforge/types.h"

namespace detforge::cuda {

using graph::RowEpilogue;
namespace cg = cooperative_groups;

namespace {

constexpr int kC = 4;  // CTAs per cluster, each a quarter of the columns
constexpr int kBM = 16, kThreads = 256, kWarps = 8, kKc = 32;
constexpr int kMaxT = 2;                           // n-tiles per warp: slices up to 128 columns
constexpr int kMaxSlice = kWarps * kMaxT * 8;      // 128
constexpr int64_t kMaxRows = int64_t{kBM} * 264;  // beyond ~2 clusters per SM the library GEMMs win
constexpr int kNoOff = -1;

struct Params {
  const __half* x;
  int M;
  int n_layers;
  const __half* w[3];
  const __half* b[3];
  int N[3], K[3], Kp[3], relu[3];
  int split[3];  // 1: rank r owns columns [r * sw, (r + 1) * sw); 0: rank 0 owns [0, sw)
  int sw[3];     // slice width (a multiple of 8)
  // smem offsets in halves from the base (kNoOff: absent): weight slices [sw][Kp + 8], biases [sw],
  // the last layer's row operands [16][sw] and column vectors [sw]
  int ldx;  // X row stride (halves): max Kp + 8
  int off_w[3], off_b[3], off_res, off_lnres, off_gamma, off_beta, off_ref, off_addc;
  int off_red;  // LayerNorm exchange [kC][16][2] floats (offset in halves, 8-byte aligned)
  int pc_b[3], pc_res, pc_lnres, pc_gamma, pc_beta, pc_ref, pc_addc;  // cp.async piece (halves)
  const __half* res;
  int epi;  // RowEpilogue
  const __half* gamma;
  const __half* beta;
  float eps;
  const __half* ln_res;
  const __half* ref;
  const __half* addc;
  int addc_rows;
  __half* y;
};

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// This CTA's columns of layer l: [*c0, *c0 + width).
__device__ __forceinline__ int slice(const Params& p, int l, int rank, int* c0) {
  *c0 = p.split[l] ? rank * p.sw[l] : 0;
  return p.split[l] || rank == 0 ? p.sw[l] : 0;
}

// This CTA's whole slice of layer l's weights into W ([rows][Kp + 8]: conflict-free ldmatrix).
__device__ __forceinline__ void load_layer(const Params& p, int l, int rank, __half* W) {
  int c0;
  const int width = slice(p, l, rank, &c0), N = p.N[l], K = p.K[l], per_row = p.Kp[l] / 8, ldw = p.Kp[l] + 8;
  const __half* w = p.w[l];
  for (int idx = threadIdx.x; idx < width * per_row; idx += kThreads) {
    const int nl = idx / per_row, n = c0 + nl, k = (idx % per_row) * 8;
    __half* dst = W + nl * ldw + k;
    if (K % 8 == 0) {
      const bool ok = n < N && k < K;
      cp_async16(smem_u32(dst), ok ? w + static_cast<int64_t>(n) * K + k : w, ok);
    } else {  // K not a multiple of 8 (query_pos_head's 4 inputs): guarded scalar loads
      for (int e = 0; e < 8; ++e) dst[e] = n < N && k + e < K ? w[static_cast<int64_t>(n) * K + k + e] : __float2half(0.f);
    }
  }
}

// The block's 16 input rows, K0 columns zero-padded to Kp0, into X.
__device__ __forceinline__ void load_x(const Params& p, int m0, __half* X) {
  const int K = p.K[0], per_row = p.Kp[0] / 8;
  for (int idx = threadIdx.x; idx < kBM * per_row; idx += kThreads) {
    const int r = idx / per_row, k = (idx % per_row) * 8, m = m0 + r;
    __half* dst = X + r * p.ldx + k;
    if (K % 8 == 0) {
      const bool ok = m < p.M && k < K;
      cp_async16(smem_u32(dst), ok ? p.x + static_cast<int64_t>(m) * K + k : p.x, ok);
    } else {
      for (int e = 0; e < 8; ++e)
        dst[e] = m < p.M && k + e < K ? p.x[static_cast<int64_t>(m) * K + k + e] : __float2half(0.f);
    }
  }
}

// Columns [c0, c0 + width) of `rows` rows (row r of the source: `row_of(r)`, -1 = none) of a
// [*, N] fp16 tensor into dst [rows][width], zero where absent, as cp.async pieces of `piece`
// halves (8, 4 or 2: N and src are aligned to it, see piece_of): the operands stream with the
// weights. (v3 loaded them with plain loads, one round trip per operand in series: ~5 us.)
template <class RowOf>
__device__ __forceinline__ void stage(__half* dst, const __half* src, int rows, int N, int c0, int width, int piece,
                                      RowOf row_of) {
  const int per_row = width / piece;
  for (int idx = threadIdx.x; idx < rows * per_row; idx += kThreads) {
    const int r = idx / per_row, cl = (idx % per_row) * piece, c = c0 + cl;
    const int64_t m = row_of(r);
    const bool ok = m >= 0 && c < N;  // N is a multiple of piece: a piece is all in or all out
    const __half* s = ok ? src + m * N + c : src;
    const uint32_t d = smem_u32(dst + r * width + cl), n = ok ? piece * 2 : 0;
    if (piece == 8)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(s), "r"(n) : "memory");
    else if (piece == 4)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(s), "r"(n) : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(s), "r"(n) : "memory");
  }
}

__device__ __forceinline__ float round_h(float v) { return __half2float(__float2half_rn(v)); }

// LayerNorm of the block's rows over the whole cluster (sC: this CTA's fp16-rounded columns
// [c0, c0 + width)). Each CTA pushes its per-row (mean, M2) to every CTA; they combine as
// Chan et al.'s parallel variance (the same statistics as layer_norm.cu's two passes up to fp32
// rounding) behind one cluster barrier, which every thread of every CTA passes.
__device__ void finish_layer_norm(const Params& p, cg::cluster_group& cluster, const float* sC, int ldc, int c0,
                                  int width, int m0, int rank, const __half* sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, l = p.n_layers - 1;
  const int N = p.N[l], parts = p.split[l] ? kC : 1;
  float2* red = reinterpret_cast<float2*>(const_cast<__half*>(sm) + p.off_red);  // [kC][16]
  constexpr int kRows = kBM / kWarps, kPer = kMaxSlice / 32;
  const int valid = min(width, N - c0);  // an unsplit slice pads N to a multiple of 8
  float v[kRows][kPer];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + kWarps * i;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      v[i][j] = c < valid ? sC[r * ldc + c] + (p.off_lnres != kNoOff ? __half2float(sm[p.off_lnres + r * width + c]) : 0.f) : 0.f;
      s += v[i][j];
    }
    const float mean = valid > 0 ? warp_sum(s) / valid : 0.f;
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (lane + 32 * j < valid) sq += (v[i][j] - mean) * (v[i][j] - mean);
    sq = warp_sum(sq);
    if (width && lane < kC) cluster.map_shared_rank(red, lane)[rank * kBM + r] = make_float2(mean, sq);
  }
  cluster.sync();
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + kWarps * i;
    const int64_t m = m0 + r;
    if (m >= p.M || !width) continue;
    const float n_i = static_cast<float>(parts == 1 ? N : p.sw[l]);
    float mean = 0.f, m2 = 0.f;
    for (int q = 0; q < parts; ++q) mean += n_i * red[q * kBM + r].x;
    mean /= N;
    for (int q = 0; q < parts; ++q) {
      const float2 t = red[q * kBM + r];
      m2 += t.y + n_i * (t.x - mean) * (t.x - mean);
    }
    const float rstd = rsqrtf(m2 / N + p.eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      if (c < valid)
        p.y[m * N + c0 + c] = __float2half_rn((v[i][j] - mean) * rstd * __half2float(sm[p.off_gamma + c]) +
                                              __half2float(sm[p.off_beta + c]));
    }
  }
}

// The other epilogues, row by row (one warp per row): columns [c0, c0 + width) of each row.
__device__ void finish_rows(const Params& p, const float* sC, int ldc, int c0, int width, int m0, const __half* sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int N = p.N[p.n_layers - 1];
  for (int r = warp; r < kBM; r += kWarps) {
    const int64_t m = m0 + r;
    if (m >= p.M) continue;
    for (int cl = lane; cl < width; cl += 32) {
      if (c0 + cl >= N) continue;
      float v = sC[r * ldc + cl];
      if (p.epi == static_cast<int>(RowEpilogue::box_refine)) {  // as box_refine.cu
        const float x = fminf(fmaxf(__half2float(sm[p.off_ref + r * width + cl]), 0.f), 1.f);
        v = 1.f / (1.f + expf(-(v + logf(fmaxf(x, 1e-5f) / fmaxf(1.f - x, 1e-5f)))));
      } else if (p.epi == static_cast<int>(RowEpilogue::add_const)) {
        v += __half2float(sm[p.off_addc + r * width + cl]);
      }
      p.y[m * N + c0 + cl] = __float2half_rn(v);
    }
  }
}

__device__ __forceinline__ void wait_layer(int pending) {  // cp.async groups: one per layer
  if (pending >= 2) cp_async_wait<2>();
  else if (pending == 1) cp_async_wait<1>();
  else cp_async_wait<0>();
}

__global__ void __cluster_dims__(kC, 1, 1) __launch_bounds__(kThreads, 1) row_mlp_k(Params p) {
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* sm = reinterpret_cast<__half*>(smem_raw);
  __half* X[2] = {sm, sm + kBM * p.ldx};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = static_cast<int>(blockIdx.x / kC) * kBM;
  const int L = p.n_layers, last_l = L - 1;

  // Everything this CTA reads is requested up front: X, the epilogue operands and layer 0's
  // weight slice in the first cp.async group, each later layer's slice in a group of its own, so
  // layer 0 starts while the later ones stream.
  load_x(p, m0, X[0]);
  const int M = p.M, N = p.N[last_l];
  auto one_row = [](int) { return int64_t{0}; };
  auto rows = [m0, M](int r) { return m0 + r < M ? int64_t{m0 + r} : int64_t{-1}; };
  int c0 = 0, width = 0;
  for (int l = 0; l < L; ++l) {
    width = slice(p, l, rank, &c0);
    if (p.off_b[l] != kNoOff) stage(sm + p.off_b[l], p.b[l], 1, p.N[l], c0, width, p.pc_b[l], one_row);
  }
  if (p.off_res != kNoOff) stage(sm + p.off_res, p.res, kBM, N, c0, width, p.pc_res, rows);
  if (p.off_lnres != kNoOff) stage(sm + p.off_lnres, p.ln_res, kBM, N, c0, width, p.pc_lnres, rows);
  if (p.off_gamma != kNoOff) stage(sm + p.off_gamma, p.gamma, 1, N, c0, width, p.pc_gamma, one_row);
  if (p.off_beta != kNoOff) stage(sm + p.off_beta, p.beta, 1, N, c0, width, p.pc_beta, one_row);
  if (p.off_ref != kNoOff) stage(sm + p.off_ref, p.ref, kBM, N, c0, width, p.pc_ref, rows);
  if (p.off_addc != kNoOff) {
    const int ar = p.addc_rows;
    stage(sm + p.off_addc, p.addc, kBM, N, c0, width, p.pc_addc,
          [m0, M, ar](int r) { return m0 + r < M ? int64_t{(m0 + r) % ar} : int64_t{-1}; });
  }
  for (int l = 0; l < L; ++l) {
    load_layer(p, l, rank, sm + p.off_w[l]);
    cp_async_commit();
  }
  // Peers must be running before the first remote write (after layer 0): arrive now, wait then.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

  for (int l = 0; l < L; ++l) {
    wait_layer(L - 1 - l);
    __syncthreads();  // layer l's weights, its input X and the staged operands visible to all
    width = slice(p, l, rank, &c0);
    const int ntiles = width / 8, ldw = p.Kp[l] + 8;
    const __half* Xs = X[l & 1];
    const __half* W = sm + p.off_w[l];
    float acc[kMaxT][4];
#pragma unroll
    for (int t = 0; t < kMaxT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][e] = 0.f;
    if (warp < ntiles) {
      for (int kc = 0; kc < p.Kp[l]; kc += kKc) {
        uint32_t af[2][4];
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
          ldmatrix_x4(af[kk], smem_u32(Xs + (lane & 15) * p.ldx + kc + kk * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) {
          const int tile = warp + kWarps * t;
          if (tile >= ntiles) break;
          // matrices: (n 0-7, k 0-7), (k 8-15), (k 16-23), (k 24-31) of this tile's 8 rows
          uint32_t bf[4];
          ldmatrix_x4(bf, smem_u32(W + (tile * 8 + (lane & 7)) * ldw + kc + (lane >> 3) * 8));
          mma16816(acc[t], af[0], bf[0], bf[1]);
          mma16816(acc[t], af[1], bf[2], bf[3]);
        }
      }
    }
    // Layer l is complete: bias, activation, one fp16 rounding.
    const bool last = l == last_l;
    float* sC = reinterpret_cast<float*>(smem_raw);  // last layer: [16][width + 4] over both X buffers
    const int ldc = width + 4;
    __half* peer[kC];
    if (l == 0) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#pragma unroll
    for (int q = 0; q < kC; ++q) peer[q] = last ? nullptr : cluster.map_shared_rank(X[(l + 1) & 1], q);
    if (last) __syncthreads();  // every warp is done reading X before sC overwrites it
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      const int tile = warp + kWarps * t;
      if (tile >= ntiles) break;
      const int cl = tile * 8 + (lane & 3) * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = (lane >> 2) + h * 8;
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          v[e] = acc[t][h * 2 + e];
          if (c0 + cl + e < p.N[l]) {
            if (p.b[l]) v[e] += __half2float(sm[p.off_b[l] + cl + e]);
            if (last && p.off_res != kNoOff) v[e] += __half2float(sm[p.off_res + r * width + cl + e]);
            if (p.relu[l]) v[e] = fmaxf(v[e], 0.f);
          } else {
            v[e] = 0.f;
          }
        }
        if (last) {
          sC[r * ldc + cl] = round_h(v[0]);
          sC[r * ldc + cl + 1] = round_h(v[1]);
        } else {  // hidden widths are split (multiples of 32): this slice goes to every CTA
          const __half2 hv = __floats2half2_rn(v[0], v[1]);
#pragma unroll
          for (int q = 0; q < kC; ++q) *reinterpret_cast<__half2*>(peer[q] + r * p.ldx + c0 + cl) = hv;
        }
      }
    }
    if (!last) {
      cluster.sync();  // the whole next-layer input is in every CTA
      continue;
    }
    __syncthreads();
    if (p.epi == static_cast<int>(RowEpilogue::layer_norm))
      finish_layer_norm(p, cluster, sC, ldc, c0, width, m0, rank, sm);
    else
      finish_rows(p, sC, ldc, c0, width, m0, sm);
  }
}

}  // namespace

namespace {

// Fills the shape fields and smem offsets of p; returns the dynamic smem bytes.
size_t layout(const RowMlpArgs& a, Params& p) {
  p.n_layers = a.n_layers;
  int kp_max = 0, sw_max = 0;
  for (int l = 0; l < a.n_layers; ++l) {
    const RowMlpLayer& L = a.layers[l];
    p.N[l] = L.N;
    p.K[l] = L.K;
    p.Kp[l] = round_up(L.K, kKc);
    p.relu[l] = L.act == graph::Act::relu;
    p.split[l] = L.N % (8 * kC) == 0;
    p.sw[l] = p.split[l] ? L.N / kC : round_up(L.N, 8);
    kp_max = std::max(kp_max, p.Kp[l]);
    sw_max = std::max(sw_max, p.sw[l]);
  }
  p.ldx = kp_max + 8;
  const int sw = p.sw[a.n_layers - 1];
  // The final fp32 tile overlays the two X buffers; everything else follows, 16-byte aligned.
  size_t off = std::max(size_t{2} * kBM * p.ldx, size_t{kBM} * (sw + 4) * 2);  // halves
  auto take = [&off](size_t halves) {
    const int o = static_cast<int>(off);
    off = (off + halves + 7) / 8 * 8;
    return o;
  };
  for (int l = 0; l < a.n_layers; ++l) p.off_w[l] = take(size_t{1} * p.sw[l] * (p.Kp[l] + 8));
  for (int l = 0; l < a.n_layers; ++l) p.off_b[l] = a.layers[l].b ? take(p.sw[l]) : kNoOff;
  const bool ln = a.epi == RowEpilogue::layer_norm;
  p.off_res = a.res ? take(size_t{kBM} * sw) : kNoOff;
  p.off_lnres = ln && a.ln_res ? take(size_t{kBM} * sw) : kNoOff;
  p.off_gamma = ln ? take(sw) : kNoOff;
  p.off_beta = ln ? take(sw) : kNoOff;
  p.off_ref = a.epi == RowEpilogue::box_refine ? take(size_t{kBM} * sw) : kNoOff;
  p.off_addc = a.epi == RowEpilogue::add_const ? take(size_t{kBM} * sw) : kNoOff;
  p.off_red = take(size_t{kC} * kBM * 4);  // float2 per (rank, row)
  return off * sizeof(__half);
}

constexpr size_t kSmemMax = 227 * 1024;  // sm_90's opt-in limit per block

// The cp.async piece (halves) for an [*, N] operand: 8, 4 or 2 as N and the pointer allow; 0 when
// neither (odd N or a pointer not 4-byte aligned).
int piece_of(const void* ptr, int N) {
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  for (int pc : {8, 4, 2})
    if (N % pc == 0 && a % (2 * pc) == 0) return pc;
  return 0;
}

// Fills the operand pieces of p; false when an operand cannot be staged.
bool pieces(const RowMlpArgs& a, Params& p) {
  const int N = a.layers[a.n_layers - 1].N;
  bool ok = true;
  auto pc = [&ok](const void* ptr, int n) {
    if (!ptr) return 0;
    const int v = piece_of(ptr, n);
    ok = ok && v > 0;
    return v;
  };
  for (int l = 0; l < a.n_layers; ++l) p.pc_b[l] = pc(a.layers[l].b, a.layers[l].N);
  p.pc_res = pc(a.res, N);
  const bool ln = a.epi == RowEpilogue::layer_norm;
  p.pc_lnres = pc(ln ? a.ln_res : nullptr, N);
  p.pc_gamma = pc(ln ? a.gamma : nullptr, N);
  p.pc_beta = pc(ln ? a.beta : nullptr, N);
  p.pc_ref = pc(a.epi == RowEpilogue::box_refine ? a.ref : nullptr, N);
  p.pc_addc = pc(a.epi == RowEpilogue::add_const ? a.addc : nullptr, N);
  return ok;
}

}  // namespace

namespace {

// The checks of row_mlp_block_rows, then p's shapes, offsets and pieces: the dynamic smem bytes,
// or 0 (with `why`) when the chain is not supported.
size_t plan(const RowMlpArgs& a, Params& p, std::string* why) {
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return 0;
  };
  if (a.n_layers < 1 || a.n_layers > 3) return fail("1 to 3 layers");
  if (a.M < 1) return fail("no rows");
  for (int l = 0; l < a.n_layers; ++l) {
    const RowMlpLayer& L = a.layers[l];
    if (L.N < 1 || L.K < 1) return fail("empty layer");
    if (L.act != graph::Act::none && L.act != graph::Act::relu) return fail("activation other than relu");
    if (l > 0 && L.K != a.layers[l - 1].N) return fail("layer widths do not chain");
    if (l + 1 < a.n_layers && L.N % (8 * kC)) return fail("hidden width not a multiple of 32");
    // A split layer gives each CTA N / 4 columns, an unsplit (last) one all of them to rank 0.
    if (L.N > (L.N % (8 * kC) ? kMaxSlice : kC * kMaxSlice)) return fail("width over 512 (128 unless a multiple of 32)");
    if (!L.w || (L.K % 8 == 0 && !aligned16(L.w))) return fail("missing or misaligned weights");
  }
  if (a.layers[0].K > 1024) return fail("input width over 1024");
  const int N = a.layers[a.n_layers - 1].N;
  if (a.epi == RowEpilogue::box_refine && N != 4) return fail("box_refine needs N = 4");
  if (a.epi == RowEpilogue::layer_norm && (!a.gamma || !a.beta)) return fail("layer_norm without gamma/beta");
  if (a.epi == RowEpilogue::add_const && (!a.addc || a.addc_rows < 1)) return fail("add_const without a constant");
  if (!a.x || !a.y || (a.layers[0].K % 8 == 0 && !aligned16(a.x))) return fail("missing or misaligned input");
  if (a.M > kMaxRows) return fail("too many rows for a row-block chain");
  // Each CTA holds its whole weight slice: fc2 (1024 -> 256) takes 129 KiB plus 65 KiB of X.
  const size_t smem = layout(a, p);
  if (smem > kSmemMax) return fail("weight slices over the shared memory of one CTA");
  if (!pieces(a, p)) return fail("an epilogue operand with an odd width or not 4-byte aligned");
  return smem;
}

}  // namespace

int row_mlp_block_rows(const RowMlpArgs& a, std::string* why) {
  Params p{};
  return plan(a, p, why) ? kBM : 0;
}

void row_mlp(const RowMlpArgs& a, cudaStream_t s) {
  std::string why;
  Params p{};
  const size_t smem = plan(a, p, &why);
  if (!smem) throw Error("row_mlp: unsupported chain: " + why);
  p.x = static_cast<const __half*>(a.x);
  p.M = static_cast<int>(a.M);
  for (int l = 0; l < a.n_layers; ++l) {
    p.w[l] = static_cast<const __half*>(a.layers[l].w);
    p.b[l] = static_cast<const __half*>(a.layers[l].b);
  }
  p.res = static_cast<const __half*>(a.res);
  p.epi = static_cast<int>(a.epi);
  p.gamma = static_cast<const __half*>(a.gamma);
  p.beta = static_cast<const __half*>(a.beta);
  p.eps = a.eps;
  p.ln_res = static_cast<const __half*>(a.ln_res);
  p.ref = static_cast<const __half*>(a.ref);
  p.addc = static_cast<const __half*>(a.addc);
  p.addc_rows = static_cast<int>(std::max<int64_t>(a.addc_rows, 1));
  p.y = static_cast<__half*>(a.y);
  const dim3 grid(static_cast<unsigned>((a.M + kBM - 1) / kBM * kC));
  opt_in_smem<row_mlp_k>(smem);
  row_mlp_k<<<grid, kThreads, smem, s>>>(p);
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
