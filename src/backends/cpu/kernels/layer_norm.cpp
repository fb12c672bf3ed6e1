// layer_norm over the last dim of [L,C], with an optional residual added first:
// out = LN(x (+residual)) * gamma + beta. Statistics are two-pass (mean, then the centred sum of
// squares) accumulated in double: PyTorch's CPU LayerNorm is accurate to ~1 ulp in fp32 and a
// one-pass E[x^2]-E[x]^2 in fp32 loses several digits on post-residual rows whose mean is large
// relative to their spread, which would eat into the 1e-4 end-to-end budget.
#include <cmath>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class LayerNormStep final : public PerImageStep {
 public:
  LayerNormStep(const CompileCtx& cc, const graph::Op& op) : PerImageStep(op, 3, 4) {
    const auto& x = in_tensor(cc, op, 0);
    expect_rank(op, x, 2);
    L_ = x.shape[0];
    C_ = x.shape[1];
    gamma_ = const_data(op, in_tensor(cc, op, 1));
    beta_ = const_data(op, in_tensor(cc, op, 2));
    if (static_cast<int64_t>(gamma_.size()) != C_ || static_cast<int64_t>(beta_.size()) != C_)
      op_fail(op, "gamma/beta must have " + std::to_string(C_) + " values");
    if (has_input(op, 3)) {
      expect_shape(op, in_tensor(cc, op, 3), x.shape);
      res_ = op.inputs[3];
    }
    expect_shape(op, out_tensor(cc, op), x.shape);
    eps_ = op.attrs.contains("eps") ? op.attr_float("eps") : 1e-5f;
  }

 private:
  void run_image(const ExecCtx& c, int bi, const float* x, float* y) const override {
    const int64_t C = C_;
    const float* g = gamma_.data();
    const float* be = beta_.data();
    const float* r = res_ != graph::kNoTensor ? c.f(res_, bi) : nullptr;
#pragma omp parallel for schedule(static)
    for (int64_t l = 0; l < L_; ++l) {
      const float* xr = x + l * C;
      float* yr = y + l * C;
      double sum = 0;
      if (r) {
        const float* rr = r + l * C;
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < C; ++k) {
          const float v = xr[k] + rr[k];
          yr[k] = v;
          sum += v;
        }
      } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < C; ++k) {
          yr[k] = xr[k];
          sum += xr[k];
        }
      }
      const double mean = sum / static_cast<double>(C);
      double sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t k = 0; k < C; ++k) {
        const double d = yr[k] - mean;
        sq += d * d;
      }
      const double var = sq / static_cast<double>(C);  // biased, as torch
      const float rstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps_)));
      const float m = static_cast<float>(mean);
#pragma omp simd
      for (int64_t k = 0; k < C; ++k) yr[k] = (yr[k] - m) * rstd * g[k] + be[k];
    }
  }

  graph::TensorId res_ = graph::kNoTensor;
  int64_t L_, C_;
  std::vector<float> gamma_, beta_;
  float eps_;
};

}  // namespace

StepPtr make_layer_norm_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<LayerNormStep>(cc, op); }

}  // namespace detforge::cpu
