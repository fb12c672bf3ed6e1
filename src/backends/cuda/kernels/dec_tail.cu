// The decoder layer's row-local tail as one cooperative launch (see dec_tail.h for the stages and
// the why). Layout: 8 warps per CTA, one CTA per SM (the grid is at most the SM count, launched
// cooperatively so every CTA is resident), GEMM tiles of 16 rows x 64 columns walked by a
// grid-stride loop; the 4 warp columns each own 16 output columns, and the two warp rows split K
// in halves (summed through shared memory). A and the tile's weight slice sit whole in shared
// memory (K <= 1024); the first tile's weight slice of the next stage is requested before each
// grid barrier, since weights do not depend on the stage before. Activations written inside the
// launch are read through L2 only (cp.async.cg, __ldcg): the non-coherent and L1 paths could hold
// stale lines.
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
constexpr int BM = 16, BN = 64, kMaxK = 1024, kLnC = 256;
constexpr size_t kSmemA = size_t(BM) * (kMaxK + 8) * 2;
constexpr size_t kSmemB = size_t(BN) * (kMaxK + 8) * 2;
constexpr size_t kSmemRed = 4 * 32 * 8 * sizeof(float);
constexpr size_t kSmem = kSmemA + kSmemB + kSmemRed;

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

// Grid barrier (bar[0] counts arrivals over the launch; bar[1] counts exits, see grid_exit).
__device__ __forceinline__ void grid_sync(unsigned* bar, unsigned& gen) {
  __syncthreads();
  if (threadIdx.x == 0) {
    ++gen;
    const unsigned target = gen * gridDim.x;
    __threadfence();
    atomicAdd(bar, 1u);
    volatile unsigned* v = bar;
    while (*v < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

// The last CTA out zeroes both words for the next launch: every CTA has left its last wait by
// the time it counts itself out, so no CTA still reads bar[0].
__device__ __forceinline__ void grid_exit(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(bar + 1, 1u) == gridDim.x - 1) {
      bar[0] = 0;
      bar[1] = 0;
      __threadfence();
    }
  }
}

__device__ __forceinline__ void load_rows(const __half* src, int K, int row0, int nrows, int valid_rows, __half* dst) {
  const int per_row = K / 8;
  for (int c = threadIdx.x; c < nrows * per_row; c += kThreads) {
    const int r = c / per_row, k8 = c - r * per_row;
    const bool ok = row0 + r < valid_rows;
    const __half* p = ok ? src + (int64_t)(row0 + r) * K + k8 * 8 : src;
    cp_async16(smem_u32(dst + r * (K + 8) + k8 * 8), p, ok);
  }
}

__device__ __forceinline__ int tiles_of(const DecTailGemm& g, int rows) { return (rows + BM - 1) / BM * (g.N / BN); }

// The weight slice of this CTA's first tile of stage g (issued before a grid barrier).
__device__ __forceinline__ void prefetch_b(const DecTailGemm& g, int rows, __half* sB) {
  if (static_cast<int>(blockIdx.x) >= tiles_of(g, rows)) return;
  const int n0 = (blockIdx.x % (g.N / BN)) * BN;
  load_rows(static_cast<const __half*>(g.w), g.K, n0, BN, g.N, sB);
  cp_async_commit();
}

// LayerNorm over 256 channels of the tile's 16 rows, in place in shared memory; as layer_norm.cu:
// two-pass fp32 statistics, the output rounded to fp16. Warp w takes rows 2w and 2w + 1.
__device__ __forceinline__ void ln_rows(const DecTailGemm& g, int m0, int rows, bool write, __half* sA) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint4 gp = __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(g.ln_g) + lane * 8));
  const uint4 bp = __ldg(reinterpret_cast<const uint4*>(static_cast<const __half*>(g.ln_b) + lane * 8));
  const uint32_t* gw = &gp.x;
  const uint32_t* bw = &bp.x;
  for (int r = warp * 2; r < warp * 2 + 2; ++r) {
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

__device__ void gemm_stage(const DecTailGemm& g, int rows, unsigned char* smem, bool b_prefetched) {
  __half* sA = reinterpret_cast<__half*>(smem);
  __half* sB = reinterpret_cast<__half*>(smem + kSmemA);
  float* red = reinterpret_cast<float*>(smem + kSmemA + kSmemB);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const int cg = warp & 3, kh = warp >> 2;
  const int K = g.K, LDk = K + 8, ncol = g.N / BN, ntiles = tiles_of(g, rows);
  const __half* A = static_cast<const __half*>(g.a);
  bool first = true;
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const int m0 = (tile / ncol) * BM, n0 = (tile % ncol) * BN;
    if (!(first && b_prefetched)) load_rows(static_cast<const __half*>(g.w), K, n0, BN, g.N, sB);
    load_rows(A, K, m0, BM, rows, sA);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if (g.ln_g) {
      ln_rows(g, m0, rows, g.ln_out && n0 == 0, sA);
      __syncthreads();
    }
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const int kb = kh * (K / 2), ke = kb + K / 2;
#pragma unroll 4
    for (int k = kb; k < ke; k += 16) {
      uint32_t a[4];
      a[0] = *reinterpret_cast<const uint32_t*>(sA + gq * LDk + k + 2 * t);
      a[1] = *reinterpret_cast<const uint32_t*>(sA + (gq + 8) * LDk + k + 2 * t);
      a[2] = *reinterpret_cast<const uint32_t*>(sA + gq * LDk + k + 8 + 2 * t);
      a[3] = *reinterpret_cast<const uint32_t*>(sA + (gq + 8) * LDk + k + 8 + 2 * t);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const __half* bp = sB + (cg * 16 + j * 8 + gq) * LDk + k + 2 * t;
        mma16816(acc[j], a, *reinterpret_cast<const uint32_t*>(bp), *reinterpret_cast<const uint32_t*>(bp + 8));
      }
    }
    if (kh == 1)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[(cg * 32 + lane) * 8 + j * 4 + e] = acc[j][e];
    __syncthreads();
    if (kh == 0) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = n0 + cg * 16 + j * 8 + 2 * t;
        const float2 bv = h2f(__ldg(reinterpret_cast<const unsigned*>(static_cast<const __half*>(g.bias) + col)));
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = m0 + gq + hr * 8;
          if (row >= rows) continue;
          const int64_t o = (int64_t)row * g.N + col;
          float v0 = acc[j][hr * 2] + red[(cg * 32 + lane) * 8 + j * 4 + hr * 2] + bv.x;
          float v1 = acc[j][hr * 2 + 1] + red[(cg * 32 + lane) * 8 + j * 4 + hr * 2 + 1] + bv.y;
          if (g.res) {
            const float2 r = h2f(ldcg_u32(static_cast<const __half*>(g.res) + o));
            v0 += r.x;
            v1 += r.y;
          }
          if (g.relu) {
            v0 = fmaxf(v0, 0.f);
            v1 = fmaxf(v1, 0.f);
          }
          const uint32_t out = f2h(v0, v1);
          *reinterpret_cast<uint32_t*>(static_cast<__half*>(g.y) + o) = out;
          if (g.add2) {
            const float2 y = h2f(out), a2 = h2f(ldcg_u32(static_cast<const __half*>(g.add2) + o));
            *reinterpret_cast<uint32_t*>(static_cast<__half*>(g.y2) + o) = f2h(y.x + a2.x, y.y + a2.y);
          }
        }
      }
    }
    __syncthreads();  // shared memory is refilled by the next tile
    first = false;
  }
}

