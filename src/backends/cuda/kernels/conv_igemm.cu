// Implicit-GEMM fp16 NHWC convolution (see conv_igemm.h for the why and the GEMM view).
//
// One kernel template per CTA tile (BM x BN x BK with BK 32 or 64, 4 warps of WM x WN):
//  * A (im2col of x) and B (w rows) tiles stream through a 3-4 stage cp.async pipeline; every
//    16-byte chunk is one cp.async.cg with src-size 0 (zero fill) for padding, rows past M or N
//    and K past the end, so the MMA loop has no bounds checks.
//  * smem rows are BK + 8 halves (80 or 144 bytes): the 8 row addresses of one ldmatrix phase
//    fall on distinct 4-bank groups, so ldmatrix is conflict-free without a swizzle.
//  * Each thread owns one 8-element K column (tid % (BK/8)) of a fixed set of tile rows, so the
//    per-row gather state (image base, oy*s - pad, ox*s - pad) is computed once per CTA and the
//    K position (ky, kx, ci) advances incrementally, with no divides in the loop.
//  * The accumulators go through smem so that the epilogue reads and writes 16 bytes at a time:
//    without split-K it applies bias + residual + act and stores fp16; with split-K
//    (gridDim.z > 1, for small M such as 20x20x512 where 64x64 tiles give 56 CTAs on 132 SMs)
//    it stores fp32 partials [split][M][N] and a reduce kernel finishes.
#include "backends/cuda/kernels/conv_igemm.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/conv_igemm_params.cuh"
#include "backends/cuda/kernels/epilogue8.cuh"
#include "backends/cuda/kernels/igemm_gather.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/own_conv_args.h"

#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "detforge/types.h"

