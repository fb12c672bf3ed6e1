// Top-k query selection: per image, the k rows with the largest row maximum, sorted by value
// descending, ties by lower index (torch.topk on the GPU gives no tie order; the IR fixes one so
// both backends agree). One block per image: row maxima into shared memory as 64-bit keys
// (order-preserving float bits, inverted, then the row index), a bitonic sort, the first k.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

constexpr int kMaxLen = 16384;  // 128 KiB of keys: 8400 anchors at 640x640 fit with room
constexpr int kThreads = 1024;

__device__ __forceinline__ uint32_t order_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if (f != f) u = 0x7fc00000u;                     // NaN sorts as the largest, as torch.topk does
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending unsigned == ascending float
}

template <class T>
__global__ void topk_rows_k(const T* scores, int32_t* idx, int L, int N, int k, int n2) {
  extern __shared__ unsigned long long keys[];
  const int b = blockIdx.x;
  const T* sb = scores + (int64_t)b * L * N;
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    if (i < L) {
      float m = -INFINITY;
      for (int c = 0; c < N; ++c) m = fmaxf(m, ld(sb, (int64_t)i * N + c));
      // smaller key = better: inverted value bits, then the index (lower index first)
      keys[i] = (static_cast<unsigned long long>(~order_bits(m)) << 32) | static_cast<uint32_t>(i);
    } else {
      keys[i] = ~0ull;
    }
  }
  __syncthreads();
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        int j = i ^ stride;
        if (j > i) {
          bool up = (i & size) == 0;
          unsigned long long a = keys[i], c = keys[j];
          if ((a > c) == up) {
            keys[i] = c;
            keys[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < k; i += blockDim.x) idx[(int64_t)b * k + i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
}

}  // namespace

int topk_rows_max_len() { return kMaxLen; }

void topk_rows(const void* scores, int32_t* idx, int B, int L, int N, int k, bool half, cudaStream_t s) {
  if (L > kMaxLen) throw Error("topk_rows: " + std::to_string(L) + " rows exceed the CUDA limit of " +
                               std::to_string(kMaxLen));
  if (k > L) throw Error("topk_rows: k = " + std::to_string(k) + " exceeds the " + std::to_string(L) + " rows");
  int n2 = 1;
  while (n2 < L) n2 <<= 1;
  size_t smem = sizeof(unsigned long long) * n2;
  DF_DISPATCH(half, T, {
    DF_CUDA(cudaFuncSetAttribute(topk_rows_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(sizeof(unsigned long long) * kMaxLen)));
    topk_rows_k<T><<<B, kThreads, smem, s>>>((const T*)scores, idx, L, N, k, n2);
  });
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
