// Probes of a kernel's programmatic-dependent-launch discipline (tests/gpu/test_cuda_library_waits.cpp).
// late_copy releases its dependents at once, spins, then copies: a dependent that reads dst (or
// writes src) before its griddepcontrol.wait sees the old bytes (or spoils the copy).
// plain_copy never waits: the control that shows the probe can see a kernel that does not wait.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

__global__ void late_copy_k(const uint4* src, uint4* dst, size_t n16, long long spin) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n16; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

__global__ void plain_copy_k(const uint4* src, uint4* dst, size_t n16) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n16; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

size_t units(size_t bytes) {
  if (bytes % 16) throw Error("late_copy: the byte count must be a multiple of 16");
  return bytes / 16;
}

}  // namespace

void late_copy(const void* src, void* dst, size_t bytes, long long spin_cycles, cudaStream_t s) {
  late_copy_k<<<32, 256, 0, s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), units(bytes), spin_cycles);
  DF_CUDA(cudaGetLastError());
}

void plain_copy(const void* src, void* dst, size_t bytes, cudaStream_t s) {
  plain_copy_k<<<32, 256, 0, s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), units(bytes));
  DF_CUDA(cudaGetLastError());
}

}  // namespace detforge::cuda
