// Linears of a few hundred rows, y[M,N] = act(x[M,K] W[N,K]^T + b (+ res)), fp16, on tensor cores
// (mma.sync m16n8k16, fp32 accumulation, one rounding at the store).
//
// Why: at batch 1 the decoder and AIFI run ~30 linears of 300-400 rows (N 256-1024, K 256-1024)
// one after another. cuBLASLt's nvjet kernels take 3.2-4.8 us each inside the captured graph
// (H200 CUPTI, bench/results/h200/latest.json op_profile) for 39-157 MFLOP, where a plain kernel
// of ours (LayerNorm over the same rows) takes ~1.5 us. Their edges also had to be made full
// (cuda_settings.h at full_edges_), so they cannot start before their producer ends. This kernel
// is built for latency instead of throughput:
//  - CTA tile 32 x 32, so 300 x 256 is 80 CTAs on the 132 SMs (64 x 64 for N >= 1024);
//  - its 4 warps split K four ways: each warp loads its own quarter of the A and W tiles with
//    cp.async and multiplies it with no block barrier, and one barrier before a shared-memory
//    reduction of the 4 partial tiles;
//  - under programmatic dependent launch the weights (constant after load) are requested before
//    griddepcontrol.wait, so they arrive while the producer of x is still finishing.
// The rows beyond M are zero-filled, so any M works; batch 32 (9,600 rows) stays on cuBLASLt
// (the engine's row limit).
// Measured (H200, eager per-op CUPTI, tenth session): not faster. 300 x 256 x 256 took 3.4-4.3 us
// against nvjet's 3.2-3.7, the N = 1024 fc1 7.6 against 4.0, and the engine at batch 1 was
// 1.7-3.5 % slower with it (bench/results/h200/ab-2026-12-04-session10/). So it is off by default
// (DETFORGE_CUDA_TILE_LINEAR). What was not tried: fewer, deeper K stages per warp (each warp
// waits for its whole slice before its first mma), and 2 CTAs per cluster sharing W.
#include <string>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/mma.cuh"

namespace detforge::cuda {
namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;

__host__ __device__ constexpr int k_slice(int K) { return K / kWarps; }
// Halves per smem row of a warp's slice: +8 keeps ldmatrix's 8 row addresses on distinct banks
// (the row pitch is 4 words mod 32 for every slice that is a multiple of 64 halves).
__host__ __device__ constexpr int k_pitch(int K) { return k_slice(K) + 8; }
template <int kBM, int kBN>
size_t smem_bytes(int K) {
  const size_t tiles = static_cast<size_t>(kWarps) * (kBM + kBN) * k_pitch(K) * sizeof(__half);
  const size_t partials = static_cast<size_t>(kWarps) * kBM * (kBN + 4) * sizeof(float);
  return tiles > partials ? tiles : partials;
}

// CTA tile kBM x kBN (32 x 32, or 64 x 64 for N >= 1024 and K <= 512: a 32 x 32 grid re-reads x
// once per 32 columns, 10 MB of L2 traffic for the decoder's fc1 against 5 MB). kLdc: fp32 pitch of the
// partial tiles.
template <int kBM, int kBN>
__global__ void __launch_bounds__(kThreads)
    tile_linear_k(const __half* __restrict__ x, const __half* __restrict__ w, const __half* __restrict__ bias,
                  const __half* __restrict__ res, __half* __restrict__ y, int M, int N, int K, graph::Act act) {
  constexpr int kLdc = kBN + 4, MI = kBM / 16, NI = kBN / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int ks = k_slice(K), pitch = k_pitch(K), cpr = ks / 8;  // 16-byte chunks per slice row
  __half* sA = reinterpret_cast<__half*>(smem_raw) + warp * (kBM + kBN) * pitch;  // [kBM][pitch]
  __half* sB = sA + kBM * pitch;                                                    // [kBN][pitch]
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN, k0 = warp * ks;

  // W first: constant since engine load, safe to read before the wait.
  for (int c = lane; c < kBN * cpr; c += 32) {
    const int r = c / cpr, kc = (c - r * cpr) * 8;
    const bool ok = n0 + r < N;
    cp_async16(smem_u32(sB + r * pitch + kc), ok ? w + static_cast<int64_t>(n0 + r) * K + k0 + kc : w, ok);
  }
  cp_async_commit();
  pdl_wait_and_release();
  for (int c = lane; c < kBM * cpr; c += 32) {
    const int r = c / cpr, kc = (c - r * cpr) * 8;
    const bool ok = m0 + r < M;
    cp_async16(smem_u32(sA + r * pitch + kc), ok ? x + static_cast<int64_t>(m0 + r) * K + k0 + kc : x, ok);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();

  // The warp's kBM x kBN partial tile: MI row blocks of 16 x NI column blocks of 8.
  float acc[MI][NI][4] = {};
  for (int kk = 0; kk < ks; kk += 16) {
    uint32_t af[MI][4], bf[NI / 2][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
      ldmatrix_x4(af[mi], smem_u32(sA + (mi * 16 + (lane & 15)) * pitch + kk + (lane >> 4) * 8));
    // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj)
      ldmatrix_x4(bf[nj], smem_u32(sB + (nj * 16 + (lane & 7) + (lane >> 4) * 8) * pitch + kk + ((lane >> 3) & 1) * 8));
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma16816(acc[mi][ni], af[mi], bf[ni / 2][(ni & 1) * 2], bf[ni / 2][(ni & 1) * 2 + 1]);
  }

  __syncthreads();  // every warp is done with its slices: the smem becomes the partial tiles
  float* sC = reinterpret_cast<float*>(smem_raw) + warp * kBM * kLdc;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int r = mi * 16 + (lane >> 2), c = ni * 8 + (lane & 3) * 2;
      *reinterpret_cast<float2*>(sC + r * kLdc + c) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<float2*>(sC + (r + 8) * kLdc + c) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  // 8 consecutive outputs per thread-step (kBM * kBN / 8 groups over kThreads threads). The
  // partial tiles are summed in warp order (fixed: the result does not depend on timing).
  for (int g = threadIdx.x; g < kBM * kBN / 8; g += kThreads) {
    const int r = g / (kBN / 8), c = (g % (kBN / 8)) * 8;
    const int m = m0 + r, n = n0 + c;
    if (m >= M || n >= N) continue;  // N % 8 == 0: a group of 8 is wholly in or out
    const float* base = reinterpret_cast<const float*>(smem_raw) + r * kLdc + c;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = 0.f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi)
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] += base[wi * kBM * kLdc + e];
    const int64_t o = static_cast<int64_t>(m) * N + n;
    Pack<__half> bp, rp, out;
    if (bias) *reinterpret_cast<uint4*>(&bp) = __ldg(reinterpret_cast<const uint4*>(bias + n));
    if (res) *reinterpret_cast<uint4*>(&rp) = *reinterpret_cast<const uint4*>(res + o);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float t = v[e];
      if (bias) t += ld(bp.v, e);
      if (res) t += ld(rp.v, e);
      st(out.v, e, act_f(act, t));
    }
    *reinterpret_cast<uint4*>(y + o) = *reinterpret_cast<const uint4*>(&out);
  }
}

