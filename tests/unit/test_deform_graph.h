// A small deformable-attention graph for merge_deform_projections (unit tests, CPU engine) and
// the CUDA engine (GPU tests): three levels (4x3, 2x2, 1x1: Lv = 17 tokens) whose 17 queries are
// the same tokens. x[17, K] -> ref = sigmoid(linear(x)); cq = x + pos; offsets = linear(cq),
// value = linear(x), logits = linear(cq) (in this op order: the value projection runs between
// the two) -> ms_deform_attn. Random weights in [-1, 1]: offsets of a few units, so many samples
// fall partly or wholly outside the maps. Each variant breaks one condition of the merge (or,
// aw_first, swaps the two projections' places).
#pragma once
#include <random>
#include <string>
#include <vector>

#include "test_graph_util.h"

namespace detforge::test::deform {

enum class Variant { plain, aw_first, off_also_output, aw_also_read, aw_relu, aw_residual, aw_other_input, aw_f16 };
// Widths that are multiples of 8 (as RT-DETR's 256, 192, 96, 288), so that no fp16 GEMM of the
// CUDA engine meets a row stride its heuristics may refuse.
constexpr int kHeads = 2, kLevels = 3, kPoints = 4, kC = 16, kK = 8, kQ = 17;
constexpr int kOff = kHeads * kLevels * kPoints * 2, kAw = kHeads * kLevels * kPoints;  // 48, 24 per row

inline std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline graph::Graph make_graph(Variant v) {
  using graph::OpKind;
  using graph::TensorId;
  graph::Graph g;
  TensorId x = g.add_activation("x", {kQ, kK});
  g.inputs = {x};
  auto lin = [&](const std::string& n, TensorId in, int N, uint32_t seed, const char* act = "none") {
    return add_op(g, OpKind::linear, n, {in, g.add_const(n + ".w", {N, kK}, uniform(N * kK, seed)),
                                         g.add_const(n + ".b", {N}, uniform(N, seed + 1))},
                  {kQ, N}, {{"act", act}});
  };
  TensorId ref =
      add_op(g, OpKind::activation, "dec.ref", {lin("dec.ref_head", x, 4, 52)}, {kQ, 4}, {{"act", "sigmoid"}});
  TensorId cq = add_op(g, OpKind::add, "dec.pos", {x, g.add_const("dec.pos.c", {kQ, kK}, uniform(kQ * kK, 54))},
                       {kQ, kK}, {{"act", "none"}});
  const std::string p = "dec.encoder_attn.";
  TensorId res = v == Variant::aw_residual ? lin("dec.other", x, kAw, 56) : graph::kNoTensor;
  auto aw_lin = [&] {
    TensorId aw = lin(p + "attention_weights", v == Variant::aw_other_input ? x : cq, kAw, 60,
                      v == Variant::aw_relu ? "relu" : "none");
    if (v == Variant::aw_residual) g.ops.back().inputs.push_back(res);
    if (v == Variant::aw_f16) g.tensor(aw).dtype = graph::DType::f16;
    return aw;
  };
  const bool aw_first = v == Variant::aw_first;
  TensorId aw = aw_first ? aw_lin() : graph::kNoTensor;
  TensorId off = aw_first ? graph::kNoTensor : lin(p + "sampling_offsets", cq, kOff, 58);
  TensorId value = lin("dec.value_proj", x, kC, 50);
  if (aw_first) off = lin(p + "sampling_offsets", cq, kOff, 58);
  else aw = aw_lin();
  const nlohmann::json shapes = {{4, 3}, {2, 2}, {1, 1}};
  const int lp = kLevels * kPoints;
  TensorId ps = g.add_const(p + "n_points_scale", {lp}, std::vector<float>(lp, 1.f / kPoints));
  g.outputs = {add_op(g, OpKind::ms_deform_attn, "dec.encoder_attn", {value, off, aw, ref, ps}, {kQ, kC},
                      {{"heads", kHeads}, {"levels", kLevels}, {"points", kPoints}, {"offset_scale", 0.5f},
                       {"spatial_shapes", shapes}, {"level_start", {0, 12, 16}}})};
  if (v == Variant::off_also_output) g.outputs.push_back(off);
  if (v == Variant::aw_also_read)
    g.outputs.push_back(add_op(g, OpKind::activation, "dec.aw_relu", {aw}, {kQ, kAw}, {{"act", "relu"}}));
  g.validate();
  return g;
}

}  // namespace detforge::test::deform
