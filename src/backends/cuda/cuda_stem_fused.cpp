// DETFORGE_CUDA_STEM_FUSED (cuda_settings.h at stem_fused_): the ResNet-vd stem (three 3x3 convs
// with bias and ReLU, then the 3x3/2 max pool) as one stem_fused launch (kernels/stem_fused.h),
// reading the fp32 pixels, so the input's fp16 conversion goes too. The ops stay in the graph:
// the three convs launch nothing (no plan is built or timed for them; absorbed_, as other ops whose
// work a later launch does) and the launch sits at the pool, which the schedule already orders
// after them. Their outputs are never written.
// Taken only when the graph has exactly that shape: the input's only reader is conv1 (3 -> 32,
// stride 2), each intermediate has one reader and is no graph output, all in fp16, and when the
// device gives a block the kernel's 173.5 KB of shared memory.
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/stem_fused.h"
#include "graph/passes.h"

namespace detforge::cuda {

using graph::OpKind;
using graph::TensorId;

namespace {

// A 3x3 conv with bias and ReLU, padding 1, no residual, ci -> co channels at `stride`.
bool stem_conv(const graph::Graph& g, const graph::Op& op, int ci, int co, int stride) {
  if (op.kind != OpKind::conv2d || op.act() != graph::Act::relu || op.res_after_act() || !op.has_input(2) ||
      op.has_input(3) || op.attr_int_or("groups", 1) != 1)
    return false;
  const auto& w = g.tensor(op.inputs[1]).shape;  // OIHW in the graph
  return w.size() == 4 && w[0] == co && w[1] == ci && w[2] == 3 && w[3] == 3 && op.attr_int_or("stride", 1) == stride &&
         op.attr_int_or("pad", 0) == 1 && op.attr_int_or("dilation", 1) == 1;
}

}  // namespace

void CudaEngine::setup_stem_fused() {
  if (!half_ || !stem_fused_ || pad_op_ >= 0) return;
  int smem = 0;
  DF_CUDA(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
  if (static_cast<size_t>(smem) < stem_fused_smem_bytes()) return;  // e.g. 99 KB parts: the five kernels
  const auto cons = graph::consumers(g_);
  const int c1 = sole_input_conv(cons);
  const auto& in = g_.tensor(g_.inputs[0]).shape;
  if (c1 < 0 || in.size() != 3 || in[2] != 3) return;
  // The only reader of op `i`'s output, which is no graph output; -1 otherwise.
  auto next = [&](int i) {
    const TensorId t = g_.ops[i].outputs[0];
    if (cons[t].size() != 1 || cons[t][0] < 0 || g_.ops[cons[t][0]].inputs[0] != t) return -1;
    return std::find(g_.outputs.begin(), g_.outputs.end(), t) == g_.outputs.end() ? cons[t][0] : -1;
  };
  const int c2 = next(c1), c3 = c2 < 0 ? -1 : next(c2), pool = c3 < 0 ? -1 : next(c3);
  if (pool < 0 || !stem_conv(g_, g_.ops[c1], 3, 32, 2) || !stem_conv(g_, g_.ops[c2], 32, 32, 1) ||
      !stem_conv(g_, g_.ops[c3], 32, 64, 1))
    return;
  const graph::Op& p = g_.ops[pool];
  if (p.kind != OpKind::max_pool2d || p.attr_int("kernel") != 3 || p.attr_int_or("stride", 3) != 2 ||
      p.attr_int_or("pad", 0) != 1)
    return;
  const auto& out = g_.tensor(p.outputs[0]).shape;
  if (out.size() != 3 || out[0] != stem_fused_out_dim(static_cast<int>(in[0])) ||
      out[1] != stem_fused_out_dim(static_cast<int>(in[1])) || out[2] != 64)
    return;
  // The weights are uploaded OHWI (upload_weights), as the kernel's packing reads them.
  DF_CUDA(cudaMalloc(&stem_fused_w_, stem_fused_packed_bytes()));
  stem_fused_pack(ptr(g_.ops[c1].inputs[1]), ptr(g_.ops[c2].inputs[1]), ptr(g_.ops[c3].inputs[1]), stem_fused_w_,
                  stream_);
  DF_CUDA(cudaStreamSynchronize(stream_));
  stem_fused_ops_ = {c1, c2, c3, pool};
  for (int c : {c1, c2, c3}) absorbed_[c] = 1;  // writes_nothing: the non-finite check and snapshots skip them
}

bool CudaEngine::in_stem_fused(size_t i) const {
  return std::find(stem_fused_ops_.begin(), stem_fused_ops_.end(), static_cast<int>(i)) != stem_fused_ops_.end();
}

bool CudaEngine::launch_stem_fused(size_t i, int batch, cudaStream_t s) {
  if (!in_stem_fused(i)) return false;
  if (static_cast<int>(i) != stem_fused_ops_[3]) return true;  // a conv: the pool's launch does its work
  auto bias = [&](int k) { return ptr(g_.ops[stem_fused_ops_[k]].inputs[2]); };
  const auto& in = g_.tensor(g_.inputs[0]).shape;
  stem_fused(d_in32_, stem_fused_w_, bias(0), bias(1), bias(2), ptr(g_.ops[i].outputs[0]), batch,
             static_cast<int>(in[0]), static_cast<int>(in[1]), s, stem_fused_);
  return true;
}

}  // namespace detforge::cuda
