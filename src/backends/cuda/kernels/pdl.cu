// The process-wide programmatic-dependent-launch switch (common.cuh: launch, pdl_wait_and_release).
#include <atomic>

#include "backends/cuda/kernels/common.cuh"

namespace detforge::cuda {
namespace {
std::atomic<bool> g_pdl{false};  // off until an engine sets it from DETFORGE_CUDA_PDL
thread_local bool t_off = false;
}  // namespace

bool pdl_enabled() { return !t_off && g_pdl.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

PdlOff::PdlOff(bool active) : active_(active), prev_(t_off) {
  if (active_) t_off = true;
}
PdlOff::~PdlOff() {
  if (active_) t_off = prev_;
}

}  // namespace detforge::cuda
