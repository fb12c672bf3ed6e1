// linear on oneDNN matmul: rows = the image's L tokens, weights [N,K] reordered once into the
// primitive's preferred layout, bias, and the epilogue as post-ops (binary_add residual, act).
#include <algorithm>

#include "backends/cpu/dnnl_util.h"

namespace detforge::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

class LinearStep final : public Step {
 public:
  LinearStep(const CompileCtx& cc, const graph::Op& op) {
    expect_inputs(op, 3, 4);
    expect_outputs(op, 1);
    const auto& x = in_tensor(cc, op, 0);
    const auto& w = in_tensor(cc, op, 1);
    const auto& y = out_tensor(cc, op);
    expect_rank(op, x, 2);
    expect_rank(op, w, 2);
    const auto& wdata = const_data(op, w);
    const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
    if (w.shape[1] != K) op_fail(op, "weight " + w.name + " " + shape_str(w.shape) + " does not match input width " + std::to_string(K));
    expect_shape(op, y, {M, N});
    const bool has_bias = has_input(op, 2), has_res = has_input(op, 3);
    if (has_res) expect_shape(op, in_tensor(cc, op, 3), {M, N});
    x_ = op.inputs[0];
    y_ = op.outputs[0];
    res_ = has_res ? op.inputs[3] : graph::kNoTensor;

    memory::desc src_md({M, K}, dt::f32, tag::ab);
    memory::desc dst_md({M, N}, dt::f32, tag::ab);
    memory::desc w_any({K, N}, dt::f32, tag::any);
    memory::desc b_md({1, N}, dt::f32, tag::ab);
    auto d = has_bias ? dnnl::matmul::desc(src_md, w_any, b_md, dst_md) : dnnl::matmul::desc(src_md, w_any, dst_md);
    auto attr = make_epilogue_attr(op.act(), has_res ? &dst_md : nullptr);
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(d, attr, cc.eng);
    } catch (const dnnl::error& e) {
      op_fail(op, std::string("oneDNN has no matmul for this configuration: ") + e.what());
    }
    // PyTorch [N,K] row-major is the {K,N} matrix with strides {1,K} (format ba).
    memory w_user({{K, N}, dt::f32, tag::ba}, cc.eng, const_cast<float*>(wdata.data()));
    weights_ = memory(pd.weights_desc(), cc.eng);
    dnnl::stream s(cc.eng);
    dnnl::reorder(w_user, weights_).execute(s, w_user, weights_);
    s.wait();
    if (has_bias) {
      const auto& b = in_tensor(cc, op, 2);
      expect_shape(op, b, {N});
      const auto& bdata = const_data(op, b);
      bias_ = memory(b_md, cc.eng);
      std::copy(bdata.begin(), bdata.end(), static_cast<float*>(bias_.get_data_handle()));
    }
    call_.init(dnnl::matmul(pd), pd, cc.eng);
    call_.add_arg(DNNL_ARG_SRC, memory(src_md, cc.eng, DNNL_MEMORY_NONE));
    call_.add_arg(DNNL_ARG_WEIGHTS, weights_);
    if (has_bias) call_.add_arg(DNNL_ARG_BIAS, bias_);
    call_.add_arg(DNNL_ARG_DST, memory(dst_md, cc.eng, DNNL_MEMORY_NONE));
    if (has_res) call_.add_arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(dst_md, cc.eng, DNNL_MEMORY_NONE));
  }

  void run(const ExecCtx& c, int batch) override {
    for (int b = 0; b < batch; ++b) {
      call_.set(DNNL_ARG_SRC, c.f(x_, b));
      call_.set(DNNL_ARG_DST, c.f(y_, b));
      if (res_ != graph::kNoTensor) call_.set(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, c.f(res_, b));
      call_.execute(c);
    }
  }
  size_t scratch_bytes() const override { return call_.scratch_bytes(); }

 private:
  graph::TensorId x_, y_, res_;
  memory weights_, bias_;
  DnnlCall call_;
};

}  // namespace

StepPtr make_linear_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<LinearStep>(cc, op); }

}  // namespace detforge::cpu
