// topk_rows: out[k] (int32) = indices of the k largest per-row maxima of scores[L,Ncls],
// sorted by value descending; equal values keep the lower row index first, and NaN ranks above
// every number (as torch.topk does). torch's CPU topk does not promise an order among ties, so
// where several rows share a score (RT-DETR's invalid anchors all score the same) its order may
// differ from ours; the family spec (section 7) says to compare per selected index.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class TopkRowsStep final : public Step {
 public:
  TopkRowsStep(const CompileCtx& cc, const graph::Op& op) {
    expect_inputs(op, 1, 1);
    expect_outputs(op, 1);
    const auto& s = in_tensor(cc, op, 0);
    expect_rank(op, s, 2);
    L_ = s.shape[0];
    N_ = s.shape[1];
    k_ = op.attr_int("k");
    if (k_ < 1 || k_ > L_) op_fail(op, "k = " + std::to_string(k_) + " must be in 1.." + std::to_string(L_));
    if (N_ < 1) op_fail(op, "scores have no classes");
    const auto& y = out_tensor(cc, op);
    if (y.dtype != graph::DType::i32) op_fail(op, "output " + y.name + " must be i32");
    expect_shape(op, y, {k_});
    s_ = op.inputs[0];
    y_ = op.outputs[0];
  }
  size_t scratch_bytes() const override { return static_cast<size_t>(L_) * (sizeof(float) + sizeof(int32_t)) + 64; }

  void run(const ExecCtx& c, int batch) override {
    float* mx = static_cast<float*>(c.scratch);
    int32_t* idx = reinterpret_cast<int32_t*>(mx + L_);
    const int64_t N = N_;
    for (int bi = 0; bi < batch; ++bi) {
      const float* s = c.f(s_, bi);
#pragma omp parallel for schedule(static)
      for (int64_t l = 0; l < L_; ++l) {
        const float* r = s + l * N;
        float m = r[0];
        for (int64_t j = 1; j < N; ++j)
          if (r[j] > m || std::isnan(r[j])) m = r[j];
        mx[l] = m;
        idx[l] = static_cast<int32_t>(l);
      }
      auto before = [mx](int32_t a, int32_t b) {
        const float va = mx[a], vb = mx[b];
        const bool na = std::isnan(va), nb = std::isnan(vb);
        if (na != nb) return na;
        if (!na && va != vb) return va > vb;
        return a < b;
      };
      std::partial_sort(idx, idx + k_, idx + L_, before);
      std::copy(idx, idx + k_, c.i(y_, bi));
    }
  }

 private:
  graph::TensorId s_, y_;
  int64_t L_, N_;
  int k_;
};

}  // namespace

StepPtr make_topk_rows_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<TopkRowsStep>(cc, op); }

}  // namespace detforge::cpu
