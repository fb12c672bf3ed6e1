#include "backends/cuda/cuda_engine.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/image_input.h"
#include "backends/cuda/kernels/kernels.h"
#include "graph/memory_plan.h"
#include "graph/op_order.h"
#include "core/half.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

namespace {

constexpr size_t kAlign = 256;
// One workspace shared by cuDNN and cuBLASLt (ops run one after another on one stream).
constexpr size_t kWorkspaceBytes = size_t{64} << 20;

// fp16 has no room for the anchor sentinel (torch.finfo(float32).max = 3.4e38 in transformers):
// a constant beyond the fp16 range is stored as +-16376 (NVIDIA's finfo(fp16).max / 4), which
// stays finite when a head output is added (inf only past 49128) and still saturates the later
// sigmoid, as in TensorRT-Model-Connect's decoder_builder.
constexpr float kFp16Sentinel = 16376.f;

uint16_t to_half_bits(float v) {
  if (std::isinf(v) || (std::isfinite(v) && std::fabs(v) > kFp16Max)) v = v > 0 ? kFp16Sentinel : -kFp16Sentinel;
  return fp32_to_fp16(v);
}

bool input_must_be_activation(OpKind k, size_t i) {
  switch (k) {
    case OpKind::conv2d: case OpKind::linear: case OpKind::layer_norm: return i == 0 || i == 3;
    case OpKind::ms_deform_attn: return i < 4;
    case OpKind::attention: return i < 3;
    case OpKind::gather_rows: return i == 1;  // a constant table is gathered per image (gather_rows_early)
    case OpKind::box_refine: return i < 2;
    case OpKind::add: case OpKind::concat: return false;  // add swaps a const to b; concat checked below
    default: return i == 0;
  }
}

}  // namespace

