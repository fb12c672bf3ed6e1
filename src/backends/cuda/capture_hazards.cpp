// The captured graph's edges. CaptureNodes records which graph nodes each schedule entry's
// launches added during a capture. harden_edges uses them to make the programmatic (early-start)
// edges into library-kernel ops full edges: the fix of the multi-stream defect (NOTES.md v12).
// capture_misses_hazards, a debugging aid, checks each byte hazard between two entries against
// the graph's reachability (schedule_is_safe proves the schedule, this proves its capture).
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

// The nodes of g into v (CaptureNodes' destructor, which must not throw, checks the result).
cudaError_t get_nodes(cudaGraph_t g, std::vector<cudaGraphNode_t>& v) {
  size_t n = 0;
  if (const cudaError_t e = cudaGraphGetNodes(g, nullptr, &n); e != cudaSuccess) return e;
  v.resize(n);
  return n ? cudaGraphGetNodes(g, v.data(), &n) : cudaSuccess;
}

std::vector<cudaGraphNode_t> nodes_of(cudaGraph_t g) {
  std::vector<cudaGraphNode_t> v;
  DF_CUDA(get_nodes(g, v));
  return v;
}

struct Edges {
  std::vector<cudaGraphNode_t> from, to;
  std::vector<cudaGraphEdgeData> data;
  size_t size() const { return from.size(); }
  // Programmatic: the downstream node may start before this edge's upstream node has finished.
  bool early(size_t k) const {
    return data[k].type != cudaGraphDependencyTypeDefault || data[k].from_port != cudaGraphKernelNodePortDefault;
  }
};

Edges edges_of(cudaGraph_t g) {
  size_t n = 0;
  DF_CUDA(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  Edges e{std::vector<cudaGraphNode_t>(n), std::vector<cudaGraphNode_t>(n), std::vector<cudaGraphEdgeData>(n)};
  if (n) DF_CUDA(cudaGraphGetEdges(g, e.from.data(), e.to.data(), e.data.data(), &n));
  return e;
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
  std::vector<cudaGraphNode_t> now;
  if (cudaStreamGetCaptureInfo(s_, &st, nullptr, &g) != cudaSuccess || !g || get_nodes(g, now) != cudaSuccess) return;
  for (auto* node : now)
    if (!old.count(node)) out_->push_back(node);
}

std::unordered_set<cudaGraphNode_t> CudaEngine::library_nodes(const BatchPlan& p, bool waiting_only) const {
  std::unordered_set<cudaGraphNode_t> lib;
  for (size_t e = 1; e < p.node_sets.size(); ++e)
    if (runs_library_kernel(e - 1, p) && (!waiting_only || library_kernel_waits(e - 1, p)))
      lib.insert(p.node_sets[e].begin(), p.node_sets[e].end());
  return lib;
}

bool CudaEngine::library_kernel_waits(size_t i, const BatchPlan& p) const {
  // cuDNN's precompiled engine 41 (sm90 xmma fprop) without a residual input: CudaLibraryWaits
  // saw its kernels read their input and write their output only after a programmatic
  // predecessor finished (0 of 24 replays differ, H100, 22nd session). cuBLASLt's nvjet kernels,
  // cuDNN's engines 39 and 10 and the runtime-compiled engine 4 did not wait (24 of 24 differ).
  const FusedConv* f = p.fused[i].get();
  return f && !f->runtime_compiled() && f->plan_name().rfind("eng41_", 0) == 0 && !g_.ops[i].has_input(3);
}

namespace {

bool is_kernel(cudaGraphNode_t n) {
  cudaGraphNodeType t{};
  return cudaGraphNodeGetType(n, &t) == cudaSuccess && t == cudaGraphNodeTypeKernel;
}

}  // namespace

int CudaEngine::harden_edges(cudaGraph_t graph, BatchPlan& p, int mode) {
  // Mode 3: the kernels that wait for their programmatic predecessors (library_kernel_waits) get
  // every kernel-to-kernel edge into them made programmatic, so their launch overlaps the
  // predecessor's tail; the other library kernels' early edges are made full as in mode 1.
  const auto lib = library_nodes(p, false);
  const auto waits = mode == 3 ? library_nodes(p, true) : std::unordered_set<cudaGraphNode_t>{};
  const Edges edges = edges_of(graph);
  std::unordered_map<cudaGraphNode_t, size_t> entry;  // the schedule entry whose launches added a node
  for (size_t e = 0; mode == 3 && e < p.node_sets.size(); ++e)
    for (auto* node : p.node_sets[e]) entry[node] = e;
  // Edges inside one op (a kernel after the op's own memset or first kernel) stay as captured.
  auto same_op = [&](size_t k) {
    const auto a = entry.find(edges.from[k]), b = entry.find(edges.to[k]);
    return a != entry.end() && b != entry.end() && a->second == b->second;
  };
  int n = 0;
  auto replace = [&](size_t k, const cudaGraphEdgeData& d) {
    DF_CUDA(cudaGraphRemoveDependencies(graph, &edges.from[k], &edges.to[k], &edges.data[k], 1));
    DF_CUDA(cudaGraphAddDependencies(graph, &edges.from[k], &edges.to[k], &d, 1));
    ++n;
  };
  for (size_t k = 0; k < edges.size(); ++k) {
    if (waits.count(edges.to[k])) {
      if (!edges.early(k) && !same_op(k) && is_kernel(edges.from[k]) && is_kernel(edges.to[k])) {
        cudaGraphEdgeData early{};
        early.from_port = cudaGraphKernelNodePortProgrammatic;
        early.type = cudaGraphDependencyTypeProgrammatic;
        replace(k, early);
        ++p.edges_made_early;
      }
      continue;
    }
    if (!edges.early(k)) continue;
    if (mode != 2 && !lib.count(edges.to[k])) continue;
    replace(k, cudaGraphEdgeData{});
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
  const Edges edges = edges_of(graph);
  const size_t ne = edges.size();
  // reach[u] holds every node reachable from u, over all edges (a programmatic edge orders our
  // kernels through griddepcontrol.wait); `programmatic` counts the edges that are not full ones.
  const size_t n = nodes.size(), words = (n + 63) / 64;
  std::vector<std::vector<size_t>> succ(n);
  std::vector<int> indeg(n, 0);
  const auto lib = library_nodes(p, false);
  int programmatic = 0, into_library = 0;
  for (size_t k = 0; k < ne; ++k) {
    succ[index.at(edges.from[k])].push_back(index.at(edges.to[k]));
    ++indeg[index.at(edges.to[k])];
    programmatic += edges.early(k);
    into_library += edges.early(k) && lib.count(edges.to[k]);
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
  p.node_sets.clear();  // the destroyed graph's nodes
  if (!misses) return "";
  return std::to_string(misses) + " hazards without a path in the graph (" + std::to_string(n) + " nodes, " +
         std::to_string(ne) + " edges, " + std::to_string(programmatic) + " programmatic), first:" + missing;
}

}  // namespace detforge::cuda