template <int kBM, int kBN>
void launch_tile(const void* x, const void* w, const void* bias, const void* res, void* y, int64_t rows, int N, int K,
                 Act act, bool early, cudaStream_t s) {
  const size_t smem = smem_bytes<kBM, kBN>(K);
  if (smem > 48 * 1024) opt_in_smem<tile_linear_k<kBM, kBN>>(smem);
  const dim3 grid(static_cast<unsigned>((rows + kBM - 1) / kBM), static_cast<unsigned>((N + kBN - 1) / kBN));
  PdlOff plain(!early);
  launch(tile_linear_k<kBM, kBN>, grid, dim3(kThreads), smem, s, static_cast<const __half*>(x),
         static_cast<const __half*>(w), static_cast<const __half*>(bias), static_cast<const __half*>(res),
         static_cast<__half*>(y), static_cast<int>(rows), N, K, act);
}

}  // namespace

bool tile_linear_ok(int64_t rows, int N, int K, const void* x, const void* w, const void* bias, const void* res,
                    const void* y) {
  if (rows < 1 || rows > (int64_t{1} << 30) || N < 8 || N % 8 != 0 || K < 64 || K > kTileLinearMaxK ||
      K % 64 != 0)
    return false;
  if (!x || !w || !y || !aligned16(x) || !aligned16(w) || !aligned16(y)) return false;
  if ((bias && !aligned16(bias)) || (res && !aligned16(res))) return false;
  return x != y;  // y may alias res (read before written, by the same thread), never x
}

void tile_linear(const void* x, const void* w, const void* bias, const void* res, void* y, int64_t rows, int N, int K,
                 Act act, bool early, cudaStream_t s) {
  if (!tile_linear_ok(rows, N, K, x, w, bias, res, y))
    throw Error("tile_linear: unsupported rows " + std::to_string(rows) + ", N " + std::to_string(N) + ", K " +
                std::to_string(K) + " or pointers (16-byte aligned, K a multiple of 64 up to " +
                std::to_string(kTileLinearMaxK) + ", N of 8)");
  if (N >= 1024 && K <= 512)  // 64 x 64 at K 1024 would need 264 KiB of smem (the H200 allows 227)
    launch_tile<64, 64>(x, w, bias, res, y, rows, N, K, act, early, s);
  else
    launch_tile<32, 32>(x, w, bias, res, y, rows, N, K, act, early, s);
}

}  // namespace detforge::cuda
