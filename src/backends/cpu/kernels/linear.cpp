// linear on oneDNN matmul: rows = the image's L tokens, weights [N,K] reordered once into the
// primitive's preferred layout, bias, and the epilogue as post-ops (binary_add residual, act).
#include "backends/cpu/dnnl_util.h"

namespace detforge::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

class LinearStep final : public DnnlEpilogueStep {
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
    if (has_bias) expect_shape(op, in_tensor(cc, op, 2), {N});
    if (has_res) expect_shape(op, in_tensor(cc, op, 3), {M, N});

    memory::desc src_md({M, K}, dt::f32, tag::ab);
    memory::desc dst_md({M, N}, dt::f32, tag::ab);
    memory::desc w_any({K, N}, dt::f32, tag::any);
    memory::desc b_md({1, N}, dt::f32, tag::ab);
    auto d = has_bias ? dnnl::matmul::desc(src_md, w_any, b_md, dst_md) : dnnl::matmul::desc(src_md, w_any, dst_md);
    auto attr = make_epilogue_attr(op.act(), has_res ? &dst_md : nullptr);
    auto pd = make_primitive_desc<dnnl::matmul::primitive_desc>(op, "matmul", d, attr, cc.eng);
    // PyTorch [N,K] row-major is the {K,N} matrix with strides {1,K} (format ba).
    memory w_user({{K, N}, dt::f32, tag::ba}, cc.eng, const_cast<float*>(wdata.data()));
    bind(cc, op, dnnl::matmul(pd), pd, w_user, b_md, src_md, dst_md);
  }
};

}  // namespace

StepPtr make_linear_step(const CompileCtx& cc, const graph::Op& op) { return std::make_unique<LinearStep>(cc, op); }

}  // namespace detforge::cpu
