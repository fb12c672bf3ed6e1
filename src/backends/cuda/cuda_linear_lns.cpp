// A linear and the LayerNorm of its output as one launch (kernels/linear_ln.h says why), behind
// DETFORGE_CUDA_LINEAR_LN: 0 off (default: not yet measured), 1 on (the kernel launched with
// programmatic dependent launch, as our other kernels), 2 on without it (the wgmma implicit
// GEMM broke graph == eager under PDL in session 16, cause unknown: NOTES v19). fp16 engines on
// compute capability 9.0 only. DETFORGE_CUDA_LINEAR_LN_SPLIT=S forces the split-K cluster size
// where K allows it (kernels/linear_ln.h), 0 = the launcher's choice.
//
// Like the layer_norm + add pairs (cuda_ln_adds.cpp), the ops stay in the graph. The linear
// launches nothing (absorbed_); the launch sits at the layer_norm, or at its add when that pair
// is launched together (then the add's output is the kernel's second output), charged with
// reading the linear's activations (extra_reads_) so the arena keeps them and the schedule orders
// the launch after their producers. The linear's own output is never written: its only reader is
// the layer_norm, whose work the launch does. Past DETFORGE_CUDA_LINEAR_LN_MAX_ROWS rows (a
// batch's choice, plan_linear_lns) both ops run as before and the linear writes its output.
#include <algorithm>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/linear_ln.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

std::vector<std::pair<int, int>> linear_ln_pairs(const graph::Graph& g) {
  const auto cons = graph::consumers(g);
  std::vector<std::pair<int, int>> r;
  for (size_t l = 0; l < g.ops.size(); ++l) {
    const graph::Op& lin = g.ops[l];
    if (lin.kind != OpKind::linear || (lin.act() != graph::Act::none && lin.act() != graph::Act::relu)) continue;
    const auto& w = g.tensor(lin.inputs[1]).shape;
    if (!g.tensor(lin.inputs[1]).is_const || w.size() != 2 || w[0] != kLinearLnN ||
        linear_ln_splits(static_cast<int>(w[1])).empty() || (lin.has_input(2) && !g.tensor(lin.inputs[2]).is_const))
      continue;
    const TensorId y = lin.outputs[0];
    if (cons[y].size() != 1 || std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end()) continue;
    const int n = cons[y][0];
    const graph::Op& ln = g.ops[n];
    if (ln.kind != OpKind::layer_norm || ln.inputs[0] != y || g.tensor(ln.outputs[0]).shape.back() != kLinearLnN ||
        !g.tensor(ln.inputs[1]).is_const || !g.tensor(ln.inputs[2]).is_const || (ln.has_input(3) && ln.inputs[3] == y))
      continue;
    r.push_back({static_cast<int>(l), n});
  }
  return r;
}

void CudaEngine::setup_linear_lns() {
  const size_t n = g_.ops.size();
  linear_ln_lin_.assign(n, -1);
  linear_ln_ln_.assign(n, -1);
  linear_ln_lin_of_.assign(n, -1);
  if (!half_ || linear_ln_mode_ == 0 || row_mlp_ || !linear_ln_runs_here()) return;
  for (const auto& [l, ln] : linear_ln_pairs(g_)) {
    if (absorbed_[l] || (!box_step_of_.empty() && (box_step_of_[l] >= 0 || box_step_of_[ln] >= 0))) continue;
    int site = ln;  // where the launch sits: the layer_norm, or the add launched with it
    if (absorbed_[ln]) {
      const auto it = std::find(ln_add_of_.begin(), ln_add_of_.end(), ln);
      if (it == ln_add_of_.end()) continue;  // absorbed by something else
      site = static_cast<int>(it - ln_add_of_.begin());
    }
    absorbed_[l] = 1;
    linear_ln_lin_of_[l] = site;
    linear_ln_lin_[site] = l;
    linear_ln_ln_[site] = ln;
    for (TensorId t : g_.ops[l].inputs)
      if (t != graph::kNoTensor && !g_.tensor(t).is_const) extra_reads_[site].push_back(t);
  }
}

void CudaEngine::plan_linear_lns(BatchPlan& p, int batch) {
  p.linear_ln_on.assign(g_.ops.size(), 0);
  for (size_t i = 0; i < linear_ln_lin_.size(); ++i) {
    const int l = linear_ln_lin_[i];
    if (l < 0) continue;
    const TensorId y = g_.ops[linear_ln_ln_[i]].outputs[0];
    if (g_.tensor(y).numel() / kLinearLnN * batch > linear_ln_max_rows_) continue;
    p.linear_ln_on[i] = 1;
    p.linear_ln_on[l] = 1;
  }
}

bool CudaEngine::launch_linear_ln(size_t i, const BatchPlan& p, int batch, cudaStream_t s) {
  const int l = linear_ln_lin_.empty() ? -1 : linear_ln_lin_[i];
  if (l < 0 || !p.linear_ln_on[i]) return false;  // off at this batch: the layer_norm (or add) runs its own way
  const graph::Op &lin = g_.ops[l], &ln = g_.ops[linear_ln_ln_[i]];
  LinearLnArgs a;
  a.x = ptr(lin.inputs[0]);
  a.w = ptr(lin.inputs[1]);
  a.bias = lin.has_input(2) ? ptr(lin.inputs[2]) : nullptr;
  a.res = lin.has_input(3) ? ptr(lin.inputs[3]) : nullptr;
  a.act = lin.act();
  a.gamma = ptr(ln.inputs[1]);
  a.beta = ptr(ln.inputs[2]);
  a.ln_res = ln.has_input(3) ? ptr(ln.inputs[3]) : nullptr;
  a.eps = ln.attrs.contains("eps") ? ln.attr_float("eps") : 1e-5f;
  const TensorId y = ln.outputs[0];
  a.y = ptr(y);
  if (static_cast<int>(i) != linear_ln_ln_[i]) {  // the add launched with the layer_norm
    const graph::Op& add = g_.ops[i];
    a.add2 = ptr(add.inputs[0] == y ? add.inputs[1] : add.inputs[0]);
    a.y2 = ptr(add.outputs[0]);
  }
  const auto& w = g_.tensor(lin.inputs[1]).shape;
  a.N = static_cast<int>(w[0]);
  a.K = static_cast<int>(w[1]);
  a.M = g_.tensor(y).numel() * batch / a.N;
  const std::vector<int> ok = linear_ln_splits(a.K);
  const int split = std::find(ok.begin(), ok.end(), linear_ln_split_) != ok.end() ? linear_ln_split_ : 0;
  linear_ln(a, s, split, linear_ln_mode_ == 1);
  return true;
}

int CudaEngine::linear_lns() const {
  return static_cast<int>(std::count_if(linear_ln_lin_.begin(), linear_ln_lin_.end(), [](int l) { return l >= 0; }));
}

}  // namespace detforge::cuda
