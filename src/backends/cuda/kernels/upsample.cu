// Nearest-neighbour x2 upsampling, NHWC: out[y][x] = in[y/2][x/2].
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {
template <class T>
__global__ void upsample2x_k(const T* x, T* y, int B, int H, int W, int C) {
  const int Wo = 2 * W, Ho = 2 * H;
  const int64_t n = (int64_t)B * Ho * Wo * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int c = i % C;
    int64_t t = i / C;
    const int ox = t % Wo;
    t /= Wo;
    const int oy = t % Ho;
    const int64_t b = t / Ho;
    y[i] = x[((b * H + oy / 2) * W + ox / 2) * C + c];
  }
}
}  // namespace

void upsample_nearest2x(const void* x, void* y, int B, int H, int W, int C, bool half, cudaStream_t s) {
  DF_DISPATCH(half, T,
              upsample2x_k<T><<<blocks_for((int64_t)B * H * W * C * 4, 256), 256, 0, s>>>((const T*)x, (T*)y, B, H,
                                                                                          W, C));
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
