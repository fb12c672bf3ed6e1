// im2col for fp16/fp32 NHWC convolutions: y[r, (ky*kw + kx)*Ci + ci] = x[b, oy*stride - pad + ky,
// ox*stride - pad + kx, ci] (0 outside the image), r = (b*Ho + oy)*Wo + ox. With the engine's
// OHWI conv weights as W[Co, kh*kw*Ci], the convolution is then one GEMM y W^T, which cuBLASLt
// can split along K. Why: at batch 1 the 20x20 3x3 convs of r18vd's stage 3 (M 400, N 512,
// K 4608) ran 12-16 us in cuDNN with 32 CTAs on 132 SMs, and no cuDNN plan did better
// (CONV_TUNE_GRAPH, bench/results/h200/ab-2026-12-04-session11 call 1). Not yet run on a GPU.
// One thread per 16-byte chunk of a row (Ci a multiple of 16 bytes).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

template <class T>
__global__ void im2col_k(const Pack<T>* __restrict__ x, Pack<T>* __restrict__ y, ConvShape g, int64_t chunks) {
  pdl_wait_and_release();
  const int cp = g.Ci / Pack<T>::N;  // 16-byte chunks per pixel
  const int64_t row_chunks = (int64_t)g.kh * g.kw * cp;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < chunks; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = t / row_chunks;
    const int q = static_cast<int>(t - r * row_chunks);
    const int tap = q / cp, c = q - tap * cp;
    const int ky = tap / g.kw, kx = tap - ky * g.kw;
    const int ox = static_cast<int>(r % g.Wo);
    const int64_t rb = r / g.Wo;
    const int oy = static_cast<int>(rb % g.Ho);
    const int b = static_cast<int>(rb / g.Ho);
    const int iy = oy * g.stride - g.pad + ky, ix = ox * g.stride - g.pad + kx;
    Pack<T> v;
    if (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) {
      v = x[(((int64_t)b * g.H + iy) * g.W + ix) * cp + c];
    } else {
      *reinterpret_cast<uint4*>(&v) = make_uint4(0, 0, 0, 0);
    }
    y[t] = v;
  }
}

}  // namespace

bool im2col_supported(const ConvShape& g, bool half, const void* x, const void* y) {
  const int P = half ? 8 : 4;
  return g.B > 0 && g.Ci > 0 && g.Ci % P == 0 && g.kh > 0 && g.kw > 0 && g.stride > 0 && g.pad >= 0 && g.Ho > 0 &&
         g.Wo > 0 && aligned16(x) && aligned16(y);
}

size_t im2col_bytes(const ConvShape& g, bool half) {
  return static_cast<size_t>(g.B) * g.Ho * g.Wo * g.kh * g.kw * g.Ci * (half ? 2 : 4);
}

void im2col(const void* x, void* y, const ConvShape& g, bool half, cudaStream_t s) {
  if (!im2col_supported(g, half, x, y)) throw Error("im2col: unsupported geometry or alignment");
  const int64_t chunks = static_cast<int64_t>(im2col_bytes(g, half) / 16);
  DF_DISPATCH(half, T,
              launch(im2col_k<T>, blocks_for(chunks, 256), 256, 0, s, (const Pack<T>*)x, (Pack<T>*)y, g, chunks));
}

}  // namespace detforge::cuda
