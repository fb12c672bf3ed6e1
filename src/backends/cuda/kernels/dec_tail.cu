// The decoder layer's row-local tail as one launch (see dec_tail.h for the stages and the why).
// Layout: a cluster of 8 CTAs per block of BM = 16 rows; in every GEMM stage CTA rank r owns
// columns [r N/8, (r + 1) N/8) of all BM rows (N 256: 32 columns, N 1024: 128). 8 warps: 4 warp columns
// (each every 4th n8 tile of the CTA's columns) x 2 warp rows splitting K in halves (summed
// through shared memory). The CTA's weight slice of the next stage is requested before each
// cluster barrier (weights do not depend on the stage before), so after the barrier only the
// BM rows of activations (and the residual slice) are loaded. The LayerNorm stages normalise the
// BM rows in every CTA (rank 0 stores them). Activations written inside the launch are read
// through L2 only (cp.async.cg, __ldcg): other SMs wrote them. Clusters are independent, so a
// grid larger than the GPU runs in waves without any grid-wide wait.
// Measured (H100, 300 rows, stage stamps; bench/results/h100/ab-2026-12-06-session20/call4): with
// 16 rows per cluster (19 clusters, 2 CTAs per SM) 33.9 us per launch. The cluster barrier
// itself is ~0.5 us; what remains is shared-memory filling: every cluster reads the tail's
// 1.7 MB of weights, each CTA ~290 KB per launch at ~25 GB/s per SM (issuing a 64 KB weight
// slice took ~2.5 us). 32 rows per cluster (kMT below) halves the clusters, and was slower.
#include "backends/cuda/kernels/cluster.cuh"
#include "backends/cuda/kernels/dec_tail.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/mma.cuh"

namespace detforge::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCluster = 8;
// m16 tiles per cluster. 2 (32 rows, 10 clusters at 300 rows, one CTA per SM) took 37.4 us per
// launch against 33.9 us for 1 (16 rows, 19 clusters, two CTAs per SM): fewer clusters read the
// weights, but each CTA's stages got longer (fc1 5.6 against 3.1 us). H100, session 20 calls 4-5.
constexpr int kMT = 1;
constexpr int BM = 16 * kMT, kMaxK = 1024, kLnC = 256, kMaxCols = 1024 / kCluster;  // 128
constexpr int kMaxTiles = kMaxCols / 8 / 4;  // n8 tiles per warp column: 4
// Shared memory: A [16][K + 8], B [cols][K + 8] (the larger of 128 x 264 and 32 x 1032), the
// residual slice [BM][cols], the K-half partial sums [4 warps][32 lanes][kMT x 4 tiles x 4].
constexpr size_t kSmemA = size_t(BM) * (kMaxK + 8) * 2;
constexpr size_t kSmemB = size_t(kMaxCols) * (kLnC + 8) * 2 > size_t(kLnC / kCluster) * (kMaxK + 8) * 2
                              ? size_t(kMaxCols) * (kLnC + 8) * 2
                              : size_t(kLnC / kCluster) * (kMaxK + 8) * 2;
constexpr size_t kSmemR = size_t(BM) * kMaxCols * 2;
constexpr size_t kSmemRed = 4 * 32 * kMT * kMaxTiles * 4 * sizeof(float);
constexpr size_t kSmem = kSmemA + kSmemB + kSmemR + kSmemRed;

