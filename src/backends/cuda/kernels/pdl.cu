// The process-wide programmatic-dependent-launch switch (common.cuh: launch, pdl_wait_and_release).
#include <atomic>

#include "backends/cuda/kernels/common.cuh"

namespace detforge::cuda {
namespace {
std::atomic<bool> g_pdl{false};  // the engine default (DETFORGE_CUDA_PDL=0)
}
bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }
}  // namespace detforge::cuda
