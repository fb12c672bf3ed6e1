// The halo-tiled 3x3 stride-1 fp16 convolution (conv_direct.h says why and what).
//
// GEMM view per CTA: M = the TH*TW output pixels of its tile, N = Co (all of it), K = 9*Ci in
// (ky, kx, ci) order. Shared memory holds
//  * sW [Co][9*Ci + 8] halves: the whole weight; the 8 halves of padding put the 8 row addresses
//    of one ldmatrix phase on distinct bank groups (row pitch 592 or 1168 bytes);
//  * sX [(TH+2)*(TW+2)][Ci + 8] halves: the input halo, zero-filled outside the image (pixel
//    pitch 80 or 144 bytes, conflict-free for 8 consecutive pixels).
// For tap (ky, kx) the A row of output pixel (ty, tx) is halo pixel (ty+ky, tx+kx): ldmatrix takes
// one row address per lane, so the im2col matrix is never built. Each warp owns MI 16-pixel groups
// (TW % 16 == 0: a group lies in one output row) and all Co columns, so one B fragment load feeds
// MI MMAs. The fp32 tile is staged over the operands for 16-byte epilogue stores.
#include "backends/cuda/kernels/conv_direct.h"

#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/conv_direct_params.cuh"
#include "backends/cuda/kernels/conv_igemm_params.cuh"  // conv_wgmma_available
#include "backends/cuda/kernels/epilogue8.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/own_conv_args.h"
#include "detforge/types.h"

namespace detforge::cuda {
namespace {

using DParams = DirectParams;  // conv_direct_params.cuh

template <int CI, int CO, int TW, int TH, int NW>
struct Cfg {
  static constexpr int P = TH * TW, G = P / 16, MI = G / NW, NT = NW * 32;
  static constexpr int HWD = TW + 2, HHT = TH + 2;  // halo width and height
  static constexpr int LDX = CI + 8, K = 9 * CI, LDW = K + 8, LDC = CO + 4;
  static constexpr size_t kWBytes = static_cast<size_t>(CO) * LDW * 2;
  static constexpr size_t kOperands = kWBytes + static_cast<size_t>(HHT) * HWD * LDX * 2;
  static constexpr size_t kStaging = static_cast<size_t>(P) * LDC * 4;  // the fp32 tile, over the operands
  static constexpr size_t smem = kOperands > kStaging ? kOperands : kStaging;
  static_assert(CI % 16 == 0 && CO % 16 == 0 && TW % 16 == 0, "shape");
  static_assert(G % NW == 0 && MI >= 1 && MI <= 4, "pixel groups per warp");
};

template <int CI, int CO, int TW, int TH, int NW>
__global__ void __launch_bounds__(NW * 32) conv3x3_direct_k(const DParams p) {
  using C = Cfg<CI, CO, TW, TH, NW>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* sW = reinterpret_cast<__half*>(smem_raw);
  __half* sX = reinterpret_cast<__half*>(smem_raw + C::kWBytes);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ox0 = blockIdx.x * TW, oy0 = blockIdx.y * TH, b = blockIdx.z;

  // The weight: a constant, so requested before the wait for the producer of x.
  constexpr int WCH = C::K / 8;  // 16-byte chunks per output channel
  for (int idx = tid; idx < CO * WCH; idx += C::NT) {
    const int n = idx / WCH, c = idx - n * WCH;
    cp_async16(smem_u32(sW + n * C::LDW + c * 8), p.w + static_cast<int64_t>(n) * C::K + c * 8, true);
  }
  cp_async_commit();
  pdl_wait_and_release();

  const __half* xb = p.x + static_cast<int64_t>(b) * p.H * p.W * CI;
  constexpr int CPP = CI / 8;  // 16-byte chunks per pixel
  auto load_rows = [&](int r0, int r1) {
    const int n = (r1 - r0) * C::HWD * CPP;
    for (int idx = tid; idx < n; idx += C::NT) {
      const int px = idx / CPP, c = idx - px * CPP;
      const int r = r0 + px / C::HWD, col = px % C::HWD;
      const int iy = oy0 - 1 + r, ix = ox0 - 1 + col;
      const bool ok = static_cast<unsigned>(iy) < static_cast<unsigned>(p.H) &&
                      static_cast<unsigned>(ix) < static_cast<unsigned>(p.W);
      const __half* src = ok ? xb + (static_cast<int64_t>(iy) * p.W + ix) * CI + c * 8 : p.x;
      cp_async16(smem_u32(sX + (r * C::HWD + col) * C::LDX + c * 8), src, ok);  // zero fill outside
    }
    cp_async_commit();
  };
  load_rows(0, TH);           // kernel row 0 reads halo rows 0..TH-1
  load_rows(TH, TH + 1);      // row 1 also reads TH
  load_rows(TH + 1, TH + 2);  // row 2 also reads TH+1

  float acc[C::MI][CO / 8][4];
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < CO / 8; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;

  // This lane's ldmatrix row addresses (bytes) at tap (0, 0), channel 0.
  uint32_t a_addr[C::MI];
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi) {
    const int pix = (warp * C::MI + mi) * 16 + (lane & 15);
    const int ty = pix / TW, tx = pix % TW;
    a_addr[mi] = smem_u32(sX + (ty * C::HWD + tx) * C::LDX + (lane >> 4) * 8);
  }
  // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
  const uint32_t b_addr = smem_u32(sW + ((lane & 7) + (lane >> 4) * 8) * C::LDW + ((lane >> 3) & 1) * 8);

#pragma unroll
  for (int ky = 0; ky < 3; ++ky) {
    cp_async_wait_pending(2 - ky);  // kernel row ky's halo rows (and the weight, committed first) landed
    __syncthreads();
#pragma unroll
    for (int kx = 0; kx < 3; ++kx)
#pragma unroll
      for (int c16 = 0; c16 < CI / 16; ++c16) {
        const int k = (ky * 3 + kx) * CI + c16 * 16;
        uint32_t af[C::MI][4], bf[CO / 16][4];
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi)
          ldmatrix_x4(af[mi], a_addr[mi] + 2 * ((ky * C::HWD + kx) * C::LDX + c16 * 16));
#pragma unroll
        for (int nj = 0; nj < CO / 16; ++nj) ldmatrix_x4(bf[nj], b_addr + 2 * (nj * 16 * C::LDW + k));
#pragma unroll
        for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < CO / 8; ++ni)
            mma16816(acc[mi][ni], af[mi], bf[ni / 2][(ni & 1) * 2], bf[ni / 2][(ni & 1) * 2 + 1]);
      }
  }

  __syncthreads();  // every warp is done with sW and sX: the fp32 tile is staged over them
  float* sC = reinterpret_cast<float*>(smem_raw);  // [P][LDC]
