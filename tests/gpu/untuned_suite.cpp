// The GPU suite's engines load with DETFORGE_CUDA_TUNE=0 (the heuristics' cuDNN plans and the
// library kernels) and DETFORGE_CUDA_TUNE_CACHE=0 (nothing read from or written to the user's
// cache folder) unless the environment or a test says otherwise. Why: a tuned engine times its
// kernel choices at a first load (~12 s at batch 1, ~75 s at batch 32; cached per GPU after
// that, cuda_tune_cache.cpp; the engine's default up to 4 images), the suite builds engines of many settings whose tests compare an
// opt-in path with the untuned engine, and a test that times (CudaConvTuneGraph) must time on
// every run. The tuned engine has its own tests (test_cuda_tune_cache.cpp, with a cache folder
// of their own; CudaConvTuneGraph; Modes/CudaOwnConvEngine).
#include <cstdlib>

namespace {

[[maybe_unused]] const bool kPinned = [] {
  setenv("DETFORGE_CUDA_TUNE", "0", 0);  // 0: a value already in the environment wins
  setenv("DETFORGE_CUDA_TUNE_CACHE", "0", 0);
  return true;
}();

}  // namespace