__device__ __forceinline__ uint32_t ldcg_u32(const void* p) { return __ldcg(static_cast<const unsigned*>(p)); }
__device__ __forceinline__ uint4 ldcg_u128(const void* p) { return __ldcg(static_cast<const uint4*>(p)); }
__device__ __forceinline__ float2 h2f(uint32_t u) {
  __half2 h = *reinterpret_cast<__half2*>(&u);
  return __half22float2(h);
}
__device__ __forceinline__ uint32_t f2h(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ float round_h(float v) { return __half2float(__float2half_rn(v)); }

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void stamp(const DecTailArgs& a, int k) {
  if (a.stamps && threadIdx.x == 0) a.stamps[blockIdx.x * kDecTailStamps + k] = globaltimer();
}

// rows [row0, row0 + nrows) x K of src (row stride K) into dst (row stride K + 8); rows at or past
// valid_rows are zero-filled.
__device__ __forceinline__ void load_rows(const __half* src, int K, int row0, int nrows, int valid_rows, __half* dst) {
  const int per_row = K / 8;
  for (int c = threadIdx.x; c < nrows * per_row; c += kThreads) {
    const int r = c / per_row, k8 = c - r * per_row;
    const bool ok = row0 + r < valid_rows;
    const __half* p = ok ? src + (int64_t)(row0 + r) * K + k8 * 8 : src;
    cp_async16(smem_u32(dst + r * (K + 8) + k8 * 8), p, ok);
  }
}

// [BM][cols] of src (row stride N) from column col0 into dst (row stride cols).
__device__ __forceinline__ void load_slice(const __half* src, int N, int m0, int rows, int col0, int cols, __half* dst) {
  const int per_row = cols / 8;
  for (int c = threadIdx.x; c < BM * per_row; c += kThreads) {
    const int r = c / per_row, k8 = c - r * per_row;
    const bool ok = m0 + r < rows;
    const __half* p = ok ? src + (int64_t)(m0 + r) * N + col0 + k8 * 8 : src;
    cp_async16(smem_u32(dst + r * cols + k8 * 8), p, ok);
  }
}

__device__ __forceinline__ void prefetch_b(const DecTailGemm& g, unsigned rank, __half* sB) {
  const int cols = g.N / kCluster;
  load_rows(static_cast<const __half*>(g.w), g.K, rank * cols, cols, g.N, sB);
  cp_async_commit();
}

// LayerNorm over 256 channels of the BM rows, in place in shared memory; as layer_norm.cu:
// two-pass fp32 statistics, the output rounded to fp16. Warp w takes rows kMT*2w.. kMT*2(w+1)-1.
__device__ __forceinline__ void ln_rows(const DecTailGemm& g, int m0, int rows, bool write, __half* sA) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint4 gp = __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(g.ln_g) + lane * 8));
  const uint4 bp = __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(g.ln_b) + lane * 8));
  const uint32_t* gw = &gp.x;
  const uint32_t* bw = &bp.x;
  for (int r = warp * 2 * kMT; r < (warp + 1) * 2 * kMT; ++r) {
    __half* row = sA + r * (kLnC + 8);
    uint4 xp = *reinterpret_cast<const uint4*>(row + lane * 8);
    const uint32_t* xw = &xp.x;
    float v[8];
    float sum = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 f = h2f(xw[q]);
      v[2 * q] = f.x;
      v[2 * q + 1] = f.y;
      sum += f.x + f.y;
    }
    const float mean = warp_sum(sum) / kLnC;
    float sq = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) sq += (v[e] - mean) * (v[e] - mean);
    const float rstd = rsqrtf(warp_sum(sq) / kLnC + g.eps);
    uint4 op;
    uint32_t* ow = &op.x;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 gg = h2f(gw[q]), bb = h2f(bw[q]);
      ow[q] = f2h((v[2 * q] - mean) * rstd * gg.x + bb.x, (v[2 * q + 1] - mean) * rstd * gg.y + bb.y);
    }
    *reinterpret_cast<uint4*>(row + lane * 8) = op;
    if (write && m0 + r < rows)
      *reinterpret_cast<uint4*>(static_cast<__half*>(g.ln_out) + (int64_t)(m0 + r) * kLnC + lane * 8) = op;
  }
}

