// linear + LayerNorm as one launch on wgmma (linear_ln.h says what and why). Built for sm_90a
// alone (CMakeLists: the detforge_sm90a object library).
//
// One CTA = 64 rows x all 256 columns x a K slice of NKT tiles of 64 halves: two warpgroups, each
// a 64 x 128 half of the columns (wgmma m64n128k16, both operands read from shared memory in the
// 128-byte-swizzle layout of wgmma.cuh). A slice has at most 4 tiles, so every tile has a stage of
// its own: all loads are requested up front (the weight before the programmatic-launch wait, the
// activations after it), one cp.async group per tile, and the wgmmas of tile t start once group t
// has landed. No stage is refilled, so no wgmma group has to retire before a load.
//
// Split-K: the S CTAs of a row block form a cluster along z. Each stages its fp32 partial tile in
// shared memory; after a cluster barrier, CTA r finishes rows [r * ceil(64 / S), ...) by summing
// all S partial tiles through distributed shared memory in rank order (deterministic), one warp
// per row with 8 columns per lane: bias, residual, activation, the fp16 rounding of the linear,
// then the LayerNorm of the whole row (warp sums) and the optional second output.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/conv_igemm_params.cuh"  // conv_wgmma_available
#include "backends/cuda/kernels/linear_ln.h"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/wgmma.cuh"
#include "detforge/types.h"

namespace detforge::cuda {
namespace {

constexpr int kBM = 64, kBK = 64, kThreads = 256, kWarps = kThreads / 32;
constexpr int kABytes = kBM * 128, kBBytes = kLinearLnN * 128, kStage = kABytes + kBBytes;
constexpr int kLdc = kLinearLnN + 4;  // fp32 staging pitch (floats)
constexpr size_t kStaging = static_cast<size_t>(kBM) * kLdc * 4;

struct LnParams {
  const __half* x;
  const __half* w;
  const __half* bias;
  const __half* res;
  const __half* ln_res;
  const __half* gamma;
  const __half* beta;
  const __half* add2;
  __half* y2;
  __half* y;
  int64_t M;
  int K;
  int relu;
  float eps;
};

constexpr size_t smem_bytes(int nkt) {
  const size_t pipe = static_cast<size_t>(nkt) * kStage;
  return (pipe > kStaging ? pipe : kStaging) + 1024;  // + slack for the 1024-byte alignment
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)  // device helpers, where the kernel uses them
__device__ __forceinline__ void unround8(float (&v)[8], const uint4& u) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __half22float2(h[j]);
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}

__device__ __forceinline__ uint32_t round2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint4 round8(const float (&v)[8]) {
  return make_uint4(round2(v[0], v[1]), round2(v[2], v[3]), round2(v[4], v[5]), round2(v[6], v[7]));
}

// One 16-byte global store (a plain uint4 assignment became four 4-byte stores in the SASS).
__device__ __forceinline__ void store16(__half* p, const uint4& u) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
               : "memory");
}

// Constants (bias, gamma, beta) through the read-only path.
__device__ __forceinline__ void load8(float (&v)[8], const __half* p) {
  unround8(v, __ldg(reinterpret_cast<const uint4*>(p)));
}
#endif

