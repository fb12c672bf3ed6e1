// The conv that reads the graph input (r18vd's stem conv1, 3->32 3x3/2), when it is the input's
// only reader, may take that input in another form than the fp16 copy of the fp32 pixels:
// - DETFORGE_CUDA_STEM=1 (off): conv_stem reads the fp32 pixels directly (kernels/conv_stem.h),
//   on its row kernel where the shape fits (3x3/2, 3 -> 32 or 64 channels); 2: always on the
//   kernel of one thread per output pixel. Its first version took 20.8 us on the H200 against
//   cuDNN's 10.8 us plus the 5.1 us input conversion it saves (one shared weight read per FMA).
//   Session 27 (H100, bench/results/h100/ab-2026-12-07-session27/): the per-pixel kernel 17.2 us
//   and the row kernel 19.6-20.2 us against 4.3 + 10.2 us; batch 1 equal and 1-2 % slower.
// - DETFORGE_CUDA_PAD_INPUT=P (4 or 8; 0, the default, leaves it off): in fp16 the input
//   (640x640x3 NHWC) is converted to P channels, zeros past the third, and the conv takes its
//   weight with P input channels, zeros there too. The sums are the same. Why: with 3 channels
//   cuDNN runs that conv on an sm80 "indexed_wo_smem ... aligna2" kernel, 10.0 us at batch 1
//   (H200 CUPTI timeline, 2026-12-04) for 0.18 GFLOP, while 4 or 8 channels give 8- or 16-byte
//   aligned rows. The conversion writes P/3 times the bytes. Measured (H100,
//   ab-2026-12-05-session14): batch 1 0.6714 / 0.6715 ms at P = 4 / 8 against 0.6697 / 0.6693
//   for the default; off.
#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/conv_stem.h"
#include "graph/pass_util.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

int CudaEngine::sole_input_conv(const std::vector<std::vector<int>>& cons) const {
  const TensorId in = g_.inputs[0];
  if (cons[in].size() != 1 || cons[in][0] < 0) return -1;  // several readers, or a graph output
  const graph::Op& op = g_.ops[cons[in][0]];
  return op.kind == OpKind::conv2d && op.inputs[0] == in ? cons[in][0] : -1;
}

void CudaEngine::find_stem_op() {
  if (stem_mode_ == 0 || stem_fused_ops_[0] >= 0) return;  // the fused stem takes this conv
  const int c = sole_input_conv(graph::consumers(g_));
  if (c >= 0 && g_.ops[c].inputs.size() <= 3 && conv_stem_supported(conv_shape(c, 1))) stem_op_ = c;
}

void CudaEngine::find_pad_input() {
  if (!half_ || pad_input_ == 0) return;
  const TensorId in = g_.inputs[0];
  const auto& sh = g_.tensor(in).shape;
  if (sh.size() != 3 || sh[2] >= pad_input_) return;
  const auto cons = graph::consumers(g_);
  const int c = sole_input_conv(cons);
  // The padded weight is uploaded once, so no other op may read it.
  if (c < 0 || !graph::is_sole_consumer(cons, g_.ops[c].inputs[1], c)) return;
  for (const auto& s : slots_)
    if (&s != &slots_[in] && s.root == in) return;  // a view of the input would see P channels
  pad_op_ = c;
  pad_w_ = g_.ops[c].inputs[1];
  slots_[in].per_image = sh[0] * sh[1] * pad_input_;
}

}  // namespace detforge::cuda
