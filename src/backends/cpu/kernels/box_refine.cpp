// box_refine: out = sigmoid(delta + inverse_sigmoid(ref)) with transformers' inverse_sigmoid:
//   x' = clamp(x, 0, 1); inverse_sigmoid(x) = log(max(x', 1e-5) / max(1 - x', 1e-5)).
#include <algorithm>
#include <cmath>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class BoxRefineStep final : public PerImageStep {
 public:
  BoxRefineStep(const CompileCtx& cc, const graph::Op& op) : PerImageStep(op, 2, 2) {
    const auto& d = in_tensor(cc, op, 0);
    expect_rank(op, d, 2);
    if (d.shape[1] != 4) op_fail(op, "delta must be [Q,4]");
    expect_shape(op, in_tensor(cc, op, 1), d.shape);
    expect_shape(op, out_tensor(cc, op), d.shape);
    n_ = d.numel();
    r_ = op.inputs[1];
  }

 private:
  void run_image(const ExecCtx& c, int bi, const float* d, float* y) const override {
    constexpr float eps = 1e-5f;
    const float* r = c.f(r_, bi);
    for (int64_t i = 0; i < n_; ++i) {
      const float x = std::min(std::max(r[i], 0.f), 1.f);
      const float inv = std::log(std::max(x, eps) / std::max(1.f - x, eps));
      y[i] = 1.f / (1.f + std::exp(-(d[i] + inv)));
    }
  }

  int64_t n_;
  graph::TensorId r_;
};

}  // namespace

StepPtr make_box_refine_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<BoxRefineStep>(cc, op); }

}  // namespace detforge::cpu