template <int NKT, int S>
__global__ void __launch_bounds__(kThreads) linear_ln_k(const LnParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle pattern needs 1024-byte alignment
  unsigned char* const sbase = smem_raw + (base - raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int k0 = static_cast<int>(blockIdx.z) * NKT * kBK;

  // This thread's 16-byte chunk kc of rows row0 + 32 i: all of them share r & 7 (32 % 8 == 0),
  // so one swizzled chunk position (wgmma.cuh).
  const int kc = tid & 7, row0 = tid >> 3;
  const uint32_t dst0 = static_cast<uint32_t>(row0 * 128 + ((kc ^ (row0 & 7)) << 4));

  // The weight (256 rows, 8 per thread per tile): a constant, requested before the wait so that
  // it arrives while the producer of x finishes. It joins group 0.
#pragma unroll
  for (int t = 0; t < NKT; ++t) {
    const uint32_t dst = base + t * kStage + kABytes + dst0;
    const __half* src = p.w + static_cast<int64_t>(row0) * p.K + k0 + t * kBK + kc * 8;
#pragma unroll
    for (int i = 0; i < kLinearLnN / 32; ++i)
      cp_async16(dst + i * 32 * 128, src + static_cast<int64_t>(i) * 32 * p.K, true);
  }
  pdl_wait_and_release();
#pragma unroll
  for (int t = 0; t < NKT; ++t) {
    const uint32_t dst = base + t * kStage + dst0;
#pragma unroll
    for (int i = 0; i < kBM / 32; ++i) {
      const int64_t m = m0 + row0 + 32 * i;
      const bool ok = m < p.M;  // rows past M are zero-filled
      const __half* src = ok ? p.x + m * p.K + k0 + t * kBK + kc * 8 : p.x;
      cp_async16(dst + i * 32 * 128, src, ok);
    }
    cp_async_commit();
  }

  // The rows this warp finishes (CTA rank z takes rows [z * kPer, ...) of the block; warp w rows
  // w, w + 8, ...) and their activation operands, all requested at once: at RPW <= 2 now, so
  // that their latency hides behind the MMAs, else (more registers) after them.
  constexpr int kPer = (kBM + S - 1) / S, RPW = (kPer + kWarps - 1) / kWarps;
  constexpr bool kEarly = RPW <= 2;
  const int r_begin = min(kBM, static_cast<int>(blockIdx.z) * kPer), r_end = min(kBM, r_begin + kPer);
  const int c = lane * 8;  // this lane's 8 columns, as layer_norm_vec_k holds them
  int64_t row_o[RPW];
  bool row_ok[RPW];
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    const int rr = r_begin + warp + j * kWarps;
    const int64_t m = m0 + rr;
    row_ok[j] = rr < r_end && m < p.M;
    row_o[j] = m * kLinearLnN + c;
  }
  uint4 res_v[RPW], lnr_v[RPW], add_v[RPW];
#pragma unroll
  for (int j = 0; j < RPW; ++j) res_v[j] = lnr_v[j] = add_v[j] = make_uint4(0u, 0u, 0u, 0u);
  const auto prefetch = [&] {
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
      if (!row_ok[j]) continue;
      // Plain loads: y may alias res / ln_res / add2, but only in this thread's own elements,
      // which it reads here before it writes them.
      if (p.res) res_v[j] = *reinterpret_cast<const uint4*>(p.res + row_o[j]);
      if (p.ln_res) lnr_v[j] = *reinterpret_cast<const uint4*>(p.ln_res + row_o[j]);
      if (p.y2) add_v[j] = *reinterpret_cast<const uint4*>(p.add2 + row_o[j]);
    }
  };
  if constexpr (kEarly) prefetch();

  float acc[64];  // started by the first wgmma (accumulate = 0), not zeroed (wgmma.cuh)
