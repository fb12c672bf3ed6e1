// Graph rewrites, run in this order by optimize(): fold BatchNorm into the preceding conv, fold
// an average pool into the 1x1 conv after it (ResNet-vd shortcut), (opt-in) run row-wise ops
// after the row gather that reads them, fuse residual adds and activations into conv/linear epilogues and adds into LayerNorm, fold a 1x1
// conv into its parallel kxk conv (RepVGG), merge attention q/k projections and deformable
// attention offset/weight projections, (opt-in) merge the decoder's value projections, (opt-in) distribute the decoder's position adds into the
// linears that read them, drop dead ops (the intermediate class heads), then
// compact the tensor table.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"

namespace detforge::graph {

// consumers[t] = indices of ops reading tensor t; a graph output counts as a consumer (-1).
std::vector<std::vector<int>> consumers(const Graph& g);
// producers[t] = index of the op writing tensor t, -1 for inputs and constants.
std::vector<int> producers(const Graph& g);

struct PassStats {
  int folded_batch_norms = 0;
  int folded_avg_pools = 0;
  int fused_residuals = 0;
  int fused_post_activation_adds = 0;
  int fused_activations = 0;
  int fused_layer_norm_adds = 0;
  int folded_parallel_convs = 0;
  int merged_qk_projections = 0;
  int merged_deform_projections = 0;
  int distributed_adds = 0;
  int gathered_early = 0;
  int merged_value_projections = 0;
  int split_concat_convs = 0;
  int removed_ops = 0;
};

// conv2d → batch_norm (the conv's only consumer): w' = w*s, b' = (b - mean)*s + beta,
// s = gamma / sqrt(var + eps), computed in double and rounded once to fp32.
int fold_batch_norm(Graph& g);
// avg_pool2d (kernel k = stride, no padding, input sides divisible by k) read only by a 1x1
// conv2d (stride 1, no padding): that conv becomes k x k with stride k and every tap holding
// the 1x1 weight / k^2, reading the pool's input. The ResNet-vd shortcuts of r18vd (3).
int fold_avg_pool_into_conv(Graph& g);
// Per op, the cost of the longest path that ends with it: one unit per op plus its GFLOP per
// image (conv2d, linear). A rough critical-path estimate for choosing between branches.
std::vector<double> path_costs(const Graph& g);
// One op's cost in that model: 1 + its GFLOP per image.
double op_cost(const Graph& g, const Op& op);
// conv2d/linear without activation or residual, consumed only by add(act): becomes
// conv2d/linear(residual = the other operand, act), in the add's place in op order. With
// `long_branch`, when both operands qualify, the one with the larger path cost carries the add,
// so the cheaper branch runs beside it (ResNet-vd: the two 3x3 convs carry the add of the
// shortcut conv instead of waiting for it); otherwise the later-produced one. Then a lone
// activation after a conv2d, linear or add without activation is folded into it.
int fuse_residual_adds(Graph& g, bool long_branch = true);

// add (no activation) of two same-shape activations, one of them produced by a conv2d with an
// activation and no residual and read only by the add (the CSP blocks' x1 + x2): becomes that
// conv2d(residual = the other operand, res_after_act = 1), out = act(conv + b) + other, in the
// add's place in op order, when the operand on the longer path (path_costs) can carry it (never
// the shorter one). Runs after fold_parallel_convs. Skip name: post_activation_adds.
int fuse_post_activation_adds(Graph& g);
int fuse_activations(Graph& g);
// add (no activation) consumed only by layer_norm: layer_norm(x = a, residual = b).
int fuse_layer_norm_adds(Graph& g);
// RepVGG re-parameterisation: conv_kxk(x) + conv_1x1(x) (same input and stride, the kxk conv
// padded by k/2, the sum fused as one conv's residual, as fuse_residual_adds leaves it) becomes
// one kxk conv whose centre tap holds the sum of both kernels and whose bias is the sum of both
// biases (in double, rounded once). RT-DETR's CCFM has 12 such blocks: 12 convolutions fewer.
int fold_parallel_convs(Graph& g);
// Attention whose q and k come from two linears of one input (no residual, no activation, read
// only by that attention): one linear with the stacked weights [Wq; Wk] writes [L, Nq + Nk],
// and the attention reads q from column 0 and k from column Nq (attrs q_col, k_col). RT-DETR's
// AIFI layer and three decoder self-attentions: 4 GEMM launches fewer; at batch 1 each was a
// ~3 us kernel on the H200 and k_proj ran beside q_proj on a second stream (timeline profile).
int merge_qk_projections(Graph& g);
// ms_deform_attn whose offsets and logits come from two linears of one input (no residual, no
// activation, read only by that op, same dtype): one linear with the stacked weights
// [W_off; W_aw] writes [Q, No + Na], and the op reads offsets from column 0 and logits from
// column No (attrs off_col, aw_col; row stride No + Na). RT-DETR's three decoder layers: 3 GEMM
// launches fewer (sampling_offsets, N 192, and attention_weights, N 96). At batch 1 on the H200
// (fp16, timeline of bench/results/h200/latest.json) each was a 3.2-4.5 us 300-row GEMM, the
// second on another stream starting ~2.6 us into the first and ending 2.8-4.0 us after it; the
// ms_deform_attn waited for both. Not yet measured merged.
int merge_deform_projections(Graph& g);
// add(a, P(r)) with P a linear without residual or activation, and every reader of the sum a
// linear L without residual reading it as input (the decoder's queries + query_pos_head): each L
// becomes two linears, L(a) = W_L a (zero bias) and L_P(r) = (W_L W_P) r + W_L b_P + b_L (the fold
// in double, rounded once); the one whose operand is ready later (path_costs) runs in L's place
// with the other as its residual, and the other runs right before it in op order. The add
// goes; P goes once nothing else reads it. Runs after the q/k and deformable merges. r18vd: 6 adds
// (2 per decoder layer), 3 position linears. Off by default (not faster on the H200; passes.cpp
// says why): DETFORGE_EXTRA_PASSES=distribute_adds runs it.
int distribute_adds_into_linears(Graph& g);
// gather_rows(P(...), idx) with P row-wise (linear, layer_norm, activation, add) on [L, *]
// tensors and read only by that gather: P runs on the gathered rows, each of its row operands
// gathered by idx first (an existing gather of the same tensor by idx is shared, and moved up
// when it came later; a constant operand, RT-DETR's anchors, is gathered as a constant that
// broadcasts over the batch), writing the gather's output. Repeats while a gather moves; returns
// the number of ops moved. r18vd: the encoder box head (3 linears and the anchor add) runs on
// the 300 selected rows instead of 8400 (gather_early.cpp says why). Opt-in (H100, session 14:
// 1.8 % slower at batch 1, 4 % faster at batch 32): DETFORGE_EXTRA_PASSES=gather_early. Runs
// before the epilogue fusions, so that the anchor add becomes the last linear's residual.
int gather_rows_early(Graph& g);
// Two or more stackable linears of one input, each read only as the value (input 0) of
// ms_deform_attn ops: one linear with the stacked weights writes [Lv, sum N_i], and each op
// reads its value from column sum_{j<i} N_j (attr v_col; row stride the merged width). r18vd:
// the three decoder layers' value_proj, 8400 x 256 each, become one 8400 x 768 GEMM, 2 launches
// fewer (merge_values.cpp says why). Returns the number of linears merged. Opt-in (H100,
// session 14: equal at batch 1, 1.3 % faster at batch 32): DETFORGE_EXTRA_PASSES=merge_values.
int merge_value_projections(Graph& g);
// concat (channel axis, two non-constant operands) read only by 1x1 convs (stride 1, no padding,
// no residual): each conv becomes conv_e(early operand) with the bias and no activation, then
// conv_l(late operand, zero bias, residual = conv_e's output, the conv's activation) in its place;
// which operand is late comes from path_costs. The concat goes. r18vd: the 4 CCFM concats, 8 convs
// split in 16 (split_concat_convs.cpp says why). Runs after fuse_post_activation_adds. Returns
// the concats removed. Opt-in (H100, session 26: equal at batch 1 and 32):
// DETFORGE_EXTRA_PASSES=split_concats.
int split_concat_convs(Graph& g);
// Removes ops whose outputs reach no graph output, and unreferenced tensors.
int eliminate_dead_code(Graph& g);

// Runs the passes above (a name in either list below that no pass answers to throws
// detforge::Error). DETFORGE_SKIP_PASSES=fold_parallel_convs,merge_qk_projections,
// merge_deform_projections,fold_avg_pool_into_conv,post_activation_adds leaves those optional
// passes out (A/B runs);
// residual_on_long_branch there makes fuse_residual_adds choose without path costs.
// DETFORGE_EXTRA_PASSES=distribute_adds,gather_early,merge_values,split_concats runs the passes
// that are off by default.
PassStats optimize(Graph& g);

}  // namespace detforge::graph
