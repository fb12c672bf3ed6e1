// Multi-head attention core: per head h (channels h*d..h*d+d-1),
//   out_h = softmax(scale * q_h k_h^T) v_h,  softmax max-subtracted in fp32.
// All three stages run on oneDNN: batched matmul over heads (with `scale` as its output scale),
// softmax over keys in place, batched matmul with V. Measured on r18vd, one thread on a shared
// (loaded) 2-core box: an own SSE loop took 86 ms of an 830 ms forward; with the matmuls on
// oneDNN but a scalar std::exp softmax still ~50 ms (3.4 M exps per forward are not vectorised
// without -ffast-math), so the softmax moved to oneDNN's vectorised one: 13 ms there, and
// 2.4 ms of a 157 ms forward on 2 threads of a quieter box. Q, K, V are first packed head-major ([H,L,d],
// [H,S,d], [H,S,d]) so both products see dense operands: K^T is the same buffer read with
// transposed strides (format acb), which oneDNN's GEMM takes as is.
#include <algorithm>

#include "backends/cpu/dnnl_util.h"

namespace detforge::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

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
    expect_rank(op, v, 2);
    const auto& out = out_tensor(cc, op);
    expect_rank(op, out, 2);
    L_ = q.shape[0];
    C_ = out.shape[1];
    S_ = k.shape[0];
    expect_shape(op, out, {L_, C_});
    if (v.shape[0] != S_) op_fail(op, "k has " + std::to_string(S_) + " rows, v " + std::to_string(v.shape[0]));
    // q, k, v may be column slices of wider tensors (graph::merge_qk_projections).
    if (const auto why = graph::attention_columns_error(cc.g, op); !why.empty()) op_fail(op, why);
    const auto cols = graph::attention_columns(op);
    const int64_t col[3] = {cols.q, cols.k, cols.v};
    const graph::Tensor* t[3] = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) {
      ld_[i] = t[i]->shape[1];
      col_[i] = col[i];
    }
    heads_ = op.attr_int("heads");
    if (heads_ < 1 || C_ % heads_ != 0) op_fail(op, "heads " + std::to_string(heads_) + " does not divide width " + std::to_string(C_));
    d_ = C_ / heads_;
    scale_ = op.attr_float("scale");
    q_ = op.inputs[0];
    k_ = op.inputs[1];
    v_ = op.inputs[2];
    y_ = op.outputs[0];

    const int64_t H = heads_;
    memory::desc qh({H, L_, d_}, dt::f32, tag::abc);
    memory::desc kt({H, d_, S_}, dt::f32, tag::acb);  // [H,S,d] storage read as [H,d,S]
    memory::desc sc({H, L_, S_}, dt::f32, tag::abc);
    memory::desc vh({H, S_, d_}, dt::f32, tag::abc);
    memory::desc oh({H, L_, d_}, dt::f32, tag::abc);
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::primitive_attr scaled;  // not a copy of attr: oneDNN attr copies share one object
      scaled.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      scaled.set_output_scales(0, {scale_});
      dnnl::matmul::primitive_desc pd1(dnnl::matmul::desc(qh, kt, sc), scaled, cc.eng);
      dnnl::matmul::primitive_desc pd2(dnnl::matmul::desc(sc, vh, oh), attr, cc.eng);
      dnnl::softmax_forward::primitive_desc pds(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, sc, 2), attr, cc.eng);
      qk_.init(dnnl::matmul(pd1), pd1, cc.eng);
      pv_.init(dnnl::matmul(pd2), pd2, cc.eng);
      sm_.init(dnnl::softmax_forward(pds), pds, cc.eng);
      sm_.add_arg(DNNL_ARG_SRC, memory(sc, cc.eng, DNNL_MEMORY_NONE));
      sm_.add_arg(DNNL_ARG_DST, memory(sc, cc.eng, DNNL_MEMORY_NONE));
      qk_.add_arg(DNNL_ARG_SRC, memory(qh, cc.eng, DNNL_MEMORY_NONE));
      qk_.add_arg(DNNL_ARG_WEIGHTS, memory(kt, cc.eng, DNNL_MEMORY_NONE));
      qk_.add_arg(DNNL_ARG_DST, memory(sc, cc.eng, DNNL_MEMORY_NONE));
      pv_.add_arg(DNNL_ARG_SRC, memory(sc, cc.eng, DNNL_MEMORY_NONE));
      pv_.add_arg(DNNL_ARG_WEIGHTS, memory(vh, cc.eng, DNNL_MEMORY_NONE));
      pv_.add_arg(DNNL_ARG_DST, memory(oh, cc.eng, DNNL_MEMORY_NONE));
    } catch (const dnnl::error& e) {
      op_fail(op, std::string("oneDNN has no matmul for this attention: ") + e.what());
    }
  }

  // Scratch layout: [oneDNN scratchpad | Qh | Kh | Vh | scores | Oh], each 64-byte aligned.
  size_t scratch_bytes() const override {
    const size_t pad = std::max({qk_.scratch_bytes(), pv_.scratch_bytes(), sm_.scratch_bytes()});
    return al(pad) + al(4 * C_ * L_) + 2 * al(4 * C_ * S_) + al(4 * heads_ * L_ * S_) + al(4 * C_ * L_);
  }

  void run(const ExecCtx& c, int batch) override {
    char* base = static_cast<char*>(c.scratch);
    const size_t pad = al(std::max({qk_.scratch_bytes(), pv_.scratch_bytes(), sm_.scratch_bytes()}));
    float* qh = reinterpret_cast<float*>(base + pad);
    float* kh = qh + al(4 * C_ * L_) / 4;
    float* vh = kh + al(4 * C_ * S_) / 4;
    float* sc = vh + al(4 * C_ * S_) / 4;
    float* oh = sc + al(4 * heads_ * L_ * S_) / 4;
    const int64_t C = C_, d = d_, H = heads_, L = L_, S = S_;
    qk_.set(DNNL_ARG_SRC, qh);
    qk_.set(DNNL_ARG_WEIGHTS, kh);
    qk_.set(DNNL_ARG_DST, sc);
    pv_.set(DNNL_ARG_SRC, sc);
    pv_.set(DNNL_ARG_WEIGHTS, vh);
    pv_.set(DNNL_ARG_DST, oh);
    sm_.set(DNNL_ARG_SRC, sc);
    sm_.set(DNNL_ARG_DST, sc);
    for (int bi = 0; bi < batch; ++bi) {
      const float* q = c.f(q_, bi);
      const float* k = c.f(k_, bi);
      const float* v = c.f(v_, bi);
      float* y = c.f(y_, bi);
      pack(q + col_[0], ld_[0], qh, L);
      pack(k + col_[1], ld_[1], kh, S);
      pack(v + col_[2], ld_[2], vh, S);
      qk_.execute(c);
      sm_.execute(c);
      pv_.execute(c);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t h = 0; h < H; ++h) std::copy(oh + (h * L + i) * d, oh + (h * L + i) * d + d, y + i * C + h * d);
    }
  }

 private:
  static size_t al(int64_t bytes) { return (static_cast<size_t>(bytes) + 63) / 64 * 64; }
  // [n, C] with row stride ld (channel = h*d + e) -> [H, n, d]
  void pack(const float* src, int64_t ld, float* dst, int64_t n) const {
    const int64_t d = d_, H = heads_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < H; ++h) std::copy(src + i * ld + h * d, src + i * ld + h * d + d, dst + (h * n + i) * d);
  }

  graph::TensorId q_, k_, v_, y_;
  int64_t ld_[3] = {}, col_[3] = {};  // row stride and first column of q, k, v
  int64_t L_, C_, S_, d_;
  int heads_;
  float scale_;
  DnnlCall qk_, pv_, sm_;
};

}  // namespace

StepPtr make_attention_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<AttentionStep>(cc, op); }

}  // namespace detforge::cpu
