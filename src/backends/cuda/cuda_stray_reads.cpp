// CudaEngine::stray_reads, a debugging aid: which ops read arena bytes outside the ranges the
// schedule knows them to read (their inputs, extra_reads_) or write. Why: in session 23 a graph
// rerun repeated its difference from the eager forward bit for bit, and none showed without arena
// reuse: the mark of an op that reads, for some inputs only or with an effect on some inputs only,
// bytes it does not declare, whose content depends on which op last wrote them.
// Two eager forwards on the current inputs (after a third, so that both start from the same
// arena): the first keeps a copy of every op's declared writes; the second, before each op, fills
// every arena byte outside the op's declared reads and writes with `poison` (0x7B: 61280 in fp16,
// 1.3e36 in fp32, finite so that a ReLU or a max does not hide it as it hides NaN, NOTES.md v12),
// runs the op, compares its declared writes with the first forward's, and puts the other bytes
// back. The first op whose writes differ read outside its declaration (later ones may only
// inherit its wrong output).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/arena_diff.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"
#include "graph/byte_spans.h"

namespace detforge::cuda {

std::vector<std::string> CudaEngine::stray_reads(int batch, unsigned char poison) {
  BatchPlan& p = plan(batch);
  const uint64_t base = reinterpret_cast<uint64_t>(arena_), size = arena_bytes_;
  char* arena = static_cast<char*>(arena_);
  std::vector<std::vector<graph::Span>> writes(g_.ops.size()), allowed(g_.ops.size());
  std::vector<size_t> ref_off(g_.ops.size() + 1, 0);
  auto compared = [](const graph::Span& w) { return (w.second - w.first) / 16 * 16; };  // whole 16-byte words
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    writes[i] = graph::spans_inside(p.acc[i + 1].writes, base, size);
    auto both = p.acc[i + 1].reads;
    both.insert(both.end(), p.acc[i + 1].writes.begin(), p.acc[i + 1].writes.end());
    allowed[i] = graph::spans_inside(both, base, size);
    size_t n = 0;
    for (const auto& w : writes[i]) n += compared(w);
    ref_off[i + 1] = ref_off[i] + n;
  }
  char* ref = nullptr;
  char* shadow = nullptr;
  unsigned char* flags = nullptr;
  std::vector<std::string> found;
  size_t max_spans = 1;
  for (const auto& w : writes) max_spans = std::max(max_spans, w.size());
  auto free_all = [&] {
    cudaFree(ref);
    cudaFree(shadow);
    cudaFree(flags);
  };
  try {
    DF_CUDA(cudaMalloc(&ref, std::max<size_t>(ref_off.back(), 16)));
    DF_CUDA(cudaMalloc(&shadow, std::max<size_t>(size, 16)));
    DF_CUDA(cudaMalloc(&flags, max_spans));
    // Both forwards start from the arena an eager forward of these inputs leaves: bytes that an op
    // declares but that no launch has written yet at its place (an op absorbed into a later launch,
    // a partial write) then hold the same leftovers in both, not the leftovers of whatever ran before.
    run_eager_hooked(batch, [](int, bool) {});
    // Forward 1: each op's declared writes as it left them.
    run_eager_hooked(batch, [&](int i, bool before) {
      if (i < 0 || before) return;
      size_t at = ref_off[i];
      for (const auto& w : writes[i]) {
        const size_t n = compared(w);
        DF_CUDA(cudaMemcpyAsync(ref + at, arena + w.first, n, cudaMemcpyDeviceToDevice, stream_));
        at += n;
      }
    });
    // Forward 2: each op with only its declared bytes intact.
    std::vector<unsigned char> changed(max_spans);
    run_eager_hooked(batch, [&](int i, bool before) {
      if (i < 0) return;
      if (before) {
        DF_CUDA(cudaMemcpyAsync(shadow, arena, size, cudaMemcpyDeviceToDevice, stream_));
        for (const auto& g : graph::span_gaps(allowed[i], size))
          DF_CUDA(cudaMemsetAsync(arena + g.first, poison, g.second - g.first, stream_));
        return;
      }
      DF_CUDA(cudaMemsetAsync(flags, 0, max_spans, stream_));
      size_t at = ref_off[i];
      for (size_t k = 0; k < writes[i].size(); ++k) {
        const size_t n = compared(writes[i][k]);
        mark_changed_chunks(arena + writes[i][k].first, ref + at, n, n, flags + k, stream_);
        at += n;
      }
      DF_CUDA(cudaMemcpyAsync(changed.data(), flags, max_spans, cudaMemcpyDeviceToHost, stream_));
      for (const auto& g : graph::span_gaps(writes[i], size))
        DF_CUDA(cudaMemcpyAsync(arena + g.first, shadow + g.first, g.second - g.first, cudaMemcpyDeviceToDevice,
                                stream_));
      DF_CUDA(cudaStreamSynchronize(stream_));
      int differ = 0;
      for (size_t k = 0; k < writes[i].size(); ++k) differ += changed[k];
      if (differ)
        found.push_back(g_.ops[i].name + " (" + op_launch_summary(batch, static_cast<size_t>(i)) + "): " +
                        std::to_string(differ) + " of " + std::to_string(writes[i].size()) +
                        " written ranges differ with the undeclared bytes poisoned");
    });
  } catch (...) {
    free_all();
    throw;
  }
  free_all();
  return found;
}

}  // namespace detforge::cuda
