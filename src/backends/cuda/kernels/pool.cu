// NHWC max and average pooling. Max: padding never wins. Average: the divisor is the number of
// in-bounds elements (PyTorch's AvgPool2d(2,2,ceil_mode=True) at an odd edge divides by 2 or 1).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {
template <class T, bool kMax>
__global__ void pool_k(const T* x, T* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad) {
  const int64_t n = (int64_t)B * Ho * Wo * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int c = i % C;
    int64_t t = i / C;
    const int ox = t % Wo;
    t /= Wo;
    const int oy = t % Ho;
    const int b = static_cast<int>(t / Ho);
    float acc = kMax ? -INFINITY : 0.f;
    int cnt = 0;
    for (int dy = 0; dy < k; ++dy) {
      const int iy = oy * stride - pad + dy;
      if (iy < 0 || iy >= H) continue;
      for (int dx = 0; dx < k; ++dx) {
        const int ix = ox * stride - pad + dx;
        if (ix < 0 || ix >= W) continue;
        const float v = ld(x, (((int64_t)b * H + iy) * W + ix) * C + c);
        acc = kMax ? fmaxf(acc, v) : acc + v;
        ++cnt;
      }
    }
    st(y, i, kMax ? acc : (cnt ? acc / cnt : 0.f));
  }
}
}  // namespace

void max_pool2d(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad,
                bool half, cudaStream_t s) {
  DF_DISPATCH(half, T,
              pool_k<T, true><<<blocks_for((int64_t)B * Ho * Wo * C, 256), 256, 0, s>>>((const T*)x, (T*)y, B, H, W,
                                                                                        C, Ho, Wo, k, stride, pad));
  DF_CUDA_LAUNCH();
}
void avg_pool2d(const void* x, void* y, int B, int H, int W, int C, int Ho, int Wo, int k, int stride, int pad,
                bool half, cudaStream_t s) {
  DF_DISPATCH(half, T,
              pool_k<T, false><<<blocks_for((int64_t)B * Ho * Wo * C, 256), 256, 0, s>>>(
                  (const T*)x, (T*)y, B, H, W, C, Ho, Wo, k, stride, pad));
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
