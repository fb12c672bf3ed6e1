// Plain host loops for the IR ops the engine tests use (NHWC, one image), written from the
// semantics in graph/ir.h. Double accumulation: the reference is the more precise side.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/ir.h"

namespace detforge::test::ref {

using V = std::vector<float>;

inline V conv(const V& x, int H, int W, int Ci, const V& w, int Co, int k, int stride, int pad, const V& b,
              const V* res, graph::Act act, int* Ho_out, int* Wo_out) {
  const int Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
  V y(static_cast<size_t>(Ho) * Wo * Co);
  for (int oy = 0; oy < Ho; ++oy)
    for (int ox = 0; ox < Wo; ++ox)
      for (int co = 0; co < Co; ++co) {
        double a = b.empty() ? 0 : b[co];
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx) {
            const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            for (int ci = 0; ci < Ci; ++ci)
              a += static_cast<double>(x[(iy * W + ix) * Ci + ci]) * w[((co * Ci + ci) * k + ky) * k + kx];
          }
        const size_t o = (static_cast<size_t>(oy) * Wo + ox) * Co + co;
        if (res) a += (*res)[o];
        y[o] = graph::apply_act(act, static_cast<float>(a));
      }
  *Ho_out = Ho;
  *Wo_out = Wo;
  return y;
}

inline V pool(const V& x, int H, int W, int C, int k, int stride, int pad, bool mx, int Ho, int Wo) {
  V y(static_cast<size_t>(Ho) * Wo * C);
  for (int oy = 0; oy < Ho; ++oy)
    for (int ox = 0; ox < Wo; ++ox)
      for (int c = 0; c < C; ++c) {
        double a = mx ? -1e300 : 0;
        int n = 0;
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx) {
            const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            const double v = x[(iy * W + ix) * C + c];
            a = mx ? std::max(a, v) : a + v;
            ++n;
          }
        y[(oy * Wo + ox) * C + c] = static_cast<float>(mx ? a : a / n);
      }
  return y;
}

inline V upsample2x(const V& x, int H, int W, int C) {
  V y(static_cast<size_t>(4) * H * W * C);
  for (int oy = 0; oy < 2 * H; ++oy)
    for (int ox = 0; ox < 2 * W; ++ox)
      for (int c = 0; c < C; ++c) y[(oy * 2 * W + ox) * C + c] = x[((oy / 2) * W + ox / 2) * C + c];
  return y;
}

inline V linear(const V& x, int L, int K, const V& w, int N, const V& b, const V* res, graph::Act act) {
  V y(static_cast<size_t>(L) * N);
  for (int i = 0; i < L; ++i)
    for (int n = 0; n < N; ++n) {
      double a = b[n];
      for (int k = 0; k < K; ++k) a += static_cast<double>(x[i * K + k]) * w[n * K + k];
      if (res) a += (*res)[i * N + n];
      y[i * N + n] = graph::apply_act(act, static_cast<float>(a));
    }
  return y;
}

inline V layer_norm(const V& x, int L, int C, const V& g, const V& b, float eps) {
  V y(x.size());
  for (int i = 0; i < L; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= C;
    for (int c = 0; c < C; ++c) y[i * C + c] = static_cast<float>((x[i * C + c] - m) / std::sqrt(v + eps) * g[c] + b[c]);
  }
  return y;
}

}  // namespace detforge::test::ref
