// Thread-block cluster helpers (sm_90) shared by the cluster kernels (dec_tail.cu,
// topk_cluster.cu): the CTA's rank, a full cluster barrier, and a peer CTA's shared memory.
#pragma once
#include <cstdint>

namespace detforge::cuda {

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of the cluster: writes before it (global and the peers' shared memory included)
// are visible after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The address of `p` (this CTA's shared memory) in the shared memory of CTA `rank`.
template <class U>
__device__ __forceinline__ U* cluster_peer(U* p, unsigned rank) {
  uint64_t in = reinterpret_cast<uint64_t>(p), out;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"(in), "r"(rank));
  return reinterpret_cast<U*>(out);
}

}  // namespace detforge::cuda
