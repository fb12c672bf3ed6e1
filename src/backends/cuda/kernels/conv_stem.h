// The stem convolution straight from the fp32 graph input: y = act(conv(x, w) + bias) for a
// convolution with at most 4 input channels (RGB), x fp32 NHWC, y and the weights in the
// storage type. Measured on the H200 (fp16, batch 1): cuDNN ran r18vd's 640x640x3 -> 32, 3x3 s2
// conv in 10.8 us, after a 5.1 us fp32 -> fp16 conversion of the input; a direct kernel reading
// the fp32 pixels needs neither (and accumulates the unrounded pixels in fp32).
#pragma once
#include <cuda_runtime.h>

#include "backends/cuda/cudnn_conv.h"
#include "graph/ir.h"

namespace detforge::cuda {

// Ci <= 4, Co in {8, 16, 32, 64}, no residual. row_kernel: 3x3 stride-2 convs of 3 channels to
// 32 or 64 (the ResNet-vd stems) run on the row kernel (input rows staged in shared memory, 4 or 2
// output pixels per thread); false, or any other shape: one thread per output pixel.
bool conv_stem_supported(const ConvShape& s);
void conv_stem(const float* x, const void* w, const void* bias, void* y, const ConvShape& s, graph::Act act, bool half,
               cudaStream_t st, bool row_kernel = true);

}  // namespace detforge::cuda
