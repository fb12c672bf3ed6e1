// DETFORGE_CUDA_GREEN_SMS=n (off by default; written without a device, NOTES.md v32): the
// decoder's three 8400-row value projections run on a stream of their own in a green context of
// >= n SMs (cuda_green.h). Why (session 27's H100 timeline, defaults): held behind the top-k
// (LATE_VALUE=3), the three GEMMs (5.7, 10.5 and 9.2 us) ran at 485-500 us beside the path's
// query-position linears, which took 6.5 and 6.1 us instead of ~3.3; free to start earlier they
// delayed the enc_output GEMM instead (v15). Confined to a few SMs they may start as soon as the
// memory exists and finish long before layer 0's sampling (~520 us) needs them, while every kernel
// of the path keeps the other SMs.
//
// The schedule pins those ops to one extra stream (graph::schedule_streams' `pinned`); their
// cuBLASLt plans are chosen for the partition's SM count (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET),
// so no kernel expects more co-resident CTAs than the partition holds. Events recorded on that
// stream come from the green context. Before the first capture one concurrent eager forward
// loads the kernels into the green context (capture forbids loading); if the capture still
// fails there, the plan drops the green stream and captures again. Only at batches whose value
// GEMMs have at most 16,800 rows (r18vd: batch 1-2): at batch 32 each is 268,800 x 256 x 256, and
// a few SMs would take longer than the decoder waits for them.
#include <cstdio>

#include "backends/cuda/cuda_engine.h"

namespace detforge::cuda {

namespace {
constexpr int64_t kGreenMaxRows = 16800;
}  // namespace

void CudaEngine::setup_green() {
  green_op_.assign(g_.ops.size(), 0);
  if (green_sms_ <= 0) return;
  const std::vector<int> values = decoder_value_linears(g_);
  if (values.empty()) return;
  green_ = std::make_unique<GreenStream>(device_, green_sms_);
  if (!green_->stream()) {
    std::fprintf(stderr, "detforge: DETFORGE_CUDA_GREEN_SMS=%d: no green context (%s); the value projections stay "
                 "on the shared streams\n", green_sms_, green_->problem().c_str());
    return;
  }
  for (int v : values) green_op_[v] = 1;
  const graph::Op& op = g_.ops[values[0]];
  green_rows_ = g_.tensor(op.inputs[0]).numel() / g_.tensor(op.inputs[1]).shape[1];
}

bool CudaEngine::green_at(int batch) const {
  return green_ && green_->stream() && green_rows_ * batch <= kGreenMaxRows;
}

bool CudaEngine::uses_green(const BatchPlan& p) const {
  return p.sched.pinned_stream >= 0;
}

cudaStream_t CudaEngine::side_stream(const BatchPlan& p, int k) const {
  return k == p.sched.pinned_stream ? green_->stream() : side_[k - 1];
}

CudaEngine::GreenStats CudaEngine::green_stats(int batch) {
  prepare(batch);
  const BatchPlan& p = plan(batch);
  GreenStats s;
  if (green_) {
    s.sms = green_->sms();
    s.problem = green_->problem();
  } else if (green_sms_ > 0) {
    s.problem = "the graph has no decoder value projections";
  }
  if (uses_green(p))
    for (size_t i = 0; i < g_.ops.size(); ++i) s.ops += p.sched.stream[i + 1] == p.sched.pinned_stream;
  return s;
}

}  // namespace detforge::cuda