CudaEngine::CudaEngine(const graph::Graph& g, const EngineOptions& opt)
    : max_batch_(opt.max_batch), check_finite_(opt.check_finite), device_(opt.device) {
  g.validate();
  if (g.inputs.size() != 1) throw Error("cuda backend: the graph must have exactly one input (pixels)");
  precision_ = opt.precision.empty() ? "fp32" : opt.precision;
  if (precision_ != "fp32" && precision_ != "fp16")
    throw Error("cuda backend: precision '" + precision_ + "' is not supported (fp32 | fp16)");
  half_ = precision_ == "fp16";
  read_settings();
  for (const auto& op : g.ops) {
    if (op.kind == OpKind::batch_norm)
      throw Error("cuda backend: op " + op.name + " (batch_norm) must be folded by fold_batch_norm first");
    for (size_t i = 0; i < op.inputs.size(); ++i)
      if (input_must_be_activation(op.kind, i) && g.tensor(op.inputs[i]).is_const)
        throw Error("cuda backend: op " + op.name + " (" + graph::op_kind_name(op.kind) + ") input " +
                    std::to_string(i) + " is a constant; the CUDA backend needs an activation there");
    if (op.kind == OpKind::attention)
      if (const auto why = graph::attention_columns_error(g, op); !why.empty())
        throw Error("cuda backend: op " + op.name + " (attention): " + why);
    if (op.kind == OpKind::ms_deform_attn)
      if (const auto why = graph::deform_columns_error(g, op); !why.empty())
        throw Error("cuda backend: op " + op.name + " (ms_deform_attn): " + why);
    if (op.kind == OpKind::concat)
      for (auto t : op.inputs)
        if (g.tensor(t).is_const) throw Error("cuda backend: concat " + op.name + " of a constant is not supported");
  }
  DF_CUDA(cudaSetDevice(device_));
  DF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DF_CUDNN(cudnnCreate(&cudnn_), "engine");
  if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) throw Error("cuda backend: cublasLtCreate failed");

  // Structure only: copy the graph without constant data.
  g_.ops = g.ops;
  g_.inputs = g.inputs;
  g_.outputs = g.outputs;
  g_.tensors.reserve(g.tensors.size());
  for (const auto& t : g.tensors) {
    graph::Tensor c;
    c.name = t.name;
    c.shape = t.shape;
    c.dtype = t.dtype;
    c.is_const = t.is_const;
    g_.tensors.push_back(std::move(c));
  }
  // Every op issued as soon as its inputs exist (graph/op_order.h); DETFORGE_CUDA_ASAP=0 keeps
  // the builder's order. Measured (H200 fp16, ab-2026-12-03-pdl-qk-asap): batch 1 0.7388 ->
  // 0.7281 ms (the decoder's value projections leave its critical path), batch 32 unchanged.
  // Off by default under DETFORGE_CUDA_ROW_MLP=1: a row chain must be consecutive ops, and the
  // new order splits one of r18vd's 19.
  if (env_int("DETFORGE_CUDA_ASAP", row_mlp_ ? 0 : 1, 0, 1)) graph::reorder_ops(g_, graph::asap_order(g_));
  slots_.resize(g_.tensors.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].root = static_cast<int>(i);
    slots_[i].per_image = g_.tensors[i].numel();
    slots_[i].is_const = g_.tensors[i].is_const;
    slots_[i].i32 = g_.tensors[i].dtype == graph::DType::i32;
  }
  for (const auto& op : g_.ops) {
    if (op.kind == OpKind::reshape) {
      if (g_.tensor(op.inputs[0]).numel() != g_.tensor(op.outputs[0]).numel())
        throw Error("cuda backend: reshape " + op.name + " changes the element count");
      slots_[op.outputs[0]].root = slots_[op.inputs[0]].root;
    }
    if (op.kind == OpKind::topk_rows) slots_[op.outputs[0]].i32 = true;
  }
  find_pad_input();
  upload_weights(g);
  order_late_values();
  order_ln_adds();
  order_dec_tails();
  setup_row_chains();
  setup_box_steps();
  absorbed_.assign(g_.ops.size(), 0);
  setup_dec_tails();
  setup_ln_adds();
  setup_linear_lns();
  setup_upsample_concats();
  setup_green();
  critical_ = graph::critical_ops(g_, 0.25);
  plan_memory();
  setup_stem_fused();
  find_stem_op();
  open_tune_cache();

  const int64_t in_n = g_.tensor(g_.inputs[0]).numel() * max_batch_;
  DF_CUDA(cudaMalloc(&d_in32_, sizeof(float) * in_n));
  DF_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&h_in_), sizeof(float) * in_n, cudaHostAllocDefault));
  for (TensorId t : g_.outputs) {
    const int64_t n = g_.tensor(t).numel() * max_batch_;
    float *d = nullptr, *h = nullptr;
    DF_CUDA(cudaMalloc(&d, sizeof(float) * n));
    DF_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&h), sizeof(float) * n, cudaHostAllocDefault));
    d_out32_.push_back(d);
    h_out_.push_back(h);
  }
  DF_CUDA(cudaMalloc(&d_count_, sizeof(unsigned long long)));
  plans_.resize(max_batch_ + 1);
  // Capture at load for batch 1 and the largest batch; others on first use.
  prepare(1);
  if (max_batch_ > 1) prepare(max_batch_);
}

