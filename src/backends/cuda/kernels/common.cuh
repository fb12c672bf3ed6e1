// Device helpers shared by the kernels: fp32/fp16 loads and stores, activations, launch sizes.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"
#include "graph/ir.h"

namespace detforge::cuda {

__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

__device__ __forceinline__ float act_f(graph::Act a, float x) {
  switch (a) {
    case graph::Act::relu: return x > 0.f ? x : 0.f;
    case graph::Act::silu: return x / (1.f + expf(-x));
    case graph::Act::gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752440f));  // erf form
    case graph::Act::sigmoid: return 1.f / (1.f + expf(-x));
    default: return x;
  }
}

inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 16 bytes of storage (8 halves or 4 floats) moved as one uint4 access. The vectorised kernels
// (bias_act, pooling, upsample, concat, add, mul_rows) use it when the channel count, the
// element offsets and the pointers are multiples of 16 bytes, and keep a scalar kernel for the
// rest: scalar 2-byte fp16 kernels with an int64 divide per element ran at a fraction of the
// copy bandwidth (6.7 of 31.6 ms of the v1 batch-32 forward, H200 CUPTI).
template <class T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// 16 bytes through the read-only path: for bytes no kernel writes while this one runs (weights,
// or activations read after the PDL wait).
template <class T>
__device__ __forceinline__ Pack<T> ldg_pack(const Pack<T>* p) {
  Pack<T> r;
  *reinterpret_cast<uint4*>(&r) = __ldg(reinterpret_cast<const uint4*>(p));
  return r;
}
template <class T>
__device__ __forceinline__ Pack<T> ldg_pack(const T* p) {
  return ldg_pack(reinterpret_cast<const Pack<T>*>(p));
}

// An NHWC index (of elements, or of 16-byte packs with C counted in packs) split into its
// coordinates: i = ((b * H + y) * W + x) * C + c; `row` = b * H + y, the image row, for kernels
// that need no separate b and y (the unused fields cost nothing once inlined). I: the index type
// (int where the caller has checked the range: int64 divides are the slow part of copy kernels).
template <class I>
struct NhwcCoord {
  int b, y, x, c;
  I row;
};
template <class I>
__device__ __forceinline__ NhwcCoord<I> nhwc_coord(I i, int H, int W, int C) {
  NhwcCoord<I> r;
  r.c = static_cast<int>(i % C);
  const I t = i / C;
  r.x = static_cast<int>(t % W);
  r.row = t / W;
  r.y = static_cast<int>(r.row % H);
  r.b = static_cast<int>(r.row / H);
  return r;
}

// Dispatch a templated launch on the storage type.
#define DF_DISPATCH(half, T, ...)       \
  if (half) {                           \
    using T = __half;                   \
    __VA_ARGS__;                        \
  } else {                              \
    using T = float;                    \
    __VA_ARGS__;                        \
  }

// Kernels with over 48 KiB of dynamic shared memory need an opt-in, once per device and kernel
// (bit = device ordinal); Kern is the kernel itself, so each instantiation has its own flag.
// The opt-in is to the device maximum, not to `bytes`: a kernel launched with several sizes
// (row_mlp) failed with "invalid argument" once a later launch needed more than the first.
template <auto Kern>
void opt_in_smem(size_t bytes) {
  static std::atomic<uint64_t> opted{0};
  int dev = 0, max_optin = 0;
  DF_CUDA(cudaGetDevice(&dev));
  DF_CUDA(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > static_cast<size_t>(max_optin))
    throw Error("kernel needs " + std::to_string(bytes) + " bytes of shared memory, the device allows " +
                std::to_string(max_optin));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (opted.load(std::memory_order_acquire) & bit) return;
  DF_CUDA(cudaFuncSetAttribute(Kern, cudaFuncAttributeMaxDynamicSharedMemorySize, max_optin));
  opted.fetch_or(bit, std::memory_order_acq_rel);
}

// Programmatic dependent launch (sm_90+). Kernels launched through `launch` may start while the
// kernel before them in the stream (or the graph edge captured from it) is still finishing: the
// block setup and launch latency overlap the previous kernel's tail. Every kernel launched this
// way must call pdl_wait_and_release() before its first global memory access: the wait returns
// once the previous grid has completed and its writes are visible (a no-op without PDL); the
// release lets the next PDL kernel be scheduled as soon as every block of this one has started.
__device__ __forceinline__ void pdl_wait_and_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kern<<<grid, block, smem, s>>>(args...), with the programmatic-serialization attribute when
// PDL is enabled; launch errors throw.
template <class... P, class... A>
void launch(void (*kern)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  DF_CUDA(cudaLaunchKernelEx(&cfg, kern, static_cast<P>(std::forward<A>(args))...));
}

}  // namespace detforge::cuda