#pragma unroll
  for (int t = 0; t < NKT; ++t) {
    cp_async_wait_pending(NKT - 1 - t);  // tile t (and, with group 0, the whole weight) landed
    fence_proxy_async();                 // this thread's cp.async writes, visible to wgmma
    __syncthreads();                     // ... every thread's
    const uint32_t sa = base + t * kStage, sb = sa + kABytes + wg * 128 * 128;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      wgmma_f16<128>(acc, wgmma_desc_sw128(sa + kk * 32), wgmma_desc_sw128(sb + kk * 32), (t | kk) != 0);
    wgmma_commit();
  }
  wgmma_wait<0>();
  __syncthreads();  // both warpgroups are done reading the stages: the staging tile goes over them

  float* sC = reinterpret_cast<float*>(sbase);  // [64 rows][kLdc]
  {
    const int r = (warp & 3) * 16 + (lane >> 2), c = wg * 128 + (lane & 3) * 2;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<float2*>(sC + r * kLdc + c + j * 8) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(sC + (r + 8) * kLdc + c + j * 8) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  if constexpr (!kEarly) prefetch();
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  if constexpr (S > 1)
    cl.sync();  // every partial tile of the cluster is staged
  else
    __syncthreads();

  // Every rank's partial sums for this warp's rows, all requested before any is added (one
  // DSMEM round trip, not RPW * S), then added in rank order: the same sum on every run.
  float v[RPW][8];
  {
    float4 part[RPW][S][2];
#pragma unroll
    for (int j = 0; j < RPW; ++j)
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (!row_ok[j]) continue;
        const float* src = (S > 1 ? cl.map_shared_rank(sC, s) : sC) + (r_begin + warp + j * kWarps) * kLdc + c;
        part[j][s][0] = *reinterpret_cast<const float4*>(src);
        part[j][s][1] = *reinterpret_cast<const float4*>(src + 4);
      }
#pragma unroll
    for (int j = 0; j < RPW; ++j) {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] = 0.f;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (!row_ok[j]) continue;
        const float4 lo = part[j][s][0], hi = part[j][s][1];
        v[j][0] += lo.x, v[j][1] += lo.y, v[j][2] += lo.z, v[j][3] += lo.w;
        v[j][4] += hi.x, v[j][5] += hi.y, v[j][6] += hi.z, v[j][7] += hi.w;
      }
    }
  }
  // The sums above used every value read from the other CTAs: this CTA is done with their
  // tiles. Only arrive; the wait is at the end, so the barrier overlaps the LayerNorm.
  if constexpr (S > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

  float bias[8], g[8], bt[8];
  if (p.bias) load8(bias, p.bias + c);
  load8(g, p.gamma + c);
  load8(bt, p.beta + c);
  float t[RPW][8], mean[RPW], rstd[RPW];
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    // The linear's epilogue (epilogue8.cuh's order: bias, residual, activation, one rounding).
    if (p.bias)
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] += bias[e];
    if (p.res) {
      float r[8];
      unround8(r, res_v[j]);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] += r[e];
    }
    if (p.relu)
#pragma unroll
      for (int e = 0; e < 8; ++e) v[j][e] = v[j][e] > 0.f ? v[j][e] : 0.f;
    unround8(t[j], round8(v[j]));  // the linear's output as cuBLASLt would have stored it
    // The LayerNorm (layer_norm_vec_k's order for C = 256: residual, sum, mean, centred squares).
    if (p.ln_res) {
      float r[8];
      unround8(r, lnr_v[j]);
#pragma unroll
      for (int e = 0; e < 8; ++e) t[j][e] += r[e];
    }
    float sum = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += t[j][e];
    mean[j] = warp_sum(sum) / kLinearLnN;  // rows past M: garbage, never stored
  }
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    float sq = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) sq += (t[j][e] - mean[j]) * (t[j][e] - mean[j]);
    rstd[j] = rsqrtf(warp_sum(sq) / kLinearLnN + p.eps);
  }
#pragma unroll
  for (int j = 0; j < RPW; ++j) {
    if (!row_ok[j]) continue;
    float out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = (t[j][e] - mean[j]) * rstd[j] * g[e] + bt[e];
    const uint4 yo = round8(out);
    if (p.y2) {  // y as stored plus add2, rounded once (layer_norm.cu's second output)
      float a[8], ys[8];
      unround8(a, add_v[j]);
      unround8(ys, yo);
#pragma unroll
      for (int e = 0; e < 8; ++e) ys[e] += a[e];
      store16(p.y2 + row_o[j], round8(ys));
    }
    store16(p.y + row_o[j], yo);
  }
  // No CTA leaves (and frees the tile the others read) before all have arrived.
  if constexpr (S > 1) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#else
  __trap();  // linear_ln_runs_here() keeps launches off devices without the sm_90a code
#endif
}

template <int NKT, int S>
void launch_nkt(const LnParams& p, bool pdl, cudaStream_t st) {
  constexpr size_t smem = smem_bytes(NKT);
  opt_in_smem<linear_ln_k<NKT, S>>(smem);
  cudaLaunchAttribute attr[2];
  int n = 0;
  if constexpr (S > 1) {  // the split-K CTAs of one row block form a cluster along z
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = 1;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = static_cast<unsigned>(S);
    ++n;
  }
  if (pdl && pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((p.M + kBM - 1) / kBM), 1, static_cast<unsigned>(S));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  DF_CUDA(cudaLaunchKernelEx(&cfg, linear_ln_k<NKT, S>, p));
}

