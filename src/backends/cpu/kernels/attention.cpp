// Multi-head attention core: per head h (channels h*d..h*d+d-1),
//   out_h = softmax(scale * q_h k_h^T) v_h,  softmax max-subtracted, fp32 accumulation.
// K is packed once per run into [head][d][S] so the score loop runs over contiguous keys
// (vectorises over S); the value loop runs over the head's d contiguous channels.
// Work is split over (head, query row) pairs; each thread owns an S-float score row of scratch.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

class AttentionStep final : public Step {
 public:
  AttentionStep(const CompileCtx& cc, const graph::Op& op) {
    expect_inputs(op, 3, 3);
    expect_outputs(op, 1);
    const auto& q = in_tensor(cc, op, 0);
    const auto& k = in_tensor(cc, op, 1);
    const auto& v = in_tensor(cc, op, 2);
    expect_rank(op, q, 2);
    expect_rank(op, k, 2);
    L_ = q.shape[0];
    C_ = q.shape[1];
    S_ = k.shape[0];
    expect_shape(op, k, {S_, C_});
    expect_shape(op, v, {S_, C_});
    expect_shape(op, out_tensor(cc, op), {L_, C_});
    heads_ = op.attr_int("heads");
    if (heads_ < 1 || C_ % heads_ != 0) op_fail(op, "heads " + std::to_string(heads_) + " does not divide width " + std::to_string(C_));
    d_ = C_ / heads_;
    scale_ = op.attr_float("scale");
    nt_ = std::max(1, cc.threads);
    q_ = op.inputs[0];
    k_ = op.inputs[1];
    v_ = op.inputs[2];
    y_ = op.outputs[0];
  }

  size_t scratch_bytes() const override {
    return sizeof(float) * static_cast<size_t>(C_ * S_ + nt_ * row_stride());
  }

  void run(const ExecCtx& c, int batch) override {
    float* kt = static_cast<float*>(c.scratch);
    float* rows = kt + C_ * S_;
    const int64_t C = C_, S = S_, d = d_, H = heads_;
    const float scale = scale_;
    for (int bi = 0; bi < batch; ++bi) {
      const float* q = c.f(q_, bi);
      const float* k = c.f(k_, bi);
      const float* v = c.f(v_, bi);
      float* y = c.f(y_, bi);
      // kt[h][dd][j] = k[j][h*d+dd]: channel-major transpose, c = h*d+dd.
#pragma omp parallel for schedule(static) num_threads(nt_)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t j = 0; j < S; ++j) kt[ch * S + j] = k[j * C + ch];
#pragma omp parallel for schedule(static) num_threads(nt_)
      for (int64_t t = 0; t < H * L_; ++t) {
        const int64_t h = t / L_, i = t % L_;
        float* s = rows + omp_get_thread_num() * row_stride();
        const float* qi = q + i * C + h * d;
        const float* kh = kt + h * d * S;
        std::fill(s, s + S, 0.f);
        for (int64_t dd = 0; dd < d; ++dd) {
          const float qv = qi[dd];
          const float* kr = kh + dd * S;
#pragma omp simd
          for (int64_t j = 0; j < S; ++j) s[j] += qv * kr[j];
        }
        float mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          s[j] *= scale;
          mx = std::max(mx, s[j]);
        }
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < S; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        const float inv = 1.f / sum;
        float* yi = y + i * C + h * d;
        std::fill(yi, yi + d, 0.f);
        for (int64_t j = 0; j < S; ++j) {
          const float p = s[j] * inv;
          const float* vr = v + j * C + h * d;
#pragma omp simd
          for (int64_t dd = 0; dd < d; ++dd) yi[dd] += p * vr[dd];
        }
      }
    }
  }

 private:
  int64_t row_stride() const { return (S_ + 15) / 16 * 16; }  // 64-byte aligned rows
  graph::TensorId q_, k_, v_, y_;
  int64_t L_, C_, S_, d_;
  int heads_, nt_;
  float scale_;
};

}  // namespace

StepPtr make_attention_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<AttentionStep>(cc, op); }

}  // namespace detforge::cpu
