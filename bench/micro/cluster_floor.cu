// Where row_mlp's ~6 us floor comes from (src/backends/cuda/NOTES.md, v7): per-launch time of an
// (almost) empty kernel, 76 CTAs x 256 threads, with and without a cluster of 4, large dynamic
// shared memory and cluster barriers, each launched 50 times back to back inside a CUDA graph
// (the engine's setting) and timed by events around 20 replays.
// On the device: ninja -C build-device cluster_floor && build-device/cluster_floor (not yet run:
// the fourth session had no device time left when it was written).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace cg = cooperative_groups;

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

template <int kSyncs>
__global__ void plain(float* out) {
  extern __shared__ float s[];
  for (int i = 0; i < kSyncs; ++i) __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 100000) out[0] = s[0];
}

template <int kSyncs>
__global__ void __cluster_dims__(4, 1, 1) clustered(float* out) {
  extern __shared__ float s[];
  cg::cluster_group c = cg::this_cluster();
  for (int i = 0; i < kSyncs; ++i) c.sync();
  if (threadIdx.x == 0 && blockIdx.x == 100000) out[0] = s[0];
}

template <class Launch>
float per_launch_us(Launch launch) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  launch(s);  // eager first
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 50; ++i) launch(s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, s));
  for (int r = 0; r < 20; ++r) CK(cudaGraphLaunch(ge, s));
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  return ms * 1000.f / (20 * 50);
}

template <auto Kern>
void row(const char* name, size_t smem, float* out) {
  CK(cudaFuncSetAttribute(Kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  const float us = per_launch_us([&](cudaStream_t s) {
    Kern<<<76, 256, smem, s>>>(out);
    CK(cudaGetLastError());
  });
  std::printf("%-34s %7zu B smem  %6.2f us per launch\n", name, smem, us);
}

int main() {
  float* out;
  CK(cudaMalloc(&out, 4));
  for (size_t smem : {size_t{0}, size_t{48} << 10, size_t{110} << 10, size_t{200} << 10}) {
    row<plain<0>>("plain", smem, out);
    row<plain<4>>("plain + 4 __syncthreads", smem, out);
    row<clustered<0>>("cluster of 4", smem, out);
    row<clustered<1>>("cluster of 4 + 1 cluster.sync", smem, out);
    row<clustered<3>>("cluster of 4 + 3 cluster.sync", smem, out);
  }
  return 0;
}