// One GEMM stage for rows [m0, m0 + BM), this CTA's columns; its weight slice is already requested.
template <int T>  // n8 tiles per warp column: cols / 32
__device__ void gemm_stage(const DecTailGemm& g, int m0, int rows, unsigned rank, unsigned char* smem) {
  __half* sA = reinterpret_cast<__half*>(smem);
  __half* sB = reinterpret_cast<__half*>(smem + kSmemA);
  __half* sR = reinterpret_cast<__half*>(smem + kSmemA + kSmemB);
  float* red = reinterpret_cast<float*>(smem + kSmemA + kSmemB + kSmemR);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const int wc = warp & 3, kh = warp >> 2;
  const int K = g.K, LDk = K + 8, cols = g.N / kCluster, col0 = rank * cols;
  load_rows(static_cast<const __half*>(g.a), K, m0, BM, rows, sA);
  const __half* extra = static_cast<const __half*>(g.res ? g.res : g.add2);  // at most one of them
  if (extra) load_slice(extra, g.N, m0, rows, col0, cols, sR);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  if (g.ln_g) {
    ln_rows(g, m0, rows, g.ln_out && rank == 0, sA);
    __syncthreads();
  }
  float acc[kMT][T][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < T; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.f;
  const int kb = kh * (K / 2), ke = kb + K / 2;
#pragma unroll 2
  for (int k = kb; k < ke; k += 16) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const __half* ap = sA + (mt * 16 + gq) * LDk + k + 2 * t;
      a[mt][0] = *reinterpret_cast<const uint32_t*>(ap);
      a[mt][1] = *reinterpret_cast<const uint32_t*>(ap + 8 * LDk);
      a[mt][2] = *reinterpret_cast<const uint32_t*>(ap + 8);
      a[mt][3] = *reinterpret_cast<const uint32_t*>(ap + 8 * LDk + 8);
    }
#pragma unroll
    for (int j = 0; j < T; ++j) {
      const __half* bp = sB + ((wc + 4 * j) * 8 + gq) * LDk + k + 2 * t;
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(bp), b1 = *reinterpret_cast<const uint32_t*>(bp + 8);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma16816(acc[mt][j], a[mt], b0, b1);
    }
  }
  float* mine = red + (wc * 32 + lane) * (kMT * kMaxTiles * 4);
  if (kh == 1)
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < T; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) mine[(mt * T + j) * 4 + e] = acc[mt][j][e];
  __syncthreads();
  if (kh == 0) {
#pragma unroll
    for (int j = 0; j < T; ++j) {
      const int lc = (wc + 4 * j) * 8 + 2 * t, col = col0 + lc;  // local and global column
      const float2 bv = h2f(__ldg(reinterpret_cast<const unsigned*>(static_cast<const __half*>(g.bias) + col)));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = mt * 16 + gq + hr * 8, row = m0 + r;
        if (row >= rows) continue;
        const int64_t o = (int64_t)row * g.N + col;
        const float* part = mine + (mt * T + j) * 4;
        float v0 = acc[mt][j][hr * 2] + part[hr * 2] + bv.x;
        float v1 = acc[mt][j][hr * 2 + 1] + part[hr * 2 + 1] + bv.y;
        const float2 x = extra ? h2f(*reinterpret_cast<const uint32_t*>(sR + r * cols + lc)) : float2{0.f, 0.f};
        if (g.res) {
          v0 += x.x;
          v1 += x.y;
        }
        if (g.relu) {
          v0 = fmaxf(v0, 0.f);
          v1 = fmaxf(v1, 0.f);
        }
        const uint32_t out = f2h(v0, v1);
        *reinterpret_cast<uint32_t*>(static_cast<__half*>(g.y) + o) = out;
        if (g.add2) {
          const float2 y = h2f(out);
          *reinterpret_cast<uint32_t*>(static_cast<__half*>(g.y2) + o) = f2h(y.x + x.x, y.y + x.y);
        }
      }
    }
  }
  __syncthreads();  // shared memory is refilled by the next stage
}

__device__ __forceinline__ void run_gemm(const DecTailGemm& g, int m0, int rows, unsigned rank, unsigned char* smem) {
  if (g.N / kCluster == 128)
    gemm_stage<4>(g, m0, rows, rank, smem);
  else
    gemm_stage<1>(g, m0, rows, rank, smem);
}

// bbox layer 2 (N = 4), box_refine and query_pos_head layer 0: box_step.cu's arithmetic, one
// warp per row (warps 0 .. 2 kMT - 1 of each CTA: 2 kMT of the BM rows), x read through L2.
__device__ void box_stage(const DecTailArgs& a, int m0, unsigned rank) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = m0 + rank * 2 * kMT + warp;
  if (warp >= 2 * kMT || row >= a.rows) return;
  const __half* x = static_cast<const __half*>(a.g[4].y);
  const __half* w3 = static_cast<const __half*>(a.w3);
  const __half* b3 = static_cast<const __half*>(a.b3);
  const __half* ref_in = static_cast<const __half*>(a.ref_in);
  __half* ref_out = static_cast<__half*>(a.ref_out);
  const int K = a.g[4].N;
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = lane * 8; k0 < K; k0 += 256) {
    const uint4 xp = ldcg_u128(x + (int64_t)row * K + k0);
    const uint32_t* xw = &xp.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 wp = __ldg(reinterpret_cast<const uint4*>(w3 + (int64_t)j * K + k0));
      const uint32_t* ww = &wp.x;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 xf = h2f(xw[q]), wf = h2f(ww[q]);
        s[j] = fmaf(xf.x, wf.x, s[j]);
        s[j] = fmaf(xf.y, wf.y, s[j]);
      }
    }
  }
  float box[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float delta = round_h(warp_sum(s[j]) + __half2float(b3[j]));
    const float r = fminf(fmaxf(__half2float(ref_in[(int64_t)row * 4 + j]), 0.f), 1.f);
    const float v = delta + logf(fmaxf(r, 1e-5f) / fmaxf(1.f - r, 1e-5f));
    box[j] = round_h(1.f / (1.f + expf(-v)));
  }
  if (lane < 4)
    ref_out[(int64_t)row * 4 + lane] = __float2half_rn(lane == 0 ? box[0] : lane == 1 ? box[1] : lane == 2 ? box[2] : box[3]);
  if (!a.wq1) return;
  const __half* w1 = static_cast<const __half*>(a.wq1);
  const __half* b1 = static_cast<const __half*>(a.bq1);
  for (int o0 = lane * 8; o0 < a.P; o0 += 256) {
    uint4 wp[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) wp[q] = __ldg(reinterpret_cast<const uint4*>(w1 + (int64_t)o0 * 4 + q * 8));
    const uint4 bp = __ldg(reinterpret_cast<const uint4*>(b1 + o0));
    const __half* wh = reinterpret_cast<const __half*>(wp);
    const __half* bh = reinterpret_cast<const __half*>(&bp);
    uint4 out;
    __half* oh = reinterpret_cast<__half*>(&out);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float acc = 0.f;
#pragma unroll
      for (int k = 0; k < 4; ++k) acc = fmaf(box[k], __half2float(wh[e * 4 + k]), acc);
      oh[e] = __float2half_rn(fmaxf(acc + __half2float(bh[e]), 0.f));
    }
    *reinterpret_cast<uint4*>(static_cast<__half*>(a.q1) + (int64_t)row * a.P + o0) = out;
  }
}

