// Helpers shared by the graph passes (passes.cpp, branch_passes.cpp).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace detforge::graph {

inline bool is_sole_consumer(const std::vector<std::vector<int>>& c, TensorId t, int op) {
  return c[t].size() == 1 && c[t][0] == op;
}

// Removes ops marked dead (keeps order), leaves tensors for eliminate_dead_code to compact.
inline void erase_ops(Graph& g, const std::vector<char>& dead) {
  std::vector<Op> kept;
  kept.reserve(g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (!dead[i]) kept.push_back(std::move(g.ops[i]));
  g.ops = std::move(kept);
}

// Rewrites every use of tensor `from` as `to` (inputs and graph outputs).
inline void replace_uses(Graph& g, TensorId from, TensorId to) {
  for (Op& op : g.ops)
    for (TensorId& t : op.inputs)
      if (t == from) t = to;
  for (TensorId& t : g.outputs)
    if (t == from) t = to;
}

inline bool has_no_epilogue(const Op& op) {
  return op.act() == Act::none && (op.kind == OpKind::conv2d || op.kind == OpKind::linear) && op.inputs.size() == 3;
}

// A linear whose weight [N, K] and bias [N] are constants with data, its weight 2-D and its
// output 2-D (any epilogue).
inline bool constant_linear(const Graph& g, const Op& op) {
  if (op.kind != OpKind::linear || op.inputs.size() < 3) return false;
  const Tensor &w = g.tensor(op.inputs[1]), &b = g.tensor(op.inputs[2]);
  return w.is_const && b.is_const && !w.data.empty() && !b.data.empty() && w.shape.size() == 2 &&
         b.numel() == w.shape[0] && g.tensor(op.outputs[0]).shape.size() == 2;
}

// A linear without residual or activation, its weight [N, K] and bias [N] constants with data
// and its output [rows, N]: what stack_linears can merge.
inline bool plain_constant_linear(const Graph& g, const Op& op) {
  return has_no_epilogue(op) && constant_linear(g, op) &&
         g.tensor(op.outputs[0]).shape[1] == g.tensor(op.inputs[1]).shape[0];
}

// Whether every reader of `y` (consumers(g)[y] in `cons`, no graph output among them) is a
// ms_deform_attn reading it as its value (input 0): a decoder value projection's output.
inline bool read_only_as_deform_values(const Graph& g, const std::vector<std::vector<int>>& cons, TensorId y) {
  for (int c : cons[y])
    if (c < 0 || g.ops[c].kind != OpKind::ms_deform_attn || g.ops[c].inputs[0] != y) return false;
  return !cons[y].empty();
}

// Linears of one input (stackable: no residual or activation, constant weight [N_i, K] and bias,
// outputs of one dtype and row count) as one: weights and biases stacked in the given order,
// output [rows, sum N_i]; column sum_{j<i} N_j starts op i's outputs. Named `name`, or when that
// is empty "<first name>+<last name part of each other>". Returns the merged op (its tensors are
// added to g), or nothing when they do not stack (fewer than two, another input, dtype, rows or K).
std::optional<Op> stack_linears(Graph& g, const std::vector<const Op*>& linears, std::string name = "");

}  // namespace detforge::graph
