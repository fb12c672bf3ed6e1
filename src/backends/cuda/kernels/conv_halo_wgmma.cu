// The halo-tiled 3x3 stride-1 fp16 conv on Hopper's warpgroup MMA (wgmma, sm_90a): the wgmma
// family of conv_direct's variants (conv_direct.h says what and why; the variant table is in
// conv_direct.cu). Built for sm_90a alone (CMakeLists: the detforge_sm90a object library).
//
// Why: the mma.sync version is level with cuDNN (NOTES v18), bound by ldmatrix + mma.sync issue,
// and the im2col kernels (conv_igemm.cu, either family) are bound by L2 traffic: they fetch each
// input pixel 9 times (160x160x64->64: ~43 MB moved per conv, 11 us at ~4 TB/s, cuDNN too).
// Here a CTA fetches its input halo and the whole weight once, and the tensor cores read both
// straight from shared memory. Measured (session 16, H100): correct, but slower than the mma.sync
// halo kernel (160x160x64->64: 16.5 against 11.3 us; cuDNN 11.0). ncu: one wave that loads
// 124 KiB per CTA, then computes, then stores, with nothing overlapped; its warps wait on cp.async
// (L1TEX scoreboard) most of the time (NOTES v19).
//
// Shared memory (no swizzle: wgmma's "interleave" K-major layout of 8x8 core matrices, each 8
// rows of 16 contiguous bytes; wgmma.cuh):
//  * sW [9 taps][Ci/8][Co][8 halves]: for tap t and K step ks, B is the core-matrix column pair
//    (t, 2ks) and (t, 2ks+1): LBO = Co*16 bytes, SBO = 128 (8 output channels);
//  * sX [Ci/8][TH+2][66][8 halves]: the input halo of a 64-wide tile, zero outside the image. For
//    output row ty and tap (ky, kx), the A rows (64 consecutive output pixels) are halo pixels
//    (ty+ky, kx .. kx+63), i.e. 64 consecutive 16-byte chunks of each channel block: SBO = 128,
//    LBO = one channel block (the im2col matrix is never built).
// A warpgroup owns TH/NWG output rows: per row, 9 taps x Ci/16 wgmma m64nCOk16. Both operands
// come in per-kernel-row cp.async groups, so that kernel row ky waits only for weight taps
// 3ky..3ky+2 (a contiguous third of sW) and halo rows ky..ky+TH-1. The weight (a constant) is
// requested before the programmatic-launch wait, the halo after it. A thread's wait_group covers a
// prefix of its own commits, so a thread that issued weight rows 1-2 before the wait could not
// wait for a halo row 0 issued after it without waiting for them too: the first NTW threads load
// weight rows 1 and 2, the others the halo, and all of them weight row 0 (load_w, load_rows).
// The weight's smem writes were 32-way bank-conflicted (a warp's 16-byte chunks Co*16 bytes
// apart); they are now conflict-free (a warp writes 32 slots over Co). Not yet measured on a GPU.
// The fp32 tile is staged over the operands for 16-byte epilogue stores (epilogue8.cuh).
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/conv_direct_params.cuh"
#include "backends/cuda/kernels/conv_igemm_params.cuh"
#include "backends/cuda/kernels/epilogue8.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/wgmma.cuh"
#include "detforge/types.h"

