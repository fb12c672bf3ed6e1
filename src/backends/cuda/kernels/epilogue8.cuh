// The fp16 conv epilogue shared by our convolution kernels (conv_igemm.cu, conv_direct.cu): 8
// fp32 sums of one output row's columns n..n+7, plus bias and residual, the activation, one
// fp16 rounding and one 16-byte store.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace detforge::cuda {

// v[j] += the 8 halves at p (16-byte aligned), in fp32.
__device__ __forceinline__ void add_half8(float (&v)[8], const __half* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __half22float2(h[j]);
    v[2 * j] += f.x;
    v[2 * j + 1] += f.y;
  }
}

// y[o..o+7] = act(v + bias[n..n+7] + res[o..o+7]) with act 0 none, 1 relu, 2 silu; bias and res
// may be null. res is read before y is written, so y may alias res.
__device__ __forceinline__ void store_epilogue8(float (&v)[8], const __half* bias, const __half* res, __half* y,
                                                int act, int n, int64_t o) {
  if (bias) add_half8(v, bias + n);
  if (res) add_half8(v, res + o);
  if (act == 1) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] > 0.f ? v[j] : 0.f;
  } else if (act == 2) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] / (1.f + expf(-v[j]));
  }
  uint4 out;
  __half2* h = reinterpret_cast<__half2*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
  *reinterpret_cast<uint4*>(y + o) = out;
}

}  // namespace detforge::cuda