CudaEngine::~CudaEngine() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& p : plans_) {
    if (p && p->exec) cudaGraphExecDestroy(p->exec);
    if (p) {
      for (auto ev : p->events)
        if (ev) cudaEventDestroy(ev);
      for (auto* b : p->snap) cudaFree(b);
      cudaFree(p->op_ws_buf);
    }
  }
  plans_.clear();
  fused_cache_.clear();  // the plans refer to the handles destroyed below
  for (auto h : side_cudnn_) cudnnDestroy(h);
  for (auto* w : side_ws_) cudaFree(w);
  for (auto st : side_) cudaStreamDestroy(st);
  cudaFree(green_ws_);
  green_.reset();  // after the plans' events, some of which are the green context's
  image_input_.reset();
  cudaFree(d_select_);
  cudaFreeHost(h_select_);
  for (auto* p : d_out32_) cudaFree(p);
  for (auto* p : h_out_) cudaFreeHost(p);
  cudaFree(d_in32_);
  cudaFreeHost(h_in_);
  cudaFree(d_count_);
  cudaFree(stem_fused_w_);
  cudaFree(arena_);
  cudaFree(weights_);
  cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaEngine::upload_weights(const graph::Graph& g) {
  // Conv weights go OIHW -> OHWI (cuDNN's KRSC for NHWC); everything else keeps its layout.
  std::vector<char> conv_w(g.tensors.size(), 0), used(g.tensors.size(), 0);
  for (const auto& op : g.ops) {
    if (op.kind == OpKind::conv2d) conv_w[op.inputs[1]] = 1;
    for (auto t : op.inputs) used[t] = 1;
  }
  const size_t es = half_ ? 2 : 4;
  std::vector<size_t> off(g.tensors.size(), 0);
  size_t total = 0;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    if (!g.tensors[i].is_const || !used[i]) continue;
    if (g.tensors[i].data.empty()) throw Error("cuda backend: constant " + g.tensors[i].name + " has no data");
    off[i] = total;
    const int64_t n = static_cast<int>(i) == pad_w_ ? g.tensors[i].numel() / g.tensors[i].shape[1] * pad_input_
                                                   : g.tensors[i].numel();
    total += (n * es + kAlign - 1) / kAlign * kAlign;
  }
  weight_bytes_ = total;
  std::vector<char> host(std::max<size_t>(total, 1));
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const auto& t = g.tensors[i];
    if (!t.is_const || !used[i]) continue;
    std::vector<float> v = t.data;
    if (conv_w[i]) {
      if (t.shape.size() != 4) throw Error("cuda backend: conv weight " + t.name + " is not 4-D");
      const int64_t O = t.shape[0], I = t.shape[1], KH = t.shape[2], KW = t.shape[3];
      const int64_t IP = static_cast<int>(i) == pad_w_ ? pad_input_ : I;  // zeros past I
      v.assign(static_cast<size_t>(O * KH * KW * IP), 0.f);
      for (int64_t o = 0; o < O; ++o)
        for (int64_t ci = 0; ci < I; ++ci)
          for (int64_t y = 0; y < KH; ++y)
            for (int64_t x = 0; x < KW; ++x)
              v[((o * KH + y) * KW + x) * IP + ci] = t.data[((o * I + ci) * KH + y) * KW + x];
    }
    char* dst = host.data() + off[i];
    if (half_) {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (size_t k = 0; k < v.size(); ++k) h[k] = to_half_bits(v[k]);
    } else {
      std::memcpy(dst, v.data(), v.size() * sizeof(float));
    }
  }
  DF_CUDA(cudaMalloc(&weights_, std::max<size_t>(total, 1)));
  DF_CUDA(cudaMemcpy(weights_, host.data(), total, cudaMemcpyHostToDevice));
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (g.tensors[i].is_const && used[i]) slots_[i].dev = static_cast<char*>(weights_) + off[i];
}

void CudaEngine::plan_memory() {
  std::vector<int> root(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) root[i] = slots_[i].root;
  const auto ar =
      graph::arena_requests(g_, root, [&](int r) { return slot_bytes(r) + arena_guard_; }, extra_reads_);
  const auto& roots = ar.roots;
  const auto& lt = ar.reqs;
  // DAG-aware reuse (default; DETFORGE_CUDA_DAG_REUSE=0 turns it off): a buffer takes freed bytes
  // only when its writer already depends on every op that touched them. Plain lifetime reuse adds
  // orderings the data do not need, e.g. the 8400-row encoder bbox head waited for top-k (H200
  // timeline). Measured (ab-2026-12-03b-sched): 0.7280 -> 0.7096 ms at batch 1, batch 32 equal.
  std::function<bool(size_t, size_t)> may_share;
  std::vector<graph::OpBits> anc;
  if (env_int("DETFORGE_CUDA_DAG_REUSE", 1, 0, 1)) {
    anc = graph::data_ancestors(g_, extra_reads_);
    may_share = graph::dag_share_rule(lt, ar.users, anc);
  }
  // DETFORGE_CUDA_ARENA_REUSE=0 (a debugging aid): no two buffers share bytes, so every op's
  // output survives the forward and op_outputs() can read it.
  if (!arena_reuse_) may_share = [](size_t, size_t) { return false; };
  const graph::MemoryPlan plan = graph::plan_memory(lt, kAlign, may_share);
  arena_bytes_ = plan.total_bytes;
  const auto& off = plan.offsets;
  DF_CUDA(cudaMalloc(&arena_, std::max<size_t>(arena_bytes_, 1)));
  for (size_t k = 0; k < roots.size(); ++k) slots_[roots[k]].dev = static_cast<char*>(arena_) + off[k];
  workspace_bytes_ = kWorkspaceBytes;
  DF_CUDA(cudaMalloc(&workspace_, workspace_bytes_));
}

