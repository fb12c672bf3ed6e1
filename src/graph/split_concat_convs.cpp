// split_concat_convs: RT-DETR's CCFM feeds each CSP block a channel concat of a tensor made just
// before it (the upsampled lateral, the stride-2 downsample) and one made long before (a backbone
// projection, an earlier lateral). At batch 1 on an H100 the four concats are 2.8-7.2 us kernels
// on the critical path, each followed by the block's 1x1 convs over all 512 channels
// (bench/results/h100/ab-2026-12-07-session25, timeline of fe3_b1). A 1x1 conv is linear in its
// input channels, so conv(concat[late, early]) = conv_late(late) + conv_early(early): the early
// half (with the bias) runs off the path as soon as its operand exists, and the path keeps one
// conv over half the channels that adds it as its residual before the activation.
// Measured equal at batch 1 and 32 on an H100 (session 26, NOTES.md v29): the early halves ran as
// soon as their operands existed, beside the backbone's and the CCFM's convs; opt-in.
#include <algorithm>

#include "graph/pass_util.h"
#include "graph/passes.h"

namespace detforge::graph {
namespace {

bool splittable_conv(const Graph& g, const Op& c, TensorId cat) {
  if (c.kind != OpKind::conv2d || c.inputs.size() != 3 || c.inputs[0] != cat || c.res_after_act()) return false;
  if (c.attr_int_or("stride", 1) != 1 || c.attr_int_or("pad", 0) != 0 || c.attr_int_or("groups", 1) != 1) return false;
  const Tensor &w = g.tensor(c.inputs[1]), &b = g.tensor(c.inputs[2]);
  return w.is_const && b.is_const && !w.data.empty() && !b.data.empty() && w.shape.size() == 4 &&
         w.shape[2] == 1 && w.shape[3] == 1 && b.numel() == w.shape[0];
}

// Input channels [from, from + n) of a 1x1 conv weight [Co, Ci, 1, 1].
std::vector<float> weight_columns(const Tensor& w, int64_t from, int64_t n) {
  const int64_t co = w.shape[0], ci = w.shape[1];
  std::vector<float> r(static_cast<size_t>(co * n));
  for (int64_t o = 0; o < co; ++o)
    std::copy_n(w.data.begin() + o * ci + from, n, r.begin() + o * n);
  return r;
}

}  // namespace

int split_concat_convs(Graph& g) {
  const auto cons = consumers(g);
  const auto prod = producers(g);
  const auto cost = path_costs(g);
  auto ready = [&](TensorId t) { return prod[t] < 0 ? 0.0 : cost[prod[t]]; };
  // Per conv op to split: its replacement pair (early part, then the conv itself), in its place.
  std::vector<std::vector<Op>> replaced(g.ops.size());
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& cat = g.ops[i];
    if (cat.kind != OpKind::concat || cat.inputs.size() != 2 || cat.attr_int("axis") != 2) continue;
    const TensorId y = cat.outputs[0];
    if (cons[y].empty() || std::any_of(cons[y].begin(), cons[y].end(),
                                       [&](int c) { return c < 0 || !splittable_conv(g, g.ops[c], y); }))
      continue;
    if (g.tensor(cat.inputs[0]).is_const || g.tensor(cat.inputs[1]).is_const) continue;
    const double r0 = ready(cat.inputs[0]), r1 = ready(cat.inputs[1]);
    if (r0 == r1) continue;  // neither operand is known to come first
    const int late = r0 > r1 ? 0 : 1;
    const TensorId xl = cat.inputs[late], xe = cat.inputs[1 - late];
    const int64_t c0 = g.tensor(cat.inputs[0]).shape[2];
    const int64_t cl = g.tensor(xl).shape[2], ce = g.tensor(xe).shape[2];
    const int64_t from_l = late == 0 ? 0 : c0, from_e = late == 0 ? c0 : 0;
    for (int ci : cons[y]) {
      const Op c = g.ops[ci];
      const int64_t co = g.tensor(c.inputs[1]).shape[0];
      const Tensor& out = g.tensor(c.outputs[0]);
      const std::vector<int64_t> out_shape = out.shape;
      const DType dt = out.dtype;
      std::vector<float> we = weight_columns(g.tensor(c.inputs[1]), from_e, ce);
      std::vector<float> wl = weight_columns(g.tensor(c.inputs[1]), from_l, cl);
      std::vector<float> bias = g.tensor(c.inputs[2]).data;
      // add_* may move g.tensors: no Tensor reference is used past this point.
      Op early = c;
      early.name = c.name + "(early part)";
      early.inputs = {xe, g.add_const(early.name + ".weight", {co, ce, 1, 1}, std::move(we)),
                      g.add_const(early.name + ".bias", {co}, std::move(bias))};
      early.outputs = {g.add_activation(early.name + ":out", out_shape, dt)};
      early.attrs["act"] = "none";
      Op path = c;
      path.inputs = {xl, g.add_const(c.name + "(late part).weight", {co, cl, 1, 1}, std::move(wl)),
                     g.add_const(c.name + "(late part).bias", {co}, std::vector<float>(static_cast<size_t>(co), 0.f)),
                     early.outputs[0]};
      replaced[ci] = {std::move(early), std::move(path)};
    }
    ++n;
  }
  if (n == 0) return 0;
  std::vector<Op> ops;
  ops.reserve(g.ops.size() + 8);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (replaced[i].empty()) ops.push_back(std::move(g.ops[i]));
    else for (Op& op : replaced[i]) ops.push_back(std::move(op));
  }
  g.ops = std::move(ops);
  return n;
}

}  // namespace detforge::graph
