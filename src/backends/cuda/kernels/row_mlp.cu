// A linear chain run one block of 16 rows per cluster of 4 CTAs (see row_mlp.h). Each CTA owns a
// quarter of every layer's columns (the weights it streams are a quarter of the layer's) and pushes
// its slice of a hidden activation into all four CTAs' next-layer input through distributed shared
// memory; the LayerNorm epilogue exchanges per-row partial sums the same way (two passes, as
// layer_norm.cu). Measured why (H200, ncu, M = 300, 256 -> 256 + LN): the first version ran the
// whole row block in one CTA of 8 warps, 19 CTAs in all; it issued ~3,900 instructions per warp
// at ~6.6 cycles each (latency-bound, L2 at 3 % of its throughput) and took 16 us against the
// unfused ~5 us. Splitting the columns 4 ways cuts each warp's serial work by ~4x and puts 76 SMs
// to work.
//  * The CTA's weight rows stream as 32-wide k chunks ([rows][32] fp16, padded to 40 halves:
//    conflict-free ldmatrix, as conv_igemm.cu) through a 3-stage cp.async pipeline that runs
//    across layer boundaries.
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
constexpr int kBM = 16, kThreads = 256, kWarps = 8, kStages = 3, kKc = 32, kLdw = kKc + 8;
constexpr int kMaxT = 2;                           // n-tiles per warp: slices up to 128 columns
constexpr int kMaxSlice = kWarps * kMaxT * 8;      // 128
constexpr int64_t kMaxRows = int64_t{kBM} * 264;  // beyond ~2 clusters per SM the library GEMMs win

struct Params {
  const __half* x;
  int M;
  int n_layers;
  const __half* w[3];
  const __half* b[3];
  int N[3], K[3], Kp[3], relu[3];
  int split[3];        // 1: rank r owns columns [r * sw, (r + 1) * sw); 0: rank 0 owns [0, sw)
  int sw[3];           // slice width (a multiple of 8)
  int chunk_start[4];  // global k-chunk index where each layer starts; [n_layers] = total
  int ldx;             // X row stride (halves): max Kp + 8
  int ws_rows;         // weight stage rows: max slice width
  int wst_off;         // halves from the smem base to the weight stages
  int red_off;         // floats from the smem base to the LayerNorm exchange [2][kC][kBM]
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

// Weight chunk j (layer l, k chunk kc) of this CTA's rows into stage buffer `ws` ([rows][kLdw]).
__device__ __forceinline__ void load_chunk(const Params& p, int j, int rank, __half* ws) {
  int l = 0;
  while (l + 1 < p.n_layers && j >= p.chunk_start[l + 1]) ++l;
  int c0;
  const int width = slice(p, l, rank, &c0);
  const int k0 = (j - p.chunk_start[l]) * kKc, N = p.N[l], K = p.K[l];
  const __half* w = p.w[l];
  for (int idx = threadIdx.x; idx < width * (kKc / 8); idx += kThreads) {
    const int nl = idx / (kKc / 8), n = c0 + nl, k = k0 + (idx % (kKc / 8)) * 8;
    __half* dst = ws + nl * kLdw + (k - k0);
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

__device__ __forceinline__ float h2f(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float round_h(float v) { return __half2float(__float2half_rn(v)); }

// Lane 0 of a warp adds `v` as partial `rank` of row r into every cluster CTA's exchange buffer.
__device__ __forceinline__ void push_partial(cg::cluster_group& cluster, float* red, int rank, int r, float v, int lane) {
  if (lane != 0) return;
#pragma unroll
  for (int q = 0; q < kC; ++q) cluster.map_shared_rank(red, q)[rank * kBM + r] = v;
}

// LayerNorm of the block's rows over the whole cluster (sC: this CTA's fp16-rounded columns
// [c0, c0 + width)); two exchanges of per-row partials, as layer_norm.cu's two passes. Every
// thread of every CTA calls it (it holds two cluster barriers).
__device__ void finish_layer_norm(const Params& p, cg::cluster_group& cluster, const float* sC, int ldc, int c0,
                                  int width, int m0, int rank, float* red) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int N = p.N[p.n_layers - 1], parts = p.split[p.n_layers - 1] ? kC : 1;
  constexpr int kRows = kBM / kWarps, kPer = kMaxSlice / 32;
  float v[kRows][kPer], mean[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + kWarps * i;
    const int64_t m = m0 + r;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      v[i][j] = c < width ? sC[r * ldc + c] + (p.ln_res && m < p.M ? h2f(p.ln_res, m * N + c0 + c) : 0.f) : 0.f;
      s += v[i][j];
    }
    if (width) push_partial(cluster, red, rank, r, warp_sum(s), lane);
  }
  cluster.sync();
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + kWarps * i;
    float s = 0.f;
    for (int q = 0; q < parts; ++q) s += red[q * kBM + r];
    mean[i] = s / N;
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (lane + 32 * j < width) sq += (v[i][j] - mean[i]) * (v[i][j] - mean[i]);
    if (width) push_partial(cluster, red + kC * kBM, rank, r, warp_sum(sq), lane);
  }
  cluster.sync();
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + kWarps * i;
    const int64_t m = m0 + r;
    if (m >= p.M) continue;
    float sq = 0.f;
    for (int q = 0; q < parts; ++q) sq += red[kC * kBM + q * kBM + r];
    const float rstd = rsqrtf(sq / N + p.eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      if (c < width)
        p.y[m * N + c0 + c] =
            __float2half_rn((v[i][j] - mean[i]) * rstd * h2f(p.gamma, c0 + c) + h2f(p.beta, c0 + c));
    }
  }
}

