// The implicit-GEMM fp16 conv on Hopper's warpgroup MMA (wgmma, sm_90a): the wgmma family of
// conv_igemm's variants (conv_igemm.h has the GEMM view; conv_igemm.cu the variant table). Built
// for sm_90a only (CMakeLists: its own object library).
//
// Why: our mma.sync kernels (conv_igemm.cu, conv_direct.cu) stop at ~110-165 TFLOP/s on the
// r18vd 3x3 convs, bound by ldmatrix + mma.sync issue (NOTES v18): every operand passes through
// registers. wgmma reads both operands from shared memory, so a warpgroup issues one instruction
// per 64 x N x 16 block and the loads of later K tiles run beside it. Measured (session 16, H100):
// correct, but no faster than the mma.sync family or cuDNN on the r18vd shapes; ncu has it
// latency-bound at ~34 % SM throughput, as cuDNN's kernel is at 14 % (NOTES v19).
//
// Structure (one CTA = BM/64 warpgroups; warpgroup g owns output rows [64g, 64g + 64) and all BN
// columns):
//  * A (im2col of x) and B (w rows) tiles of BK = 64 halves stream through a STAGES-deep cp.async
//    pipeline, each 16-byte chunk written at its 128-byte-swizzle position (wgmma.cuh), zero-filled
//    for padding and tails, as in conv_igemm.cu;
//  * tiles are requested D = STAGES - 2 ahead, and one wgmma group stays in flight: the stage
//    refilled at iteration i was read by group i - 2, which the wait at the end of i - 1 retired;
//  * cp.async writes go through the generic proxy and wgmma reads through the async proxy, so each
//    thread fences (fence.proxy.async) before the barrier that publishes a stage;
//  * launched without programmatic dependent launch (launch_w says why); the weight chunks of
//    the first D tiles are requested first all the same;
//  * the epilogue stages the fp32 tile in shared memory and finishes 8 columns per step
//    (epilogue8.cuh);
//  * split-K runs as one thread-block cluster of `splits` CTAs along z: each stages its partial
//    tile, and after a cluster barrier CTA r sums rows [r*BM/S, (r+1)*BM/S) of all S tiles through
//    distributed shared memory in a fixed order (deterministic) and finishes them. No workspace
//    and no second launch: conv_igemm.cu's split-K reduce kernel cost a launch and a partials round
//    trip through memory.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/conv_igemm_params.cuh"
#include "backends/cuda/kernels/epilogue8.cuh"
#include "backends/cuda/kernels/igemm_gather.cuh"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/wgmma.cuh"
#include "detforge/types.h"

