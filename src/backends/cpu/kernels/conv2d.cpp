// conv2d on oneDNN: src/dst NHWC fp32 per image, weights reordered once into the layout the
// primitive prefers (format_tag::any), bias, and the epilogue fused as post-ops:
// binary_add(residual) then the activation, matching out = act(conv(x,w)+b (+residual)).
#include "backends/cpu/dnnl_util.h"

#include <algorithm>

namespace detforge::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

class Conv2dStep final : public Step {
 public:
  Conv2dStep(const CompileCtx& cc, const graph::Op& op) {
    expect_inputs(op, 3, 4);
    expect_outputs(op, 1);
    const auto& x = in_tensor(cc, op, 0);
    const auto& w = in_tensor(cc, op, 1);
    const auto& y = out_tensor(cc, op);
    expect_rank(op, x, 3);
    expect_rank(op, w, 4);
    const auto& wdata = const_data(op, w);
    const int64_t H = x.shape[0], W = x.shape[1], Ci = x.shape[2];
    const int64_t Co = w.shape[0], kh = w.shape[2], kw = w.shape[3];
    if (w.shape[1] != Ci) op_fail(op, "weight " + w.name + " " + shape_str(w.shape) + " does not match input channels " + std::to_string(Ci));
    const int s = op.attr_int("stride"), p = op.attrs.contains("pad") ? op.attr_int("pad") : 0;
    if (s < 1 || p < 0) op_fail(op, "bad stride/pad");
    const int64_t Ho = (H + 2 * p - kh) / s + 1, Wo = (W + 2 * p - kw) / s + 1;
    if (Ho < 1 || Wo < 1) op_fail(op, "kernel larger than the padded input");
    expect_shape(op, y, {Ho, Wo, Co});
    const bool has_bias = has_input(op, 2);
    const bool has_res = has_input(op, 3);
    if (has_bias) expect_shape(op, in_tensor(cc, op, 2), {Co});
    if (has_res) expect_shape(op, in_tensor(cc, op, 3), {Ho, Wo, Co});
    x_ = op.inputs[0];
    y_ = op.outputs[0];
    res_ = has_res ? op.inputs[3] : graph::kNoTensor;

    memory::desc src_md({1, Ci, H, W}, dt::f32, tag::nhwc);
    memory::desc dst_md({1, Co, Ho, Wo}, dt::f32, tag::nhwc);
    memory::desc w_any({Co, Ci, kh, kw}, dt::f32, tag::any);
    memory::desc b_md({Co}, dt::f32, tag::a);
    dnnl::convolution_forward::desc d =
        has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                    src_md, w_any, b_md, dst_md, {s, s}, {p, p}, {p, p})
                 : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                    src_md, w_any, dst_md, {s, s}, {p, p}, {p, p});
    auto attr = make_epilogue_attr(op.act(), has_res ? &dst_md : nullptr);
    dnnl::convolution_forward::primitive_desc pd;
    try {
      pd = dnnl::convolution_forward::primitive_desc(d, attr, cc.eng);
    } catch (const dnnl::error& e) {
      op_fail(op, std::string("oneDNN has no convolution for this configuration: ") + e.what());
    }
    // Weights: OIHW fp32 master copy -> the primitive's preferred layout, once.
    memory w_user({{Co, Ci, kh, kw}, dt::f32, tag::oihw}, cc.eng, const_cast<float*>(wdata.data()));
    weights_ = memory(pd.weights_desc(), cc.eng);
    dnnl::stream s_(cc.eng);
    dnnl::reorder(w_user, weights_).execute(s_, w_user, weights_);
    if (has_bias) {
      const auto& b = in_tensor(cc, op, 2);
      const auto& bdata = const_data(op, b);
      bias_ = memory(b_md, cc.eng);
      std::copy(bdata.begin(), bdata.end(), static_cast<float*>(bias_.get_data_handle()));
    }
    s_.wait();
    call_.init(dnnl::convolution_forward(pd), pd, cc.eng);
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

StepPtr make_conv2d_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<Conv2dStep>(cc, op); }

}  // namespace detforge::cpu
