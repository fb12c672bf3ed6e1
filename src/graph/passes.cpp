#include "graph/passes.h"

#include "graph/pass_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

#include "detforge/types.h"

namespace detforge::graph {

std::vector<std::vector<int>> consumers(const Graph& g) {
  std::vector<std::vector<int>> c(g.tensors.size());
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (TensorId t : g.ops[i].inputs)
      if (t != kNoTensor) c[t].push_back(static_cast<int>(i));
  for (TensorId t : g.outputs) c[t].push_back(-1);
  return c;
}

std::vector<int> producers(const Graph& g) {
  std::vector<int> p(g.tensors.size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (TensorId t : g.ops[i].outputs) p[t] = static_cast<int>(i);
  return p;
}

int fold_batch_norm(Graph& g) {
  auto cons = consumers(g);
  auto prod = producers(g);
  std::vector<char> dead(g.ops.size(), 0);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op& bn = g.ops[i];
    if (bn.kind != OpKind::batch_norm) continue;
    TensorId x = bn.inputs[0];
    int pi = prod[x];
    if (pi < 0 || g.ops[pi].kind != OpKind::conv2d || !is_sole_consumer(cons, x, static_cast<int>(i)) ||
        g.ops[pi].inputs.size() != 3 || g.ops[pi].act() != Act::none)
      throw Error("fold_batch_norm: " + bn.name + " does not follow a plain conv2d; cannot fold");
    Op& conv = g.ops[pi];
    Tensor& w = g.tensor(conv.inputs[1]);
    Tensor& b = g.tensor(conv.inputs[2]);
    const auto& gamma = g.tensor(bn.inputs[1]).data;
    const auto& beta = g.tensor(bn.inputs[2]).data;
    const auto& mean = g.tensor(bn.inputs[3]).data;
    const auto& var = g.tensor(bn.inputs[4]).data;
    const double eps = bn.attr_float("eps");
    const int64_t cout = w.shape[0], per = w.numel() / cout;
    for (int64_t o = 0; o < cout; ++o) {
      double s = static_cast<double>(gamma[o]) / std::sqrt(static_cast<double>(var[o]) + eps);
      for (int64_t j = 0; j < per; ++j) w.data[o * per + j] = static_cast<float>(w.data[o * per + j] * s);
      b.data[o] = static_cast<float>((static_cast<double>(b.data[o]) - mean[o]) * s + beta[o]);
    }
    // The bias was a per-conv zero constant made by the builder; it now holds the folded bias.
    std::string module = conv.name;
    b.name = module + ".bias(folded " + bn.name + ")";
    TensorId y = bn.outputs[0];
    replace_uses(g, y, conv.outputs[0]);
    dead[i] = 1;
    ++n;
  }
  erase_ops(g, dead);
  return n;
}

namespace {

// fuse_residual_adds and fuse_post_activation_adds: an add whose operand's producer `carries`
// it (and is read only by the add, the other operand a same-shape activation) becomes that
// producer with the other operand as residual input, `finish`ed, in the add's place. With
// `longer_only`, only the operand on the longer path may carry it.
int fuse_adds_into_producers(Graph& g, bool long_branch, bool longer_only,
                             const std::function<bool(const Op&, const Op&)>& carries,
                             const std::function<void(Op&, const Op&)>& finish) {
  int n = 0;
  for (bool changed = true; changed;) {
    changed = false;
    auto cons = consumers(g);
    auto prod = producers(g);
    const std::vector<double> cost = long_branch ? path_costs(g) : std::vector<double>();
    for (size_t i = 0; i < g.ops.size() && !changed; ++i) {
      Op& add = g.ops[i];
      if (add.kind != OpKind::add) continue;
      // Fuse into the operand on the longer path (the other branch then runs beside it and is
      // ready when the fused op starts); without costs, or on a tie, into the later-produced one.
      int first = prod[add.inputs[0]] > prod[add.inputs[1]] ? 0 : 1;
      if (long_branch && prod[add.inputs[0]] >= 0 && prod[add.inputs[1]] >= 0 &&
          cost[prod[add.inputs[0]]] != cost[prod[add.inputs[1]]])
        first = cost[prod[add.inputs[0]]] > cost[prod[add.inputs[1]]] ? 0 : 1;
      int target = -1, other = -1;
      for (int o : {first, 1 - first}) {
        if (longer_only && o != first) break;
        const int p = prod[add.inputs[o]];
        if (p < 0) continue;
        TensorId t = g.ops[p].outputs[0];
        if (carries(add, g.ops[p]) && is_sole_consumer(cons, t, static_cast<int>(i)) &&
            g.tensor(add.inputs[1 - o]).shape == g.tensor(t).shape && !g.tensor(add.inputs[1 - o]).is_const) {
          target = p;
          other = 1 - o;
          break;
        }
      }
      if (target < 0) continue;
      Op f = std::move(g.ops[target]);
      f.inputs.push_back(add.inputs[other]);
      finish(f, add);
      f.outputs[0] = add.outputs[0];  // its old output is now unused; DCE drops it
      // The fused op takes the add's place: after both operands' producers, before every reader.
      g.ops[i] = std::move(f);
      std::vector<char> dead(g.ops.size(), 0);
      dead[target] = 1;
      erase_ops(g, dead);
      ++n;
      changed = true;
    }
  }
  return n;
}

}  // namespace

int fuse_residual_adds(Graph& g, bool long_branch) {
  return fuse_adds_into_producers(
      g, long_branch, false, [](const Op&, const Op& p) { return has_no_epilogue(p); },
      [](Op& f, const Op& add) { f.attrs["act"] = add.attrs.value("act", std::string("none")); });
}

int fuse_post_activation_adds(Graph& g) {
  // Only the longer branch: carried by the shorter one, the add would make that branch wait for
  // the longer one (measured: with CSP's conv2 carrying it, the CCFM ran on one stream, batch 1
  // 0.6691 -> 0.6789 ms, H200 2026-12-03).
  return fuse_adds_into_producers(
      g, true, true,
      [](const Op& add, const Op& p) {
        return add.act() == Act::none && p.kind == OpKind::conv2d && p.act() != Act::none && p.inputs.size() == 3;
      },
      [](Op& f, const Op&) { f.attrs["res_after_act"] = 1; });
}

int fuse_activations(Graph& g) {
  auto cons = consumers(g);
  auto prod = producers(g);
  std::vector<char> dead(g.ops.size(), 0);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op& a = g.ops[i];
    if (a.kind != OpKind::activation) continue;
    int p = prod[a.inputs[0]];
    if (p < 0) continue;
    Op& f = g.ops[p];
    bool fusable = (f.kind == OpKind::conv2d || f.kind == OpKind::linear || f.kind == OpKind::add) && f.act() == Act::none;
    if (!fusable || !is_sole_consumer(cons, a.inputs[0], static_cast<int>(i))) continue;
    f.attrs["act"] = a.attrs.at("act");
    f.outputs[0] = a.outputs[0];
    dead[i] = 1;
    ++n;
  }
  erase_ops(g, dead);
  return n;
}