__global__ void __launch_bounds__(kThreads) dec_tail_k(const DecTailArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sB = reinterpret_cast<__half*>(smem + kSmemA);
  const unsigned rank = cluster_rank();
  const int m0 = static_cast<int>(blockIdx.x / kCluster) * BM;
  stamp(a, 0);
  prefetch_b(a.g[0], rank, sB);
  for (int s = 0; s < 5; ++s) {
    run_gemm(a.g[s], m0, a.rows, rank, smem);
    stamp(a, 1 + 2 * s);
    if (s < 4) prefetch_b(a.g[s + 1], rank, sB);
    cluster_sync();
    stamp(a, 2 + 2 * s);
  }
  if (a.wq1) prefetch_b(a.gq, rank, sB);
  box_stage(a, m0, rank);
  stamp(a, 11);
  if (a.wq1) {
    cluster_sync();
    stamp(a, 12);
    run_gemm(a.gq, m0, a.rows, rank, smem);
    stamp(a, 13);
  }
}

const char* gemm_unsupported(const DecTailGemm& g) {
  if (!g.a || !g.w || !g.bias || !g.y) return "a GEMM stage lacks an operand";
  if (g.K % 64 || g.K < 64 || g.K > kMaxK) return "K is not a multiple of 64 up to 1024";
  if (g.N != 256 && g.N != 1024) return "N is not 256 or 1024";
  if (g.N == 1024 && g.K > kLnC) return "an N of 1024 needs K <= 256 (the weight slice in shared memory)";
  if (g.ln_g && (g.K != kLnC || !g.ln_b)) return "a LayerNorm stage needs K = 256 and a beta";
  if (g.add2 && (!g.y2 || g.res)) return "add2 needs y2 and no residual";
  const void* ptrs[] = {g.a, g.w, g.bias, g.res, g.ln_g, g.ln_b, g.ln_out, g.y, g.add2, g.y2};
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return "a pointer is not 16-byte aligned";
  return "";
}

}  // namespace

const char* dec_tail_unsupported(const DecTailArgs& a) {
  if (a.rows < 1) return "no rows";
  for (const auto& g : a.g)
    if (const char* why = gemm_unsupported(g); *why) return why;
  if (!a.w3 || !a.b3 || !a.ref_in || !a.ref_out) return "the box step lacks an operand";
  if (a.g[4].N % 8 || !aligned16(a.w3) || !aligned16(a.g[4].y)) return "the box step's K or alignment";
  if (a.wq1) {
    if (a.P % 8 || a.P < 8 || !a.bq1 || !a.q1 || !aligned16(a.wq1) || !aligned16(a.bq1) || !aligned16(a.q1))
      return "the query_pos_head's first layer shape or alignment";
    if (const char* why = gemm_unsupported(a.gq); *why) return why;
  }
  return "";
}

int dec_tail_ctas(int rows) { return (rows + BM - 1) / BM * kCluster; }

void dec_tail(const DecTailArgs& a, cudaStream_t s) {
  if (const char* why = dec_tail_unsupported(a); *why) throw Error(std::string("dec_tail: ") + why);
  opt_in_smem<dec_tail_k>(kSmem);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(dec_tail_ctas(a.rows)));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  DF_CUDA(cudaLaunchKernelEx(&cfg, dec_tail_k, a));
}

}  // namespace detforge::cuda
