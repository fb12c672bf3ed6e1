// A nearest x2 upsample read only by a channel concat runs inside the concat's launch
// (kernels/concat.cu's upsampled parts): r18vd's two CCFM top-down steps. Why: the upsample
// kernels were 2.5 and 3.1 us on the encoder's critical path at batch 1 (H200 CUPTI timeline,
// fp16), each right before its concat. DETFORGE_CUDA_UPSAMPLE_CONCAT=0 turns it off.
// The upsample stays in the graph (its output keeps its bytes) and launches nothing; the concat,
// a later op, is charged with reading the upsample's input (extra_reads_).
#include <algorithm>

#include "backends/cuda/cuda_engine.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

void CudaEngine::setup_upsample_concats() {
  upsampled_from_.assign(g_.tensors.size(), graph::kNoTensor);
  if (!upsample_concat_on_) return;
  const auto cons = graph::consumers(g_);
  const auto prod = graph::producers(g_);
  for (size_t c = 0; c < g_.ops.size(); ++c) {
    const graph::Op& cat = g_.ops[c];
    const auto& oshape = g_.tensor(cat.outputs[0]).shape;
    // NHWC channel concat of at most kMaxConcatParts inputs (one launch).
    if (cat.kind != OpKind::concat || oshape.size() != 3 || cat.attr_int("axis") != 2 ||
        cat.inputs.size() > static_cast<size_t>(kMaxConcatParts))
      continue;
    for (TensorId t : cat.inputs) {
      const int u = prod[t];
      if (u < 0 || g_.ops[u].kind != OpKind::upsample_nearest2x || absorbed_[u] || cons[t].size() != 1 ||
          std::count(cat.inputs.begin(), cat.inputs.end(), t) != 1 ||
          std::find(g_.outputs.begin(), g_.outputs.end(), t) != g_.outputs.end())
        continue;
      // The concat kernel maps output pixel (y, x) of the concat's grid to source (y/2, x/2).
      const auto& src = g_.tensor(g_.ops[u].inputs[0]).shape;
      if (src.size() != 3 || src[0] * 2 != oshape[0] || src[1] * 2 != oshape[1]) continue;
      upsampled_from_[t] = g_.ops[u].inputs[0];
      absorbed_[u] = 1;
      extra_reads_[c].push_back(g_.ops[u].inputs[0]);
    }
  }
}

int CudaEngine::upsample_concats() const {
  return static_cast<int>(std::count_if(upsampled_from_.begin(), upsampled_from_.end(),
                                        [](TensorId t) { return t != graph::kNoTensor; }));
}

}  // namespace detforge::cuda