int fuse_layer_norm_adds(Graph& g) {
  auto cons = consumers(g);
  auto prod = producers(g);
  std::vector<char> dead(g.ops.size(), 0);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op& ln = g.ops[i];
    if (ln.kind != OpKind::layer_norm || ln.inputs.size() != 3) continue;
    int p = prod[ln.inputs[0]];
    if (p < 0 || g.ops[p].kind != OpKind::add || g.ops[p].act() != Act::none) continue;
    if (!is_sole_consumer(cons, ln.inputs[0], static_cast<int>(i))) continue;
    const Op& add = g.ops[p];
    if (g.tensor(add.inputs[0]).is_const || g.tensor(add.inputs[1]).is_const) continue;
    ln.inputs[0] = add.inputs[0];
    ln.inputs.push_back(add.inputs[1]);
    dead[p] = 1;
    ++n;
  }
  erase_ops(g, dead);
  return n;
}

int fold_parallel_convs(Graph& g) {
  auto cons = consumers(g);
  auto prod = producers(g);
  std::vector<char> dead(g.ops.size(), 0);
  int n = 0;
  auto stride = [](const Op& op) { return op.attr_int_or("stride", 1); };
  auto pad = [](const Op& op) { return op.attr_int_or("pad", 0); };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op& b = g.ops[i];  // the conv that carries the sum as its residual
    if (b.kind != OpKind::conv2d || b.inputs.size() != 4 || dead[i]) continue;
    const TensorId r = b.inputs[3];
    const int pa = prod[r];
    if (pa < 0 || dead[pa] || !is_sole_consumer(cons, r, static_cast<int>(i))) continue;
    Op& a = g.ops[pa];
    if (a.kind != OpKind::conv2d || !has_no_epilogue(a) || a.inputs[0] != b.inputs[0] || stride(a) != stride(b)) continue;
    if (a.attrs.value("groups", 1) != 1 || b.attrs.value("groups", 1) != 1) continue;
    Tensor& wa = g.tensor(a.inputs[1]);
    Tensor& wb = g.tensor(b.inputs[1]);
    if (!wa.is_const || !wb.is_const || !g.tensor(a.inputs[2]).is_const || !g.tensor(b.inputs[2]).is_const) continue;
    if (wa.shape.size() != 4 || wb.shape.size() != 4 || wa.shape[0] != wb.shape[0] || wa.shape[1] != wb.shape[1])
      continue;
    // One of the two is 1x1 unpadded, the other square, odd and padded by k/2: the 1x1 kernel
    // then lines up with the centre tap. Which one runs first does not matter.
    const bool a_big = wb.shape[2] == 1 && wb.shape[3] == 1 && pad(b) == 0;
    const bool b_big = wa.shape[2] == 1 && wa.shape[3] == 1 && pad(a) == 0;
    const Op& big = a_big ? a : b;
    const Tensor& wbig = a_big ? wa : wb;
    if (!(a_big || b_big) || wbig.shape[2] != wbig.shape[3] || wbig.shape[2] % 2 == 0 || pad(big) != wbig.shape[2] / 2)
      continue;
    // The folded weights and bias replace the big conv's; they must be its own constants.
    if (!is_sole_consumer(cons, big.inputs[1], a_big ? pa : static_cast<int>(i)) ||
        !is_sole_consumer(cons, big.inputs[2], a_big ? pa : static_cast<int>(i)))
      continue;
    Tensor& w_small = a_big ? wb : wa;
    Tensor& w_big = a_big ? wa : wb;
    Tensor& b_small = g.tensor((a_big ? b : a).inputs[2]);
    Tensor& b_big_t = g.tensor(big.inputs[2]);
    const int64_t O = w_big.shape[0], I = w_big.shape[1], k = w_big.shape[2], c = k / 2;
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t ci = 0; ci < I; ++ci) {
        float& t = w_big.data[((o * I + ci) * k + c) * k + c];
        t = static_cast<float>(static_cast<double>(t) + w_small.data[o * I + ci]);
      }
      b_big_t.data[o] = static_cast<float>(static_cast<double>(b_big_t.data[o]) + b_small.data[o]);
    }
    w_big.name += "+" + (a_big ? b : a).name;
    // The big conv takes b's place: same inputs as before minus the residual, b's act and output.
    Op folded = big;
    folded.inputs.resize(3);
    folded.attrs["act"] = b.attrs.value("act", std::string("none"));
    folded.outputs = b.outputs;
    g.ops[i] = std::move(folded);
    dead[pa] = 1;
    ++n;
  }
  erase_ops(g, dead);
  return n;
}