CudaEngine::BatchPlan& CudaEngine::plan(int batch) {
  if (batch < 1 || batch > max_batch_)
    throw Error("cuda backend: batch " + std::to_string(batch) + " is outside 1.." + std::to_string(max_batch_));
  auto& p = plans_[batch];
  if (!p) {
    auto np = std::make_unique<BatchPlan>();
    np->conv.resize(g_.ops.size());
    np->fused.resize(g_.ops.size());
    np->own_conv.assign(g_.ops.size(), -1);
    np->lin.resize(g_.ops.size());
    np->small_lin.assign(g_.ops.size(), SmallLinear::none);
    np->im2col.assign(g_.ops.size(), 0);
    np->conv_order = conv_handles_ >= 2 ? conv_handles_ : 0;
    np->max_streams = max_streams_;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < g_.ops.size(); ++i) build_op_plan(i, *np, batch);
    save_tune_cache(batch, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    plan_row_chains(*np, batch);
    plan_linear_lns(*np, batch);
    if (!dec_tails_.empty()) {  // the query rows of the batch (cuda_dec_tails.cpp)
      const graph::Op& op0 = g_.ops[dec_tails_[0].out_proj];
      np->dec_tail_on = g_.tensor(op0.outputs[0]).numel() / g_.tensor(op0.inputs[1]).shape[0] * batch <= dec_tail_max_rows_;
    }
    schedule(*np, batch);
    bind_convs_to_stream_handles(*np, batch);
    alloc_snapshots(*np, batch);
    alloc_op_workspaces(*np, batch);
    p = std::move(np);
  }
  return *p;
}

