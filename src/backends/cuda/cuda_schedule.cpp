// The per-batch plan's concurrency: the stream schedule of its ops (graph/stream_schedule), the
// cuDNN handles of side streams (DETFORGE_CUDA_CONV_HANDLES=1), and the debugging aids' buffers
// (DETFORGE_CUDA_SNAPSHOTS, DETFORGE_CUDA_OP_WORKSPACE) and op descriptions.
#include <algorithm>
#include <map>
#include <string>

#include "backends/cuda/arena_diff.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"
#include "graph/passes.h"
#include "graph/stream_schedule.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

void CudaEngine::schedule(BatchPlan& p, int batch) {
  // Entry 0 writes the graph input (the fp32 -> storage conversion); entry i + 1 is op i. Byte
  // ranges are the arena extents of the slots (max_batch sized), so they are exact for any batch.
  const size_t n = g_.ops.size() + 1;
  std::vector<graph::OpAccess> acc(n);
  auto range = [&](TensorId t) {
    const int r = slots_[t].root;
    const auto b = reinterpret_cast<uint64_t>(slots_[r].dev);
    return graph::ByteRange{b, b + slot_bytes(r)};
  };
  acc[0].writes.push_back(range(g_.inputs[0]));
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    const auto& op = g_.ops[i];
    for (auto t : op.inputs)
      if (t != graph::kNoTensor && !slots_[slots_[t].root].is_const) acc[i + 1].reads.push_back(range(t));
    for (auto t : extra_reads_[i]) acc[i + 1].reads.push_back(range(t));
    for (auto t : extra_writes_[i]) acc[i + 1].writes.push_back(range(t));
    // A reshape only renames bytes: it reads its input so it follows the producer, writes nothing.
    if (op.kind != OpKind::reshape)
      for (auto t : op.outputs) acc[i + 1].writes.push_back(range(t));
  }
  // Fused convs ordered among themselves: each "writes" a pseudo byte range (below any device
  // address) shared by the convs to keep apart. 2: all fused convs; 3: those whose kernel cuDNN
  // compiles at run time; 4: those with the same cuDNN plan (one range per plan name); 5: those
  // whose engine runs through cuBLASLt (behavior note CUBLASLT_DEPENDENCY); 6: p.order_ops;
  // 7: the precompiled ones (not compiled at run time); 8: those of the same cuDNN engine (one
  // range per engine id, "eng41" of "eng41_k2=4_..."). 7 and 8 were tried after conflicting_convs
  // named a pair of engine-41 plans; neither held on 16 inputs (cuda_settings.h at conv_handles_).
  // 9: every op that launches a library kernel (cuDNN conv, fused or not, and cuBLASLt GEMM)
  // ordered among all such ops; our own kernels overlap them (cuda_settings.h at conv_handles_).
  std::map<std::string, uint64_t> group;
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    const int m = p.conv_order;
    if (m == 9 && runs_library_kernel(i, p)) acc[i + 1].writes.push_back(graph::ByteRange{1, 2});
    const FusedConv* f = p.fused[i].get();
    if (m == 9 || !f || p.own_conv[i] >= 0) continue;
    if (m == 2 || (m == 3 && f->runtime_compiled()) || (m == 5 && f->uses_cublaslt()) ||
        (m == 6 && i < p.order_ops.size() && p.order_ops[i]) || (m == 7 && !f->runtime_compiled())) {
      acc[i + 1].writes.push_back(graph::ByteRange{1, 2});
    } else if (m == 4 || m == 8) {
      const std::string& name = f->plan_name();
      const uint64_t k = group.emplace(m == 4 ? name : name.substr(0, name.find('_')), group.size() + 1).first->second;
      acc[i + 1].writes.push_back(graph::ByteRange{k, k + 1});
    }
  }
  // DETFORGE_CUDA_LATE_VALUE: each anchor "writes" a pseudo range of its own (far below any
  // device address and the conv-ordering ranges above) that its value linears "read".
  for (const auto& [anchor, v] : late_value_ops(g_, late_value_)) {
    const uint64_t k = (uint64_t{1} << 20) + 2 * static_cast<uint64_t>(anchor);
    if (v <= anchor) continue;  // op order moved it after the anchor; this never happens
    acc[anchor + 1].writes.push_back(graph::ByteRange{k, k + 1});
    acc[v + 1].reads.push_back(graph::ByteRange{k, k + 1});
  }
  // DETFORGE_CUDA_GREEN_SMS: the decoder's value projections on a stream of their own, in a green
  // context (cuda_green_ops.cpp).
  std::vector<char> pinned;
  if (green_at(batch) && !p.green_off) {
    pinned.assign(n, 0);
    for (size_t i = 0; i < g_.ops.size(); ++i) pinned[i + 1] = green_op_[i];
  }
  p.sched = graph::schedule_streams(acc, p.max_streams, pinned.empty() ? nullptr : &pinned);
  p.acc = acc;
  std::string why;
  if (!graph::schedule_is_safe(acc, p.sched, &why)) throw Error("cuda backend: unsafe stream schedule: " + why);
  for (cudaEvent_t ev : p.events)  // a schedule made again (prepare's graph check)
    if (ev) cudaEventDestroy(ev);
  p.events.assign(n, nullptr);
  for (size_t e = 0; e < n; ++e) {
    if (!p.sched.record[e]) continue;
    if (p.sched.stream[e] == p.sched.pinned_stream)  // recorded on the green stream
      p.events[e] = green_->make_event();
    else
      DF_CUDA(cudaEventCreateWithFlags(&p.events[e], cudaEventDisableTiming));
  }
  if (uses_green(p) && !green_ws_) DF_CUDA(cudaMalloc(&green_ws_, workspace_bytes_));
  const int regular_streams = p.sched.streams - (uses_green(p) ? 1 : 0);
  while (static_cast<int>(side_.size()) + 1 < regular_streams) {
    cudaStream_t st = nullptr;
    void* ws = nullptr;
    DF_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    DF_CUDA(cudaMalloc(&ws, workspace_bytes_));
    side_.push_back(st);
    side_ws_.push_back(ws);
  }
  while (conv_handles_ == 1 && side_cudnn_.size() < side_.size()) {
    cudnnHandle_t h = nullptr;
    DF_CUDNN(cudnnCreate(&h), "side stream");
    side_cudnn_.push_back(h);
  }
}

