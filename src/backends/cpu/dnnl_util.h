// Small helpers shared by the oneDNN-backed steps (conv2d, linear, attention): epilogue
// post-ops, user scratchpad (so oneDNN never allocates one at run time), and an execute that
// reuses a prebuilt argument array instead of the C++ wrapper's per-call std::vector and
// std::unordered_map. oneDNN 2.6 still builds its own argument map inside
// dnnl_primitive_execute: measured ~1,060 operator-new calls per r18vd forward, all of them
// there or in the returned HostTensors (none in our executor or kernels), about 0.1 ms.
#pragma once
#include <dnnl.hpp>

#include <vector>

#include "backends/cpu/step.h"

namespace detforge::cpu {

// The oneDNN eltwise that matches graph::apply_act (checked in test_cpu_dnnl_act):
//   relu -> eltwise_relu(alpha 0), silu -> eltwise_swish(alpha 1) = x*sigmoid(x),
//   gelu -> eltwise_gelu_erf, sigmoid -> eltwise_logistic.
// `residual_md` non-null adds a binary_add post-op before the activation, or after it when
// `res_after_act` (conv2d attr res_after_act); epilogue_residual_arg gives its argument id.
dnnl::primitive_attr make_epilogue_attr(graph::Act act, const dnnl::memory::desc* residual_md,
                                        bool res_after_act = false);
int epilogue_residual_arg(graph::Act act, bool res_after_act);

// One primitive plus its memory handles; call set() for each handle, then execute().
class DnnlCall {
 public:
  DnnlCall() = default;
  void init(dnnl::primitive prim, const dnnl::primitive_desc_base& pd, const dnnl::engine& eng);
  // Registers an argument; `mem` must stay alive (it is owned here).
  void add_arg(int arg, const dnnl::memory& mem);
  void set(int arg, void* ptr);
  void execute(const ExecCtx& c);
  size_t scratch_bytes() const { return scratch_bytes_; }

 private:
  dnnl::primitive prim_;
  std::vector<dnnl::memory> mems_;
  std::vector<dnnl_exec_arg_t> args_;
  size_t scratch_bytes_ = 0;
  int scratch_index_ = -1;
};

// Creates a primitive descriptor, turning oneDNN's "unimplemented" into an error that names the
// op and `what` ("convolution", "matmul").
template <class PD, class D>
PD make_primitive_desc(const graph::Op& op, const char* what, const D& d, const dnnl::primitive_attr& attr,
                       const dnnl::engine& eng) {
  try {
    return PD(d, attr, eng);
  } catch (const dnnl::error& e) {
    op_fail(op, std::string("oneDNN has no ") + what + " for this configuration: " + e.what());
  }
}

// The shared half of conv2d and linear: op inputs (x, weights, bias?, residual?), one output,
// constant weights reordered once into the primitive's preferred layout, bias copied once, and
// the residual as a binary post-op (see make_epilogue_attr). run() executes the primitive per image.
class DnnlEpilogueStep : public Step {
 public:
  void run(const ExecCtx& c, int batch) final;
  size_t scratch_bytes() const final { return call_.scratch_bytes(); }

 protected:
  // `w_user` wraps the constant weight data in its stored layout; `bias_md` is used only when
  // the op has a bias (input 2), `src_md`/`dst_md` describe one image.
  void bind(const CompileCtx& cc, const graph::Op& op, dnnl::primitive prim, const dnnl::primitive_desc_base& pd,
            dnnl::memory w_user, const dnnl::memory::desc& bias_md, const dnnl::memory::desc& src_md,
            const dnnl::memory::desc& dst_md);

 private:
  graph::TensorId x_ = graph::kNoTensor, y_ = graph::kNoTensor, res_ = graph::kNoTensor;
  int res_arg_ = 0;  // epilogue_residual_arg
  dnnl::memory weights_, bias_;
  DnnlCall call_;
};

}  // namespace detforge::cpu