namespace detforge::cuda {
namespace {

// Tile config: BK = K per pipeline stage (32 or 64), STAGES cp.async stages. smem rows are
// BK + 8 halves (80 or 144 bytes): the 8 rows of one ldmatrix phase hit distinct bank groups.

using Params = IgemmParams;  // conv_igemm_params.cuh

// The epilogue of one 8-column chunk (epilogue8.cuh); y may alias res.
__device__ __forceinline__ void finish8(const Params& p, float (&v)[8], int n, int64_t o) {
  store_epilogue8(v, p.bias, p.res, p.y, p.act, n, o);
}

template <int BM, int BN, int WM, int WN>
constexpr int threads_of() {
  return (BM / WM) * (BN / WN) * 32;
}
template <int BM, int BN, int BK, int STAGES>
constexpr size_t smem_of() {
  return static_cast<size_t>(STAGES) * (BM + BN) * (BK + 8) * sizeof(__half);
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(threads_of<BM, BN, WM, WN>()) igemm_kernel(const Params p) {
  constexpr int kBK = BK, kLds = BK + 8, kStages = STAGES;
  constexpr int WARPS_M = BM / WM, NT = threads_of<BM, BN, WM, WN>();
  constexpr int MI = WM / 16, NI = WN / 8;
  constexpr int CPR = BK / 8;                                // 16-byte chunks per tile row
  constexpr int A_IT = BM * CPR / NT, B_IT = BN * CPR / NT;  // chunks per thread per stage
  constexpr int ROWS_PER_IT = NT / CPR;
  constexpr int LDC = BN + 4;  // fp32 staging pitch of the epilogue
  static_assert(BM * CPR % NT == 0 && BN * CPR % NT == 0 && NI % 2 == 0 && WM % 16 == 0, "tile");
  static_assert(static_cast<size_t>(BM) * LDC * 4 <= smem_of<BM, BN, BK, STAGES>(), "epilogue staging fits");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* sA = reinterpret_cast<__half*>(smem_raw);  // [kStages][BM][kLds]
  __half* sB = sA + kStages * BM * kLds;             // [kStages][BN][kLds]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WARPS_M, wn = warp / WARPS_M;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int kt_begin = blockIdx.z * p.kt_per_split;
  const int nkt = max(min(p.kt_total - kt_begin, p.kt_per_split), 0);

  // Gather state of this thread's A rows and B rows (row r = tid / CPR + i * ROWS_PER_IT).
  const int kc = tid % CPR;
  const int row0 = tid / CPR;
  ImcolGather<A_IT> ga;
  ga.init(p, m0 + row0, ROWS_PER_IT, kt_begin * kBK + kc * 8);
  WeightRows<B_IT> gb;
  gb.init(p, n0 + row0, ROWS_PER_IT);

  auto load_tile = [&](int stage) {
    __half* a_dst = sA + stage * BM * kLds + row0 * kLds + kc * 8;
#pragma unroll
    for (int i = 0; i < A_IT; ++i) {
      bool ok;
      const __half* src = ga.src(p, i, &ok);
      cp_async16(smem_u32(a_dst + i * ROWS_PER_IT * kLds), src, ok);
    }
    __half* b_dst = sB + stage * BN * kLds + row0 * kLds + kc * 8;
#pragma unroll
    for (int i = 0; i < B_IT; ++i) {
      bool ok;
      const __half* src = gb.src(p, i, ga.k, &ok);
      cp_async16(smem_u32(b_dst + i * ROWS_PER_IT * kLds), src, ok);
    }
    ga.advance(p, kBK);  // by one K tile
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nkt) load_tile(s);
    cp_async_commit();
  }

  for (int it = 0; it < nkt; ++it) {
    cp_async_wait<kStages - 2>();  // tile `it` has landed (for this thread) ...
    __syncthreads();               // ... for all threads, and stage (it-1)%S is free again
    const int nxt = it + kStages - 1;
    if (nxt < nkt) load_tile(nxt % kStages);
    cp_async_commit();

    const __half* As = sA + (it % kStages) * BM * kLds;
    const __half* Bs = sB + (it % kStages) * BN * kLds;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[MI][4], bf[NI / 2][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        ldmatrix_x4(af[mi], smem_u32(As + (wm * WM + mi * 16 + (lane & 15)) * kLds + kk * 16 + (lane >> 4) * 8));
      // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj)
        ldmatrix_x4(bf[nj], smem_u32(Bs + (wn * WN + nj * 16 + (lane & 7) + (lane >> 4) * 8) * kLds + kk * 16 +
                                     ((lane >> 3) & 1) * 8));
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
          mma16816(acc[mi][ni], af[mi], bf[ni / 2][(ni & 1) * 2], bf[ni / 2][(ni & 1) * 2 + 1]);
    }
  }

  // Epilogue: stage the fp32 tile in smem, then 8 columns (16 bytes of fp16) per thread-step.
  cp_async_wait<0>();
  __syncthreads();
  float* sC = reinterpret_cast<float*>(smem_raw);  // [BM][LDC]
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int r = wm * WM + mi * 16 + (lane >> 2), c = wn * WN + ni * 8 + (lane & 3) * 2;
      *reinterpret_cast<float2*>(sC + r * LDC + c) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<float2*>(sC + (r + 8) * LDC + c) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  constexpr int CH = BN / 8;
  for (int idx = tid; idx < BM * CH; idx += NT) {
    const int r = idx / CH, c = (idx % CH) * 8;
    const int m = m0 + r, n = n0 + c;
    if (m >= p.M || n >= p.N) continue;  // N % 8 == 0: a chunk is wholly in or out
    const float4 lo = *reinterpret_cast<const float4*>(sC + r * LDC + c);
    const float4 hi = *reinterpret_cast<const float4*>(sC + r * LDC + c + 4);
    const int64_t o = static_cast<int64_t>(m) * p.N + n;
    if (p.ws) {
      float* dst = p.ws + static_cast<int64_t>(blockIdx.z) * p.M * p.N + o;
      *reinterpret_cast<float4*>(dst) = lo;
      *reinterpret_cast<float4*>(dst + 4) = hi;
    } else {
      float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      finish8(p, v, n, o);
    }
  }
}

// Sums the split-K partials in a fixed order (deterministic) and applies the epilogue.
__global__ void igemm_splitk_reduce(const Params p, int splits) {
  const int64_t MN = static_cast<int64_t>(p.M) * p.N, chunks = MN / 8;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = c * 8;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < splits; ++s) {
      const float4 lo = *reinterpret_cast<const float4*>(p.ws + s * MN + o);
      const float4 hi = *reinterpret_cast<const float4*>(p.ws + s * MN + o + 4);
      v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w;
      v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
    }
    finish8(p, v, static_cast<int>(o % p.N), o);
  }
}

// ---- host side ---------------------------------------------------------------------------------