namespace detforge::cuda {
namespace {

template <int CI, int CO, int TH, int NWG>
struct HCfg {
  static constexpr int TW = 64, HWD = TW + 2, HHT = TH + 2;
  static constexpr int CPB = CI / 8;  // 16-byte channel blocks per pixel
  static constexpr int R = TH / NWG;  // output rows per warpgroup
  static constexpr int NT = NWG * 128;
  static constexpr int NTW = NT / 4;  // threads that load weight rows 1-2 (a guess: tune on a GPU)
  static constexpr int W_BYTES = 9 * CI * CO * 2;
  static constexpr int CB = HHT * HWD * 16;  // bytes of one channel block of the halo
  static constexpr int X_BYTES = CPB * CB;
  static constexpr int LDC = CO + 4;  // fp32 staging pitch
  static constexpr size_t kOperands = static_cast<size_t>(W_BYTES) + X_BYTES;
  static constexpr size_t kStaging = static_cast<size_t>(TH) * TW * LDC * 4;
  static constexpr size_t smem = kOperands > kStaging ? kOperands : kStaging;
  static_assert(CI % 16 == 0 && CO % 16 == 0 && CO <= 128 && TH % NWG == 0, "shape");
  static_assert(CPB % 2 == 0, "the weight load pairs channel blocks (32-byte global sectors)");
};

template <int CI, int CO, int TH, int NWG>
__global__ void __launch_bounds__(NWG * 128) halo_wgmma_k(const DirectParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = HCfg<CI, CO, TH, NWG>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t sw = smem_u32(smem_raw), sx = sw + C::W_BYTES;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int ox0 = blockIdx.x * C::TW, oy0 = blockIdx.y * TH, b = blockIdx.z;

  // Weight kernel row ky (taps 3ky..3ky+2; OHWI: global chunk (co*9 + tap)*CPB + cb) over
  // threads t0, t0+nt, ...: a lane pair takes cb 2h, 2h+1 (one 32-byte sector), the next index
  // bits co, so a warp writes 16 consecutive co of 2 cb, 32 distinct 16-byte slots (nt and the
  // warp's first j are multiples of 32 and CO of 16): the 4-wavefront minimum, no bank conflict.
  auto load_w = [&](int ky, int t0, int nt) {
    constexpr int HALF = C::CPB / 2;
    for (int j = t0; j < 3 * C::CPB * CO; j += nt) {
      const int co = (j >> 1) % CO, rest = (j >> 1) / CO;
      const int cb = (rest % HALF) * 2 + (j & 1), tap = ky * 3 + rest / HALF;
      cp_async16(sw + ((tap * C::CPB + cb) * CO + co) * 16,
                 p.w + (static_cast<int64_t>(co * 9 + tap) * C::CPB + cb) * 8, true);
    }
    cp_async_commit();
  };
  // Commit groups, per thread (wait_group N: all but the N most recent of the thread's groups
  // are complete). Threads tid < NTW: W0 | W1 | W2, all before the wait; the others: W0 | H0 | H1 |
  // H2, the halo after it. Before kernel row ky every thread waits with N = 2 - ky: W0 (+ H0),
  // then W1 (+ H1), then everything; the weight rows 1-2 never hold up a halo row 0.
  const bool wthr = tid < C::NTW;  // warp-uniform
  load_w(0, tid, C::NT);
  if (wthr) {
    load_w(1, tid, C::NTW);
    load_w(2, tid, C::NTW);
  }
  pdl_wait_and_release();

  const __half* xb = p.x + static_cast<int64_t>(b) * p.H * p.W * CI;
  auto load_rows = [&](int r0, int r1) {
    const int n = (r1 - r0) * C::HWD * C::CPB;
    for (int idx = tid - C::NTW; idx < n; idx += C::NT - C::NTW) {
      const int cb = idx % C::CPB, px = idx / C::CPB;
      const int r = r0 + px / C::HWD, col = px % C::HWD;
      const int iy = oy0 - 1 + r, ix = ox0 - 1 + col;
      const bool ok = static_cast<unsigned>(iy) < static_cast<unsigned>(p.H) &&
                      static_cast<unsigned>(ix) < static_cast<unsigned>(p.W);
      const __half* src = ok ? xb + (static_cast<int64_t>(iy) * p.W + ix) * CI + cb * 8 : p.x;
      cp_async16(sx + cb * C::CB + (r * C::HWD + col) * 16, src, ok);  // zero fill outside
    }
    cp_async_commit();
  };
  if (!wthr) {
    load_rows(0, TH);           // kernel row 0 reads halo rows 0..TH-1
    load_rows(TH, TH + 1);      // row 1 also reads TH
    load_rows(TH + 1, TH + 2);  // row 2 also reads TH+1
  }

  float acc[C::R][CO / 2];  // started by the first wgmma (accumulate = 0), not zeroed

#pragma unroll
  for (int ky = 0; ky < 3; ++ky) {
    cp_async_wait_pending(2 - ky);  // ky = 0: weight row 0 and halo rows 0..TH-1
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < C::R; ++i) {
      const int ty = wg * C::R + i;
#pragma unroll
      for (int kx = 0; kx < 3; ++kx) {
        const uint32_t a0 = sx + ((ty + ky) * C::HWD + kx) * 16;
        const uint32_t b0 = sw + (ky * 3 + kx) * C::CPB * CO * 16;
#pragma unroll
        for (int ks = 0; ks < CI / 16; ++ks)
          wgmma_f16<CO>(acc[i], wgmma_desc_interleave(a0 + 2 * ks * C::CB, C::CB, 128),
                        wgmma_desc_interleave(b0 + 2 * ks * CO * 16, CO * 16, 128), ky + kx + ks > 0);
      }
    }
    wgmma_commit();
  }
  wgmma_wait<0>();
  __syncthreads();  // every warpgroup is done reading the operands: the staging tile goes over them

