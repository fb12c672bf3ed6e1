// A debugging aid for CudaEngine::stray_writes: which fixed-size chunks of a buffer differ
// between two copies of it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace detforge::cuda {

// flags[k] = 1 where bytes [k*chunk, (k+1)*chunk) of a and b differ (flags untouched elsewhere:
// clear them first). bytes and chunk must be multiples of 16, the pointers 16-byte aligned.
void mark_changed_chunks(const void* a, const void* b, size_t bytes, size_t chunk, unsigned char* flags,
                         cudaStream_t s);

}  // namespace detforge::cuda
