// Multi-head attention core, softmax(scale * q k^T) v per head, for the short sequences of
// RT-DETR (400 tokens in AIFI, 300 queries in the decoder). One warp per (batch, head, query):
// lanes take keys for the scores (kept in shared memory, fp32), then lanes take channels for
// the weighted sum of v. Softmax statistics are fp32.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

constexpr int kWarps = 4;

template <class T>
__global__ void attention_k(const T* q, const T* k, const T* v, T* o, int L, int S, int C, int heads, float scale) {
  extern __shared__ float smem[];  // kWarps * S scores
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.z, h = blockIdx.y;
  const int i = blockIdx.x * kWarps + warp;
  if (i >= L) return;
  const int d = C / heads;
  float* sc = smem + warp * S;
  const T* qr = q + ((int64_t)b * L + i) * C + h * d;
  const T* kb = k + (int64_t)b * S * C + h * d;
  const T* vb = v + (int64_t)b * S * C + h * d;
  float mx = -INFINITY;
  for (int j = lane; j < S; j += 32) {
    const T* kr = kb + (int64_t)j * C;
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += ld(qr, c) * ld(kr, c);
    acc *= scale;
    sc[j] = acc;
    mx = fmaxf(mx, acc);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j < S; j += 32) {
    float e = expf(sc[j] - mx);
    sc[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  __syncwarp();
  const float inv = 1.f / sum;
  T* orow = o + ((int64_t)b * L + i) * C + h * d;
  for (int c = lane; c < d; c += 32) {
    float acc = 0.f;
    for (int j = 0; j < S; ++j) acc += sc[j] * ld(vb + (int64_t)j * C, c);
    st(orow, c, acc * inv);
  }
}

}  // namespace

void attention(const void* q, const void* k, const void* v, void* o, int B, int L, int S, int C, int heads,
               float scale, bool half, cudaStream_t s) {
  dim3 grid((L + kWarps - 1) / kWarps, heads, B);
  size_t smem = sizeof(float) * kWarps * S;
  DF_DISPATCH(half, T, {
    if (smem > 48 * 1024) DF_CUDA(cudaFuncSetAttribute(attention_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(smem)));
    attention_k<T><<<grid, kWarps * 32, smem, s>>>((const T*)q, (const T*)k, (const T*)v, (T*)o, L, S, C, heads,
                                                   scale);
  });
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