void CudaEngine::forward(BatchPlan& p, int batch, bool check, bool concurrent,
                         const std::function<void(int, bool)>* hook) {
  concurrent = concurrent && p.sched.streams > 1 && !check;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  DF_CUDA(cudaStreamIsCapturing(stream_, &capturing));
  // Eager only: the graph makes the early-start edges into library kernels full (harden_edges).
  const LibraryFence fence(eager_fence_ && capturing == cudaStreamCaptureStatusNone);
  const auto& sc = p.sched;
  auto stream_of = [&](size_t e) { return !concurrent || sc.stream[e] == 0 ? stream_ : side_stream(p, sc.stream[e]); };
  auto ws_of = [&](size_t e) {
    const int k = sc.stream[e];
    return !concurrent || k == 0 ? workspace_ : k == sc.pinned_stream ? green_ws_ : side_ws_[k - 1];
  };
  // Fork and join events live as long as the plan (events[n..]): a capture may still refer to them.
  const size_t n_ent = g_.ops.size() + 1;
  if (concurrent && p.events.size() < n_ent + sc.streams) {
    const size_t had = std::max(p.events.size(), n_ent);
    p.events.resize(n_ent + sc.streams, nullptr);
    for (size_t k = had; k < p.events.size(); ++k) {
      if (static_cast<int>(k - n_ent) == sc.pinned_stream)  // recorded on the green stream (the join)
        p.events[k] = green_->make_event();
      else
        DF_CUDA(cudaEventCreateWithFlags(&p.events[k], cudaEventDisableTiming));
    }
  }
  if (concurrent) {
    // Fork: every side stream joins the capture by waiting on an event of the origin stream.
    cudaEvent_t fork = p.events[n_ent];
    DF_CUDA(cudaEventRecord(fork, stream_));
    for (int k = 1; k < sc.streams; ++k) DF_CUDA(cudaStreamWaitEvent(side_stream(p, k), fork, 0));
  }
  auto before = [&](size_t e) {
    if (!concurrent) return;
    for (int w : sc.waits[e]) DF_CUDA(cudaStreamWaitEvent(stream_of(e), p.events[w], 0));
  };
  auto after = [&](size_t e) {
    if (concurrent && sc.record[e]) DF_CUDA(cudaEventRecord(p.events[e], stream_of(e)));
  };
  // Graph outputs to fp32 (d_out32_). Their arena bytes live to the end of the forward (nothing
  // reuses them), so a conversion may run any time after the producer.
  std::vector<char> converted(g_.outputs.size(), 0);
  auto convert_output = [&](size_t o, cudaStream_t st) {
    const TensorId t = g_.outputs[o];
    const int64_t n = g_.tensor(t).numel() * batch;
    if (slots_[slots_[t].root].i32)
      i32_to_f32(static_cast<const int32_t*>(ptr(t)), d_out32_[o], n, st);
    else
      storage_to_f32(ptr(t), d_out32_[o], n, half_, st);
  };
  const TensorId in = g_.inputs[0];
  if (hook) (*hook)(-1, true);
  before(0);
  if (pad_op_ >= 0) {
    const auto& sh = g_.tensor(in).shape;
    f32_to_half_padc(d_in32_, ptr(in), sh[0] * sh[1] * batch, static_cast<int>(sh[2]), pad_input_, stream_of(0));
  } else if (stem_op_ < 0 && stem_fused_ops_[0] < 0) {  // the direct and the fused stem read d_in32_
    f32_to_storage(d_in32_, ptr(in), g_.tensor(in).numel() * batch, half_, stream_of(0));
  }
  after(0);
  if (hook) (*hook)(-1, false);
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    if (hook) (*hook)(static_cast<int>(i), true);
    before(i + 1);
    {
      const PdlOff same_stream_only(concurrent && pdl_mode_ == 2 && !sc.waits[i + 1].empty());
      const CaptureNodes track(concurrent && p.track_nodes ? stream_of(i + 1) : nullptr, p.node_sets, i + 1);
      if (concurrent) set_capture_priority(i, stream_of(i + 1));
      launch_op(i, p, batch, stream_of(i + 1), !p.op_ws.empty() && p.op_ws[i] ? p.op_ws[i] : ws_of(i + 1));
    }
    // Before the op's event: a later writer of these bytes on another stream waits for the copy.
    if (!p.snap_after.empty())
      for (int j : p.snap_after[i])
        DF_CUDA(cudaMemcpyAsync(p.snap[j], ptr(g_.ops[j].outputs[0]), p.snap_bytes[j], cudaMemcpyDeviceToDevice,
                                stream_of(i + 1)));
    after(i + 1);
    if (hook) (*hook)(static_cast<int>(i), false);
    if (early_outputs_)  // converted on the producer's stream now, not after the join
      for (size_t o = 0; o < g_.outputs.size(); ++o) {
        const auto& outs = g_.ops[i].outputs;
        if (converted[o] || std::find(outs.begin(), outs.end(), g_.outputs[o]) == outs.end()) continue;
        convert_output(o, stream_of(i + 1));
        converted[o] = 1;
      }
    if (check && first_nonfinite_.empty() && !writes_nothing(i, p)) {
      DF_CUDA(cudaMemsetAsync(d_count_, 0, sizeof(unsigned long long), stream_));
      for (auto t : g_.ops[i].outputs)
        if (!slots_[slots_[t].root].i32)
          count_nonfinite(ptr(t), g_.tensor(t).numel() * batch, half_, d_count_, stream_);
      unsigned long long c = 0;
      DF_CUDA(cudaMemcpyAsync(&c, d_count_, sizeof(c), cudaMemcpyDeviceToHost, stream_));
      DF_CUDA(cudaStreamSynchronize(stream_));
      if (c) first_nonfinite_ = g_.ops[i].name + " (" + graph::op_kind_name(g_.ops[i].kind) + ")";
    }
  }
  if (concurrent) {
    // Join: the origin stream waits for every side stream's last op.
    for (int k = 1; k < sc.streams; ++k) {
      cudaEvent_t j = p.events[n_ent + k];
      DF_CUDA(cudaEventRecord(j, side_stream(p, k)));
      DF_CUDA(cudaStreamWaitEvent(stream_, j, 0));
    }
  }
  const PdlOff after_join(concurrent && pdl_mode_ == 2);  // the conversions wait on every stream
  for (size_t o = 0; o < g_.outputs.size(); ++o)
    if (!converted[o]) convert_output(o, stream_);
}

