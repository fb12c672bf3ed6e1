#include "backends/cuda/graph_memsets.h"

#include <cstdint>
#include <vector>

#include "backends/cuda/kernels/common.cuh"

namespace detforge::cuda {
namespace {

// The cudaMemsetParams semantics: height rows of width elements of elementSize (1, 2 or 4)
// bytes, rows `pitch` bytes apart, every element set to the low elementSize bytes of value.
__global__ void graph_memset_k(char* dst, size_t pitch, unsigned value, unsigned es, size_t width, size_t height) {
  const size_t n = width * height;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    char* p = dst + (i / width) * pitch + (i % width) * es;
    if (es == 4)
      *reinterpret_cast<uint32_t*>(p) = value;
    else if (es == 2)
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(value);
    else
      *p = static_cast<char>(value);
  }
}

bool ok(cudaError_t e) { return e == cudaSuccess; }

// The nodes on one side of `node`: its dependencies (in = true) or its dependents.
bool neighbours(cudaGraphNode_t node, bool in, std::vector<cudaGraphNode_t>& out) {
  size_t n = 0;
  if (!ok(in ? cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n)
             : cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &n)))
    return false;
  out.assign(n, nullptr);
  std::vector<cudaGraphEdgeData> edges(n);
  if (n == 0) return true;
  return ok(in ? cudaGraphNodeGetDependencies(node, out.data(), edges.data(), &n)
               : cudaGraphNodeGetDependentNodes(node, out.data(), edges.data(), &n));
}

}  // namespace

int replace_memset_nodes(cudaGraph_t g) {
  size_t n = 0;
  if (!ok(cudaGraphGetNodes(g, nullptr, &n))) return -1;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n && !ok(cudaGraphGetNodes(g, nodes.data(), &n))) return -1;
  int replaced = 0;
  for (cudaGraphNode_t m : nodes) {
    cudaGraphNodeType type;
    if (!ok(cudaGraphNodeGetType(m, &type))) return -1;
    if (type != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams mp = {};
    if (!ok(cudaGraphMemsetNodeGetParams(m, &mp))) return -1;
    if (mp.elementSize != 1 && mp.elementSize != 2 && mp.elementSize != 4) return -1;
    std::vector<cudaGraphNode_t> deps, outs;
    if (!neighbours(m, true, deps) || !neighbours(m, false, outs)) return -1;
    char* dst = static_cast<char*>(mp.dst);
    size_t pitch = mp.height > 1 ? mp.pitch : mp.width * mp.elementSize;
    unsigned value = mp.value, es = mp.elementSize;
    size_t width = mp.width, height = mp.height;
    void* args[] = {&dst, &pitch, &value, &es, &width, &height};
    cudaKernelNodeParams kp = {};
    kp.func = reinterpret_cast<void*>(graph_memset_k);
    kp.gridDim = dim3(blocks_for(static_cast<int64_t>(width * height), 256));
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t k = nullptr;
    if (!ok(cudaGraphAddKernelNode(&k, g, deps.data(), deps.size(), &kp))) return -1;
    for (cudaGraphNode_t o : outs)
      if (!ok(cudaGraphRemoveDependencies(g, &m, &o, nullptr, 1)) || !ok(cudaGraphAddDependencies(g, &k, &o, nullptr, 1)))
        return -1;
    if (!ok(cudaGraphDestroyNode(m))) return -1;
    ++replaced;
  }
  return replaced;
}

}  // namespace detforge::cuda