struct Variant {
  const char* name;
  int bm, bn, bk, splits;
  bool wgmma;  // the sm_90a family (conv_wgmma.cu; BK 64)
};
// Measured (H200, graph-captured, bias+res+relu; DISABLED_Timing in the test): the kernel runs at
// ~110 TFLOP/s on the large 3x3s, 1.2-2x slower than cuDNN's plain conv (160x160x64->64: 17.2 vs
// 10.9 us; 20x20x512->512: 18.2 (64x64x64_k4) vs 11.6 us) and wins only where split-K matters most
// (20x20x128->128: 6.2 (64x32_k4) vs 7.2 us). The engine's per-op timing keeps cuDNN elsewhere.
// 128x64: large M (320x320, 160x160 layers); 128x32: large M with Co = 32;
// 64x64 / 64x32: more CTAs for 80x80 and below;
// split-K for 40x40 and 20x20 where M*N/tile is far below the 132 SMs of an H200.
constexpr Variant kVariants[] = {
    {"igemm_128x64_k1", 128, 64, 32, 1}, {"igemm_64x64_k1", 64, 64, 32, 1}, {"igemm_64x64_k2", 64, 64, 32, 2},
    {"igemm_64x64_k4", 64, 64, 32, 4},   {"igemm_64x64_k8", 64, 64, 32, 8}, {"igemm_64x32_k1", 64, 32, 32, 1},
    {"igemm_64x32_k2", 64, 32, 32, 2},   {"igemm_64x32_k4", 64, 32, 32, 4},   {"igemm_128x32_k1", 128, 32, 32, 1},
    // BK = 64, 3 stages: half the barriers per MMA, 128-byte row segments per warp load.
    {"igemm_128x64x64_k1", 128, 64, 64, 1}, {"igemm_64x64x64_k1", 64, 64, 64, 1},
    {"igemm_64x64x64_k4", 64, 64, 64, 4}, {"igemm_64x32x64_k1", 64, 32, 64, 1},
    {"igemm_64x32x64_k4", 64, 32, 64, 4},
    // wgmma (conv_wgmma.cu): 128-row tiles for the 320x320-80x80 layers, 64-row tiles and split-K
    // for 40x40 and 20x20. Measured (session 16, H100, same timing): no faster than the mma.sync
    // family on the large 3x3s (160x160x64->64: 11.1 vs cuDNN 11.0 us; 20x20x512->512: 14.1 (k4) vs
    // 11.4); ahead of cuDNN on 160x160x64->128 s2 (7.5 vs 8.4) and 20x20x128->128 (6.2 vs 6.9).
    // ncu: latency-bound at ~34 % SM throughput (NOTES v19).
    {"wgmma_128x64_k1", 128, 64, 64, 1, true},  {"wgmma_128x128_k1", 128, 128, 64, 1, true},
    {"wgmma_128x32_k1", 128, 32, 64, 1, true},  {"wgmma_64x128_k1", 64, 128, 64, 1, true},
    {"wgmma_64x64_k1", 64, 64, 64, 1, true},    {"wgmma_64x64_k2", 64, 64, 64, 2, true},
    {"wgmma_64x64_k4", 64, 64, 64, 4, true},    {"wgmma_64x128_k2", 64, 128, 64, 2, true},
    {"wgmma_64x128_k4", 64, 128, 64, 4, true},  {"wgmma_128x128_k4", 128, 128, 64, 4, true},
    {"wgmma_128x128_k8", 128, 128, 64, 8, true},
};
constexpr int kNumVariants = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));

int64_t k_of(const ConvShape& s) { return static_cast<int64_t>(s.kh) * s.kw * s.Ci; }
int64_t m_of(const ConvShape& s) { return static_cast<int64_t>(s.B) * s.Ho * s.Wo; }

// Splits actually launched: no empty split (k-tiles per split rounded up, then recounted).
void split_plan(const ConvShape& s, int v, int* splits, int* kt_total, int* kt_per) {
  const int bk = kVariants[v].bk;
  const int kt = static_cast<int>((k_of(s) + bk - 1) / bk);
  int want = kVariants[v].splits;
  if (want > kt) want = kt;
  const int per = (kt + want - 1) / want;
  *kt_total = kt;
  *kt_per = per;
  *splits = (kt + per - 1) / per;
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
void launch_tile(const Params& p, int splits, cudaStream_t st) {
  constexpr size_t smem = smem_of<BM, BN, BK, STAGES>();
  auto* kern = igemm_kernel<BM, BN, BK, WM, WN, STAGES>;
  opt_in_smem<igemm_kernel<BM, BN, BK, WM, WN, STAGES>>(smem);
  const dim3 grid((p.M + BM - 1) / BM, (p.N + BN - 1) / BN, splits);
  kern<<<grid, threads_of<BM, BN, WM, WN>(), smem, st>>>(p);
  DF_CUDA_LAUNCH();
}

}  // namespace

int conv_igemm_variants() { return kNumVariants; }

const char* conv_igemm_variant_name(int v) {
  if (v < 0 || v >= kNumVariants) throw Error("conv_igemm: variant " + std::to_string(v) + " out of range");
  return kVariants[v].name;
}

