// LayerNorm over the channel dim, one warp per row, optional residual added first.
// Mean and variance are two-pass fp32 whatever the storage type (a one-pass E[x^2]-E[x]^2 in
// fp16 is where NVIDIA's TensorRT build of this model loses precision; see the family spec §7).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

constexpr int kMaxPerLane = 32;  // C up to 1024 stays in registers; wider rows re-read memory

template <class T>
__global__ void layer_norm_k(const T* x, const T* res, const T* g, const T* b, T* y, int64_t rows, int C, float eps) {
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * C;
  float v[kMaxPerLane];
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    int c = lane + 32 * j;
    float t = 0.f;
    if (c < C) {
      t = ld(x, base + c);
      if (res) t += ld(res, base + c);
    }
    v[j] = t;
    sum += t;
  }
  for (int c = lane + 32 * kMaxPerLane; c < C; c += 32) sum += ld(x, base + c) + (res ? ld(res, base + c) : 0.f);
  const float mean = warp_sum(sum) / C;
  float sq = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    int c = lane + 32 * j;
    if (c < C) sq += (v[j] - mean) * (v[j] - mean);
  }
  for (int c = lane + 32 * kMaxPerLane; c < C; c += 32) {
    float t = ld(x, base + c) + (res ? ld(res, base + c) : 0.f) - mean;
    sq += t * t;
  }
  const float rstd = rsqrtf(warp_sum(sq) / C + eps);
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    int c = lane + 32 * j;
    if (c < C) st(y, base + c, (v[j] - mean) * rstd * ld(g, c) + ld(b, c));
  }
  for (int c = lane + 32 * kMaxPerLane; c < C; c += 32) {
    float t = ld(x, base + c) + (res ? ld(res, base + c) : 0.f);
    st(y, base + c, (t - mean) * rstd * ld(g, c) + ld(b, c));
  }
}

}  // namespace

void layer_norm(const void* x, const void* res, const void* gamma, const void* beta, void* y, int64_t rows, int C,
                float eps, bool half, cudaStream_t s) {
  const int warps = 8;
  unsigned blocks = static_cast<unsigned>((rows + warps - 1) / warps);
  DF_DISPATCH(half, T,
              layer_norm_k<T><<<blocks, warps * 32, 0, s>>>((const T*)x, (const T*)res, (const T*)gamma,
                                                            (const T*)beta, (T*)y, rows, C, eps));
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
