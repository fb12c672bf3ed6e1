#include "backends/cpu/dnnl_util.h"

#include <algorithm>

namespace detforge::cpu {

dnnl::primitive_attr make_epilogue_attr(graph::Act act, const dnnl::memory::desc* residual_md, bool res_after_act) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (residual_md && !res_after_act) po.append_binary(dnnl::algorithm::binary_add, *residual_md);
  switch (act) {
    case graph::Act::none: break;
    case graph::Act::relu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f); break;
    case graph::Act::silu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f); break;
    case graph::Act::gelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f); break;
    case graph::Act::sigmoid: po.append_eltwise(1.f, dnnl::algorithm::eltwise_logistic, 0.f, 0.f); break;
  }
  if (residual_md && res_after_act) po.append_binary(dnnl::algorithm::binary_add, *residual_md);
  attr.set_post_ops(po);
  return attr;
}

int epilogue_residual_arg(graph::Act act, bool res_after_act) {
  return res_after_act && act != graph::Act::none ? DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1
                                                  : DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;
}

void DnnlCall::init(dnnl::primitive prim, const dnnl::primitive_desc_base& pd, const dnnl::engine& eng) {
  prim_ = std::move(prim);
  scratch_bytes_ = pd.scratchpad_desc().get_size();
  if (scratch_bytes_ > 0) {
    scratch_index_ = static_cast<int>(args_.size());
    add_arg(DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE));
  }
}

void DnnlCall::add_arg(int arg, const dnnl::memory& mem) {
  mems_.push_back(mem);
  args_.push_back({arg, mems_.back().get()});
}

void DnnlCall::set(int arg, void* ptr) {
  for (size_t i = 0; i < args_.size(); ++i)
    if (args_[i].arg == arg) {
      mems_[i].set_data_handle(ptr);
      return;
    }
  throw Error("internal: oneDNN argument " + std::to_string(arg) + " was never registered");
}

void DnnlCall::execute(const ExecCtx& c) {
  if (scratch_index_ >= 0) mems_[scratch_index_].set_data_handle(c.scratch);
  dnnl_status_t st = dnnl_primitive_execute(prim_.get(), c.stream->get(), static_cast<int>(args_.size()), args_.data());
  if (st == dnnl_success) st = dnnl_stream_wait(c.stream->get());
  if (st != dnnl_success) throw Error("oneDNN primitive failed with status " + std::to_string(static_cast<int>(st)));
}

void DnnlEpilogueStep::bind(const CompileCtx& cc, const graph::Op& op, dnnl::primitive prim,
                            const dnnl::primitive_desc_base& pd, dnnl::memory w_user,
                            const dnnl::memory::desc& bias_md, const dnnl::memory::desc& src_md,
                            const dnnl::memory::desc& dst_md) {
  const bool has_bias = has_input(op, 2), has_res = has_input(op, 3);
  x_ = op.inputs[0];
  y_ = op.outputs[0];
  res_ = has_res ? op.inputs[3] : graph::kNoTensor;
  res_arg_ = epilogue_residual_arg(op.act(), op.res_after_act());
  weights_ = dnnl::memory(pd.weights_desc(0), cc.eng);
  dnnl::stream s(cc.eng);
  dnnl::reorder(w_user, weights_).execute(s, w_user, weights_);
  s.wait();
  if (has_bias) {
    const auto& bdata = const_data(op, in_tensor(cc, op, 2));
    bias_ = dnnl::memory(bias_md, cc.eng);
    std::copy(bdata.begin(), bdata.end(), static_cast<float*>(bias_.get_data_handle()));
  }
  call_.init(std::move(prim), pd, cc.eng);
  call_.add_arg(DNNL_ARG_SRC, dnnl::memory(src_md, cc.eng, DNNL_MEMORY_NONE));
  call_.add_arg(DNNL_ARG_WEIGHTS, weights_);
  if (has_bias) call_.add_arg(DNNL_ARG_BIAS, bias_);
  call_.add_arg(DNNL_ARG_DST, dnnl::memory(dst_md, cc.eng, DNNL_MEMORY_NONE));
  if (has_res) call_.add_arg(res_arg_, dnnl::memory(dst_md, cc.eng, DNNL_MEMORY_NONE));
}

void DnnlEpilogueStep::run(const ExecCtx& c, int batch) {
  for (int b = 0; b < batch; ++b) {
    call_.set(DNNL_ARG_SRC, c.f(x_, b));
    call_.set(DNNL_ARG_DST, c.f(y_, b));
    if (res_ != graph::kNoTensor) call_.set(res_arg_, c.f(res_, b));
    call_.execute(c);
  }
}

}  // namespace detforge::cpu