#pragma unroll
  for (int mi = 0; mi < C::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < CO / 8; ++ni) {
      const int r = (warp * C::MI + mi) * 16 + (lane >> 2), c = ni * 8 + (lane & 3) * 2;
      *reinterpret_cast<float2*>(sC + r * C::LDC + c) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<float2*>(sC + (r + 8) * C::LDC + c) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  store_staged_tile<CO, TW>(p, sC, C::LDC, TH, oy0, ox0, b, tid, C::NT);
}

// ---- host side ---------------------------------------------------------------------------------

struct Variant {
  const char* name;
  int ci, co, tw, th, nw;
  int nwg;  // > 0: the wgmma family (conv_halo_wgmma.cu) with this many warpgroups; tw is 64
};
// 320x320 (stem): 64-wide tiles divide the width; 1, 2 or 4 rows trade CTA count (1,600 / 800 /
// 400) against weight reloads (every CTA reads the whole weight from L2: 19-38 KiB). 160x160
// (stage 0): 32-wide tiles; 2-8 rows (400-100 CTAs; the 75 KiB weight allows two CTAs per SM).
constexpr Variant kVariants[] = {
    {"direct3x3_c32x32_2x64", 32, 32, 64, 2, 4}, {"direct3x3_c32x32_1x64", 32, 32, 64, 1, 4},
    {"direct3x3_c32x64_2x64", 32, 64, 64, 2, 4}, {"direct3x3_c32x64_1x64", 32, 64, 64, 1, 4},
    {"direct3x3_c64x64_4x32", 64, 64, 32, 4, 4}, {"direct3x3_c64x64_2x32", 64, 64, 32, 2, 4},
    {"direct3x3_c64x64_8x32", 64, 64, 32, 8, 8}, {"direct3x3_c32x32_4x64", 32, 32, 64, 4, 8},
    {"direct3x3_c32x64_4x64", 32, 64, 64, 4, 8},
    // wgmma (sm_90a): 64-wide tiles (one m64 row segment per output row), TH rows over NWG
    // warpgroups; 2-row tiles give two CTAs per SM at 160x160x64 (108 KiB of shared memory).
    {"direct3x3w_c32x32_8x64_g2", 32, 32, 64, 8, 0, 2}, {"direct3x3w_c32x32_4x64_g1", 32, 32, 64, 4, 0, 1},
    {"direct3x3w_c32x32_4x64_g2", 32, 32, 64, 4, 0, 2}, {"direct3x3w_c32x64_4x64_g2", 32, 64, 64, 4, 0, 2},
    {"direct3x3w_c32x64_4x64_g1", 32, 64, 64, 4, 0, 1}, {"direct3x3w_c32x64_2x64_g2", 32, 64, 64, 2, 0, 2},
    {"direct3x3w_c64x64_4x64_g2", 64, 64, 64, 4, 0, 2}, {"direct3x3w_c64x64_4x64_g1", 64, 64, 64, 4, 0, 1},
    {"direct3x3w_c64x64_2x64_g1", 64, 64, 64, 2, 0, 1}, {"direct3x3w_c64x64_2x64_g2", 64, 64, 64, 2, 0, 2},
};
constexpr int kNumVariants = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));

