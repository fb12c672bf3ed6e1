#include "backends/cpu/cpu_engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "graph/memory_plan.h"

namespace detforge::cpu {
namespace {

using graph::OpKind;
using graph::TensorId;

// Sets the calling thread's OpenMP team size (oneDNN's OMP runtime reads the same ICV, both when
// a primitive is created and when it runs) and restores the caller's value on scope exit.
class OmpThreadsGuard {
 public:
  explicit OmpThreadsGuard(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreadsGuard() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

void* aligned_bytes(size_t n) {
  n = std::max<size_t>((n + 63) / 64 * 64, 64);
  void* p = std::aligned_alloc(64, n);
  if (!p) throw Error("CPU backend: cannot allocate " + std::to_string(n) + " bytes");
  return p;
}

StepPtr make_step(const CompileCtx& cc, const graph::Op& op) {
  switch (op.kind) {
    case OpKind::conv2d: return make_conv2d_step(cc, op);
    case OpKind::linear: return make_linear_step(cc, op);
    case OpKind::layer_norm: return make_layer_norm_step(cc, op);
    case OpKind::attention: return make_attention_step(cc, op);
    case OpKind::ms_deform_attn: return make_ms_deform_attn_step(cc, op);
    case OpKind::topk_rows: return make_topk_rows_step(cc, op);
    case OpKind::gather_rows: return make_gather_rows_step(cc, op);
    case OpKind::box_refine: return make_box_refine_step(cc, op);
    case OpKind::max_pool2d: return make_max_pool2d_step(cc, op);
    case OpKind::avg_pool2d: return make_avg_pool2d_step(cc, op);
    case OpKind::upsample_nearest2x: return make_upsample_nearest2x_step(cc, op);
    case OpKind::concat: return make_concat_step(cc, op);
    case OpKind::add: return make_add_step(cc, op);
    case OpKind::mul_rows: return make_mul_rows_step(cc, op);
    case OpKind::activation: return make_activation_step(cc, op);
    case OpKind::reshape: return nullptr;
    case OpKind::batch_norm:
      throw Error("CPU backend cannot run op " + op.name + " (batch_norm): run the fold_batch_norm pass first");
  }
  throw Error("CPU backend cannot run op " + op.name + " (" + graph::op_kind_name(op.kind) + ")");
}

// Inputs a step copies for itself at compile time (weights, biases, LN affine, points_scale);
// every other constant operand is read through ExecCtx and needs a copy in the const store.
bool step_owns_const(OpKind k, size_t input_index) {
  switch (k) {
    case OpKind::conv2d: case OpKind::linear: case OpKind::layer_norm: return input_index == 1 || input_index == 2;
    case OpKind::ms_deform_attn: return input_index == 4;
    default: return false;
  }
}

}  // namespace

CpuEngine::CpuEngine(const graph::Graph& g, const EngineOptions& opt)
    : max_batch_(opt.max_batch), check_finite_(opt.check_finite), eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {
  if (opt.max_batch < 1) throw Error("max batch must be at least 1, got " + std::to_string(opt.max_batch));
  if (!opt.precision.empty() && opt.precision != "fp32")
    throw Error("CPU backend runs fp32 only (asked for precision '" + opt.precision + "')");
  threads_ = opt.threads > 0 ? opt.threads : omp_get_num_procs();
  g.validate();
  if (g.inputs.empty()) throw Error("CPU backend: the graph has no input");
  inputs_ = g.inputs;
  input_aliases_.resize(inputs_.size());
  std::vector<char> is_input(g.tensors.size(), 0);
  for (TensorId id : inputs_) is_input[id] = 1;
  for (const auto& op : g.ops)  // refuse unsupported ops before any work
    if (op.kind == OpKind::batch_norm)
      throw Error("CPU backend cannot run op " + op.name + " (batch_norm): run the fold_batch_norm pass first");

  const size_t nt = g.tensors.size();
  const int nops = static_cast<int>(g.ops.size());
  // Aliases: a reshape output shares its input's root buffer.
  std::vector<TensorId> root(nt);
  for (size_t i = 0; i < nt; ++i) root[i] = static_cast<TensorId>(i);
  for (const auto& op : g.ops)
    if (op.kind == OpKind::reshape) {
      if (op.inputs.size() != 1 || op.outputs.size() != 1) op_fail(op, "expects 1 input and 1 output");
      const auto& in = g.tensor(op.inputs[0]);
      const auto& out = g.tensor(op.outputs[0]);
      if (in.numel() != out.numel())
        op_fail(op, "reshape " + shape_str(in.shape) + " -> " + shape_str(out.shape) + " changes the element count");
      root[op.outputs[0]] = root[op.inputs[0]];
    }
  // Lifetimes of root buffers in op indices.
  std::vector<int> first(nt, -1), last(nt, -1);
  for (int i = 0; i < nops; ++i) {
    for (TensorId id : g.ops[i].inputs)
      if (id != graph::kNoTensor) last[root[id]] = std::max(last[root[id]], i);
    for (TensorId id : g.ops[i].outputs)
      if (root[id] == id) first[id] = i;
  }
  for (TensorId id : g.outputs) last[root[id]] = nops;
  std::vector<graph::BufferRequest> reqs;
  std::vector<TensorId> req_id;
  for (size_t i = 0; i < nt; ++i) {
    const auto& t = g.tensors[i];
    if (t.is_const || root[i] != static_cast<TensorId>(i) || is_input[i] || first[i] < 0) continue;
    if (t.dtype != graph::DType::i32 && graph::dtype_size(t.dtype) > 4)
      throw Error("CPU backend: tensor " + t.name + " has an unsupported dtype");
    graph::BufferRequest r;
    r.bytes = static_cast<size_t>(t.numel()) * 4 * static_cast<size_t>(max_batch_);
    r.first = first[i];
    r.last = std::max(last[i], first[i]);
    reqs.push_back(r);
    req_id.push_back(static_cast<TensorId>(i));
    unshared_bytes_ += (r.bytes + 63) / 64 * 64;
  }
  const graph::MemoryPlan plan = graph::plan_memory(reqs, 64);
  arena_bytes_ = plan.total_bytes;
  arena_ = static_cast<float*>(aligned_bytes(arena_bytes_));

  ctx_.base.assign(nt, nullptr);
  ctx_.stride.assign(nt, 0);
  for (size_t r = 0; r < reqs.size(); ++r) {
    ctx_.base[req_id[r]] = reinterpret_cast<float*>(reinterpret_cast<char*>(arena_) + plan.offsets[r]);
    ctx_.stride[req_id[r]] = g.tensors[req_id[r]].numel();
  }
  for (TensorId id : inputs_) ctx_.stride[id] = g.tensor(id).numel();
  // Constants read through ExecCtx (stride 0: broadcast over the batch).
  std::vector<char> needed(nt, 0);
  for (const auto& op : g.ops)
    for (size_t k = 0; k < op.inputs.size(); ++k)
      if (op.inputs[k] != graph::kNoTensor && g.tensor(op.inputs[k]).is_const && !step_owns_const(op.kind, k))
        needed[op.inputs[k]] = 1;
  for (TensorId id : g.outputs)
    if (g.tensor(root[id]).is_const) needed[root[id]] = 1;
  for (size_t i = 0; i < nt; ++i)
    if (needed[i]) {
      const auto& t = g.tensors[i];
      if (static_cast<int64_t>(t.data.size()) != t.numel())
        throw Error("CPU backend: constant " + t.name + " holds " + std::to_string(t.data.size()) + " values for shape " + shape_str(t.shape));
      const_store_.push_back(t.data);
      ctx_.base[i] = const_store_.back().data();
    }
  for (size_t i = 0; i < nt; ++i)
    if (root[i] != static_cast<TensorId>(i)) {
      ctx_.base[i] = ctx_.base[root[i]];
      ctx_.stride[i] = ctx_.stride[root[i]];
      for (size_t k = 0; k < inputs_.size(); ++k)
        if (root[i] == inputs_[k]) input_aliases_[k].push_back(static_cast<TensorId>(i));
    }

  // Steps: oneDNN primitives are created under the team size they will run with.
  OmpThreadsGuard guard(threads_);
  CompileCtx cc{g, eng_, threads_};
  for (const auto& op : g.ops) {
    OpEntry e;
    e.label = op.name + " (" + graph::op_kind_name(op.kind) + ")";
    e.kind = graph::op_kind_name(op.kind);
    try {
      e.step = make_step(cc, op);
    } catch (const dnnl::error& err) {
      op_fail(op, std::string("oneDNN error: ") + err.what());
    }
    if (e.step) {
      scratch_bytes_ = std::max(scratch_bytes_, e.step->scratch_bytes());
      for (TensorId id : op.outputs)
        if (g.tensor(id).dtype != graph::DType::i32) e.outs.push_back(id);
    }
    ops_.push_back(std::move(e));
  }
  scratch_ = aligned_bytes(scratch_bytes_);
  ctx_.scratch = scratch_;
  ctx_.scratch_bytes = scratch_bytes_;
  ctx_.stream = &stream_;
  for (TensorId id : g.outputs) {
    const auto& t = g.tensor(id);
    outputs_.push_back({id, t.name, t.shape, t.dtype == graph::DType::i32});
  }
}

void CpuEngine::set_profiling(bool on) {
  profiling_ = on;
  profiled_runs_ = 0;
  op_times_.clear();
  op_time_index_.assign(ops_.size(), -1);
  for (size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].step) {
      op_time_index_[i] = static_cast<int>(op_times_.size());
      op_times_.push_back({ops_[i].label, ops_[i].kind, 0.0});
    }
}

CpuEngine::~CpuEngine() {
  std::free(arena_);
  std::free(scratch_);
}

void CpuEngine::scan_finite(const OpEntry& e, int batch) {
  for (TensorId id : e.outs) {
    const float* p = ctx_.base[id];
    const int64_t n = ctx_.stride[id] * batch;
    int bad = 0;
#pragma omp parallel for simd reduction(| : bad) schedule(static)
    for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(p[i]);
    if (bad) {
      first_nonfinite_ = e.label;
      return;
    }
  }
}

std::vector<HostTensor> CpuEngine::run(const float* pixels, int batch) {
  if (inputs_.size() != 1)
    throw Error("CPU engine: the graph has " + std::to_string(inputs_.size()) + " inputs; run() feeds exactly one");
  feed_[0] = pixels;
  return run_inputs(feed_, batch);
}

std::vector<HostTensor> CpuEngine::run_inputs(const std::vector<const float*>& inputs, int batch) {
  if (batch < 1 || batch > max_batch_)
    throw Error("CPU engine: batch " + std::to_string(batch) + " outside 1.." + std::to_string(max_batch_));
  if (inputs.size() != inputs_.size())
    throw Error("CPU engine: " + std::to_string(inputs.size()) + " inputs given, graph has " + std::to_string(inputs_.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k]) throw Error("CPU engine: input " + std::to_string(k) + " is null");
    float* in = const_cast<float*>(inputs[k]);  // steps never write a graph input
    ctx_.base[inputs_[k]] = in;
    for (TensorId id : input_aliases_[k]) ctx_.base[id] = in;
  }
  OmpThreadsGuard guard(threads_);
  first_nonfinite_.clear();
  for (size_t i = 0; i < ops_.size(); ++i) {
    auto& e = ops_[i];
    if (!e.step) continue;
    const auto t0 = profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    e.step->run(ctx_, batch);
    if (profiling_)
      op_times_[op_time_index_[i]].ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (check_finite_ && first_nonfinite_.empty()) scan_finite(e, batch);
  }
  if (profiling_) ++profiled_runs_;
  std::vector<HostTensor> out;
  out.reserve(outputs_.size());
  for (const auto& o : outputs_) {
    HostTensor h;
    h.name = o.name;
    h.shape.push_back(batch);
    h.shape.insert(h.shape.end(), o.shape.begin(), o.shape.end());
    int64_t per = 1;
    for (auto d : o.shape) per *= d;
    h.data.resize(static_cast<size_t>(per * batch));
    for (int b = 0; b < batch; ++b) {
      float* dst = h.data.data() + b * per;
      if (o.is_i32) {
        const int32_t* src = ctx_.i(o.id, b);
        for (int64_t k = 0; k < per; ++k) dst[k] = static_cast<float>(src[k]);
      } else {
        std::copy(ctx_.f(o.id, b), ctx_.f(o.id, b) + per, dst);
      }
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace detforge::cpu

namespace detforge {
std::unique_ptr<Engine> make_cpu_engine(const graph::Graph& g, const EngineOptions& opt) {
  return std::make_unique<cpu::CpuEngine>(g, opt);
}
}  // namespace detforge
