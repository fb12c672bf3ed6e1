// The CPU executor's unit of work: one Step per graph op, built once at engine construction
// (shape checks, oneDNN primitives, reordered weights) and run many times without allocating.
//
// Memory: every activation tensor lives at base[id] + b * stride[id] for image b of the batch
// (stride = numel, the image's own [H,W,C] or [L,C] block). Constants have stride 0, so a
// constant operand broadcasts over the batch for free. `reshape` outputs share their root's
// base and stride.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "detforge/types.h"
#include "graph/ir.h"

namespace dnnl {
struct engine;
struct stream;
}  // namespace dnnl

namespace detforge::cpu {

// Per-run view of the tensors; filled by the engine, read by every step.
struct ExecCtx {
  std::vector<float*> base;      // by TensorId; i32 tensors are reinterpreted from the same bytes
  std::vector<int64_t> stride;   // elements per image (0 for constants)
  void* scratch = nullptr;       // shared scratch, 64-byte aligned, scratch_bytes long
  size_t scratch_bytes = 0;
  dnnl::stream* stream = nullptr;

  float* f(graph::TensorId id, int b) const { return base[id] + b * stride[id]; }
  int32_t* i(graph::TensorId id, int b) const { return reinterpret_cast<int32_t*>(f(id, b)); }
};

// What a step factory may use while compiling its op.
struct CompileCtx {
  const graph::Graph& g;
  dnnl::engine& eng;
  int threads = 1;
};

class Step {
 public:
  virtual ~Step() = default;
  // Runs the op on images 0..batch-1.
  virtual void run(const ExecCtx& c, int batch) = 0;
  // Bytes of ExecCtx::scratch this step needs (shared by all steps; steps run one at a time).
  virtual size_t scratch_bytes() const { return 0; }
};

// Scaffolding for ops that map image b of inputs[0] (x) to image b of outputs[0] (y): checks
// min_in..max_in inputs and one output, then runs run_image() once per image of the batch.
// Further inputs are the derived step's own (it reads them at image b through c).
class PerImageStep : public Step {
 public:
  void run(const ExecCtx& c, int batch) final {
    for (int b = 0; b < batch; ++b) run_image(c, b, c.f(x_, b), c.f(y_, b));
  }

 protected:
  PerImageStep(const graph::Op& op, size_t min_in, size_t max_in);
  virtual void run_image(const ExecCtx& c, int b, const float* x, float* y) const = 0;
  graph::TensorId x_, y_;
};

// The dims of a rank-3 [H,W,C] (NHWC per image) tensor; names the op if it is not rank 3.
struct Hwc {
  int64_t H, W, C;
};
Hwc expect_hwc(const graph::Op& op, const graph::Tensor& t);

// "op model.x.y (conv2d): " prefix for errors.
std::string op_label(const graph::Op& op);
[[noreturn]] void op_fail(const graph::Op& op, const std::string& msg);

// Shape and arity checks that name the op when they fail.
void expect_inputs(const graph::Op& op, size_t min_n, size_t max_n);
void expect_outputs(const graph::Op& op, size_t n);
const graph::Tensor& in_tensor(const CompileCtx& cc, const graph::Op& op, size_t i);
const graph::Tensor& out_tensor(const CompileCtx& cc, const graph::Op& op, size_t i = 0);
void expect_shape(const graph::Op& op, const graph::Tensor& t, const std::vector<int64_t>& want);
void expect_rank(const graph::Op& op, const graph::Tensor& t, size_t rank);
std::string shape_str(const std::vector<int64_t>& s);
bool has_input(const graph::Op& op, size_t i);  // present and not kNoTensor
// A constant's data, checked to be present and complete (names the op and tensor otherwise).
const std::vector<float>& const_data(const graph::Op& op, const graph::Tensor& t);

// Step factories, one per op kind (src/backends/cpu/kernels/<op>.cpp).
using StepPtr = std::unique_ptr<Step>;
StepPtr make_conv2d_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_linear_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_layer_norm_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_attention_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_ms_deform_attn_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_topk_rows_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_gather_rows_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_box_refine_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_max_pool2d_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_avg_pool2d_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_upsample_nearest2x_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_concat_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_add_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_mul_rows_step(const CompileCtx& cc, const graph::Op& op);
StepPtr make_activation_step(const CompileCtx& cc, const graph::Op& op);

}  // namespace detforge::cpu
