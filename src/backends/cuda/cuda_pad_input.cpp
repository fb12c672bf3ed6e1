// DETFORGE_CUDA_PAD_INPUT=P (4 or 8; 0, the default, leaves it off): in fp16 the graph input
// (640x640x3 NHWC) is converted to P channels, zeros past the third, and the one conv reading it
// (r18vd's stem conv1, 3->32 3x3/2) takes its weight with P input channels, zeros there too. The
// sums are the same. Why: with 3 channels cuDNN runs that conv on an sm80 "indexed_wo_smem ...
// aligna2" kernel, 10.0 us at batch 1 (H200 CUPTI timeline, 2026-12-04) for 0.18 GFLOP, while
// 4 or 8 channels give 8- or 16-byte aligned rows. The conversion writes P/3 times the bytes.
// Measured (H100, ab-2026-12-05-session14): batch 1 0.6714 / 0.6715 ms at P = 4 / 8 against
// 0.6697 / 0.6693 for the default; off.
#include "backends/cuda/cuda_engine.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

void CudaEngine::find_pad_input() {
  if (!half_ || pad_input_ == 0) return;
  const TensorId in = g_.inputs[0];
  const auto& sh = g_.tensor(in).shape;
  if (sh.size() != 3 || sh[2] >= pad_input_) return;
  for (TensorId t : g_.outputs)
    if (t == in) return;
  int consumer = -1, uses = 0;
  for (size_t i = 0; i < g_.ops.size(); ++i)
    for (TensorId t : g_.ops[i].inputs)
      if (t == in) ++uses, consumer = static_cast<int>(i);
  if (uses != 1 || g_.ops[consumer].kind != OpKind::conv2d || g_.ops[consumer].inputs[0] != in) return;
  // The padded weight is uploaded once, so no other op may read it.
  const TensorId w = g_.ops[consumer].inputs[1];
  for (size_t i = 0; i < g_.ops.size(); ++i)
    for (TensorId t : g_.ops[i].inputs)
      if (t == w && static_cast<int>(i) != consumer) return;
  for (const auto& s : slots_)
    if (&s != &slots_[in] && s.root == in) return;  // a view of the input would see P channels
  pad_op_ = consumer;
  pad_w_ = w;
  slots_[in].per_image = sh[0] * sh[1] * pad_input_;
}

}  // namespace detforge::cuda