bool CudaEngine::runs_library_kernel(size_t i, const BatchPlan& p) const {
  const int c = chain_of_.empty() ? -1 : chain_of_[i];
  if (c >= 0 && p.chain_on[c]) return false;  // inside a row_mlp launch (own kernel)
  if (p.own_conv[i] >= 0 || p.small_lin[i] != SmallLinear::none) return false;
  return p.fused[i] || p.conv[i] || p.lin[i];
}

void CudaEngine::bind_convs_to_stream_handles(BatchPlan& p, int batch) {
  if (conv_handles_ != 1) return;
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    const int st = p.sched.stream[i + 1];
    if (!p.fused[i] || st == 0) continue;
    std::string why;
    auto fc = fused_conv_plan(i, batch, side_cudnn_[st - 1], "@" + std::to_string(st), &why);
    if (!fc) throw Error("cuda backend: conv " + g_.ops[i].name + " has a cuDNN plan on the main handle but none on "
                         "stream " + std::to_string(st) + "'s: " + why);
    p.fused[i] = std::move(fc);
  }
}

void CudaEngine::alloc_snapshots(BatchPlan& p, int batch) {
  if (!snapshots_) return;
  const size_t n = g_.ops.size();
  p.snap.assign(n, nullptr);
  p.snap_bytes.assign(n, 0);
  p.snap_after.assign(n, {});
  // Where each output is written: by its own op's launch, or by the later launch that took the op
  // in (its extra_writes_). A copy at the absorbed op's own place read bytes not yet written.
  const auto prod = graph::producers(g_);
  auto take = [&](size_t at, int j) {
    const TensorId t = g_.ops[j].outputs[0];
    p.snap_bytes[j] = static_cast<size_t>(g_.tensor(t).numel()) * batch * elem_bytes(slots_[slots_[t].root]);
    DF_CUDA(cudaMalloc(&p.snap[j], p.snap_bytes[j]));
    p.snap_after[at].push_back(j);
  };
  for (size_t i = 0; i < n; ++i) {
    if (g_.ops[i].kind != OpKind::reshape && !writes_nothing(i, p)) take(i, static_cast<int>(i));
    for (TensorId t : extra_writes_[i]) {
      const int j = prod[t];
      if (j >= 0 && j != static_cast<int>(i) && !p.snap[j] && writes_nothing(j, p) && g_.ops[j].outputs[0] == t)
        take(i, j);
    }
  }
}

std::vector<std::string> CudaEngine::arena_overruns(int batch) {
  if (!arena_guard_) throw Error("cuda backend: arena_overruns needs DETFORGE_CUDA_ARENA_GUARD=1 at engine creation");
  constexpr unsigned char kPattern = 0xA5;
  std::vector<std::string> found;
  std::vector<unsigned char> back(arena_guard_);
  // The guard of a root slot: the bytes right after its max_batch extent, in its own request.
  auto guard = [&](graph::TensorId t) {
    const int r = slots_[t].root;
    return static_cast<char*>(slots_[r].dev) + slot_bytes(r);
  };
  run_eager_hooked(batch, [&](int i, bool before) {
    if (i < 0 || g_.ops[i].kind == OpKind::reshape) return;
    for (auto t : g_.ops[i].outputs) {
      if (before) {
        DF_CUDA(cudaMemsetAsync(guard(t), kPattern, arena_guard_, stream_));
        continue;
      }
      DF_CUDA(cudaStreamSynchronize(stream_));
      DF_CUDA(cudaMemcpy(back.data(), guard(t), arena_guard_, cudaMemcpyDeviceToHost));
      for (unsigned char b : back)
        if (b != kPattern) {
          found.push_back(g_.ops[i].name + ": " + g_.tensor(t).name);
          break;
        }
    }
  });
  return found;
}