void CudaEngine::launch(int batch) {
  prepare(batch);
  BatchPlan& p = plan(batch);
  if (p.exec)
    DF_CUDA(cudaGraphLaunch(p.exec, stream_));
  else
    forward(p, batch, false);
}

int CudaEngine::graph_nodes(int batch) {
  prepare(batch);
  return plan(batch).nodes;
}
std::string CudaEngine::conv_fusion_summary(int batch) {
  BatchPlan& p = plan(batch);
  int rtc = 0;
  for (size_t i = 0; i < p.fused.size(); ++i) rtc += p.fused[i] && p.own_conv[i] < 0 && p.fused[i]->runtime_compiled();
  return std::to_string(p.n_own) + " convs on own implicit-GEMM kernels, " + std::to_string(p.n_fused - p.n_own) +
         " fused in cuDNN (" + std::to_string(rtc) + " compiled at run time), " + std::to_string(p.n_unfused) +
         " with a separate epilogue" +
         (p.unfused_why.empty() ? "" : " (first reason: " + p.unfused_why + ")") + "; " +
         std::to_string(p.n_conv_linear) + " 1x1 convs as cuBLASLt linears, " + std::to_string(p.n_conv_im2col) +
         " kxk convs as im2col + cuBLASLt; " +
         std::to_string(p.n_own_linear) + " linears on own implicit-GEMM kernels, " +
         std::to_string(small_linears(batch)) + " on own small-K/small-N kernels (" +
         std::to_string(small_linears(batch, SmallLinear::tile)) + " of them tile_linear)";
}
int CudaEngine::small_linears(int batch, SmallLinear kind) {
  const BatchPlan& p = plan(batch);
  int n = 0;
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    const SmallLinear k = p.small_lin[i];
    if (k == SmallLinear::none || (kind != SmallLinear::none && k != kind)) continue;
    const int c = chain_of_.empty() ? -1 : chain_of_[i];
    if (c >= 0 && p.chain_on[c]) continue;  // runs inside the chain's row_mlp launch
    if (!box_step_of_.empty() && box_step_of_[i] >= 0) continue;  // inside a box_step launch
    ++n;
  }
  return n;
}
bool CudaEngine::graph_captured(int batch) {
  prepare(batch);
  return plan(batch).exec != nullptr;
}

void CudaEngine::upload_input(const float* pixels, int batch) {
  const int64_t n = g_.tensor(g_.inputs[0]).numel() * batch;
  std::memcpy(h_in_, pixels, sizeof(float) * n);
  DF_CUDA(cudaMemcpyAsync(d_in32_, h_in_, sizeof(float) * n, cudaMemcpyHostToDevice, stream_));
}

void CudaEngine::queue_download(int batch) {
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    const int64_t n = g_.tensor(g_.outputs[o]).numel() * batch;
    DF_CUDA(cudaMemcpyAsync(h_out_[o], d_out32_[o], sizeof(float) * n, cudaMemcpyDeviceToHost, stream_));
  }
  pending_batch_ = batch;
}

void CudaEngine::enqueue(const float* pixels, int batch) {
  if (pending_batch_) throw Error("cuda backend: enqueue() while a forward is in flight; call wait() first");
  prepare(batch);
  upload_input(pixels, batch);
  if (check_finite_) {
    first_nonfinite_.clear();
    forward(plan(batch), batch, true);
  } else {
    launch(batch);
  }
  queue_download(batch);
}

