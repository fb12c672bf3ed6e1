// gather_rows: y[b,i,:] = x[b, idx[b,i], :]; an index out of range yields a zero row.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {
template <class T>
__global__ void gather_rows_k(const T* x, const int32_t* idx, T* y, int B, int L, int K, int C) {
  pdl_wait_and_release();
  const int64_t n = (int64_t)B * K * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int c = i % C;
    const int64_t bk = i / C;
    const int b = static_cast<int>(bk / K);
    const int r = idx[bk];
    y[i] = (r >= 0 && r < L) ? x[((int64_t)b * L + r) * C + c] : T(0.f);
  }
}
}  // namespace

void gather_rows(const void* x, const int32_t* idx, void* y, int B, int L, int K, int C, bool half, cudaStream_t s) {
  DF_DISPATCH(half, T,
              launch(gather_rows_k<T>, blocks_for((int64_t)B * K * C, 256), 256, 0, s, (const T*)x, idx, (T*)y, B, L, K,
                     C));
}

}  // namespace detforge::cuda