// The kernel for a runtime split: every S of 1..8 that linear_ln_splits can return.
template <int NKT, int S = 1>
void launch_split(const LnParams& p, int split, bool pdl, cudaStream_t st) {
  if constexpr (S <= 8) {
    if (split == S) return launch_nkt<NKT, S>(p, pdl, st);
    launch_split<NKT, S + 1>(p, split, pdl, st);
  } else {
    throw Error("linear_ln: split " + std::to_string(split) + " above 8");
  }
}

bool misaligned(const void* p) { return p && !aligned16(p); }

}  // namespace

std::vector<int> linear_ln_splits(int K) {
  std::vector<int> r;
  if (K <= 0 || K % kBK) return r;
  const int kt = K / kBK;
  for (int s = 1; s <= 8; ++s)
    if (kt % s == 0 && (kt / s == 1 || kt / s == 2 || kt / s == 4)) r.push_back(s);
  return r;
}

int linear_ln_auto_split(int64_t M, int K) {
  const std::vector<int> ok = linear_ln_splits(K);
  if (ok.empty()) return 0;
  const int64_t blocks = (M + kBM - 1) / kBM;
  int best = ok.front();
  for (int s : ok)
    if (blocks * s <= 2 * 132) best = s;
  return best;
}

std::string linear_ln_unsupported(const LinearLnArgs& a, int split) {
  if (a.N != kLinearLnN) return "N is " + std::to_string(a.N) + ", not 256";
  if (a.M <= 0 || a.M > (int64_t{1} << 31) - kBM) return "M of " + std::to_string(a.M) + " rows";
  const std::vector<int> ok = linear_ln_splits(a.K);
  if (ok.empty()) return "K of " + std::to_string(a.K) + " (a multiple of 64 whose tiles split into 1, 2 or 4 per CTA)";
  if (split != 0 && std::find(ok.begin(), ok.end(), split) == ok.end())
    return "split " + std::to_string(split) + " for K " + std::to_string(a.K);
  if (a.act != graph::Act::none && a.act != graph::Act::relu)
    return std::string("activation ") + graph::act_name(a.act);
  if (!a.x || !a.w || !a.gamma || !a.beta || !a.y) return "null x, w, gamma, beta or y";
  if ((a.add2 == nullptr) != (a.y2 == nullptr)) return "add2 and y2 go together";
  for (const void* q : std::initializer_list<const void*>{a.x, a.w, a.bias, a.res, a.ln_res, a.gamma, a.beta,
                                                            a.add2, a.y2, a.y})
    if (misaligned(q)) return "a pointer is not 16-byte aligned";
  if (a.y == a.x || (a.y2 && a.y2 == a.x)) return "y aliases x";
  return "";
}

bool linear_ln_runs_here() { return conv_wgmma_available(); }

void linear_ln(const LinearLnArgs& a, cudaStream_t s, int split, bool pdl) {
  if (const std::string why = linear_ln_unsupported(a, split); !why.empty()) throw Error("linear_ln: " + why);
  if (!linear_ln_runs_here()) throw Error("linear_ln: needs a compute capability 9.0 GPU (H100, H200)");
  if (split == 0) split = linear_ln_auto_split(a.M, a.K);
  const LnParams p{static_cast<const __half*>(a.x),      static_cast<const __half*>(a.w),
                   static_cast<const __half*>(a.bias),   static_cast<const __half*>(a.res),
                   static_cast<const __half*>(a.ln_res), static_cast<const __half*>(a.gamma),
                   static_cast<const __half*>(a.beta),   static_cast<const __half*>(a.add2),
                   static_cast<__half*>(a.y2),           static_cast<__half*>(a.y),
                   a.M,                                  a.K,
                   a.act == graph::Act::relu ? 1 : 0,    a.eps};
  const int nkt = a.K / kBK / split;
  if (nkt == 1)
    launch_split<1>(p, split, pdl, s);
  else if (nkt == 2)
    launch_split<2>(p, split, pdl, s);
  else
    launch_split<4>(p, split, pdl, s);
}

}  // namespace detforge::cuda
