// Host reference for the own fp16 convolution kernels' tests (test_cuda_conv_igemm.cpp,
// test_cuda_conv_direct.cpp): shapes and a double-accumulation NHWC convolution.
#pragma once
#include <cmath>
#include <vector>

#include "backends/cuda/cudnn_conv.h"
#include "graph/ir.h"

namespace detforge::test {

// The kernels' output guard: halves past the end of y that must keep this value (exact in fp16).
constexpr int kGuard = 64;
constexpr float kSentinel = 1234.0f;

inline cuda::ConvShape make_shape(int B, int H, int W, int Ci, int Co, int kh, int kw, int stride, int pad) {
  cuda::ConvShape s;
  s.B = B, s.H = H, s.W = W, s.Ci = Ci, s.Co = Co, s.kh = kh, s.kw = kw, s.stride = stride, s.pad = pad;
  s.Ho = (H + 2 * pad - kh) / stride + 1;
  s.Wo = (W + 2 * pad - kw) / stride + 1;
  return s;
}

// NHWC x, OHWI w; double accumulation.
inline std::vector<float> ref_conv(const cuda::ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>* bias, const std::vector<float>* res, graph::Act act) {
  std::vector<float> y(static_cast<size_t>(s.B) * s.Ho * s.Wo * s.Co);
  std::vector<double> acc(s.Co);
  for (int b = 0; b < s.B; ++b)
    for (int oy = 0; oy < s.Ho; ++oy)
      for (int ox = 0; ox < s.Wo; ++ox) {
        for (int co = 0; co < s.Co; ++co) acc[co] = bias ? (*bias)[co] : 0.0;
        for (int ky = 0; ky < s.kh; ++ky)
          for (int kx = 0; kx < s.kw; ++kx) {
            const int iy = oy * s.stride - s.pad + ky, ix = ox * s.stride - s.pad + kx;
            if (iy < 0 || iy >= s.H || ix < 0 || ix >= s.W) continue;
            const float* xp = &x[((static_cast<size_t>(b) * s.H + iy) * s.W + ix) * s.Ci];
            for (int co = 0; co < s.Co; ++co) {
              const float* wp = &w[((static_cast<size_t>(co) * s.kh + ky) * s.kw + kx) * s.Ci];
              double a = 0;
              for (int ci = 0; ci < s.Ci; ++ci) a += static_cast<double>(xp[ci]) * wp[ci];
              acc[co] += a;
            }
          }
        const size_t o = ((static_cast<size_t>(b) * s.Ho + oy) * s.Wo + ox) * s.Co;
        for (int co = 0; co < s.Co; ++co) {
          double a = acc[co] + (res ? (*res)[o + co] : 0.0);
          if (act == graph::Act::relu) a = a > 0 ? a : 0;
          if (act == graph::Act::silu) a = a / (1.0 + std::exp(-a));
          y[o + co] = static_cast<float>(a);
        }
      }
  return y;
}

}  // namespace detforge::test