// The other epilogues, row by row (one warp per row): columns [c0, c0 + width) of each row.
__device__ void finish_rows(const Params& p, const float* sC, int ldc, int c0, int width, int m0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int N = p.N[p.n_layers - 1];
  for (int r = warp; r < kBM; r += kWarps) {
    const int64_t m = m0 + r;
    if (m >= p.M) continue;
    for (int cl = lane; cl < width; cl += 32) {
      const int c = c0 + cl;
      if (c >= N) continue;
      float v = sC[r * ldc + cl];
      if (p.epi == static_cast<int>(RowEpilogue::box_refine)) {  // as box_refine.cu
        const float x = fminf(fmaxf(h2f(p.ref, m * N + c), 0.f), 1.f);
        v = 1.f / (1.f + expf(-(v + logf(fmaxf(x, 1e-5f) / fmaxf(1.f - x, 1e-5f)))));
      } else if (p.epi == static_cast<int>(RowEpilogue::add_const)) {
        v += h2f(p.addc, (m % p.addc_rows) * N + c);
      }
      p.y[m * N + c] = __float2half_rn(v);
    }
  }
}

__global__ void __cluster_dims__(kC, 1, 1) __launch_bounds__(kThreads, 1) row_mlp_k(Params p) {
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* X[2] = {reinterpret_cast<__half*>(smem_raw), reinterpret_cast<__half*>(smem_raw) + kBM * p.ldx};
  __half* Wst = reinterpret_cast<__half*>(smem_raw) + p.wst_off;  // [kStages][ws_rows][kLdw]
  float* red = reinterpret_cast<float*>(smem_raw) + p.red_off;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = static_cast<int>(blockIdx.x / kC) * kBM;
  const int total = p.chunk_start[p.n_layers];
  const int stage = p.ws_rows * kLdw;

  float acc[kMaxT][4];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[t][e] = 0.f;

  load_x(p, m0, X[0]);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < total) load_chunk(p, s, rank, Wst + s * stage);
    cp_async_commit();
  }
  cluster.sync();  // every CTA of the cluster is running before the first remote write
  int l = 0, c0 = 0, width = slice(p, 0, rank, &c0);
  for (int j = 0; j < total; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk j (and X) visible to all; stage (j - 1) % kStages free again
    if (j + kStages - 1 < total) load_chunk(p, j + kStages - 1, rank, Wst + ((j + kStages - 1) % kStages) * stage);
    cp_async_commit();
    if (j >= p.chunk_start[l + 1]) width = slice(p, ++l, rank, &c0);
    const int kc = (j - p.chunk_start[l]) * kKc, ntiles = width / 8;
    if (warp < ntiles) {
      const __half* Xs = X[l & 1];
      const __half* Ws = Wst + (j % kStages) * stage;
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
        ldmatrix_x4(bf, smem_u32(Ws + (tile * 8 + (lane & 7)) * kLdw + (lane >> 3) * 8));
        mma16816(acc[t], af[0], bf[0], bf[1]);
        mma16816(acc[t], af[1], bf[2], bf[3]);
      }
    }
    if (j + 1 != p.chunk_start[l + 1]) continue;
    // Layer l is complete: bias, activation, one fp16 rounding.
    const bool last = l == p.n_layers - 1;
    float* sC = reinterpret_cast<float*>(smem_raw);  // last layer: [16][width + 4] over both X buffers
    const int ldc = width + 4;
    __half* peer[kC];
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
        const int64_t m = m0 + r;
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int n = c0 + cl + e;
          v[e] = acc[t][h * 2 + e];
          acc[t][h * 2 + e] = 0.f;
          if (n < p.N[l]) {
            if (p.b[l]) v[e] += h2f(p.b[l], n);
            if (last && p.res && m < p.M) v[e] += h2f(p.res, m * p.N[l] + n);
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
      finish_layer_norm(p, cluster, sC, ldc, c0, width, m0, rank, red);
    else
      finish_rows(p, sC, ldc, c0, width, m0);
  }
  cp_async_wait<0>();
}

}  // namespace

