// Capturing the forward of one batch size into a CUDA graph, and checking it: prepare() captures,
// rewrites cuDNN's memset nodes, instantiates, and compares the graph's outputs with the eager
// forward's (DETFORGE_CUDA_GRAPH_CHECK; cuda_settings.h says why), falling back to tighter schedules
// when they differ. conflicting_convs() is the diagnostic that searches which fused convs must
// not overlap (src/backends/cuda/NOTES.md v10).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/graph_memsets.h"

namespace detforge::cuda {

cudaGraph_t CudaEngine::capture(BatchPlan& p, int batch) {
  cudaGraph_t graph = nullptr;
  DF_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    forward(p, batch, false, /*concurrent=*/true);
  } catch (const std::exception& e) {
    p.capture_error = e.what();
  }
  cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  if (p.capture_error.empty() && e != cudaSuccess) p.capture_error = cudaGetErrorString(e);
  return graph;
}

// DETFORGE_CUDA_GRAPH_DUMP=dir (a debugging aid): every captured graph as it comes from capture
// (before the memset rewrite) goes to dir/graph_b<batch>_<n>.dot (cudaGraphDebugDotPrint, verbose:
// kernel names, memset and memcpy targets), and dir/ranges.txt says which device bytes are ours,
// so a node touching memory outside them (a library's own buffer that two streams would share)
// shows. Why: the overlapping-fused-convs defect (NOTES.md v10) has no byte-range explanation.
void CudaEngine::dump_graph(cudaGraph_t graph, int batch) {
  const char* dir = std::getenv("DETFORGE_CUDA_GRAPH_DUMP");
  if (!dir || !graph) return;
  static int n = 0;
  const std::string f = std::string(dir) + "/graph_b" + std::to_string(batch) + "_" + std::to_string(n++) + ".dot";
  if (cudaGraphDebugDotPrint(graph, f.c_str(), cudaGraphDebugDotFlagsVerbose) != cudaSuccess) cudaGetLastError();
  std::ofstream r(std::string(dir) + "/ranges.txt", std::ios::trunc);
  auto range = [&](const char* what, const void* b, size_t bytes) { r << what << " " << b << " " << bytes << "\n"; };
  range("arena", arena_, arena_bytes_);
  range("weights", weights_, weight_bytes_);
  range("workspace", workspace_, workspace_bytes_);
  for (void* w : side_ws_) range("side_workspace", w, workspace_bytes_);
  range("input32", d_in32_, 0);
  for (float* o : d_out32_) range("output32", o, 0);
}

void CudaEngine::capture_and_instantiate(BatchPlan& p, int batch) {
  auto tracked_capture = [&] {  // with each op's nodes recorded when harden_edges or priorities need them
    p.track_nodes = full_edges_ == 1 || full_edges_ == 3 || priority_;
    p.node_sets.assign(g_.ops.size() + 1, {});
    cudaGraph_t g = capture(p, batch);
    p.track_nodes = false;
    // Before the memset rewrite, which replaces some nodes (node_sets would name removed ones).
    const PriorityCount pc = priority_ && g && p.capture_error.empty() ? prioritize_critical_nodes(p) : PriorityCount{};
    p.prioritized = pc.set;
    p.priority_refused = pc.refused;
    return g;
  };
  cudaGraph_t graph = tracked_capture();
  cudaError_t e = cudaSuccess;
  if (p.capture_error.empty()) dump_graph(graph, batch);
  // cuDNN's memset nodes as kernel nodes (graph_memsets.h; default, DETFORGE_CUDA_MEMSET_KERNELS=0
  // keeps them). A failed rewrite is dropped: the graph is captured again as it was.
  if (p.capture_error.empty() && graph && memset_kernels_) {
    p.memsets_replaced = replace_memset_nodes(graph);
    if (p.memsets_replaced < 0) {
      cudaGetLastError();
      cudaGraphDestroy(graph);
      graph = tracked_capture();
      p.memsets_replaced = 0;
    }
  }
  p.edges_hardened = p.edges_made_early = 0;
  if (p.capture_error.empty() && graph && full_edges_) p.edges_hardened = harden_edges(graph, p, full_edges_);
  if (p.capture_error.empty()) {
    e = cudaGraphInstantiate(&p.exec, graph, p.prioritized ? cudaGraphInstantiateFlagUseNodePriority : 0);
    if (e != cudaSuccess) p.capture_error = cudaGetErrorString(e);
    size_t n = 0;
    if (e == cudaSuccess && cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess) p.nodes = static_cast<int>(n);
  }
  if (graph) cudaGraphDestroy(graph);
  p.node_sets.clear();  // the destroyed graph's nodes
  if (!p.capture_error.empty()) {
    cudaGetLastError();  // clear; this batch size runs eagerly
    p.exec = nullptr;
  }
}

