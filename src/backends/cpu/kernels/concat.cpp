// concat along any axis (batch excluded): with outer = product of the dims before `axis`, each
// input contributes a contiguous block of inner_i = product of its dims from `axis` on per outer
// index. Row concat of tokens (axis 0) is one block per input; channel concat of NHWC maps
// (axis 2) interleaves per pixel.
#include <algorithm>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class ConcatStep final : public Step {
 public:
  ConcatStep(const CompileCtx& cc, const graph::Op& op) {
    if (op.inputs.empty()) op_fail(op, "has no inputs");
    expect_outputs(op, 1);
    const auto& first = in_tensor(cc, op, 0);
    const int rank = static_cast<int>(first.shape.size());
    int axis = op.attr_int("axis");
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) op_fail(op, "axis out of range for rank " + std::to_string(rank));
    std::vector<int64_t> out_shape = first.shape;
    out_shape[axis] = 0;
    outer_ = 1;
    for (int d = 0; d < axis; ++d) outer_ *= first.shape[d];
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const auto& t = in_tensor(cc, op, i);
      if (static_cast<int>(t.shape.size()) != rank) op_fail(op, "input " + t.name + " has a different rank");
      for (int d = 0; d < rank; ++d)
        if (d != axis && t.shape[d] != first.shape[d])
          op_fail(op, "input " + t.name + " " + shape_str(t.shape) + " does not match " + shape_str(first.shape) + " off the axis");
      if (t.is_const) const_data(op, t);
      out_shape[axis] += t.shape[axis];
      int64_t inner = 1;
      for (int d = axis; d < rank; ++d) inner *= t.shape[d];
      inputs_.push_back(op.inputs[i]);
      inner_.push_back(inner);
    }
    expect_shape(op, out_tensor(cc, op), out_shape);
    out_inner_ = 0;
    for (auto n : inner_) out_inner_ += n;
    y_ = op.outputs[0];
  }

  void run(const ExecCtx& c, int batch) override {
    for (int bi = 0; bi < batch; ++bi) {
      float* y = c.f(y_, bi);
      int64_t col = 0;
      for (size_t i = 0; i < inputs_.size(); ++i) {
        const float* x = c.f(inputs_[i], bi);
        const int64_t n = inner_[i], on = out_inner_, o0 = col;
        if (outer_ == 1) {  // one block (token rows): split it into 64 KiB chunks across threads
          const int64_t chunk = 16384, nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
          for (int64_t k = 0; k < nchunks; ++k)
            std::copy(x + k * chunk, x + std::min(n, (k + 1) * chunk), y + o0 + k * chunk);
        } else {
#pragma omp parallel for schedule(static)
          for (int64_t o = 0; o < outer_; ++o) std::copy(x + o * n, x + o * n + n, y + o * on + o0);
        }
        col += n;
      }
    }
  }

 private:
  std::vector<graph::TensorId> inputs_;
  std::vector<int64_t> inner_;
  int64_t outer_, out_inner_;
  graph::TensorId y_;
};

}  // namespace

StepPtr make_concat_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<ConcatStep>(cc, op); }

}  // namespace detforge::cpu
