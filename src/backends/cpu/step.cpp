#include "backends/cpu/step.h"

namespace detforge::cpu {

std::string op_label(const graph::Op& op) {
  return "op " + op.name + " (" + graph::op_kind_name(op.kind) + ")";
}

void op_fail(const graph::Op& op, const std::string& msg) { throw Error(op_label(op) + ": " + msg); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

bool has_input(const graph::Op& op, size_t i) { return i < op.inputs.size() && op.inputs[i] != graph::kNoTensor; }

const std::vector<float>& const_data(const graph::Op& op, const graph::Tensor& t) {
  if (!t.is_const) op_fail(op, "tensor " + t.name + " must be a constant");
  if (static_cast<int64_t>(t.data.size()) != t.numel())
    op_fail(op, "constant " + t.name + " holds " + std::to_string(t.data.size()) + " values for shape " + shape_str(t.shape));
  return t.data;
}

void expect_inputs(const graph::Op& op, size_t min_n, size_t max_n) {
  if (op.inputs.size() < min_n || op.inputs.size() > max_n)
    op_fail(op, "expects " + std::to_string(min_n) + (min_n == max_n ? "" : ".." + std::to_string(max_n)) +
                    " inputs, has " + std::to_string(op.inputs.size()));
}

void expect_outputs(const graph::Op& op, size_t n) {
  if (op.outputs.size() != n)
    op_fail(op, "expects " + std::to_string(n) + " outputs, has " + std::to_string(op.outputs.size()));
}

const graph::Tensor& in_tensor(const CompileCtx& cc, const graph::Op& op, size_t i) {
  if (!has_input(op, i)) op_fail(op, "input " + std::to_string(i) + " is missing");
  return cc.g.tensor(op.inputs[i]);
}

const graph::Tensor& out_tensor(const CompileCtx& cc, const graph::Op& op, size_t i) {
  return cc.g.tensor(op.outputs.at(i));
}

void expect_shape(const graph::Op& op, const graph::Tensor& t, const std::vector<int64_t>& want) {
  if (t.shape != want) op_fail(op, "tensor " + t.name + " has shape " + shape_str(t.shape) + ", expected " + shape_str(want));
}

void expect_rank(const graph::Op& op, const graph::Tensor& t, size_t rank) {
  if (t.shape.size() != rank)
    op_fail(op, "tensor " + t.name + " has shape " + shape_str(t.shape) + ", expected rank " + std::to_string(rank));
}

PerImageStep::PerImageStep(const graph::Op& op, size_t min_in, size_t max_in) {
  expect_inputs(op, min_in, max_in);
  expect_outputs(op, 1);
  x_ = op.inputs[0];
  y_ = op.outputs[0];
}

Hwc expect_hwc(const graph::Op& op, const graph::Tensor& t) {
  expect_rank(op, t, 3);
  return {t.shape[0], t.shape[1], t.shape[2]};
}

}  // namespace detforge::cpu
