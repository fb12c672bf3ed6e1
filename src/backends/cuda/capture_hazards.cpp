// Does the captured graph hold every ordering the stream schedule asks for? CaptureNodes records
// which graph nodes each schedule entry's launches added during a capture; capture_misses_hazards
// checks each byte hazard between two entries against the graph's reachability. A debugging aid
// for the graph-versus-eager defect (NOTES.md v11): schedule_is_safe proves the schedule, this
// proves its capture (library calls that launch on a stream of their own would show here).
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"

namespace detforge::cuda {

namespace {

std::vector<cudaGraphNode_t> nodes_of(cudaGraph_t g) {
  size_t n = 0;
  DF_CUDA(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> v(n);
  if (n) DF_CUDA(cudaGraphGetNodes(g, v.data(), &n));
  return v;
}

cudaGraph_t capturing_graph(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaGraph_t g = nullptr;
  DF_CUDA(cudaStreamGetCaptureInfo(s, &st, nullptr, &g));
  if (st != cudaStreamCaptureStatusActive || !g) throw Error("cuda backend: CaptureNodes outside a capture");
  return g;
}

}  // namespace

CaptureNodes::CaptureNodes(cudaStream_t s, std::vector<std::vector<cudaGraphNode_t>>& sets, size_t e) : s_(s) {
  if (!s_) return;
  if (sets.size() <= e) sets.resize(e + 1);
  out_ = &sets[e];
  before_ = nodes_of(capturing_graph(s_));
}

CaptureNodes::~CaptureNodes() {
  if (!s_) return;
  const std::unordered_set<cudaGraphNode_t> old(before_.begin(), before_.end());
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaGraph_t g = nullptr;
  if (cudaStreamGetCaptureInfo(s_, &st, nullptr, &g) != cudaSuccess || !g) return;  // no throw from here
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return;
  std::vector<cudaGraphNode_t> now(n);
  if (n && cudaGraphGetNodes(g, now.data(), &n) != cudaSuccess) return;
  for (auto* node : now)
    if (!old.count(node)) out_->push_back(node);
}

int CudaEngine::harden_edges(cudaGraph_t graph, const BatchPlan& p, bool all) {
  std::unordered_set<cudaGraphNode_t> lib;
  for (size_t e = 1; e < p.node_sets.size(); ++e)
    if (runs_library_kernel(e - 1, p)) lib.insert(p.node_sets[e].begin(), p.node_sets[e].end());
  size_t ne = 0;
  DF_CUDA(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne));
  std::vector<cudaGraphNode_t> from(ne), to(ne);
  std::vector<cudaGraphEdgeData> data(ne);
  if (ne) DF_CUDA(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &ne));
  int n = 0;
  for (size_t k = 0; k < ne; ++k) {
    const bool early = data[k].type != cudaGraphDependencyTypeDefault || data[k].from_port != cudaGraphKernelNodePortDefault;
    if (!early || (!all && !lib.count(to[k]))) continue;
    DF_CUDA(cudaGraphRemoveDependencies(graph, &from[k], &to[k], &data[k], 1));
    const cudaGraphEdgeData full{};
    DF_CUDA(cudaGraphAddDependencies(graph, &from[k], &to[k], &full, 1));
    ++n;
  }
  return n;
}

std::string CudaEngine::capture_misses_hazards(int batch, int* checked, int* programmatic_into_library) {
  prepare(batch);
  BatchPlan& p = plan(batch);
  if (p.sched.streams < 2) return "";
  p.track_nodes = true;
  p.node_sets.assign(g_.ops.size() + 1, {});
  cudaGraph_t graph = capture(p, batch);
  p.track_nodes = false;
  if (!p.capture_error.empty() || !graph) {
    if (graph) cudaGraphDestroy(graph);
    throw Error("cuda backend: capture_misses_hazards: capture failed: " + p.capture_error);
  }
  const auto nodes = nodes_of(graph);
  std::unordered_map<cudaGraphNode_t, size_t> index;
  for (size_t k = 0; k < nodes.size(); ++k) index[nodes[k]] = k;
  size_t ne = 0;
  DF_CUDA(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne));
  std::vector<cudaGraphNode_t> from(ne), to(ne);
  std::vector<cudaGraphEdgeData> data(ne);
  if (ne) DF_CUDA(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &ne));
  // reach[u] holds every node reachable from u, over all edges (a programmatic edge orders our
  // kernels through griddepcontrol.wait); `programmatic` counts the edges that are not full ones.
  const size_t n = nodes.size(), words = (n + 63) / 64;
  std::vector<std::vector<size_t>> succ(n);
  std::vector<int> indeg(n, 0);
  std::unordered_set<cudaGraphNode_t> lib;
  for (size_t e = 1; e < p.node_sets.size(); ++e)
    if (runs_library_kernel(e - 1, p)) lib.insert(p.node_sets[e].begin(), p.node_sets[e].end());
  int programmatic = 0, into_library = 0;
  for (size_t k = 0; k < ne; ++k) {
    succ[index.at(from[k])].push_back(index.at(to[k]));
    ++indeg[index.at(to[k])];
    const bool early = data[k].type != cudaGraphDependencyTypeDefault || data[k].from_port != cudaGraphKernelNodePortDefault;
    programmatic += early;
    into_library += early && lib.count(to[k]);
  }
  if (programmatic_into_library) *programmatic_into_library = into_library;
  std::vector<size_t> order;
  for (size_t k = 0; k < n; ++k)
    if (!indeg[k]) order.push_back(k);
  for (size_t h = 0; h < order.size(); ++h)
    for (size_t v : succ[order[h]])
      if (--indeg[v] == 0) order.push_back(v);
  std::vector<std::vector<uint64_t>> reach(n, std::vector<uint64_t>(words, 0));
  for (size_t h = order.size(); h-- > 0;) {
    const size_t u = order[h];
    for (size_t v : succ[u]) {
      reach[u][v / 64] |= uint64_t{1} << (v % 64);
      for (size_t w = 0; w < words; ++w) reach[u][w] |= reach[v][w];
    }
  }
  cudaGraphDestroy(graph);
  auto name = [&](size_t e) {
    return (e == 0 ? std::string("input conversion") : g_.ops[e - 1].name) + " (stream " +
           std::to_string(p.sched.stream[e]) + ")";
  };
  std::string missing;
  int misses = 0;
  if (checked) *checked = 0;
  const auto deps = graph::hazard_deps(p.acc);
  for (size_t j = 0; j < deps.size() && j < p.node_sets.size(); ++j)
    for (int i : deps[j]) {
      if (checked && !p.node_sets[i].empty() && !p.node_sets[j].empty()) ++*checked;
      bool ordered = true;
      for (auto* a : p.node_sets[i])
        for (auto* b : p.node_sets[j]) {
          const size_t u = index.at(a), v = index.at(b);
          ordered = ordered && ((reach[u][v / 64] >> (v % 64)) & 1);
        }
      if (!ordered && misses++ < 5) missing += "\n  " + name(i) + " -> " + name(j);
    }
  if (!misses) return "";
  return std::to_string(misses) + " hazards without a path in the graph (" + std::to_string(n) + " nodes, " +
         std::to_string(ne) + " edges, " + std::to_string(programmatic) + " programmatic), first:" + missing;
}

}  // namespace detforge::cuda
