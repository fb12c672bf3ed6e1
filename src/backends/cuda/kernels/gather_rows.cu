// gather_rows: y[b,i,:] = x[b, idx[b,i], :]; an index out of range yields a zero row. x_batch is
// x's elements per image: L*C for an activation, 0 for a constant (graph::gather_rows_early
// gathers RT-DETR's anchors, one table for every image).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {
template <class T>
__global__ void gather_rows_k(const T* x, const int32_t* idx, T* y, int B, int L, int K, int C, int64_t x_batch) {
  pdl_wait_and_release();
  const int64_t n = (int64_t)B * K * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int c = i % C;
    const int64_t bk = i / C;
    const int b = static_cast<int>(bk / K);
    const int r = idx[bk];
    y[i] = (r >= 0 && r < L) ? x[b * x_batch + (int64_t)r * C + c] : T(0.f);
  }
}
}  // namespace

void gather_rows(const void* x, const int32_t* idx, void* y, int B, int L, int K, int C, bool half, cudaStream_t s,
                 bool x_broadcast) {
  const int64_t x_batch = x_broadcast ? 0 : (int64_t)L * C;
  DF_DISPATCH(half, T,
              launch(gather_rows_k<T>, blocks_for((int64_t)B * K * C, 256), 256, 0, s, (const T*)x, idx, (T*)y, B, L, K,
                     C, x_batch));
}

}  // namespace detforge::cuda