std::vector<HostTensor> CudaEngine::collect(int batch) const {
  std::vector<HostTensor> out;
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    const auto& t = g_.tensor(g_.outputs[o]);
    HostTensor h;
    h.name = t.name;
    h.shape.push_back(batch);
    h.shape.insert(h.shape.end(), t.shape.begin(), t.shape.end());
    h.data.assign(h_out_[o], h_out_[o] + t.numel() * batch);
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<HostTensor> CudaEngine::wait() {
  if (!pending_batch_) throw Error("cuda backend: wait() without enqueue()");
  DF_CUDA(cudaStreamSynchronize(stream_));
  const int b = pending_batch_;
  pending_batch_ = 0;
  return collect(b);
}

std::vector<HostTensor> CudaEngine::run(const float* pixels, int batch) {
  enqueue(pixels, batch);
  return wait();
}

// --- GPU preprocessing (gpu-preprocess) ---
std::vector<HostTensor> CudaEngine::run_images(const ImageU8* const* images, int batch, const ImageInputSpec& spec) {
  if (pending_batch_) throw Error("cuda backend: run_images() while a forward is in flight; call wait() first");
  queue_images(images, batch, spec);
  queue_download(batch);
  return wait();
}

void CudaEngine::queue_images(const ImageU8* const* images, int batch, const ImageInputSpec& spec) {
  const auto& in = g_.tensor(g_.inputs[0]).shape;
  if (in.size() != 3 || in[0] != spec.height || in[1] != spec.width || in[2] != 3) {
    std::string s;
    for (auto d : in) s += (s.empty() ? "" : ", ") + std::to_string(d);
    throw Error("cuda backend: run_images: image input size " + std::to_string(spec.width) + "x" +
                std::to_string(spec.height) + " does not match the graph input [" + s + "]");
  }
  prepare(batch);  // checks batch against max_batch
  if (!image_input_) image_input_ = std::make_unique<ImageInput>(stage_threads_, stage_side_);
  image_input_->enqueue(images, batch, spec, d_in32_, stream_);
  if (check_finite_) {  // as enqueue()
    first_nonfinite_.clear();
    forward(plan(batch), batch, true);
  } else {
    launch(batch);
  }
}
// --- end GPU preprocessing ---

int CudaEngine::graph_streams(int batch) { return plan(batch).sched.streams; }
int CudaEngine::graph_edges_hardened(int batch) {
  prepare(batch);
  return plan(batch).edges_hardened;
}
int CudaEngine::graph_edges_made_early(int batch) {
  prepare(batch);
  return plan(batch).edges_made_early;
}
int CudaEngine::graph_prioritized(int batch) {
  prepare(batch);
  return plan(batch).prioritized;
}
int CudaEngine::graph_priority_refused(int batch) {
  prepare(batch);
  return plan(batch).priority_refused;
}
int CudaEngine::graph_memsets_replaced(int batch) {
  prepare(batch);
  return plan(batch).memsets_replaced;
}
int CudaEngine::graph_waits(int batch) {
  int n = 0;
  for (const auto& w : plan(batch).sched.waits) n += static_cast<int>(w.size());
  return n;
}

void CudaEngine::run_eager_hooked(int batch, const std::function<void(int, bool)>& hook) {
  prepare(batch);
  forward(plan(batch), batch, false, false, &hook);
  DF_CUDA(cudaStreamSynchronize(stream_));
}

std::vector<HostTensor> CudaEngine::run_eager(const float* pixels, int batch) {
  BatchPlan& p = plan(batch);
  upload_input(pixels, batch);
  forward(p, batch, false);
  queue_download(batch);
  return wait();
}

}  // namespace detforge::cuda

namespace detforge {
std::unique_ptr<Engine> make_cuda_engine(const graph::Graph& g, const EngineOptions& opt) {
  return std::make_unique<cuda::CudaEngine>(g, opt);
}
}  // namespace detforge
