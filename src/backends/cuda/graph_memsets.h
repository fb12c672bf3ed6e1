// Memset nodes of a captured graph turned into kernel nodes. cuDNN clears a workspace with
// cudaMemsetAsync before some convolution plans; in the captured r18vd graph the kernel after
// such a memset node started ~12 us after it (H200 CUPTI timeline, fp16 batch 1: the 32->64 stem
// conv), where kernel-to-kernel edges take ~0.1 us.
#pragma once
#include <cuda_runtime.h>

namespace detforge::cuda {

// Replaces every memset node of `g` by a kernel node that writes the same bytes, with the same
// dependencies and dependents (as plain edges). Returns the number replaced, or -1 after a CUDA
// error (the graph may then be half rewritten: capture it again).
int replace_memset_nodes(cudaGraph_t g);

}  // namespace detforge::cuda
