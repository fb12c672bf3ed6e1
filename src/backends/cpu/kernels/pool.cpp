// max_pool2d (kernel, stride, pad; padding never wins; optional ceil_mode) and avg_pool2d
// (kernel, stride, ceil_mode; no padding; divisor = number of in-bounds elements, which equals
// torch's count_include_pad divisor when pad = 0). NHWC per image, vectorised over channels.
// Output sizes follow torch's pooling_output_shape and must equal the graph's declared shape.
#include <algorithm>
#include <cmath>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

int64_t pooled_size(int64_t in, int k, int s, int p, bool ceil_mode) {
  int64_t out = (in + 2 * p - k + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

class PoolStep final : public PerImageStep {
 public:
  PoolStep(const CompileCtx& cc, const graph::Op& op, bool is_max) : PerImageStep(op, 1, 1), max_(is_max) {
    const Hwc x = expect_hwc(op, in_tensor(cc, op, 0));
    H_ = x.H;
    W_ = x.W;
    C_ = x.C;
    k_ = op.attr_int("kernel");
    s_ = op.attr_int_or("stride", k_);
    p_ = op.attr_int_or("pad", 0);
    const bool ceil_mode = op.attrs.contains("ceil_mode") && op.attrs.at("ceil_mode").get<bool>();
    if (k_ < 1 || s_ < 1 || p_ < 0 || 2 * p_ > k_) op_fail(op, "bad kernel/stride/pad");
    if (!max_ && p_ != 0) op_fail(op, "avg_pool2d with padding is not defined by the IR");
    Ho_ = pooled_size(H_, k_, s_, p_, ceil_mode);
    Wo_ = pooled_size(W_, k_, s_, p_, ceil_mode);
    if (Ho_ < 1 || Wo_ < 1) op_fail(op, "kernel larger than the input");
    expect_shape(op, out_tensor(cc, op), {Ho_, Wo_, C_});
  }

 private:
  void run_image(const ExecCtx&, int, const float* x, float* y) const override {
    const int64_t C = C_;
#pragma omp parallel for schedule(static)
    for (int64_t oy = 0; oy < Ho_; ++oy) {
      const int64_t y0 = std::max<int64_t>(oy * s_ - p_, 0), y1 = std::min<int64_t>(oy * s_ - p_ + k_, H_);
      for (int64_t ox = 0; ox < Wo_; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * s_ - p_, 0), x1 = std::min<int64_t>(ox * s_ - p_ + k_, W_);
        float* o = y + (oy * Wo_ + ox) * C;
        std::fill(o, o + C, max_ ? -INFINITY : 0.f);
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) {
            const float* in = x + (iy * W_ + ix) * C;
            if (max_) {
#pragma omp simd
              for (int64_t ch = 0; ch < C; ++ch) o[ch] = in[ch] > o[ch] ? in[ch] : o[ch];
            } else {
#pragma omp simd
              for (int64_t ch = 0; ch < C; ++ch) o[ch] += in[ch];
            }
          }
        if (!max_) {
          const float inv = 1.f / static_cast<float>((y1 - y0) * (x1 - x0));
#pragma omp simd
          for (int64_t ch = 0; ch < C; ++ch) o[ch] *= inv;
        }
      }
    }
  }

  bool max_;
  int64_t H_, W_, C_, Ho_, Wo_;
  int k_, s_, p_;
};

}  // namespace

StepPtr make_max_pool2d_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<PoolStep>(cc, op, true); }
StepPtr make_avg_pool2d_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<PoolStep>(cc, op, false); }

}  // namespace detforge::cpu
