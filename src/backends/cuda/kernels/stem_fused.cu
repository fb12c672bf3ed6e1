// The ResNet-vd stem as one kernel: stem_fused.h says what and why.
//
// One CTA of 8 warps per 10x20 pooled outputs:
//   1. the 51x91 input pixels to fp16 in shared memory (X, 4 channels, the 4th zero);
//   2. conv1 on 25x45 pixels (A): K = 9 taps x 4 channels padded to 48, A fragments read as 32-bit
//      words of X (a pair of channels of one tap), the weights in registers;
//   3. conv2 on 23x43 pixels (B), conv3 on 21x41 (C, over X and A): implicit GEMM with K = 288,
//      A through ldmatrix from the previous halo tile, each warp's 32 output channels of weights
//      (144 registers) loaded once, so shared memory only serves A;
//   4. the 3x3/2 max pool from C to global memory, 16 bytes per thread.
// Pixels outside the image are stored as zeros at every level: that is each conv's zero padding,
// and the pool may take them because its inputs are ReLU outputs (>= 0) and every window holds
// at least one pixel inside the image.
// Tiles of 32-channel pixels (64 bytes) swizzle their four 16-byte chunks by (pixel >> 1) & 3 and
// C's 128-byte pixels their eight by pixel & 7: ldmatrix rows and the epilogue's stores then hit
// distinct banks.
#include <cuda_fp16.h>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/stem_fused.h"

namespace detforge::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int TH = 10, TW = 20;                      // pooled outputs per CTA
constexpr int T3H = 2 * TH + 1, T3W = 2 * TW + 1;    // conv3 outputs the pool reads: 21 x 41
constexpr int T2H = T3H + 2, T2W = T3W + 2;          // conv2: 23 x 43
constexpr int T1H = T2H + 2, T1W = T2W + 2;          // conv1: 25 x 45
constexpr int TXH = 2 * T1H + 1, TXW = 2 * T1W + 1;  // input: 51 x 91
constexpr int M1 = T1H * T1W, M2 = T2H * T2W, M3 = T3H * T3W, MX = TXH * TXW;
constexpr int kTiles1 = (M1 + 15) / 16;

// Packed weights (32-bit words of two halves). Per conv, and per 32-channel slice of conv3: S k-steps
// x 4 n8 tiles x 2 registers per lane, register (s * 4 + j) * 2 + h stored at [reg / 4][lane][reg % 4]:
// a lane's registers come as 16-byte loads and a warp's load is 512 contiguous bytes.
constexpr int kS1 = 3, kS2 = 18;                             // conv1 K = 36 (padded to 48), conv2/3 K = 288
constexpr int kRegs1 = kS1 * 8, kRegs2 = kS2 * 8;            // 24, 144
constexpr int kWords1 = kRegs1 * 32, kWords2 = kRegs2 * 32;  // 768, 4608
constexpr int kOffW2 = kWords1, kOffW3 = kWords1 + kWords2, kWordsAll = kWords1 + 3 * kWords2;

constexpr int cmax(int a, int b) { return a > b ? a : b; }
constexpr int round128(int v) { return (v + 127) / 128 * 128; }
// Shared memory (bytes): X then A; C over both once conv2 is done; B after them. conv2's packed
// weights wait in B's place until every warp holds them, conv3's in X's place (after conv1).
constexpr int kOffA = round128(cmax(MX * 8, 2 * kWords2 * 4));
constexpr int kOffB = round128(cmax(kOffA + M1 * 64, M3 * 128));
constexpr int kSmem = kOffB + M2 * 64;  // 173,504
static_assert(kWords2 * 4 <= M2 * 64, "conv2's weights fit in B's place");
static_assert(MX * 3 * 4 <= M1 * 64, "the fp32 input tile fits in A's place");

// 4 bytes global -> shared, zeros when !valid (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

