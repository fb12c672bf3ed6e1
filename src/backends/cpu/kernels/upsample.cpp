// upsample_nearest2x: out[y][x] = in[y/2][x/2] on NHWC per image.
#include <algorithm>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class UpsampleStep final : public PerImageStep {
 public:
  UpsampleStep(const CompileCtx& cc, const graph::Op& op) : PerImageStep(op, 1, 1) {
    const Hwc x = expect_hwc(op, in_tensor(cc, op, 0));
    H_ = x.H;
    W_ = x.W;
    C_ = x.C;
    expect_shape(op, out_tensor(cc, op), {2 * H_, 2 * W_, C_});
  }

 private:
  void run_image(const ExecCtx&, int, const float* x, float* y) const override {
    const int64_t C = C_, Wo = 2 * W_;
#pragma omp parallel for schedule(static)
    for (int64_t oy = 0; oy < 2 * H_; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox) {
        const float* in = x + ((oy / 2) * W_ + ox / 2) * C;
        std::copy(in, in + C, y + (oy * Wo + ox) * C);
      }
  }

  int64_t H_, W_, C_;
};

}  // namespace

StepPtr make_upsample_nearest2x_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<UpsampleStep>(cc, op); }

}  // namespace detforge::cpu
