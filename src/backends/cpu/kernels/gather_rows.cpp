// gather_rows: out[i,:] = x[idx[i],:] for x[L,C] and int32 idx[K]. An index outside 0..L-1 is
// an error naming the op (it can only come from a malformed graph).
#include <algorithm>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class GatherRowsStep final : public Step {
 public:
  GatherRowsStep(const CompileCtx& cc, const graph::Op& op) : op_label_(op_label(op)) {
    expect_inputs(op, 2, 2);
    expect_outputs(op, 1);
    const auto& x = in_tensor(cc, op, 0);
    expect_rank(op, x, 2);
    const auto& idx = in_tensor(cc, op, 1);
    expect_rank(op, idx, 1);
    if (idx.dtype != graph::DType::i32) op_fail(op, "index " + idx.name + " must be i32");
    if (idx.is_const) op_fail(op, "constant index tensors are not supported");
    L_ = x.shape[0];
    C_ = x.shape[1];
    K_ = idx.shape[0];
    expect_shape(op, out_tensor(cc, op), {K_, C_});
    x_ = op.inputs[0];
    idx_ = op.inputs[1];
    y_ = op.outputs[0];
  }

  void run(const ExecCtx& c, int batch) override {
    for (int bi = 0; bi < batch; ++bi) {
      const float* x = c.f(x_, bi);
      const int32_t* idx = c.i(idx_, bi);
      float* y = c.f(y_, bi);
      for (int64_t i = 0; i < K_; ++i)
        if (idx[i] < 0 || idx[i] >= L_)
          throw Error(op_label_ + ": index " + std::to_string(idx[i]) + " outside 0.." + std::to_string(L_ - 1));
      const int64_t C = C_;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < K_; ++i) std::copy(x + idx[i] * C, x + idx[i] * C + C, y + i * C);
    }
  }

 private:
  std::string op_label_;
  graph::TensorId x_, idx_, y_;
  int64_t L_, C_, K_;
};

}  // namespace

StepPtr make_gather_rows_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<GatherRowsStep>(cc, op); }

}  // namespace detforge::cpu
