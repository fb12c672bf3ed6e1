#include "graph/dec_tails.h"

#include "graph/passes.h"

namespace detforge::graph {

namespace {

// A linear with a constant [N, K] weight and a bias, activation `act`, with or without a residual.
bool linear_of(const Graph& g, int i, Act act, bool residual) {
  if (i < 0) return false;
  const Op& op = g.ops[i];
  return op.kind == OpKind::linear && op.has_input(2) && g.tensor(op.inputs[1]).is_const &&
         g.tensor(op.inputs[1]).shape.size() == 2 && op.act() == act && op.has_input(3) == residual;
}
int64_t n_of(const Graph& g, int i) { return g.tensor(g.ops[i].inputs[1]).shape[0]; }
int64_t k_of(const Graph& g, int i) { return g.tensor(g.ops[i].inputs[1]).shape[1]; }
bool plain_ln(const Graph& g, int i) {
  return i >= 0 && g.ops[i].kind == OpKind::layer_norm && g.ops[i].has_input(2) && !g.ops[i].has_input(3);
}

}  // namespace

std::vector<int> DecoderTail::ops() const {
  std::vector<int> v = {out_proj, ln1, fc1, fc2, ln2, bb0, bb1, bb2, refine};
  if (pos_add >= 0) v.insert(v.end(), {qp0, qp1, pos_add});
  return v;
}

std::vector<DecoderTail> find_decoder_tails(const Graph& g) {
  const auto cons = consumers(g);
  const auto prod = producers(g);
  // The producer of t when t has exactly `readers` readers (no graph output among them), else -1.
  auto from = [&](TensorId t, size_t readers) { return cons[t].size() == readers ? prod[t] : -1; };
  std::vector<DecoderTail> r;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].kind != OpKind::box_refine) continue;
    DecoderTail t;
    t.refine = static_cast<int>(i);
    t.bb2 = from(g.ops[i].inputs[0], 1);
    if (!linear_of(g, t.bb2, Act::none, false) || n_of(g, t.bb2) != 4) continue;
    t.bb1 = from(g.ops[t.bb2].inputs[0], 1);
    if (!linear_of(g, t.bb1, Act::relu, false)) continue;
    t.bb0 = from(g.ops[t.bb1].inputs[0], 1);
    if (!linear_of(g, t.bb0, Act::relu, false)) continue;
    const TensorId h2 = g.ops[t.bb0].inputs[0];
    t.ln2 = prod[h2];
    if (!plain_ln(g, t.ln2)) continue;
    t.fc2 = from(g.ops[t.ln2].inputs[0], 1);
    if (!linear_of(g, t.fc2, Act::none, true)) continue;
    t.fc1 = from(g.ops[t.fc2].inputs[0], 1);
    if (!linear_of(g, t.fc1, Act::relu, false)) continue;
    const TensorId h1 = g.ops[t.fc1].inputs[0];
    if (g.ops[t.fc2].inputs[3] != h1 || cons[h1].size() != 2) continue;
    t.ln1 = prod[h1];
    if (!plain_ln(g, t.ln1)) continue;
    t.out_proj = from(g.ops[t.ln1].inputs[0], 1);
    if (!linear_of(g, t.out_proj, Act::none, true)) continue;
    // The kernel's shapes: LayerNorm rows of 256, every K and N a multiple of 64 up to 1024.
    const int64_t D = n_of(g, t.out_proj), F = n_of(g, t.fc1);
    auto fits = [](int64_t v) { return v >= 64 && v <= 1024 && v % 64 == 0; };
    if (D != 256 || !fits(k_of(g, t.out_proj)) || k_of(g, t.fc1) != D || !fits(F) || k_of(g, t.fc2) != F ||
        n_of(g, t.fc2) != D || k_of(g, t.bb0) != D || !fits(n_of(g, t.bb0)) || k_of(g, t.bb1) != n_of(g, t.bb0) ||
        !fits(n_of(g, t.bb1)) || k_of(g, t.bb2) != n_of(g, t.bb1))
      continue;
    // Forward: the next layer's query_pos_head and self_attn.pos add, all three or none.
    const TensorId boxes = g.ops[i].outputs[0];
    for (int c : cons[boxes]) {
      if (!linear_of(g, c, Act::relu, false) || k_of(g, c) != 4 || n_of(g, c) % 8) continue;
      const int q1 = from(g.ops[c].outputs[0], 1) < 0 ? -1 : cons[g.ops[c].outputs[0]][0];
      if (!linear_of(g, q1, Act::none, false) || k_of(g, q1) != n_of(g, c) || !fits(k_of(g, q1)) || n_of(g, q1) != D)
        continue;
      const TensorId qpos = g.ops[q1].outputs[0];
      for (int a : cons[qpos]) {
        if (a < 0 || g.ops[a].kind != OpKind::add || g.ops[a].inputs.size() != 2 || g.ops[a].act() != Act::none) continue;
        const auto& in = g.ops[a].inputs;
        if ((in[0] == h2 && in[1] == qpos) || (in[0] == qpos && in[1] == h2)) {
          t.qp0 = c;
          t.qp1 = q1;
          t.pos_add = a;
          break;
        }
      }
      if (t.pos_add >= 0) break;
    }
    r.push_back(t);
  }
  return r;
}


}  // namespace detforge::graph
