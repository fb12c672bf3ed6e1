// The ResNet-vd stem as one kernel (NOTES.md v34): conv 3->32 3x3/2, conv 32->32 3x3, conv 32->64
// 3x3 (each with bias and ReLU, padding 1) and the 3x3/2 max pool (padding 1), fp16 with fp32
// accumulation, from the fp32 NHWC pixels to the pooled fp16 NHWC map. Why: in the batch-1 timeline
// (H100, session 30) the stem took 0-55.8 us of the critical path as five kernels (the input's fp16
// conversion 4.3 us, the convs 10.3, 17.5 and 17.8 us, the pool 9.2) with nothing beside them, and
// each conv alone is latency-bound at 110-230 TFLOP/s (NOTES.md v18-v19). One CTA computes a 10x20
// tile of pooled outputs through the three convs on halo tiles kept in shared memory (21x41 conv3,
// 23x43 conv2 and 25x45 conv1 pixels, 173.5 KB), with mma.sync and each warp's weight slice in
// registers; 128 CTAs cover r18vd's 160x160 pooled map per image (one wave on 132 SMs).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace detforge::cuda {

// The weights in the kernel's register-fragment order, from the three convs' fp16 OHWI weights
// (w1 [32][3][3][3], w2 [32][3][3][32], w3 [64][3][3][32]); stem_fused_packed_bytes() bytes at
// `packed` (16-byte aligned). Runs once at engine load.
size_t stem_fused_packed_bytes();
size_t stem_fused_smem_bytes();  // per block (173.5 KB): devices with less take the five kernels
void stem_fused_pack(const void* w1, const void* w2, const void* w3, void* packed, cudaStream_t s);

// x fp32 [B][H][W][3]; b1, b2, b3 the fp16 biases (32, 32, 64); y fp16 [B][Hp][Wp][64] with
// H1 = (H - 1) / 2 + 1 and Hp = (H1 - 1) / 2 + 1 (likewise W). Throws when the device lacks the
// shared memory (173.5 KB per block). mode (DETFORGE_CUDA_STEM_FUSED): 1 stages the input four
// pixels per thread at a time; 2 requests the whole input tile at once by cp.async; 3 is 2 with
// each warp's conv2/conv3 m16 tiles taken two at a time (8 independent mma per k-step, not 4).
void stem_fused(const float* x, const void* packed, const void* b1, const void* b2, const void* b3, void* y, int B,
                int H, int W, cudaStream_t s, int mode);
// A 3x3 stride-2 padding-1 step (conv1, then the pool): d -> (d - 1) / 2 + 1.
inline int stem_fused_half(int d) { return (d - 1) / 2 + 1; }
inline int stem_fused_out_dim(int d) { return stem_fused_half(stem_fused_half(d)); }

}  // namespace detforge::cuda
