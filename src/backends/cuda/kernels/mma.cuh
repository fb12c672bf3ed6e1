// Tensor-core helpers shared by the fp16 kernels (attention.cu, conv_igemm.cu): one warp-wide
// mma.sync m16n8k16 with fp16 inputs and fp32 accumulators (sm_80+ PTX, runs on Hopper too).
#pragma once
#include <cstdint>

namespace detforge::cuda {

// c += a (16x16, row-major A fragment) * b (16x8, column-major B fragment: b0, b1).
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace detforge::cuda
