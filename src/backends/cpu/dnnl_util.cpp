#include "backends/cpu/dnnl_util.h"

namespace detforge::cpu {

dnnl::primitive_attr make_epilogue_attr(graph::Act act, const dnnl::memory::desc* residual_md) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (residual_md) po.append_binary(dnnl::algorithm::binary_add, *residual_md);
  switch (act) {
    case graph::Act::none: break;
    case graph::Act::relu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f); break;
    case graph::Act::silu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f); break;
    case graph::Act::gelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f); break;
    case graph::Act::sigmoid: po.append_eltwise(1.f, dnnl::algorithm::eltwise_logistic, 0.f, 0.f); break;
  }
  attr.set_post_ops(po);
  return attr;
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

}  // namespace detforge::cpu