int row_mlp_block_rows(const RowMlpArgs& a, std::string* why) {
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
  // The first K may reach 1024 (fc2): its two X buffers then take 66 KiB of smem.
  if (a.layers[0].K > 1024) return fail("input width over 1024");
  const int N = a.layers[a.n_layers - 1].N;
  if (a.epi == RowEpilogue::box_refine && N != 4) return fail("box_refine needs N = 4");
  if (a.epi == RowEpilogue::layer_norm && (!a.gamma || !a.beta)) return fail("layer_norm without gamma/beta");
  if (a.epi == RowEpilogue::add_const && (!a.addc || a.addc_rows < 1)) return fail("add_const without a constant");
  if (!a.x || !a.y || (a.layers[0].K % 8 == 0 && !aligned16(a.x))) return fail("missing or misaligned input");
  if (a.M > kMaxRows) return fail("too many rows for a row-block chain");
  return kBM;
}

void row_mlp(const RowMlpArgs& a, cudaStream_t s) {
  std::string why;
  if (!row_mlp_block_rows(a, &why)) throw Error("row_mlp: unsupported chain: " + why);
  Params p{};
  p.x = static_cast<const __half*>(a.x);
  p.M = static_cast<int>(a.M);
  p.n_layers = a.n_layers;
  int kp_max = 0, start = 0;
  p.ws_rows = 8;
  for (int l = 0; l < a.n_layers; ++l) {
    const RowMlpLayer& L = a.layers[l];
    p.w[l] = static_cast<const __half*>(L.w);
    p.b[l] = static_cast<const __half*>(L.b);
    p.N[l] = L.N;
    p.K[l] = L.K;
    p.Kp[l] = round_up(L.K, kKc);
    p.relu[l] = L.act == graph::Act::relu;
    p.split[l] = L.N % (8 * kC) == 0;
    p.sw[l] = p.split[l] ? L.N / kC : round_up(L.N, 8);
    p.chunk_start[l] = start;
    start += p.Kp[l] / kKc;
    kp_max = std::max(kp_max, p.Kp[l]);
    p.ws_rows = std::max(p.ws_rows, p.sw[l]);
  }
  p.chunk_start[a.n_layers] = start;
  p.ldx = kp_max + 8;
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
  const size_t x_bytes = size_t{2} * kBM * p.ldx * sizeof(__half);
  const size_t c_bytes = size_t{1} * kBM * (p.sw[a.n_layers - 1] + 4) * sizeof(float);
  // The final fp32 tile (sC) overlays the two X buffers; the weight stages and the LayerNorm
  // exchange follow.
  const size_t base = (std::max(x_bytes, c_bytes) + 15) / 16 * 16;
  p.wst_off = static_cast<int>(base / sizeof(__half));
  const size_t red = base + size_t{kStages} * p.ws_rows * kLdw * sizeof(__half);
  p.red_off = static_cast<int>(red / sizeof(float));
  const size_t smem = red + size_t{2} * kC * kBM * sizeof(float);
  const dim3 grid(static_cast<unsigned>((a.M + kBM - 1) / kBM * kC));
  opt_in_smem<row_mlp_k>(smem);
  row_mlp_k<<<grid, kThreads, smem, s>>>(p);
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
