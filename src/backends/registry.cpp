#include "backends/engine.h"

#include "detforge/types.h"

namespace detforge {

std::vector<std::string> available_backends() {
  std::vector<std::string> out;
#ifdef DETFORGE_HAVE_CPU
  out.push_back("cpu");
#endif
#ifdef DETFORGE_HAVE_CUDA
  out.push_back("cuda");
#endif
  return out;
}

std::unique_ptr<Engine> make_engine(const std::string& backend, const graph::Graph& g,
                                    const EngineOptions& opt) {
  if (opt.max_batch < 1 || opt.max_batch > 64)
    throw Error("max batch must be between 1 and 64, got " + std::to_string(opt.max_batch));
#ifdef DETFORGE_HAVE_CPU
  if (backend == "cpu") return make_cpu_engine(g, opt);
#endif
#ifdef DETFORGE_HAVE_CUDA
  if (backend == "cuda") return make_cuda_engine(g, opt);
#endif
  std::string have;
  for (auto& b : available_backends()) have += (have.empty() ? "" : ", ") + b;
  throw Error("backend '" + backend + "' is not built into this detforge (available: " + have + ")");
}

}  // namespace detforge