bool conv_igemm_supported(const ConvShape& s, int v) {
  if (v < 0 || v >= kNumVariants) return false;
  if (s.B < 1 || s.H < 1 || s.W < 1 || s.Ci < 8 || s.Co < 8 || s.kh < 1 || s.kw < 1 || s.stride < 1 || s.pad < 0)
    return false;
  if (s.Ci % 8 != 0 || s.Co % 8 != 0) return false;  // 16-byte rows for every chunk load/store
  if (s.H + 2 * s.pad < s.kh || s.W + 2 * s.pad < s.kw) return false;
  if (s.Ho != (s.H + 2 * s.pad - s.kh) / s.stride + 1 || s.Wo != (s.W + 2 * s.pad - s.kw) / s.stride + 1)
    return false;
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  // int arithmetic inside the kernel: per-image offsets, M, K, and the grid's x extent.
  if (static_cast<int64_t>(s.H) * s.W * s.Ci > kMax || m_of(s) > kMax - 256 || k_of(s) > kMax - 256) return false;
  if (s.pad > (1 << 20) || s.H > (1 << 24) || s.W > (1 << 24)) return false;
  return true;
}

bool conv_igemm_variant_runs_here(int v) {
  return v >= 0 && v < kNumVariants && (!kVariants[v].wgmma || conv_wgmma_available());
}

size_t conv_igemm_workspace(const ConvShape& s, int v) {
  if (!conv_igemm_supported(s, v)) return 0;
  int splits = 1, kt = 0, per = 0;
  split_plan(s, v, &splits, &kt, &per);
  if (splits <= 1 || kVariants[v].wgmma) return 0;  // wgmma: split-K reduced inside a cluster
  return static_cast<size_t>(splits) * static_cast<size_t>(m_of(s)) * static_cast<size_t>(s.Co) * sizeof(float);
}

void conv_igemm(const void* x, const void* w, const void* bias, const void* res, void* y, const ConvShape& s,
                graph::Act act, int v, void* ws, cudaStream_t st) {
  if (v < 0 || v >= kNumVariants) throw Error("conv_igemm: variant " + std::to_string(v) + " out of range");
  const int act_code =
      check_own_conv_args("conv_igemm", kVariants[v].name, conv_igemm_supported(s, v), s, act, x, w, bias, res, y);

  Params p{};
  p.x = static_cast<const __half*>(x);
  p.w = static_cast<const __half*>(w);
  p.bias = static_cast<const __half*>(bias);
  p.res = static_cast<const __half*>(res);
  p.y = static_cast<__half*>(y);
  p.H = s.H, p.W = s.W, p.Ci = s.Ci, p.HoWo = s.Ho * s.Wo, p.Wo = s.Wo, p.kw = s.kw, p.stride = s.stride,
  p.pad = s.pad;
  p.M = static_cast<int>(m_of(s)), p.N = s.Co, p.K = static_cast<int>(k_of(s));
  p.act = act_code;
  int splits = 1;
  split_plan(s, v, &splits, &p.kt_total, &p.kt_per_split);
  const bool reduce = splits > 1 && !kVariants[v].wgmma;  // wgmma reduces inside its cluster
  if (reduce) {
    if (!ws || !aligned16(ws)) throw Error("conv_igemm: split-K variant needs a 16-byte aligned workspace");
    p.ws = static_cast<float*>(ws);
  }

  const Variant& var = kVariants[v];
  if (var.wgmma) {
    conv_wgmma_launch(p, var.bm, var.bn, splits, st);
  } else if (var.bk == 32) {
    if (var.bm == 128 && var.bn == 64)
      launch_tile<128, 64, 32, 64, 32, 4>(p, splits, st);
    else if (var.bm == 128 && var.bn == 32)
      launch_tile<128, 32, 32, 32, 32, 4>(p, splits, st);
    else if (var.bm == 64 && var.bn == 64)
      launch_tile<64, 64, 32, 32, 32, 4>(p, splits, st);
    else
      launch_tile<64, 32, 32, 32, 16, 4>(p, splits, st);
  } else {
    if (var.bm == 128 && var.bn == 64)
      launch_tile<128, 64, 64, 64, 32, 3>(p, splits, st);
    else if (var.bm == 64 && var.bn == 64)
      launch_tile<64, 64, 64, 32, 32, 3>(p, splits, st);
    else
      launch_tile<64, 32, 64, 32, 16, 3>(p, splits, st);
  }

  if (reduce) {
    const int64_t chunks = static_cast<int64_t>(p.M) * p.N / 8;
    int blocks = static_cast<int>((chunks + 255) / 256);
    if (blocks > 4096) blocks = 4096;
    igemm_splitk_reduce<<<blocks, 256, 0, st>>>(p, splits);
    DF_CUDA_LAUNCH();
  }
}

}  // namespace detforge::cuda
