#include "backends/cuda/arena_diff.h"

#include <cstdint>

namespace detforge::cuda {
namespace {

__global__ void mark_changed_chunks_k(const uint4* a, const uint4* b, size_t n16, size_t chunk16,
                                      unsigned char* flags) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) flags[i / chunk16] = 1;
  }
}

}  // namespace

void mark_changed_chunks(const void* a, const void* b, size_t bytes, size_t chunk, unsigned char* flags,
                         cudaStream_t s) {
  const size_t n16 = bytes / 16;
  if (!n16) return;
  const unsigned blocks = static_cast<unsigned>(n16 / 256 + 1 < 4096 ? n16 / 256 + 1 : 4096);
  mark_changed_chunks_k<<<blocks, 256, 0, s>>>(static_cast<const uint4*>(a), static_cast<const uint4*>(b), n16,
                                               chunk / 16, flags);
}

}  // namespace detforge::cuda
