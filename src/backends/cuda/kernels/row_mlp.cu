// A linear chain run one block of BM rows per CTA (see row_mlp.h). 8 warps; warp w owns the
// n-tiles (8 columns each) w, w + 8, w + 16, ... of the current layer and all BM rows, so a
// whole output row is in the CTA for the LayerNorm epilogue and the hidden activations never
// leave shared memory.
//  * The weights of all layers stream as one sequence of 32-wide k chunks ([Np][32] fp16, rows
//    padded to 40 halves: conflict-free ldmatrix, as conv_igemm.cu) through a 3-stage cp.async
//    pipeline, so the next layer's first chunks load while the current one finishes.
//  * The layer input X [BM][Kp] (Kp = K rounded up to 32, zero-filled) and the next layer's
//    input ping-pong between two smem buffers; the final fp32 row tile reuses them for the
//    epilogue, one warp per row.
// At batch 1 the decoder's chains have M = 300 rows: 19 CTAs of 16 rows, each streaming the
// chain's weights (128-264 KiB) from L2; the unfused ops were 2-4 launches of ~3-5 us each.
#include "backends/cuda/kernels/row_mlp.h"

#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "detforge/types.h"

namespace detforge::cuda {

using graph::RowEpilogue;

namespace {

constexpr int kThreads = 256, kWarps = 8, kStages = 3, kKc = 32, kLdw = kKc + 8;

struct Params {
  const __half* x;
  int M;
  int n_layers;
  const __half* w[3];
  const __half* b[3];
  int N[3], K[3], Np[3], Kp[3], relu[3];
  int chunk_start[4];  // global k-chunk index where each layer starts; [n_layers] = total
  int ldx;             // X row stride (halves): max Kp + 8
  int np_max;          // weight stage rows
  int wst_off;         // halves from the smem base to the weight stages
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

// Weight chunk j (layer l, k chunk kc) into stage buffer `ws` ([np_max][kLdw]).
__device__ __forceinline__ void load_chunk(const Params& p, int j, __half* ws) {
  int l = 0;
  while (l + 1 < p.n_layers && j >= p.chunk_start[l + 1]) ++l;
  const int k0 = (j - p.chunk_start[l]) * kKc, N = p.N[l], K = p.K[l];
  const __half* w = p.w[l];
  const int pieces = p.Np[l] * (kKc / 8);
  for (int idx = threadIdx.x; idx < pieces; idx += kThreads) {
    const int n = idx / (kKc / 8), k = k0 + (idx % (kKc / 8)) * 8;
    __half* dst = ws + n * kLdw + (k - k0);
    if (K % 8 == 0) {
      const bool ok = n < N && k < K;
      cp_async16(smem_u32(dst), ok ? w + static_cast<int64_t>(n) * K + k : w, ok);
    } else {  // K not a multiple of 8 (query_pos_head's 4 inputs): guarded scalar loads
      for (int e = 0; e < 8; ++e) dst[e] = n < N && k + e < K ? w[static_cast<int64_t>(n) * K + k + e] : __float2half(0.f);
    }
  }
}

// The CTA's BM input rows, K0 columns zero-padded to Kp0, into X.
template <int BM>
__device__ __forceinline__ void load_x(const Params& p, int m0, __half* X) {
  const int K = p.K[0], per_row = p.Kp[0] / 8;
  for (int idx = threadIdx.x; idx < BM * per_row; idx += kThreads) {
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

// The epilogue of one output row (one warp): sC holds the last linear's fp16-rounded values.
__device__ __forceinline__ void finish_row(const Params& p, const float* row, int64_t m, int lane) {
  const int N = p.N[p.n_layers - 1];
  const int64_t o = m * N;
  if (p.epi == static_cast<int>(RowEpilogue::layer_norm)) {
    constexpr int kPer = 512 / 32;  // N <= 512
    float v[kPer];
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      v[j] = c < N ? row[c] + (p.ln_res ? h2f(p.ln_res, o + c) : 0.f) : 0.f;
      sum += v[j];
    }
    const float mean = warp_sum(sum) / N;
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (lane + 32 * j < N) sq += (v[j] - mean) * (v[j] - mean);
    const float rstd = rsqrtf(warp_sum(sq) / N + p.eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = lane + 32 * j;
      if (c < N) p.y[o + c] = __float2half_rn((v[j] - mean) * rstd * h2f(p.gamma, c) + h2f(p.beta, c));
    }
    return;
  }
  for (int c = lane; c < N; c += 32) {
    float v = row[c];
    if (p.epi == static_cast<int>(RowEpilogue::box_refine)) {  // as box_refine.cu
      const float x = fminf(fmaxf(h2f(p.ref, o + c), 0.f), 1.f);
      v = 1.f / (1.f + expf(-(v + logf(fmaxf(x, 1e-5f) / fmaxf(1.f - x, 1e-5f)))));
    } else if (p.epi == static_cast<int>(RowEpilogue::add_const)) {
      v += h2f(p.addc, (m % p.addc_rows) * N + c);
    }
    p.y[o + c] = __float2half_rn(v);
  }
}

template <int MI, int MAXT>
__global__ void __launch_bounds__(kThreads) row_mlp_k(Params p) {
  constexpr int BM = 16 * MI;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* X[2] = {reinterpret_cast<__half*>(smem_raw), reinterpret_cast<__half*>(smem_raw) + BM * p.ldx};
  __half* Wst = reinterpret_cast<__half*>(smem_raw) + p.wst_off;  // [kStages][np_max][kLdw]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.x * BM;
  const int total = p.chunk_start[p.n_layers];

  float acc[MI][MAXT][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int t = 0; t < MAXT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][t][e] = 0.f;

  load_x<BM>(p, m0, X[0]);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < total) load_chunk(p, s, Wst + s * p.np_max * kLdw);
    cp_async_commit();
  }
  int l = 0;
  for (int j = 0; j < total; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk j (and X) visible to all; stage (j - 1) % kStages free again
    if (j + kStages - 1 < total) load_chunk(p, j + kStages - 1, Wst + ((j + kStages - 1) % kStages) * p.np_max * kLdw);
    cp_async_commit();
    if (j >= p.chunk_start[l + 1]) ++l;
    const int kc = (j - p.chunk_start[l]) * kKc;
    const __half* Xs = X[l & 1];
    const __half* Ws = Wst + (j % kStages) * p.np_max * kLdw;
    const int ntiles = p.Np[l] / 8;
    uint32_t af[MI][2][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
        ldmatrix_x4(af[mi][kk], smem_u32(Xs + (mi * 16 + (lane & 15)) * p.ldx + kc + kk * 16 + (lane >> 4) * 8));
#pragma unroll
    for (int t = 0; t < MAXT; ++t) {
      const int tile = warp + kWarps * t;
      if (tile >= ntiles) break;
      // matrices: (n 0-7, k 0-7), (k 8-15), (k 16-23), (k 24-31) of this tile's 8 rows
      uint32_t bf[4];
      ldmatrix_x4(bf, smem_u32(Ws + (tile * 8 + (lane & 7)) * kLdw + (lane >> 3) * 8));
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        mma16816(acc[mi][t], af[mi][0], bf[0], bf[1]);
        mma16816(acc[mi][t], af[mi][1], bf[2], bf[3]);
      }
    }
    if (j + 1 != p.chunk_start[l + 1]) continue;
    // Layer l is complete: bias, activation, one fp16 rounding.
    const bool last = l == p.n_layers - 1;
    float* sC = reinterpret_cast<float*>(smem_raw);  // last layer: [BM][Np + 4] over both X buffers
    const int ldc = p.Np[l] + 4;
    if (last) __syncthreads();  // every warp is done reading X before sC overwrites it
#pragma unroll
    for (int t = 0; t < MAXT; ++t) {
      const int tile = warp + kWarps * t;
      if (tile >= ntiles) break;
      const int c = tile * 8 + (lane & 3) * 2;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = mi * 16 + (lane >> 2) + h * 8;
          const int64_t m = m0 + r;
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int n = c + e;
            v[e] = acc[mi][t][h * 2 + e];
            acc[mi][t][h * 2 + e] = 0.f;
            if (n < p.N[l]) {
              if (p.b[l]) v[e] += h2f(p.b[l], n);
              if (last && p.res && m < p.M) v[e] += h2f(p.res, m * p.N[l] + n);
              if (p.relu[l]) v[e] = fmaxf(v[e], 0.f);
            } else {
              v[e] = 0.f;
            }
          }
          if (last) {
            sC[r * ldc + c] = round_h(v[0]);
            sC[r * ldc + c + 1] = round_h(v[1]);
          } else {
            *reinterpret_cast<__half2*>(X[(l + 1) & 1] + r * p.ldx + c) = __floats2half2_rn(v[0], v[1]);
          }
        }
    }
    if (last) {
      __syncthreads();
      for (int r = warp; r < BM; r += kWarps)
        if (m0 + r < p.M) finish_row(p, sC + r * ldc, m0 + r, lane);
    }
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
  if (a.M < 1 || a.M > (int64_t{1} << 30)) return fail("rows out of range");
  int width = 0;
  for (int l = 0; l < a.n_layers; ++l) {
    const RowMlpLayer& L = a.layers[l];
    if (L.N < 1 || L.K < 1) return fail("empty layer");
    if (L.act != graph::Act::none && L.act != graph::Act::relu) return fail("activation other than relu");
    if (l > 0 && L.K != a.layers[l - 1].N) return fail("layer widths do not chain");
    if (l + 1 < a.n_layers && L.N % 32) return fail("hidden width not a multiple of 32");
    if (!L.w || (L.K % 8 == 0 && !aligned16(L.w))) return fail("missing or misaligned weights");
    width = std::max(width, l == 0 ? L.N : std::max(L.N, L.K));
  }
  // N <= 512 keeps a row's LayerNorm in registers (16 per lane); the first K may reach 1024
  // (fc2), its X buffers then take 66 KiB of the 16-row block's smem.
  if (width > 512) return fail("width over 512");
  if (a.layers[0].K > 1024) return fail("input width over 1024");
  width = std::max(width, a.layers[0].K);
  const int N = a.layers[a.n_layers - 1].N;
  if (a.epi == RowEpilogue::box_refine && N != 4) return fail("box_refine needs N = 4");
  if (a.epi == RowEpilogue::layer_norm && (!a.gamma || !a.beta)) return fail("layer_norm without gamma/beta");
  if (a.epi == RowEpilogue::add_const && (!a.addc || a.addc_rows < 1)) return fail("add_const without a constant");
  if (!a.x || !a.y || (a.layers[0].K % 8 == 0 && !aligned16(a.x))) return fail("missing or misaligned input");
  // Every CTA streams all weights from L2: 16-row blocks while there are at most ~2 per SM
  // (batch 1-14 decoders), 64-row blocks (widths <= 256) up to 256 CTAs, library GEMMs beyond.
  if (a.M <= 16 * 264) return 16;
  if (width <= 256 && a.M <= 64 * 256) return 64;
  return fail("too many rows for a row-block chain");
}

void row_mlp(const RowMlpArgs& a, cudaStream_t s) {
  std::string why;
  const int bm = row_mlp_block_rows(a, &why);
  if (!bm) throw Error("row_mlp: unsupported chain: " + why);
  Params p{};
  p.x = static_cast<const __half*>(a.x);
  p.M = static_cast<int>(a.M);
  p.n_layers = a.n_layers;
  int kp_max = 0, np_max = 0, start = 0;
  for (int l = 0; l < a.n_layers; ++l) {
    const RowMlpLayer& L = a.layers[l];
    p.w[l] = static_cast<const __half*>(L.w);
    p.b[l] = static_cast<const __half*>(L.b);
    p.N[l] = L.N;
    p.K[l] = L.K;
    p.Np[l] = round_up(L.N, 8);
    p.Kp[l] = round_up(L.K, kKc);
    p.relu[l] = L.act == graph::Act::relu;
    p.chunk_start[l] = start;
    start += p.Kp[l] / kKc;
    kp_max = std::max(kp_max, p.Kp[l]);
    np_max = std::max(np_max, p.Np[l]);
  }
  p.chunk_start[a.n_layers] = start;
  p.ldx = kp_max + 8;
  p.np_max = np_max;
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
  const size_t x_bytes = size_t{2} * bm * p.ldx * sizeof(__half);
  const size_t c_bytes = size_t{1} * bm * (p.Np[a.n_layers - 1] + 4) * sizeof(float);
  // The final fp32 tile (sC) overlays the two X buffers; the weight stages follow both.
  const size_t base = (std::max(x_bytes, c_bytes) + 15) / 16 * 16;
  p.wst_off = static_cast<int>(base / sizeof(__half));
  const size_t smem = base + size_t{kStages} * np_max * kLdw * sizeof(__half);
  const dim3 grid(static_cast<unsigned>((a.M + bm - 1) / bm));
  if (bm == 16) {
    opt_in_smem<row_mlp_k<1, 8>>(smem);
    row_mlp_k<1, 8><<<grid, kThreads, smem, s>>>(p);
  } else {
    opt_in_smem<row_mlp_k<4, 4>>(smem);
    row_mlp_k<4, 4><<<grid, kThreads, smem, s>>>(p);
  }
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