namespace detforge::cuda {
namespace {

constexpr int kBK = 64;  // halves per K tile = one 128-byte swizzled row

template <int BM, int BN, int STAGES>
struct WCfg {
  static constexpr int NT = BM * 2;  // BM / 64 warpgroups of 128 threads
  static constexpr int ROWS_PER_IT = NT / 8;
  static constexpr int A_IT = BM * 8 / NT, B_IT = BN * 8 / NT;
  static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int LDC = BN + 4;
  static constexpr size_t kPipe = static_cast<size_t>(STAGES) * STAGE_BYTES;
  static constexpr size_t kStaging = static_cast<size_t>(BM) * LDC * 4;
  static constexpr size_t smem = (kPipe > kStaging ? kPipe : kStaging) + 1024;  // + alignment slack
  static_assert(BN * 8 % NT == 0 && B_IT >= 1 && STAGES >= 3, "tile");
};

template <int BM, int BN, int STAGES>
__global__ void __launch_bounds__(BM * 2) wgmma_conv_k(const IgemmParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = WCfg<BM, BN, STAGES>;
  constexpr int D = STAGES - 2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle pattern needs 1024-byte alignment
  unsigned char* const sbase = smem_raw + (base - raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int kt_begin = blockIdx.z * p.kt_per_split;
  const int nkt = max(min(p.kt_total - kt_begin, p.kt_per_split), 0);

  // This thread's 16-byte chunk kc of rows row0 + i * ROWS_PER_IT (ROWS_PER_IT % 8 == 0, so all
  // its rows share r & 7 and one swizzled chunk position).
  const int kc = tid & 7, row0 = tid >> 3;
  const uint32_t dst0 = static_cast<uint32_t>(row0 * 128 + ((kc ^ (row0 & 7)) << 4));
  ImcolGather<C::A_IT> ga;
  ga.init(p, m0 + row0, C::ROWS_PER_IT, kt_begin * kBK + kc * 8);
  WeightRows<C::B_IT> gb;
  gb.init(p, n0 + row0, C::ROWS_PER_IT);

  auto load_b = [&](int stage, int kt) {
    const int k = (kt_begin + kt) * kBK + kc * 8;
    const uint32_t dst = base + stage * C::STAGE_BYTES + C::A_BYTES + dst0;
#pragma unroll
    for (int i = 0; i < C::B_IT; ++i) {
      bool ok;
      const __half* src = gb.src(p, i, k, &ok);
      cp_async16(dst + i * C::ROWS_PER_IT * 128, src, ok);
    }
  };
  auto load_a = [&](int stage) {  // the next K tile of A
    const uint32_t dst = base + stage * C::STAGE_BYTES + dst0;
#pragma unroll
    for (int i = 0; i < C::A_IT; ++i) {
      bool ok;
      const __half* src = ga.src(p, i, &ok);
      cp_async16(dst + i * C::ROWS_PER_IT * 128, src, ok);
    }
    ga.advance(p, kBK);
  };

  // Prologue: the weight chunks of the first D tiles before the wait (they join group 0).
#pragma unroll
  for (int s = 0; s < D; ++s)
    if (s < nkt) load_b(s, s);
  pdl_wait_and_release();
#pragma unroll
  for (int s = 0; s < D; ++s) {
    if (s < nkt) load_a(s);
    cp_async_commit();
  }

  float acc[BN / 2];
#pragma unroll
  for (int j = 0; j < BN / 2; ++j) acc[j] = 0.f;

  const uint32_t a_wg = static_cast<uint32_t>(wg * 64 * 128);
  for (int it = 0; it < nkt; ++it) {
    cp_async_wait<D - 1>();  // tile `it` has landed (this thread's chunks) ...
    fence_proxy_async();     // ... is visible to the async proxy ...
    __syncthreads();         // ... for every thread; group it - 2 is retired everywhere
    const int nxt = it + D;
    if (nxt < nkt) {
      load_b(nxt % STAGES, nxt);
      load_a(nxt % STAGES);
    }
    cp_async_commit();

    const uint32_t sa = base + (it % STAGES) * C::STAGE_BYTES + a_wg;
    const uint32_t sb = base + (it % STAGES) * C::STAGE_BYTES + C::A_BYTES;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      wgmma_f16<BN>(acc, wgmma_desc_sw128(sa + kk * 32), wgmma_desc_sw128(sb + kk * 32));
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done reading the stages: the staging tile goes over them

  float* sC = reinterpret_cast<float*>(sbase);  // [BM][LDC]
  {
    const int r = wg * 64 + (warp & 3) * 16 + (lane >> 2), c = (lane & 3) * 2;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      *reinterpret_cast<float2*>(sC + r * C::LDC + j * 8 + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(sC + (r + 8) * C::LDC + j * 8 + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  __syncthreads();
  constexpr int CH = BN / 8;
  const int S = gridDim.z;  // the cluster's CTAs (split-K), 1 without split
  int r_begin = 0, r_end = BM;
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  if (S > 1) {
    cl.sync();  // every partial tile of the cluster is staged
    const int per = (BM + S - 1) / S;
    r_begin = min(BM, static_cast<int>(blockIdx.z) * per);
    r_end = min(BM, r_begin + per);
  }
  for (int idx = r_begin * CH + tid; idx < r_end * CH; idx += C::NT) {
    const int r = idx / CH, c = (idx % CH) * 8;
    const int m = m0 + r, n = n0 + c;
    if (m >= p.M || n >= p.N) continue;  // N % 8 == 0: a chunk is wholly in or out
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < S; ++s) {
      const float* src = S > 1 ? cl.map_shared_rank(sC, s) : sC;
      const float4 lo = *reinterpret_cast<const float4*>(src + r * C::LDC + c);
      const float4 hi = *reinterpret_cast<const float4*>(src + r * C::LDC + c + 4);
      v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w;
      v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
    }
    store_epilogue8(v, p.bias, p.res, p.y, p.act, n, static_cast<int64_t>(m) * p.N + n);
  }
  if (S > 1) cl.sync();  // the other CTAs' reads of this CTA's tile are done before it exits
#else
  __trap();  // conv_wgmma_available() keeps launches off devices without the sm_90a code
#endif
}

template <int BM, int BN, int STAGES>
void launch_w(const IgemmParams& p, int splits, cudaStream_t st) {
  using C = WCfg<BM, BN, STAGES>;
  auto* kern = wgmma_conv_k<BM, BN, STAGES>;
  opt_in_smem<wgmma_conv_k<BM, BN, STAGES>>(C::smem);
  cudaLaunchAttribute attr[1];
  int n = 0;
  if (splits > 1) {  // the split-K CTAs of one tile form a cluster along z
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = 1;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = static_cast<unsigned>(splits);
    ++n;
  }
  // No programmatic launch, as for the mma.sync family. With it (session 16, H100), the r18vd
  // engine under DETFORGE_CUDA_OWN_CONV=1 put 11 linears on wgmma_128x32 and its graph differed
  // from the eager forward on every schedule (graph check fell back to eager, 0.978 ms); with
  // DETFORGE_CUDA_PDL=0 the same test passed. The load-time choice (conv_select.cpp) times 20
  // back-to-back launches of one kernel, where a programmatic launch overlaps each launch's
  // prologue with the previous one's tail: that flattered these kernels over cuBLASLt (with
  // PDL=0 no linear was taken).
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((p.M + BM - 1) / BM, (p.N + BN - 1) / BN, splits);
  cfg.blockDim = dim3(C::NT);
  cfg.dynamicSmemBytes = C::smem;
  cfg.stream = st;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  DF_CUDA(cudaLaunchKernelEx(&cfg, kern, p));
}

}  // namespace

// This file is built for sm_90a alone (no PTX), which runs on compute capability 9.0 exactly.
// Asked on every wgmma launch (both families) and per variant by the selector, so the answer is
// kept per device ordinal, as opt_in_smem (common.cuh) keeps its opt-in.
bool conv_wgmma_available() {
  static std::atomic<uint64_t> known{0}, yes{0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (known.load(std::memory_order_acquire) & bit) return (yes.load(std::memory_order_acquire) & bit) != 0;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (major == 9 && minor == 0) yes.fetch_or(bit, std::memory_order_acq_rel);
  known.fetch_or(bit, std::memory_order_acq_rel);
  return major == 9 && minor == 0;
}

void conv_wgmma_launch(const IgemmParams& p, int bm, int bn, int splits, cudaStream_t st) {
  if (splits < 1 || splits > 8) throw Error("conv_igemm: wgmma split-K of " + std::to_string(splits) + " (1 to 8)");
  if (p.ws) throw Error("conv_igemm: the wgmma variants reduce split-K in a cluster, without a workspace");
  if (!conv_wgmma_available())
    throw Error("conv_igemm: the wgmma variants need a compute capability 9.0 GPU (H100, H200)");
  if (bm == 128 && bn == 128)
    launch_w<128, 128, 4>(p, splits, st);
  else if (bm == 128 && bn == 64)
    launch_w<128, 64, 4>(p, splits, st);
  else if (bm == 128 && bn == 32)
    launch_w<128, 32, 5>(p, splits, st);
  else if (bm == 64 && bn == 128)
    launch_w<64, 128, 4>(p, splits, st);
  else if (bm == 64 && bn == 64)
    launch_w<64, 64, 5>(p, splits, st);
  else
    throw Error("conv_igemm: no wgmma tile " + std::to_string(bm) + "x" + std::to_string(bn));
}

}  // namespace detforge::cuda
