// The process-wide programmatic-dependent-launch switch (common.cuh: launch, pdl_wait_and_release),
// and the fence that keeps a library's early-start launches behind everything before them.
#include <atomic>

#include "backends/cuda/kernels/common.cuh"

namespace detforge::cuda {
namespace {
std::atomic<bool> g_pdl{false};  // off until an engine sets it from DETFORGE_CUDA_PDL
thread_local bool t_off = false;
thread_local bool t_library_fence = false;
}  // namespace

bool pdl_enabled() { return !t_off && g_pdl.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

PdlOff::PdlOff(bool active) : active_(active), prev_(t_off) {
  if (active_) t_off = true;
}
PdlOff::~PdlOff() {
  if (active_) t_off = prev_;
}

namespace {
__global__ void fence_k() {}
}  // namespace

void pdl_fence(cudaStream_t s) {
  fence_k<<<1, 32, 0, s>>>();
  DF_CUDA(cudaGetLastError());
}

LibraryFence::LibraryFence(bool on) : prev_(t_library_fence) { t_library_fence = on; }
LibraryFence::~LibraryFence() { t_library_fence = prev_; }
void fence_before_library(cudaStream_t s) {
  if (t_library_fence) pdl_fence(s);
}

}  // namespace detforge::cuda
