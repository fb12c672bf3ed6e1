// Linear chains as one row_mlp launch (kernels/row_mlp.h, graph/row_chains.h), fp16 only.
// The chain's ops stay in the graph: the schedule and the arena still see them, and the launch
// sits at the chain's last op, which is also charged with reading the chain's input (extra_reads_)
// so that neither the arena planner nor another stream reuses those bytes before it runs.
#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/row_mlp.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::RowEpilogue;
using graph::TensorId;

void CudaEngine::setup_row_chains() {
  const size_t n = g_.ops.size();
  chain_of_.assign(n, -1);
  extra_reads_.assign(n, {});
  row_chains_.clear();
  if (!half_ || !row_mlp_) return;
  row_chains_ = graph::find_row_chains(g_);
  for (size_t c = 0; c < row_chains_.size(); ++c) {
    const graph::RowChain& ch = row_chains_[c];
    for (int i = ch.first_op(); i <= ch.last_op(); ++i) chain_of_[i] = static_cast<int>(c);
    auto& extra = extra_reads_[ch.last_op()];
    extra.push_back(g_.ops[ch.first_op()].inputs[0]);
    const graph::Op& last = g_.ops[ch.linears.back()];
    if (ch.epilogue_op >= 0 && last.has_input(3)) extra.push_back(last.inputs[3]);
  }
}

namespace {

RowMlpArgs chain_args(const graph::Graph& g, const graph::RowChain& ch, int batch,
                      const std::function<void*(TensorId)>& ptr) {
  RowMlpArgs a;
  const graph::Op& first = g.ops[ch.first_op()];
  const int64_t K0 = g.tensor(first.inputs[1]).shape[1];
  a.x = ptr(first.inputs[0]);
  a.M = g.tensor(first.inputs[0]).numel() / K0 * batch;
  a.n_layers = static_cast<int>(ch.linears.size());
  for (int l = 0; l < a.n_layers; ++l) {
    const graph::Op& op = g.ops[ch.linears[l]];
    const auto& w = g.tensor(op.inputs[1]).shape;
    a.layers[l] = {ptr(op.inputs[1]), op.has_input(2) ? ptr(op.inputs[2]) : nullptr, static_cast<int>(w[0]),
                   static_cast<int>(w[1]), op.act()};
  }
  const graph::Op& last = g.ops[ch.linears.back()];
  if (last.has_input(3)) a.res = ptr(last.inputs[3]);
  a.epi = ch.epilogue;
  const int N = a.layers[a.n_layers - 1].N;
  if (ch.epilogue_op >= 0) {
    const graph::Op& ep = g.ops[ch.epilogue_op];
    if (ch.epilogue == RowEpilogue::layer_norm) {
      a.gamma = ptr(ep.inputs[1]);
      a.beta = ptr(ep.inputs[2]);
      a.eps = ep.attrs.contains("eps") ? ep.attr_float("eps") : 1e-5f;
      if (ep.has_input(3)) a.ln_res = ptr(ep.inputs[3]);
    } else if (ch.epilogue == RowEpilogue::box_refine) {
      a.ref = ptr(ep.inputs[1]);
    } else if (ch.epilogue == RowEpilogue::add_const) {
      a.addc = ptr(ep.inputs[1]);
      a.addc_rows = g.tensor(ep.inputs[1]).numel() / N;
    }
  }
  a.y = ptr(g.ops[ch.last_op()].outputs[0]);
  return a;
}

}  // namespace

void CudaEngine::plan_row_chains(BatchPlan& p, int batch) {
  p.chain_on.assign(row_chains_.size(), 0);
  auto pt = [this](TensorId t) { return ptr(t); };
  for (size_t c = 0; c < row_chains_.size(); ++c)
    p.chain_on[c] = row_mlp_block_rows(chain_args(g_, row_chains_[c], batch, pt)) > 0;
}

bool CudaEngine::launch_row_chain(size_t i, const BatchPlan& p, int batch, cudaStream_t s) {
  const int c = chain_of_.empty() ? -1 : chain_of_[i];
  if (c < 0 || !p.chain_on[c]) return false;
  if (static_cast<int>(i) == row_chains_[c].last_op())
    row_mlp(chain_args(g_, row_chains_[c], batch, [this](TensorId t) { return ptr(t); }), s);
  return true;
}

bool CudaEngine::writes_nothing(size_t i, const BatchPlan& p) const {
  if (!linear_ln_lin_of_.empty() && linear_ln_lin_of_[i] >= 0) return p.linear_ln_on[i] != 0;  // cuda_linear_lns.cpp
  if (!dec_tail_member_.empty() && dec_tail_member_[i])  // cuda_dec_tails.cpp
    return p.dec_tail_on && dec_tail_of_[i] < 0;
  if (absorbed_in_box_step(i) || (!absorbed_.empty() && absorbed_[i])) return true;
  const int c = chain_of_.empty() ? -1 : chain_of_[i];
  return c >= 0 && p.chain_on[c] && static_cast<int>(i) != row_chains_[c].last_op();
}

int CudaEngine::row_chains_fused(int batch) {
  int n = 0;
  for (char on : plan(batch).chain_on) n += on;
  return n;
}

}  // namespace detforge::cuda
