// conv2d on oneDNN: src/dst NHWC fp32 per image, weights reordered once into the layout the
// primitive prefers (format_tag::any), bias, and the epilogue fused as post-ops:
// binary_add(residual) then the activation, matching out = act(conv(x,w)+b (+residual)), or the
// activation then binary_add(residual) for res_after_act.
#include "backends/cpu/dnnl_util.h"

namespace detforge::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

class Conv2dStep final : public DnnlEpilogueStep {
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
    const int s = op.attr_int("stride"), p = op.attr_int_or("pad", 0);
    if (s < 1 || p < 0) op_fail(op, "bad stride/pad");
    const int64_t Ho = (H + 2 * p - kh) / s + 1, Wo = (W + 2 * p - kw) / s + 1;
    if (Ho < 1 || Wo < 1) op_fail(op, "kernel larger than the padded input");
    expect_shape(op, y, {Ho, Wo, Co});
    const bool has_bias = has_input(op, 2);
    const bool has_res = has_input(op, 3);
    if (has_bias) expect_shape(op, in_tensor(cc, op, 2), {Co});
    if (has_res) expect_shape(op, in_tensor(cc, op, 3), {Ho, Wo, Co});

    memory::desc src_md({1, Ci, H, W}, dt::f32, tag::nhwc);
    memory::desc dst_md({1, Co, Ho, Wo}, dt::f32, tag::nhwc);
    memory::desc w_any({Co, Ci, kh, kw}, dt::f32, tag::any);
    memory::desc b_md({Co}, dt::f32, tag::a);
    dnnl::convolution_forward::desc d =
        has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                    src_md, w_any, b_md, dst_md, {s, s}, {p, p}, {p, p})
                 : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                    src_md, w_any, dst_md, {s, s}, {p, p}, {p, p});
    auto attr = make_epilogue_attr(op.act(), has_res ? &dst_md : nullptr, op.res_after_act());
    auto pd = make_primitive_desc<dnnl::convolution_forward::primitive_desc>(op, "convolution", d, attr, cc.eng);
    // Weights: OIHW fp32 master copy, reordered once by bind().
    memory w_user({{Co, Ci, kh, kw}, dt::f32, tag::oihw}, cc.eng, const_cast<float*>(wdata.data()));
    bind(cc, op, dnnl::convolution_forward(pd), pd, w_user, b_md, src_md, dst_md);
  }
};

}  // namespace

StepPtr make_conv2d_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<Conv2dStep>(cc, op); }

}  // namespace detforge::cpu
