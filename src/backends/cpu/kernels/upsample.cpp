// upsample_nearest2x: out[y][x] = in[y/2][x/2] on NHWC per image.
#include <algorithm>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class UpsampleStep final : public Step {
 public:
  UpsampleStep(const CompileCtx& cc, const graph::Op& op) {
    expect_inputs(op, 1, 1);
    expect_outputs(op, 1);
    const auto& x = in_tensor(cc, op, 0);
    expect_rank(op, x, 3);
    H_ = x.shape[0];
    W_ = x.shape[1];
    C_ = x.shape[2];
    expect_shape(op, out_tensor(cc, op), {2 * H_, 2 * W_, C_});
    x_ = op.inputs[0];
    y_ = op.outputs[0];
  }

  void run(const ExecCtx& c, int batch) override {
    const int64_t C = C_, Wo = 2 * W_;
    for (int bi = 0; bi < batch; ++bi) {
      const float* x = c.f(x_, bi);
      float* y = c.f(y_, bi);
#pragma omp parallel for schedule(static)
      for (int64_t oy = 0; oy < 2 * H_; ++oy)
        for (int64_t ox = 0; ox < Wo; ++ox) {
          const float* in = x + ((oy / 2) * W_ + ox / 2) * C;
          std::copy(in, in + C, y + (oy * Wo + ox) * C);
        }
    }
  }

 private:
  graph::TensorId x_, y_;
  int64_t H_, W_, C_;
};

}  // namespace

StepPtr make_upsample_nearest2x_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<UpsampleStep>(cc, op); }

}  // namespace detforge::cpu