std::vector<std::string> CudaEngine::stray_writes(int batch) {
  constexpr size_t kChunk = 256;  // the arena's alignment: no two tensors share a chunk
  BatchPlan& p = plan(batch);
  const size_t chunks = arena_bytes_ / kChunk;
  void* shadow = nullptr;
  unsigned char* flags = nullptr;
  DF_CUDA(cudaMalloc(&shadow, std::max<size_t>(arena_bytes_, 16)));
  DF_CUDA(cudaMalloc(&flags, std::max<size_t>(chunks, 1)));
  std::vector<unsigned char> changed(chunks);
  std::vector<std::string> found;
  const auto base = reinterpret_cast<uint64_t>(arena_);
  auto owner = [&](uint64_t a) {  // the tensors whose arena bytes hold address a
    std::string s;
    for (size_t t = 0; t < slots_.size(); ++t) {
      if (slots_[t].root != static_cast<int>(t) || slots_[t].is_const || !slots_[t].dev) continue;
      const auto b = reinterpret_cast<uint64_t>(slots_[t].dev);
      if (a >= b && a < b + slot_bytes(static_cast<int>(t))) s += (s.empty() ? "" : ", ") + g_.tensors[t].name;
    }
    return s.empty() ? std::string("no tensor") : s;
  };
  try {
    run_eager_hooked(batch, [&](int i, bool before) {
      if (before) {
        DF_CUDA(cudaMemcpyAsync(shadow, arena_, chunks * kChunk, cudaMemcpyDeviceToDevice, stream_));
        return;
      }
      DF_CUDA(cudaMemsetAsync(flags, 0, chunks, stream_));
      mark_changed_chunks(shadow, arena_, chunks * kChunk, kChunk, flags, stream_);
      DF_CUDA(cudaMemcpyAsync(changed.data(), flags, chunks, cudaMemcpyDeviceToHost, stream_));
      DF_CUDA(cudaStreamSynchronize(stream_));
      const auto& writes = p.acc[i + 1].writes;
      size_t outside = 0;
      uint64_t first = 0;
      for (size_t k = 0; k < chunks; ++k) {
        if (!changed[k]) continue;
        const uint64_t a = base + k * kChunk;
        bool declared = false;
        for (const auto& w : writes) declared = declared || (a < w.end && a + kChunk > w.begin);
        if (!declared && outside++ == 0) first = a;
      }
      if (outside)
        found.push_back((i < 0 ? std::string("input conversion") : g_.ops[i].name) + ": " + std::to_string(outside) +
                        " chunks of 256 bytes outside its outputs, the first in " + owner(first));
    });
  } catch (...) {
    cudaFree(shadow);
    cudaFree(flags);
    throw;
  }
  cudaFree(shadow);
  cudaFree(flags);
  return found;
}

void CudaEngine::poison_arena() {
  DF_CUDA(cudaMemsetAsync(arena_, 0xFF, arena_bytes_, stream_));
  DF_CUDA(cudaStreamSynchronize(stream_));
}

void CudaEngine::alloc_op_workspaces(BatchPlan& p, int batch) {
  if (!op_workspaces_) return;
  std::vector<size_t> bytes(g_.ops.size(), 0), off(g_.ops.size(), 0);
  size_t total = 0;
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    if (p.own_conv[i] >= 0)
      bytes[i] = g_.ops[i].kind == OpKind::conv2d ? own_conv_workspace(conv_shape(i, batch), p.own_conv[i])
                                                  : workspace_bytes_;  // a linear's shape: keep it simple
    else if (p.fused[i])
      bytes[i] = p.fused[i]->workspace_bytes();
    else if (p.conv[i])
      bytes[i] = p.conv[i]->workspace_bytes();
    else if (p.im2col[i])
      bytes[i] = workspace_bytes_;  // cuBLASLt's share, then the columns (conv_as_im2col)
    else if (p.lin[i])
      bytes[i] = p.lin[i]->workspace_bytes();
    off[i] = total;
    total += (bytes[i] + 255) / 256 * 256;
  }
  DF_CUDA(cudaMalloc(&p.op_ws_buf, std::max<size_t>(total, 256)));
  p.op_ws.assign(g_.ops.size(), nullptr);
  for (size_t i = 0; i < g_.ops.size(); ++i)
    if (bytes[i]) p.op_ws[i] = static_cast<char*>(p.op_ws_buf) + off[i];
}