namespace {

// A linear without residual or activation whose weight [N, K] and bias [N] are constants with
// data, and whose output only op `reader` reads: it may become part of a stacked linear.
bool stackable_linear(const Graph& g, const std::vector<std::vector<int>>& cons, const Op& l, int reader) {
  return plain_constant_linear(g, l) && is_sole_consumer(cons, l.outputs[0], reader);
}

}  // namespace

std::optional<Op> stack_linears(Graph& g, const std::vector<const Op*>& ls, std::string name) {
  if (ls.size() < 2) return std::nullopt;
  const Op& a = *ls[0];
  const Tensor& ya = g.tensor(a.outputs[0]);
  const int64_t K = g.tensor(a.inputs[1]).shape[1], rows = ya.shape[0];
  const DType dt = ya.dtype;
  std::vector<float> w, bias;
  int64_t N = 0;
  for (const Op* l : ls) {
    const Tensor &y = g.tensor(l->outputs[0]), &wl = g.tensor(l->inputs[1]);
    if (l->inputs[0] != a.inputs[0] || y.dtype != dt || y.shape[0] != rows || wl.shape[1] != K) return std::nullopt;
    w.insert(w.end(), wl.data.begin(), wl.data.end());
    const auto& bl = g.tensor(l->inputs[2]).data;
    bias.insert(bias.end(), bl.begin(), bl.end());
    N += wl.shape[0];
  }
  if (name.empty()) {
    name = a.name;
    for (size_t i = 1; i < ls.size(); ++i) name += "+" + ls[i]->name.substr(ls[i]->name.rfind('.') + 1);
  }
  // add_const may move g.tensors: no Tensor reference is used past this point.
  const TensorId tw = g.add_const(name + ".weight", {N, K}, std::move(w));
  const TensorId tb = g.add_const(name + ".bias", {N}, std::move(bias));
  Op merged = a;
  merged.name = name;
  merged.inputs = {a.inputs[0], tw, tb};
  merged.outputs = {g.add_activation(name + ":out", {rows, N}, dt)};
  return merged;
}