__device__ __forceinline__ uint32_t off64(int p, int chunk) { return p * 64 + ((chunk ^ ((p >> 1) & 3)) << 4); }
__device__ __forceinline__ uint32_t off128(int p, int chunk) { return p * 128 + ((chunk ^ (p & 7)) << 4); }
__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <int R>
__device__ __forceinline__ void load_frags(uint32_t (&r)[R], const uint32_t* src, int lane) {
#pragma unroll
  for (int q = 0; q < R / 4; ++q) {
    const uint4 v = *reinterpret_cast<const uint4*>(src + (q * 32 + lane) * 4);
    r[4 * q] = v.x, r[4 * q + 1] = v.y, r[4 * q + 2] = v.z, r[4 * q + 3] = v.w;
  }
}

// Bias pairs of this lane's output channels: slice * 32 + 8 j + 2 t, + 1.
__device__ __forceinline__ void load_bias(float2 (&bias)[4], const __half* b, int slice, int t) {
#pragma unroll
  for (int j = 0; j < 4; ++j) bias[j] = __half22float2(*reinterpret_cast<const __half2*>(b + slice * 32 + 8 * j + 2 * t));
}

// One accumulator row (h 0: row g, c0/c1; h 1: row g + 8, c2/c3) with bias and ReLU, as zeros outside
// the image, to the tile pixel r at chunk base `cb` (32 channels: 64-byte pixels; 64: 128-byte).
template <bool k128>
__device__ __forceinline__ void store_row(unsigned char* tile, int r, bool inside, const float (&acc)[4][4],
                                          const float2 (&bias)[4], int h, int cb, int t) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float v0 = inside ? fmaxf(acc[j][2 * h] + bias[j].x, 0.f) : 0.f;
    const float v1 = inside ? fmaxf(acc[j][2 * h + 1] + bias[j].y, 0.f) : 0.f;
    const uint32_t o = k128 ? off128(r, cb + j) : off64(r, cb + j);
    *reinterpret_cast<uint32_t*>(tile + o + 4 * t) = pack_h2(v0, v1);
  }
}

// Both rows of an m16 tile of an OW-wide output tile whose pixel (0, 0) is the image's (gy0, gx0).
template <int OW, int M, bool k128>
__device__ __forceinline__ void store_tile(unsigned char* tile, int mt, const float (&acc)[4][4], const float2 (&bias)[4],
                                           int cb, int gy0, int gx0, int Hc, int Wc, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = mt * 16 + (lane >> 2) + 8 * h;
    if (r >= M) continue;
    const int y = r / OW, x = r - y * OW;
    const bool inside = gy0 + y >= 0 && gy0 + y < Hc && gx0 + x >= 0 && gx0 + x < Wc;
    store_row<k128>(tile, r, inside, acc, bias, h, cb, lane & 3);
  }
}

// A 3x3 stride-1 conv's P consecutive m16 tiles from mt0 (OW-wide output, SW-wide 32-channel
// source at `src`), 32 output channels from the weights in bw: K = 9 taps x 32 channels, 18
// k-steps. P = 2 gives each k-step 8 independent mma instead of 4 (STEM_FUSED=3).
template <int OW, int SW, int M, int P>
__device__ __forceinline__ void conv3x3_tiles(float (&acc)[P][4][4], const uint32_t (&bw)[kRegs2], uint32_t src,
                                              int mt0, int lane) {
  int p0[P];
#pragma unroll
  for (int q = 0; q < P; ++q) {
    int r = (mt0 + q) * 16 + (lane & 15);
    if (r >= M) r = M - 1;  // the padding rows read a real pixel; their results are not stored
    const int y = r / OW, x = r - y * OW;
    p0[q] = y * SW + x;
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[q][j][0] = acc[q][j][1] = acc[q][j][2] = acc[q][j][3] = 0.f;
  }
  const int hi = lane >> 4;
#pragma unroll
  for (int s = 0; s < kS2; ++s) {
    const int tap = s >> 1;
    uint32_t a[P][4];
#pragma unroll
    for (int q = 0; q < P; ++q) {
      const int p = p0[q] + (tap / 3) * SW + tap % 3;
      ldmatrix_x4(a[q], src + off64(p, (s & 1) * 2 + hi));
    }
#pragma unroll
    for (int q = 0; q < P; ++q)
#pragma unroll
      for (int j = 0; j < 4; ++j) mma16816(acc[q][j], a[q], bw[(s * 4 + j) * 2], bw[(s * 4 + j) * 2 + 1]);
  }
}