std::vector<CudaEngine::OpSnapshot> CudaEngine::op_snapshots(int batch) {
  std::vector<OpSnapshot> r;
  auto& p = plan(batch);
  DF_CUDA(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < p.snap.size(); ++i) {
    if (!p.snap[i]) continue;
    std::vector<char> h(p.snap_bytes[i]);
    DF_CUDA(cudaMemcpy(h.data(), p.snap[i], h.size(), cudaMemcpyDeviceToHost));
    r.push_back({static_cast<int>(i), g_.ops[i].name, std::move(h)});
  }
  return r;
}

std::vector<CudaEngine::OpOutput> CudaEngine::op_outputs(int batch) {
  if (arena_reuse_) throw Error("cuda backend: op_outputs needs DETFORGE_CUDA_ARENA_REUSE=0 at engine creation");
  prepare(batch);
  DF_CUDA(cudaStreamSynchronize(stream_));
  std::vector<OpOutput> r;
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    if (g_.ops[i].kind == OpKind::reshape) continue;
    const TensorId t = g_.ops[i].outputs[0];
    const Slot& root = slots_[slots_[t].root];
    OpOutput o{i, root.i32, std::vector<char>(static_cast<size_t>(g_.tensor(t).numel()) * batch * elem_bytes(root))};
    DF_CUDA(cudaMemcpy(o.bytes.data(), ptr(t), o.bytes.size(), cudaMemcpyDeviceToHost));
    r.push_back(std::move(o));
  }
  return r;
}

std::string CudaEngine::op_launch_summary(int batch, size_t i) {
  auto& p = plan(batch);
  if (i >= g_.ops.size()) throw Error("cuda backend: op index " + std::to_string(i) + " out of range");
  std::string what = graph::op_kind_name(g_.ops[i].kind);
  if (in_stem_fused(i))
    what = static_cast<int>(i) == stem_fused_ops_[3] ? "own stem_fused (the stem's three convs and this pool)"
                                                      : "in the stem_fused launch of the stem's pool";
  else if (!box_step_of_.empty() && box_step_of_[i] >= 0)
    what = absorbed_in_box_step(i) ? "in the box_step launch of a later op" : "own box_step";
  else if (!linear_ln_lin_of_.empty() && linear_ln_lin_of_[i] >= 0 && !p.linear_ln_on[i])
    what = "cuBLASLt linear (its linear_ln pair is over DETFORGE_CUDA_LINEAR_LN_MAX_ROWS at this batch)";
  else if (dec_tail_runs(i, p) && dec_tail_of_[i] >= 0)
    what = "own dec_tail (the decoder layer's tail from output_proj)";
  else if (dec_tail_runs(i, p) && absorbed_in_dec_tail(i))
    what = "in the dec_tail launch of a later op";
  else if (!absorbed_.empty() && absorbed_[i])
    what = "in the launch of a later op (" + std::string(g_.ops[i].kind == OpKind::layer_norm ? "its add"
                                                         : g_.ops[i].kind == OpKind::linear   ? "its layer_norm"
                                                                                               : "its concat") +
           ")";
  else if (!linear_ln_lin_.empty() && linear_ln_lin_[i] >= 0 && p.linear_ln_on[i])
    what = "linear_ln of op " + std::to_string(linear_ln_lin_[i]) +
           (linear_ln_ln_[i] == static_cast<int>(i) ? "" : " with this add as its second output");
  else if (!ln_add_of_.empty() && ln_add_of_[i] >= 0)
    what = "layer_norm with this add as its second output";
  else if (p.own_conv[i] >= 0)
    what = std::string("own conv ") + own_conv_name(p.own_conv[i]);
  else if (p.fused[i])
    what = std::string("cuDNN fused conv ") + (p.fused[i]->runtime_compiled() ? "(compiled at run time) " : "") +
           (p.fused[i]->uses_cublaslt() ? "(through cuBLASLt) " : "") + p.fused[i]->plan_name();
  else if (p.conv[i])
    what = "cuDNN legacy conv";
  else if (p.lin[i])
    what = std::string(g_.ops[i].kind == graph::OpKind::conv2d ? "cuBLASLt linear (1x1 conv)" : "cuBLASLt linear") +
           (lt_tune_ > 0 ? ", candidate " + std::to_string(p.lin[i]->chosen()) + " of " +
                               std::to_string(p.lin[i]->candidates())
                         : "");
  else if (p.small_lin[i] != SmallLinear::none)
    what = std::string("own linear (") + small_linear_name(p.small_lin[i]) + ")";
  return "stream " + std::to_string(p.sched.stream[i + 1]) + ", " + what;
}

}  // namespace detforge::cuda
