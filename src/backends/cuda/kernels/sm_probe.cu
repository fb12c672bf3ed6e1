// record_block_sms (cuda_green.h): which SMs a stream's blocks ran on, for the green-context tests.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_green.h"

namespace detforge::cuda {
namespace {

__global__ void record_block_sms_k(unsigned* out, long long spin) {
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  if (threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    out[blockIdx.x] = sm;
  }
}

}  // namespace

void record_block_sms(unsigned* out, int blocks, long long spin_cycles, cudaStream_t s) {
  if (blocks <= 0) throw Error("record_block_sms: no blocks");
  record_block_sms_k<<<blocks, 128, 0, s>>>(out, spin_cycles);
  DF_CUDA(cudaGetLastError());
}

}  // namespace detforge::cuda
