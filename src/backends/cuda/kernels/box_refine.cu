// Box refinement: sigmoid(delta + inverse_sigmoid(ref)), in fp32 whatever the storage type.
// inverse_sigmoid clamps as transformers does: x' = clamp(x,0,1), log(max(x',1e-5)/max(1-x',1e-5)).
// In fp16 arithmetic 1e-5 is subnormal and x'/1e-5 reaches 1e5 > 65504 (inf) once x' rounds to
// 1, so the whole op is computed in fp32 from the stored values; only the result is rounded.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {
template <class T>
__global__ void box_refine_k(const T* delta, const T* ref, T* y, int64_t n) {
  pdl_wait_and_release();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float x = fminf(fmaxf(ld(ref, i), 0.f), 1.f);
    float inv = logf(fmaxf(x, 1e-5f) / fmaxf(1.f - x, 1e-5f));
    float v = ld(delta, i) + inv;
    st(y, i, 1.f / (1.f + expf(-v)));
  }
}
}  // namespace

void box_refine(const void* delta, const void* ref, void* y, int64_t n, bool half, cudaStream_t s) {
  DF_DISPATCH(half, T,
              launch(box_refine_k<T>, blocks_for(n, 256), 256, 0, s, (const T*)delta, (const T*)ref, (T*)y, n));
}

}  // namespace detforge::cuda