  float* sC = reinterpret_cast<float*>(smem_raw);  // [TH * 64 pixels][LDC]
#pragma unroll
  for (int i = 0; i < C::R; ++i) {
    const int pix = (wg * C::R + i) * C::TW + (warp & 3) * 16 + (lane >> 2), c = (lane & 3) * 2;
#pragma unroll
    for (int j = 0; j < CO / 8; ++j) {
      *reinterpret_cast<float2*>(sC + pix * C::LDC + j * 8 + c) = make_float2(acc[i][4 * j], acc[i][4 * j + 1]);
      *reinterpret_cast<float2*>(sC + (pix + 8) * C::LDC + j * 8 + c) =
          make_float2(acc[i][4 * j + 2], acc[i][4 * j + 3]);
    }
  }
  __syncthreads();
  store_staged_tile<CO, C::TW>(p, sC, C::LDC, TH, oy0, ox0, b, tid, C::NT);
#else
  __trap();  // conv_wgmma_available() keeps launches off devices without the sm_90a code
#endif
}

template <int CI, int CO, int TH, int NWG>
void launch_h(const DirectParams& p, int B, cudaStream_t st) {
  using C = HCfg<CI, CO, TH, NWG>;
  opt_in_smem<halo_wgmma_k<CI, CO, TH, NWG>>(C::smem);
  const dim3 grid((p.W + C::TW - 1) / C::TW, (p.H + TH - 1) / TH, B);
  launch(halo_wgmma_k<CI, CO, TH, NWG>, grid, dim3(C::NT), C::smem, st, p);
}

}  // namespace

void conv_halo_wgmma_launch(const DirectParams& p, int B, int ci, int co, int th, int nwg, cudaStream_t st) {
  if (!conv_wgmma_available())
    throw Error("conv_direct: the wgmma variants need a compute capability 9.0 GPU (H100, H200)");
  const int key = ci * 1000000 + co * 1000 + th * 10 + nwg;
  switch (key) {
    case 32032082: launch_h<32, 32, 8, 2>(p, B, st); break;
    case 32032041: launch_h<32, 32, 4, 1>(p, B, st); break;
    case 32032042: launch_h<32, 32, 4, 2>(p, B, st); break;
    case 32064042: launch_h<32, 64, 4, 2>(p, B, st); break;
    case 32064041: launch_h<32, 64, 4, 1>(p, B, st); break;
    case 32064022: launch_h<32, 64, 2, 2>(p, B, st); break;
    case 64064042: launch_h<64, 64, 4, 2>(p, B, st); break;
    case 64064041: launch_h<64, 64, 4, 1>(p, B, st); break;
    case 64064021: launch_h<64, 64, 2, 1>(p, B, st); break;
    case 64064022: launch_h<64, 64, 2, 2>(p, B, st); break;
    default:
      throw Error("conv_direct: no wgmma tile for " + std::to_string(ci) + "->" + std::to_string(co) + ", " +
                  std::to_string(th) + " rows, " + std::to_string(nwg) + " warpgroups");
  }
}

}  // namespace detforge::cuda