// A conv phase: `warps` warps from w0 take P tiles at a time of the kTiles m16 tiles and store
// them (chunk base cb) into the OW-wide destination tile whose pixel (0, 0) is the image's (gy0, gx0).
template <int OW, int SW, int M, int P, bool k128>
__device__ __forceinline__ void conv3x3_phase(const uint32_t (&bw)[kRegs2], uint32_t src, unsigned char* dst,
                                              const float2 (&bias)[4], int cb, int gy0, int gx0, int H1, int W1,
                                              int w0, int warps, int lane) {
  constexpr int kTiles = (M + 15) / 16;
  for (int mt = w0 * P; mt < kTiles; mt += warps * P) {
    float acc[P][4][4];
    conv3x3_tiles<OW, SW, M, P>(acc, bw, src, mt, lane);
#pragma unroll
    for (int q = 0; q < P; ++q)
      if (mt + q < kTiles) store_tile<OW, M, k128>(dst, mt + q, acc[q], bias, cb, gy0, gx0, H1, W1, lane);
  }
}

// Step 1, kAsync false: each thread loads 4 pixels' floats per round into registers and stores
// them as fp16 (~5 rounds of global latency per CTA). kAsync true: every float of the 51x91x3 input
// tile is requested at once by 4-byte cp.async into A's place (55.7 KB, free until conv1 writes A),
// one row per warp and a float per lane without divides, then converted from there.
template <bool kAsync>
__device__ __forceinline__ void stage_input(const float* __restrict__ x, unsigned char* sm, uint32_t sbase, int b, int H,
                                            int W, int py0, int px0, int tid) {
  if constexpr (kAsync) {
    constexpr int kRow = TXW * 3;  // floats per staged row
    const int warp = tid >> 5, lane = tid & 31;
    const int fx0 = (4 * px0 - 7) * 3;
    for (int iy = warp; iy < TXH; iy += kWarps) {
      const int gy = 4 * py0 - 7 + iy;
      const bool row_ok = gy >= 0 && gy < H;
      const float* src = x + (static_cast<size_t>(b) * H + (row_ok ? gy : 0)) * W * 3;
      for (int c = lane; c < kRow; c += 32) {
        const int fx = fx0 + c;
        const bool ok = row_ok && fx >= 0 && fx < 3 * W;
        cp_async4(sbase + kOffA + (iy * kRow + c) * 4, ok ? src + fx : x, ok);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const float* raw = reinterpret_cast<const float*>(sm + kOffA);
    for (int p = tid; p < MX; p += kThreads) {
      const float* f = raw + p * 3;  // pixel p = iy * TXW + ix starts at float iy * kRow + ix * 3 = 3 p
      *reinterpret_cast<uint2*>(sm + p * 8) = make_uint2(pack_h2(f[0], f[1]), pack_h2(f[2], 0.f));
    }
  } else {
#pragma unroll 4
    for (int p = tid; p < MX; p += kThreads) {
      const int iy = p / TXW, ix = p - iy * TXW;
      const int gy = 4 * py0 - 7 + iy, gx = 4 * px0 - 7 + ix;
      uint2 v = make_uint2(0u, 0u);
      if (gy >= 0 && gy < H && gx >= 0 && gx < W) {
        const float* s = x + ((static_cast<size_t>(b) * H + gy) * W + gx) * 3;
        v.x = pack_h2(s[0], s[1]);
        v.y = pack_h2(s[2], 0.f);
      }
      *reinterpret_cast<uint2*>(sm + p * 8) = v;
    }
  }
}

template <bool kAsync, int P>
__global__ void __launch_bounds__(kThreads, 1)
    stem_fused_k(const float* __restrict__ x, const uint32_t* __restrict__ wp, const __half* __restrict__ b1,
                 const __half* __restrict__ b2, const __half* __restrict__ b3, __half* __restrict__ y, int H, int W,
                 int H1, int W1, int Hp, int Wp) {
  extern __shared__ __align__(128) unsigned char sm[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int px0 = blockIdx.x * TW, py0 = blockIdx.y * TH, b = blockIdx.z;
  const uint32_t sbase = smem_u32(sm);
  // The weights are constants written at load: they may be read before the previous kernel ends.
  for (int i = tid; i < kWords2 / 4; i += kThreads) cp_async16(sbase + kOffB + i * 16, wp + kOffW2 + i * 4, true);
  cp_async_commit();
  uint32_t bw1[kRegs1];
  load_frags(bw1, wp, lane);
  float2 bias[4];
  load_bias(bias, b1, 0, t);
  pdl_wait_and_release();

  // 1. Input pixels (4 py0 - 7 + iy, 4 px0 - 7 + ix) to fp16, zeros outside the image.
  stage_input<kAsync>(x, sm, sbase, b, H, W, py0, px0, tid);
  __syncthreads();

  // 2. conv1: k = tap * 4 + channel. This lane's A words: k = 16 s + 2 t (+ 8), i.e. tap
  // 4 s + 2 h + t / 2 and channel pair t & 1; taps past 8 are zero (their weights are too, but
  // their offsets would leave X).
  {
    int xoff[kS1][2];
#pragma unroll
    for (int s = 0; s < kS1; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tap = 4 * s + 2 * h + (t >> 1);
        xoff[s][h] = tap < 9 ? ((tap / 3) * TXW + tap % 3) * 8 + (t & 1) * 4 : -1;
      }
    for (int mt = warp; mt < kTiles1; mt += kWarps) {
      int base[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = min(mt * 16 + g + 8 * h, M1 - 1);
        const int yy = r / T1W, xx = r - yy * T1W;
        base[h] = (2 * yy * TXW + 2 * xx) * 8;
      }
      float acc[4][4] = {};
#pragma unroll
      for (int s = 0; s < kS1; ++s) {
        uint32_t a[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // a0: row g, k 2t; a1: row g + 8; a2, a3: k + 8
          const int o = xoff[s][q >> 1];
          a[q] = o >= 0 ? *reinterpret_cast<const uint32_t*>(sm + base[q & 1] + o) : 0u;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) mma16816(acc[j], a, bw1[(s * 4 + j) * 2], bw1[(s * 4 + j) * 2 + 1]);
      }
      store_tile<T1W, M1, false>(sm + kOffA, mt, acc, bias, 0, 2 * py0 - 3, 2 * px0 - 3, H1, W1, lane);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // A complete, conv2's weights staged; X is no longer read

  // 3a. conv2 from A to B. Its weights go to registers before anyone writes B (where they wait).
  for (int i = tid; i < 2 * kWords2 / 4; i += kThreads) cp_async16(sbase + i * 16, wp + kOffW3 + i * 4, true);
  cp_async_commit();
  uint32_t bw[kRegs2];
  load_frags(bw, reinterpret_cast<const uint32_t*>(sm + kOffB), lane);
  load_bias(bias, b2, 0, t);
  __syncthreads();
  conv3x3_phase<T2W, T1W, M2, P, false>(bw, sbase + kOffA, sm + kOffB, bias, 0, 2 * py0 - 2, 2 * px0 - 2, H1, W1, warp,
                                         kWarps, lane);
  cp_async_wait<0>();
  __syncthreads();  // B complete, conv3's weights staged in X's place; A is no longer read

  // 3b. conv3 from B to C (over X and A): warps 0-3 output channels 0-31, warps 4-7 32-63.
  const int slice = warp / 4;
  load_frags(bw, reinterpret_cast<const uint32_t*>(sm) + slice * kWords2, lane);
  load_bias(bias, b3, slice, t);
  __syncthreads();  // every warp holds its weights before C overwrites them
  conv3x3_phase<T3W, T2W, M3, P, true>(bw, sbase + kOffB, sm, bias, slice * 4, 2 * py0 - 1, 2 * px0 - 1, H1, W1,
                                        warp % 4, 4, lane);
  __syncthreads();

  // 4. The 3x3/2 max pool: pooled (py0 + j, px0 + i) reads C's rows 2j..2j+2, columns 2i..2i+2.
  for (int it = tid; it < TH * TW * 8; it += kThreads) {
    const int c8 = it & 7, pix = it >> 3, j = pix / TW, i = pix - j * TW;
    const int gy = py0 + j, gx = px0 + i;
    if (gy >= Hp || gx >= Wp) continue;
    __half2 m[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) m[q] = __float2half2_rn(0.f);
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) {
        const uint4 v = *reinterpret_cast<const uint4*>(sm + off128((2 * j + dy) * T3W + 2 * i + dx, c8));
        const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) m[q] = __hmax2(m[q], *reinterpret_cast<const __half2*>(&w4[q]));
      }
    uint4 o;
    o.x = *reinterpret_cast<const uint32_t*>(&m[0]);
    o.y = *reinterpret_cast<const uint32_t*>(&m[1]);
    o.z = *reinterpret_cast<const uint32_t*>(&m[2]);
    o.w = *reinterpret_cast<const uint32_t*>(&m[3]);
    *reinterpret_cast<uint4*>(y + ((static_cast<size_t>(b) * Hp + gy) * Wp + gx) * 64 + c8 * 8) = o;
  }
}

// Word i of the packed weights: stem_fused_k's register order (see kOffW2 above). conv1's k is
// tap * 4 + channel, zero for the 4th channel and taps past 8.
__global__ void stem_pack_k(const __half* w1, const __half* w2, const __half* w3, uint32_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kWordsAll) return;
  const int conv = i < kOffW2 ? 1 : i < kOffW3 ? 2 : 3;
  const int rel = conv == 1 ? i : conv == 2 ? i - kOffW2 : i - kOffW3;
  const int slice = conv == 3 ? rel / kWords2 : 0, local = conv == 3 ? rel % kWords2 : rel;
  const int lane = (local >> 2) & 31, reg = (local >> 7) * 4 + (local & 3);
  const int h = reg & 1, j = (reg >> 1) & 3, s = reg >> 3;
  const int n = slice * 32 + 8 * j + (lane >> 2), k = 16 * s + 2 * (lane & 3) + 8 * h;
  __half v[2];
  for (int e = 0; e < 2; ++e) {
    const int kk = k + e;
    if (conv == 1) {
      const int tap = kk >> 2, c = kk & 3;
      v[e] = tap < 9 && c < 3 ? w1[n * 27 + tap * 3 + c] : __float2half(0.f);
    } else {
      v[e] = (conv == 2 ? w2 : w3)[n * 288 + kk];
    }
  }
  out[i] = static_cast<uint32_t>(__half_as_ushort(v[0])) | (static_cast<uint32_t>(__half_as_ushort(v[1])) << 16);
}

}  // namespace

size_t stem_fused_packed_bytes() { return static_cast<size_t>(kWordsAll) * 4; }
size_t stem_fused_smem_bytes() { return kSmem; }

void stem_fused_pack(const void* w1, const void* w2, const void* w3, void* packed, cudaStream_t s) {
  stem_pack_k<<<(kWordsAll + 255) / 256, 256, 0, s>>>(static_cast<const __half*>(w1), static_cast<const __half*>(w2),
                                                      static_cast<const __half*>(w3), static_cast<uint32_t*>(packed));
  DF_CUDA(cudaGetLastError());
}

template <bool kAsync, int P>
auto stem_kernel() {
  opt_in_smem<stem_fused_k<kAsync, P>>(kSmem);
  return stem_fused_k<kAsync, P>;
}

void stem_fused(const float* x, const void* packed, const void* b1, const void* b2, const void* b3, void* y, int B,
                int H, int W, cudaStream_t s, int mode) {
  if (mode < 1 || mode > 3) throw Error("stem_fused: mode " + std::to_string(mode) + " is not 1, 2 or 3");
  const int H1 = stem_fused_half(H), W1 = stem_fused_half(W);
  const int Hp = stem_fused_half(H1), Wp = stem_fused_half(W1);
  const auto kern = mode == 1 ? stem_kernel<false, 1>() : mode == 2 ? stem_kernel<true, 1>() : stem_kernel<true, 2>();
  const dim3 grid((Wp + TW - 1) / TW, (Hp + TH - 1) / TH, B);
  launch(kern, grid, dim3(kThreads), kSmem, s, x, static_cast<const uint32_t*>(packed), static_cast<const __half*>(b1),
         static_cast<const __half*>(b2), static_cast<const __half*>(b3), static_cast<__half*>(y), H, W, H1, W1, Hp, Wp);
}

}  // namespace detforge::cuda
