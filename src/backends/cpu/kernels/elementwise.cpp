// add (with act; a constant b broadcasts over the batch), mul_rows, activation.
#include <omp.h>

#include "backends/cpu/kernels/act_inline.h"
#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class AddStep final : public PerImageStep {
 public:
  AddStep(const CompileCtx& cc, const graph::Op& op) : PerImageStep(op, 2, 2) {
    const auto& a = in_tensor(cc, op, 0);
    const auto& b = in_tensor(cc, op, 1);
    const auto& y = out_tensor(cc, op);
    expect_shape(op, b, a.shape);
    expect_shape(op, y, a.shape);
    if (b.is_const) const_data(op, b);
    if (a.is_const) const_data(op, a);
    b_ = op.inputs[1];
    n_ = a.numel();
    act_ = op.act();
  }

 private:
  void run_image(const ExecCtx& c, int bi, const float* a, float* y) const override {
    const float* b = c.f(b_, bi);
    const int64_t n = n_;
    with_act(act_, [&]<graph::Act A>() {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) y[i] = act_t<A>(a[i] + b[i]);
    });
  }

  graph::TensorId b_;
  int64_t n_;
  graph::Act act_;
};

class MulRowsStep final : public PerImageStep {
 public:
  MulRowsStep(const CompileCtx& cc, const graph::Op& op) : PerImageStep(op, 2, 2) {
    const auto& x = in_tensor(cc, op, 0);
    expect_rank(op, x, 2);
    const auto& m = in_tensor(cc, op, 1);
    expect_shape(op, m, {x.shape[0]});
    const_data(op, m);
    expect_shape(op, out_tensor(cc, op), x.shape);
    m_ = op.inputs[1];
    L_ = x.shape[0];
    C_ = x.shape[1];
  }

 private:
  void run_image(const ExecCtx& c, int, const float* x, float* y) const override {
    const float* m = c.f(m_, 0);  // a constant: the same rows for every image
    const int64_t C = C_;
#pragma omp parallel for schedule(static)
    for (int64_t l = 0; l < L_; ++l) {
      const float s = m[l];
#pragma omp simd
      for (int64_t k = 0; k < C; ++k) y[l * C + k] = x[l * C + k] * s;
    }
  }

  graph::TensorId m_;
  int64_t L_, C_;
};

class ActivationStep final : public PerImageStep {
 public:
  ActivationStep(const CompileCtx& cc, const graph::Op& op) : PerImageStep(op, 1, 1) {
    const auto& x = in_tensor(cc, op, 0);
    expect_shape(op, out_tensor(cc, op), x.shape);
    n_ = x.numel();
    act_ = op.act();
  }

 private:
  void run_image(const ExecCtx&, int, const float* x, float* y) const override {
    const int64_t n = n_;
    with_act(act_, [&]<graph::Act A>() {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) y[i] = act_t<A>(x[i]);
    });
  }

  int64_t n_;
  graph::Act act_;
};

}  // namespace

StepPtr make_add_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<AddStep>(cc, op); }
StepPtr make_mul_rows_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<MulRowsStep>(cc, op); }
StepPtr make_activation_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<ActivationStep>(cc, op); }

}  // namespace detforge::cpu