template <int CI, int CO, int TW, int TH, int NW>
void launch_variant(const DParams& p, int B, cudaStream_t st) {
  using C = Cfg<CI, CO, TW, TH, NW>;
  auto* kern = conv3x3_direct_k<CI, CO, TW, TH, NW>;
  opt_in_smem<conv3x3_direct_k<CI, CO, TW, TH, NW>>(C::smem);
  const dim3 grid((p.W + TW - 1) / TW, (p.H + TH - 1) / TH, B);
  launch(kern, grid, dim3(C::NT), C::smem, st, p);
}

}  // namespace

int conv_direct_variants() { return kNumVariants; }

const char* conv_direct_variant_name(int v) {
  if (v < 0 || v >= kNumVariants) throw Error("conv_direct: variant " + std::to_string(v) + " out of range");
  return kVariants[v].name;
}

bool conv_direct_supported(const ConvShape& s, int v) {
  if (v < 0 || v >= kNumVariants) return false;
  const Variant& var = kVariants[v];
  if (s.kh != 3 || s.kw != 3 || s.stride != 1 || s.pad != 1) return false;
  if (s.Ci != var.ci || s.Co != var.co || s.B < 1 || s.H < 1 || s.W < 1 || s.Ho != s.H || s.Wo != s.W) return false;
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  if (static_cast<int64_t>(s.H) * s.W * s.Ci > kMax || static_cast<int64_t>(s.H) * s.W * s.Co > kMax) return false;
  if (s.B > 65535 || (s.H + var.th - 1) / var.th > 65535 || s.W > (1 << 24)) return false;
  return true;
}

bool conv_direct_variant_runs_here(int v) {
  return v >= 0 && v < kNumVariants && (kVariants[v].nwg == 0 || conv_wgmma_available());
}

void conv_direct(const void* x, const void* w, const void* bias, const void* res, void* y, const ConvShape& s,
                 graph::Act act, int v, cudaStream_t st) {
  if (v < 0 || v >= kNumVariants) throw Error("conv_direct: variant " + std::to_string(v) + " out of range");
  const int act_code =
      check_own_conv_args("conv_direct", kVariants[v].name, conv_direct_supported(s, v), s, act, x, w, bias, res, y);

  DParams p{};
  p.x = static_cast<const __half*>(x);
  p.w = static_cast<const __half*>(w);
  p.bias = static_cast<const __half*>(bias);
  p.res = static_cast<const __half*>(res);
  p.y = static_cast<__half*>(y);
  p.H = s.H, p.W = s.W;
  p.act = act_code;
  const Variant& var = kVariants[v];
  if (var.nwg > 0) {
    conv_halo_wgmma_launch(p, s.B, var.ci, var.co, var.th, var.nwg, st);
    return;
  }
  switch (v) {
    case 0: launch_variant<32, 32, 64, 2, 4>(p, s.B, st); break;
    case 1: launch_variant<32, 32, 64, 1, 4>(p, s.B, st); break;
    case 2: launch_variant<32, 64, 64, 2, 4>(p, s.B, st); break;
    case 3: launch_variant<32, 64, 64, 1, 4>(p, s.B, st); break;
    case 4: launch_variant<64, 64, 32, 4, 4>(p, s.B, st); break;
    case 5: launch_variant<64, 64, 32, 2, 4>(p, s.B, st); break;
    case 6: launch_variant<64, 64, 32, 8, 8>(p, s.B, st); break;
    case 7: launch_variant<32, 32, 64, 4, 8>(p, s.B, st); break;
    case 8: launch_variant<32, 64, 64, 4, 8>(p, s.B, st); break;
    default: throw Error("conv_direct: variant " + std::to_string(v) + " has no launcher");
  }
}

}  // namespace detforge::cuda