namespace {

struct MergedPair {
  TensorId out;    // the stacked linear's output
  int64_t b_col;   // the column where the second linear's outputs start (Na)
};

// Ops ia and ib (both read by `reader`) become the stacked linear: it takes the earlier of the
// two places (both read only its input), the later one is marked dead.
std::optional<MergedPair> merge_pair(Graph& g, const std::vector<std::vector<int>>& cons, std::vector<char>& dead,
                                     int ia, int ib, int reader) {
  if (ia < 0 || ib < 0 || ia == ib || dead[ia] || dead[ib]) return std::nullopt;
  if (!stackable_linear(g, cons, g.ops[ia], reader) || !stackable_linear(g, cons, g.ops[ib], reader))
    return std::nullopt;
  auto merged = stack_linears(g, {&g.ops[ia], &g.ops[ib]});
  if (!merged) return std::nullopt;
  const MergedPair r{merged->outputs[0], g.tensor(g.ops[ia].inputs[1]).shape[0]};
  g.ops[std::min(ia, ib)] = std::move(*merged);  // g.ops is not resized: references to ops stay valid
  dead[std::max(ia, ib)] = 1;
  return r;
}

// For each op of `kind` with `n_inputs` inputs whose inputs a and b come from two mergeable
// linears (merge_pair): one stacked linear feeds both inputs, read from columns 0 (col_a) and
// the first linear's width (col_b).
int merge_projection_pairs(Graph& g, OpKind kind, size_t n_inputs, int a, int b, const char* col_a,
                           const char* col_b) {
  auto cons = consumers(g);
  auto prod = producers(g);
  std::vector<char> dead(g.ops.size(), 0);
  int n = 0;
  for (size_t m = 0; m < g.ops.size(); ++m) {
    Op& op = g.ops[m];
    if (op.kind != kind || op.inputs.size() != n_inputs || op.attrs.contains(col_a) || op.attrs.contains(col_b) ||
        op.inputs[a] == op.inputs[b])
      continue;
    const auto pair = merge_pair(g, cons, dead, prod[op.inputs[a]], prod[op.inputs[b]], static_cast<int>(m));
    if (!pair) continue;
    op.inputs[a] = pair->out;
    op.inputs[b] = pair->out;
    op.attrs[col_a] = 0;
    op.attrs[col_b] = pair->b_col;
    ++n;
  }
  erase_ops(g, dead);
  return n;
}

}  // namespace

int merge_qk_projections(Graph& g) { return merge_projection_pairs(g, OpKind::attention, 3, 0, 1, "q_col", "k_col"); }

int merge_deform_projections(Graph& g) {
  return merge_projection_pairs(g, OpKind::ms_deform_attn, 5, 1, 2, "off_col", "aw_col");
}

int eliminate_dead_code(Graph& g) {
  std::vector<char> live(g.tensors.size(), 0);
  for (TensorId t : g.outputs) live[t] = 1;
  std::vector<char> dead(g.ops.size(), 1);
  for (int i = static_cast<int>(g.ops.size()) - 1; i >= 0; --i) {
    bool needed = false;
    for (TensorId t : g.ops[i].outputs) needed = needed || live[t];
    if (!needed) continue;
    dead[i] = 0;
    for (TensorId t : g.ops[i].inputs) live[t] = 1;
  }
  int removed = 0;
  for (char d : dead) removed += d;
  erase_ops(g, dead);
  // Compact the tensor table: keep inputs, outputs and everything an op touches.
  for (TensorId t : g.inputs) live[t] = 1;
  for (const Op& op : g.ops)
    for (TensorId t : op.outputs) live[t] = 1;
  std::vector<TensorId> remap(g.tensors.size(), kNoTensor);
  std::vector<Tensor> kept;
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (live[t]) {
      remap[t] = static_cast<TensorId>(kept.size());
      kept.push_back(std::move(g.tensors[t]));
    }
  g.tensors = std::move(kept);
  for (Op& op : g.ops) {
    for (TensorId& t : op.inputs) t = remap[t];
    for (TensorId& t : op.outputs) t = remap[t];
  }
  for (TensorId& t : g.inputs) t = remap[t];
  for (TensorId& t : g.outputs) t = remap[t];
  return removed;
}

