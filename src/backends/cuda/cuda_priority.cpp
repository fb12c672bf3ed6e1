// Graph-node priorities for the ops on the longest path (DETFORGE_CUDA_PRIORITY=1). At batch 1
// the H200 runs off-path GEMMs beside the path (decoder early parts, class heads, value
// projections): with ~100 blocks each they took the SMs the next path kernel needed, e.g. a
// bbox-head linear started 2.5 us after its producer ended and ran 5.2 instead of 4.4 us
// (timeline, ab-2026-12-04-session11 call 3). The block scheduler takes a higher-priority
// kernel's waiting blocks first; running blocks are not preempted.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"

namespace detforge::cuda {

int CudaEngine::prioritize_critical_nodes(const BatchPlan& p) {
  int least = 0, greatest = 0;
  DF_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  if (least == greatest) return 0;
  cudaLaunchAttributeValue v{};
  v.priority = greatest;
  int n = 0;
  // Entry e is op e - 1 (entry 0, the input conversion, is on every path).
  for (size_t e = 0; e < p.node_sets.size(); ++e) {
    if (e > 0 && (e - 1 >= critical_.size() || !critical_[e - 1])) continue;
    for (cudaGraphNode_t node : p.node_sets[e]) {
      cudaGraphNodeType type;
      if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) continue;
      DF_CUDA(cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributePriority, &v));
      ++n;
    }
  }
  return n;
}

}  // namespace detforge::cuda
