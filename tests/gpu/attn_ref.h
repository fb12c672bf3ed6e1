// Host references (double precision) of the attention and deformable-attention kernels, shared
// by test_cuda_kernels.cpp and test_cuda_attn_speedpaths.cpp.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cuda/kernels/kernels.h"

namespace detforge::test {

// softmax(scale q k^T) v per head in double: o[B,L,C] from q[B,L,C], k/v[B,S,C].
inline std::vector<float> attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& v, int B, int L, int S, int C, int heads, float scale) {
  const int d = C / heads;
  std::vector<float> want((size_t)B * L * C);
  std::vector<double> p(S);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < L; ++i) {
        double mx = -1e300, sum = 0;
        for (int j = 0; j < S; ++j) {
          double a = 0;
          for (int c = 0; c < d; ++c)
            a += (double)q[((size_t)b * L + i) * C + h * d + c] * k[((size_t)b * S + j) * C + h * d + c];
          p[j] = a * scale;
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j < S; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int c = 0; c < d; ++c) {
          double o = 0;
          for (int j = 0; j < S; ++j) o += p[j] / sum * v[((size_t)b * S + j) * C + h * d + c];
          want[((size_t)b * L + i) * C + h * d + c] = static_cast<float>(o);
        }
      }
  return want;
}

// Host reference of MSDeformAttnV2 "default" (family spec §3.8).
inline std::vector<float> deform_ref(const std::vector<float>& value, const std::vector<float>& off,
                              const std::vector<float>& logits, const std::vector<float>& ref,
                              const std::vector<float>& ps, int B, int Lv, int Q, int C, const cuda::DeformShape& sh) {
  const int H = sh.heads, LP = sh.levels * sh.points, d = C / H;
  std::vector<float> out(static_cast<size_t>(B) * Q * C);
  std::vector<double> w(LP);
  for (int b = 0; b < B; ++b)
    for (int q = 0; q < Q; ++q)
      for (int h = 0; h < H; ++h) {
        const size_t bq = static_cast<size_t>(b) * Q + q;
        double mx = -1e300, sum = 0;
        for (int j = 0; j < LP; ++j) mx = std::max(mx, (double)logits[bq * H * LP + h * LP + j]);
        for (int j = 0; j < LP; ++j) sum += (w[j] = std::exp(logits[bq * H * LP + h * LP + j] - mx));
        for (int c = 0; c < d; ++c) {
          double acc = 0;
          for (int l = 0; l < sh.levels; ++l)
            for (int p = 0; p < sh.points; ++p) {
              const int j = l * sh.points + p;
              const double k = ps[j] * sh.offset_scale;
              const double lx = ref[bq * 4 + 0] + off[bq * H * LP * 2 + (h * LP + j) * 2 + 0] * k * ref[bq * 4 + 2];
              const double ly = ref[bq * 4 + 1] + off[bq * H * LP * 2 + (h * LP + j) * 2 + 1] * k * ref[bq * 4 + 3];
              const double ix = lx * sh.W[l] - 0.5, iy = ly * sh.H[l] - 0.5;
              const int x0 = (int)std::floor(ix), y0 = (int)std::floor(iy);
              const double fx = ix - x0, fy = iy - y0;
              double s = 0;
              for (int dy = 0; dy < 2; ++dy)
                for (int dx = 0; dx < 2; ++dx) {
                  const int yy = y0 + dy, xx = x0 + dx;
                  if (yy < 0 || yy >= sh.H[l] || xx < 0 || xx >= sh.W[l]) continue;
                  const double wt = (dx ? fx : 1 - fx) * (dy ? fy : 1 - fy);
                  s += wt * value[((size_t)b * Lv + sh.start[l] + yy * sh.W[l] + xx) * C + h * d + c];
                }
              acc += w[j] / sum * s;
            }
          out[bq * C + h * d + c] = static_cast<float>(acc);
        }
      }
  return out;
}

}  // namespace detforge::test