void CudaEngine::recapture(BatchPlan& p, int batch) {
  if (p.exec) cudaGraphExecDestroy(p.exec);
  p.exec = nullptr;
  schedule(p, batch);
  capture_and_instantiate(p, batch);
}

std::string CudaEngine::graph_differs_from_eager(BatchPlan& p, int batch) {
  const int64_t n = g_.tensor(g_.inputs[0]).numel() * batch;
  std::vector<float> saved(static_cast<size_t>(n)), px(static_cast<size_t>(n));
  DF_CUDA(cudaStreamSynchronize(stream_));
  DF_CUDA(cudaMemcpy(saved.data(), d_in32_, sizeof(float) * n, cudaMemcpyDeviceToHost));
  uint32_t state = 0x9e3779b9u;  // a fixed pseudo-random image in [0, 1)
  for (auto& v : px) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) * (1.0f / 16777216.0f);
  }
  auto outputs = [&] {
    std::vector<std::vector<float>> out(g_.outputs.size());
    for (size_t o = 0; o < out.size(); ++o) {
      out[o].resize(static_cast<size_t>(g_.tensor(g_.outputs[o]).numel() * batch));
      DF_CUDA(cudaMemcpy(out[o].data(), d_out32_[o], sizeof(float) * out[o].size(), cudaMemcpyDeviceToHost));
    }
    return out;
  };
  DF_CUDA(cudaMemcpy(d_in32_, px.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  DF_CUDA(cudaGraphLaunch(p.exec, stream_));
  DF_CUDA(cudaStreamSynchronize(stream_));
  const auto from_graph = outputs();
  forward(p, batch, false);
  DF_CUDA(cudaStreamSynchronize(stream_));
  const auto from_eager = outputs();
  DF_CUDA(cudaMemcpy(d_in32_, saved.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  for (size_t o = 0; o < from_graph.size(); ++o)
    if (std::memcmp(from_graph[o].data(), from_eager[o].data(), sizeof(float) * from_graph[o].size()) != 0)
      return g_.tensor(g_.outputs[o]).name;
  return "";
}

void CudaEngine::prepare(int batch) {
  BatchPlan& p = plan(batch);
  if (p.exec || !p.capture_error.empty()) return;
  // One eager pass first: cuDNN/cuBLASLt load their kernels lazily, which capture forbids.
  forward(p, batch, false);
  DF_CUDA(cudaStreamSynchronize(stream_));
  if (uses_green(p)) {
    // ... and once more on the plan's streams: a kernel loads per context, and the green stream's
    // context is its own (cuda_green_ops.cpp). Should that still leave the capture failing, the
    // plan drops the green stream.
    forward(p, batch, false, /*concurrent=*/true);
    DF_CUDA(cudaStreamSynchronize(stream_));
  }
  capture_and_instantiate(p, batch);
  if (!p.exec && uses_green(p)) {
    std::fprintf(stderr, "detforge: the graph with the green stream did not capture (%s); capturing without it\n",
                 p.capture_error.c_str());
    p.green_off = true;
    p.capture_error.clear();
    recapture(p, batch);
  }
  if (!graph_check_) {
    p.graph_check = "off";
    return;
  }
  if (!p.exec) return;
  std::string first = graph_differs_from_eager(p, batch);
  if (first.empty()) {
    p.graph_check = "equal";
    return;
  }
  // Tighter schedules, each checked again: all library kernels ordered (unless they already are),
  // then one stream.
  std::string why = "the " + std::to_string(p.sched.streams) + "-stream graph differed from the eager forward (" +
                    first + ")";
  for (int step = p.conv_order == 9 ? 1 : 0; step < 2 && !first.empty(); ++step) {
    if (step == 0) {
      p.conv_order = 9;
    } else {
      p.max_streams = 1;
      p.green_off = true;  // one stream means one
    }
    recapture(p, batch);
    if (!p.exec) return;
    first = graph_differs_from_eager(p, batch);
    why += first.empty() ? std::string("; equal with ") + (step == 0 ? "all library kernels ordered" : "one stream")
                         : std::string("; differed again (") + first + ")";
  }
  if (!first.empty()) {  // not even one stream agrees: run eagerly
    cudaGraphExecDestroy(p.exec);
    p.exec = nullptr;
    p.capture_error = "the captured graph differs from the eager forward";
  }
  p.graph_check = why;
}

std::string CudaEngine::graph_check(int batch) {
  prepare(batch);
  return plan(batch).graph_check;
}
std::vector<std::string> CudaEngine::conflicting_convs(int batch, std::string* log) {
  prepare(batch);
  BatchPlan& p = plan(batch);
  const int own_order = p.conv_order, own_streams = p.max_streams;
  std::vector<size_t> all;
  for (size_t i = 0; i < g_.ops.size(); ++i)
    if (p.fused[i] && p.own_conv[i] < 0) all.push_back(i);
  int trials = 0;
  // True when the graph with `set` ordered (the other fused convs free) equals the eager forward.
  auto agrees = [&](const std::vector<size_t>& set) {
    p.conv_order = 6;
    p.max_streams = max_streams_;
    p.order_ops.assign(g_.ops.size(), 0);
    for (size_t i : set) p.order_ops[i] = 1;
    recapture(p, batch);
    if (!p.exec) throw Error("cuda backend: conflicting_convs: capture failed: " + p.capture_error);
    const bool ok = graph_differs_from_eager(p, batch).empty();
    *log += "trial " + std::to_string(++trials) + ": " + std::to_string(set.size()) + " ordered -> " +
            (ok ? "equal" : "differs") + "\n";
    return ok;
  };
  std::vector<size_t> c;
  if (agrees({})) {
    *log += "the graph with overlapping fused convs equals the eager forward\n";
  } else if (!agrees(all)) {
    *log += "ordering every fused conv does not make the graph equal the eager forward\n";
  } else {
    // ddmin (Zeller): shrink a passing set to one where no chunk and no complement still passes.
    c = all;
    size_t n = 2;
    while (c.size() >= 2) {
      const size_t chunk = (c.size() + n - 1) / n;
      bool reduced = false;
      for (size_t k = 0; k < c.size() && !reduced; k += chunk) {
        const std::vector<size_t> part(c.begin() + k, c.begin() + std::min(c.size(), k + chunk));
        std::vector<size_t> rest(c.begin(), c.begin() + k);
        rest.insert(rest.end(), c.begin() + std::min(c.size(), k + chunk), c.end());
        if (part.size() >= 2 && agrees(part)) {
          c = part, n = 2, reduced = true;
        } else if (n > 2 && rest.size() >= 2 && agrees(rest)) {
          c = rest, n = std::max<size_t>(n - 1, 2), reduced = true;
        }
      }
      if (!reduced) {
        if (n >= c.size()) break;
        n = std::min(c.size(), 2 * n);
      }
    }
  }
  // Back to the engine's own schedule.
  p.conv_order = own_order;
  p.max_streams = own_streams;
  p.order_ops.clear();
  recapture(p, batch);
  std::vector<std::string> names;
  for (size_t i : c) names.push_back(g_.ops[i].name + " (" + op_launch_summary(batch, i) + ")");
  return names;
}

}  // namespace detforge::cuda
