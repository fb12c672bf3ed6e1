#include "graph/row_chains.h"

#include "graph/passes.h"

namespace detforge::graph {

namespace {

// A linear the row kernel can run: relu or no activation, fp32/fp16 storage of [N, K] weights.
bool row_linear(const Graph& g, const Op& op, const RowChainLimits& lim, bool first) {
  if (op.kind != OpKind::linear) return false;
  const Act a = op.act();
  if (a != Act::none && a != Act::relu) return false;
  const auto& w = g.tensor(op.inputs[1]).shape;
  if (w.size() != 2 || w[0] > lim.max_width || w[1] > (first ? lim.max_first_k : lim.max_width)) return false;
  return op.has_input(2) && g.tensor(op.inputs[2]).is_const;
}

int64_t weight_elems(const Graph& g, const Op& op) { return g.tensor(op.inputs[1]).numel(); }

// The op reading `t` when it is the only reader, is the next op in order and takes t as input 0.
int sole_next_reader(const Graph& g, const std::vector<std::vector<int>>& cons, TensorId t, int after) {
  if (cons[t].size() != 1 || cons[t][0] != after + 1) return -1;
  return g.ops[after + 1].inputs[0] == t ? after + 1 : -1;
}

}  // namespace

std::vector<RowChain> find_row_chains(const Graph& g, const RowChainLimits& lim) {
  const auto cons = consumers(g);
  std::vector<RowChain> out;
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
    if (!row_linear(g, g.ops[i], lim, true)) continue;
    RowChain c;
    c.linears = {i};
    int64_t welems = weight_elems(g, g.ops[i]);
    // Grow while the last linear has no residual, its N can be the next K, and the next op is
    // a row linear reading only it.
    while (static_cast<int>(c.linears.size()) < lim.max_layers) {
      const Op& last = g.ops[c.linears.back()];
      if (last.has_input(3) || g.tensor(last.inputs[1]).shape[0] % 32) break;
      const int nx = sole_next_reader(g, cons, last.outputs[0], c.linears.back());
      if (nx < 0 || !row_linear(g, g.ops[nx], lim, false)) break;
      if (welems + weight_elems(g, g.ops[nx]) > lim.max_weight_elems) break;
      welems += weight_elems(g, g.ops[nx]);
      c.linears.push_back(nx);
    }
    const Op& last = g.ops[c.linears.back()];
    const int64_t N = g.tensor(last.inputs[1]).shape[0];
    const int e = sole_next_reader(g, cons, last.outputs[0], c.linears.back());
    if (e >= 0) {
      const Op& ep = g.ops[e];
      if (ep.kind == OpKind::layer_norm && N % 8 == 0) {
        c.epilogue = RowEpilogue::layer_norm;
      } else if (ep.kind == OpKind::box_refine && N == 4) {
        c.epilogue = RowEpilogue::box_refine;
      } else if (ep.kind == OpKind::add && ep.act() == Act::none && ep.inputs.size() == 2 &&
                 g.tensor(ep.inputs[1]).is_const && g.tensor(ep.inputs[1]).shape == g.tensor(last.outputs[0]).shape) {
        c.epilogue = RowEpilogue::add_const;
      }
      if (c.epilogue != RowEpilogue::none) c.epilogue_op = e;
    }
    if (c.linears.size() < 2 && c.epilogue == RowEpilogue::none) continue;
    i = c.last_op();  // ops are consecutive: continue after the chain
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace detforge::graph
