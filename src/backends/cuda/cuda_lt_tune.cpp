// DETFORGE_CUDA_LT_TUNE (cuda_settings.h at lt_tune_ says why): a cuBLASLt linear runs on the
// fastest of its heuristic's first K deterministic candidates, each timed inside a captured graph
// (graph_time_us) on the op's own buffers, taken only when >= 2 % faster than the first candidate
// and its output matches the first candidate's (fastest_matching). One choice per linear shape.
#include <algorithm>

#include "backends/cuda/cuda_engine.h"

namespace detforge::cuda {

void CudaEngine::tune_lt(LtLinear& lt, const graph::Op& op, int64_t rows, int N, int K, bool bias, bool res) {
  const int n = std::min(lt_tune_, lt.candidates());
  if (!half_ || n < 2) return;
  const std::string key = "lt," + std::to_string(rows) + "," + std::to_string(N) + "," + std::to_string(K) + "," +
                          std::to_string(bias) + std::to_string(res) + graph::act_name(op.act());
  auto it = lt_choice_cache_.find(key);
  if (it == lt_choice_cache_.end()) {
    const ConvBuffers cb = op_buffers(op, bias, res);
    const size_t ny = randomize_conv_inputs(linear_as_conv(rows, N, K), cb.x, cb.res, cb.stream);
    const LtLinear* l = &lt;
    auto run = [l, cb](int k) -> std::function<void()> {
      return [l, cb, k] { l->run_candidate(k, cb.x, cb.w, cb.bias, cb.res, cb.y, cb.ws, cb.stream); };
    };
    double best_us = graph_time_us(run(0), cb.stream);
    const auto ref = download_half(cb.y, ny, cb.stream);
    std::vector<std::function<void()>> others;
    for (int k = 1; k < n; ++k) others.push_back(run(k));
    const int k = fastest_matching(others, ref, cb.y, cb.stream, 0.98, &best_us);
    it = lt_choice_cache_.emplace(key, k >= 0 ? k + 1 : 0).first;
  }
  lt.choose(it->second);
}

}  // namespace detforge::cuda