namespace {

// Whether the comma-separated list in environment variable `var` names `pass`.
bool env_lists(const char* var, const char* pass) {
  const char* v = std::getenv(var);
  if (!v) return false;
  const std::string list = std::string(",") + v + ",";
  return list.find(std::string(",") + pass + ",") != std::string::npos;
}
// The names DETFORGE_SKIP_PASSES and DETFORGE_EXTRA_PASSES may hold: the one list that both
// the environment check (check_pass_list) and optimize()'s questions (skipped, opted_in) use.
const std::vector<std::string> kSkippable = {
    "fold_avg_pool_into_conv", "gather_early",     "residual_on_long_branch",  "fold_parallel_convs",
    "post_activation_adds",    "merge_qk_projections", "merge_deform_projections", "merge_values",
    "distribute_adds", "split_concats"};
const std::vector<std::string> kOptIn = {"distribute_adds", "gather_early", "merge_values", "split_concats"};

bool listed(const std::vector<std::string>& names, const char* pass) {
  return std::find(names.begin(), names.end(), pass) != names.end();
}

// DETFORGE_SKIP_PASSES: optional passes to leave out, for A/B runs of a pass on the GPU machine
// (bench/ab_h200.sh builds a bundle per variant that sets it).
bool skipped(const char* pass) {
  if (!listed(kSkippable, pass)) throw Error(std::string("optimize: pass ") + pass + " is not in kSkippable");
  return env_lists("DETFORGE_SKIP_PASSES", pass);
}
// DETFORGE_EXTRA_PASSES: passes that are off by default, to run them.
bool opted_in(const char* pass) {
  if (!listed(kOptIn, pass)) throw Error(std::string("optimize: pass ") + pass + " is not in kOptIn");
  return env_lists("DETFORGE_EXTRA_PASSES", pass);
}

// A name in either list that no pass answers to is a typo that would silently build the default
// graph: refuse it, naming the passes the list may hold.
void check_pass_list(const char* var, const std::vector<std::string>& known) {
  const char* v = std::getenv(var);
  if (!v) return;
  const std::string list = v;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, end - at);
    if (!name.empty() && !listed(known, name.c_str())) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw Error(std::string(var) + ": no pass is named '" + name + "' (known: " + names + ")");
    }
    at = end + 1;
  }
}

}  // namespace

PassStats optimize(Graph& g) {
  check_pass_list("DETFORGE_SKIP_PASSES", kSkippable);
  check_pass_list("DETFORGE_EXTRA_PASSES", kOptIn);
  PassStats s;
  s.folded_batch_norms = fold_batch_norm(g);  // required: no backend runs batch_norm
  if (!skipped("fold_avg_pool_into_conv")) s.folded_avg_pools = fold_avg_pool_into_conv(g);
  if (opted_in("gather_early") && !skipped("gather_early")) s.gathered_early = gather_rows_early(g);
  s.fused_residuals = fuse_residual_adds(g, !skipped("residual_on_long_branch"));
  s.fused_activations = fuse_activations(g);
  s.fused_layer_norm_adds = fuse_layer_norm_adds(g);
  if (!skipped("fold_parallel_convs")) s.folded_parallel_convs = fold_parallel_convs(g);
  // After the RepVGG fold: the bottleneck is then one conv without a residual, so it can carry.
  if (!skipped("post_activation_adds")) s.fused_post_activation_adds = fuse_post_activation_adds(g);
  if (opted_in("split_concats") && !skipped("split_concats")) s.split_concat_convs = split_concat_convs(g);
  if (!skipped("merge_qk_projections")) s.merged_qk_projections = merge_qk_projections(g);
  if (!skipped("merge_deform_projections")) s.merged_deform_projections = merge_deform_projections(g);
  if (opted_in("merge_values") && !skipped("merge_values")) s.merged_value_projections = merge_value_projections(g);
  // Off by default: no faster on the H200 (fp16 b1 0.6729-0.6740 with it against 0.6708-0.6727
  // without, b32 equal; ab-2026-12-04-session11 calls 3-4). The adds leave the path, but the
  // early linears it adds run beside the path and take SMs its GEMMs and attention needed.
  if (opted_in("distribute_adds") && !skipped("distribute_adds")) s.distributed_adds = distribute_adds_into_linears(g);
  s.removed_ops = eliminate_dead_code(g);
  g.validate();
  return s;
}

}  // namespace detforge::graph
