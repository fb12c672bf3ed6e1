// Priorities for the kernels of the ops on the longest path (graph::critical_ops),
// DETFORGE_CUDA_PRIORITY: 1 sets the capturing stream's priority attribute before each op's
// launches (library kernels too, if capture records the stream's attribute into the node),
// 2 sets the attribute on the captured kernel nodes; the graph is instantiated to use node
// priorities either way. Why: at batch 1 the H200 runs off-path GEMMs beside the path (class
// heads, value projections, distribute_adds' early linears) with ~100 blocks each, and they
// took the SMs the next path kernel needed: a bbox-head linear started 2.5 us after its producer
// ended and ran 5.2 instead of 4.4 us (timeline, ab-2026-12-04-session11 call 3). The block
// scheduler takes a higher-priority kernel's waiting blocks first; running blocks stay.
// Mode 2 on CUDA 13.0 (call 4 of that session): cudaGraphKernelNodeSetAttribute returned
// "invalid argument" for the first node tried, so nodes that refuse are now skipped and
// counted. Neither mode has been timed yet.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"

namespace detforge::cuda {

namespace {

std::pair<int, int> priority_range() {
  int least = 0, greatest = 0;
  DF_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

}  // namespace

void CudaEngine::set_capture_priority(size_t i, cudaStream_t s) {
  if (priority_ != 1 || i >= critical_.size()) return;
  const auto [least, greatest] = priority_range();
  cudaLaunchAttributeValue v{};
  v.priority = critical_[i] ? greatest : least;
  // Not fatal: a stream that refuses keeps its priority, and the count after capture says so.
  if (cudaStreamSetAttribute(s, cudaLaunchAttributePriority, &v) != cudaSuccess) cudaGetLastError();
}

CudaEngine::PriorityCount CudaEngine::prioritize_critical_nodes(const BatchPlan& p) {
  PriorityCount c;
  const auto [least, greatest] = priority_range();
  if (least == greatest) return c;
  cudaLaunchAttributeValue want{};
  want.priority = greatest;
  // Entry e is op e - 1 (entry 0, the input conversion, is not tracked).
  for (size_t e = 1; e < p.node_sets.size(); ++e) {
    if (e - 1 >= critical_.size() || !critical_[e - 1]) continue;
    for (cudaGraphNode_t node : p.node_sets[e]) {
      cudaGraphNodeType type;
      if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) continue;
      if (priority_ == 2 && cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributePriority, &want) != cudaSuccess) {
        cudaGetLastError();
        ++c.refused;
        continue;
      }
      cudaLaunchAttributeValue got{};
      if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributePriority, &got) != cudaSuccess) {
        cudaGetLastError();
        ++c.refused;
        continue;
      }
      if (got.priority == greatest) ++c.set;
      else ++c.refused;
    }
  }
  return c;
}

}  // namespace detforge::cuda