// bbox layer 2 (N = 4), box_refine and query_pos_head layer 0: box_step.cu's arithmetic, one
// warp per row, x read through L2 (written by the stage before).
__device__ void box_stage(const DecTailArgs& a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const __half* x = static_cast<const __half*>(a.g[4].y);
  const __half* w3 = static_cast<const __half*>(a.w3);
  const __half* b3 = static_cast<const __half*>(a.b3);
  const __half* ref_in = static_cast<const __half*>(a.ref_in);
  __half* ref_out = static_cast<__half*>(a.ref_out);
  const int K = a.g[4].N;
  for (int row = blockIdx.x * 8 + warp; row < a.rows; row += gridDim.x * 8) {
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
    if (!a.wq1) continue;
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
}

__global__ void __launch_bounds__(kThreads, 1) dec_tail_k(const DecTailArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sB = reinterpret_cast<__half*>(smem + kSmemA);
  unsigned gen = 0;
  prefetch_b(a.g[0], a.rows, sB);
  for (int s = 0; s < 5; ++s) {
    gemm_stage(a.g[s], a.rows, smem, static_cast<int>(blockIdx.x) < tiles_of(a.g[s], a.rows));
    if (s < 4) prefetch_b(a.g[s + 1], a.rows, sB);
    grid_sync(a.barrier, gen);
  }
  if (a.wq1) prefetch_b(a.gq, a.rows, sB);
  box_stage(a);
  if (a.wq1) {
    grid_sync(a.barrier, gen);
    gemm_stage(a.gq, a.rows, smem, static_cast<int>(blockIdx.x) < tiles_of(a.gq, a.rows));
  }
  grid_exit(a.barrier);
}

const char* gemm_unsupported(const DecTailGemm& g) {
  if (!g.a || !g.w || !g.bias || !g.y) return "a GEMM stage lacks an operand";
  if (g.K % 64 || g.K < 64 || g.K > kMaxK) return "K is not a multiple of 64 up to 1024";
  if (g.N % BN || g.N < BN) return "N is not a multiple of 64";
  if (g.ln_g && (g.K != kLnC || !g.ln_b)) return "a LayerNorm stage needs K = 256 and a beta";
  if (g.add2 && !g.y2) return "add2 without y2";
  const void* ptrs[] = {g.a, g.w, g.bias, g.res, g.ln_g, g.ln_b, g.ln_out, g.y, g.add2, g.y2};
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return "a pointer is not 16-byte aligned";
  return "";
}

}  // namespace

const char* dec_tail_unsupported(const DecTailArgs& a) {
  if (a.rows < 1) return "no rows";
  if (!a.barrier) return "no barrier words";
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

void dec_tail(const DecTailArgs& a, cudaStream_t s) {
  if (const char* why = dec_tail_unsupported(a); *why) throw Error(std::string("dec_tail: ") + why);
  opt_in_smem<dec_tail_k>(kSmem);
  int dev = 0, sms = 0, per_sm = 0;
  DF_CUDA(cudaGetDevice(&dev));
  DF_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  DF_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dec_tail_k, kThreads, kSmem));
  if (per_sm < 1) throw Error("dec_tail: the kernel does not fit on an SM");
  int most = 0;
  for (const auto& g : a.g) most = std::max(most, (a.rows + BM - 1) / BM * (g.N / BN));
  if (a.wq1) most = std::max({most, (a.rows + BM - 1) / BM * (a.gq.N / BN), (a.rows + 7) / 8});
  const int grid = std::max(1, std::min(sms, most));  // one resident CTA per SM at most
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  DF_CUDA(cudaLaunchKernelEx(&cfg, dec_tail_k, a));
}

}  // namespace detforge::cuda
