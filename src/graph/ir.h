// The Graph IR: typed tensors and ops, in topological order. Core code and backends know this
// vocabulary; only a family (src/families/*) knows how a model maps onto it.
//
// Layout conventions (every backend follows them):
//  * Activations carry an implicit leading batch dimension that is NOT part of `shape`.
//    A feature map is NHWC: shape [H, W, C]. A token sequence is [L, C]. A feature map and its
//    token view share memory (`reshape` is an alias), so flattening P5 to 400 tokens is free.
//  * Constants (weights) have no batch dimension; `shape` is their full shape. Conv weights are
//    OIHW [Cout, Cin, kh, kw], Linear weights are [N, K] (PyTorch order). Backends reorder at load.
//  * Index tensors (top-k output) are int32.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace detforge::graph {

enum class DType : uint8_t { f32, f16, bf16, fp8_e4m3, i32 };
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& s);  // throws detforge::Error
size_t dtype_size(DType t);

using TensorId = int32_t;
constexpr TensorId kNoTensor = -1;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // without batch for activations
  DType dtype = DType::f32;
  bool is_const = false;
  std::vector<float> data;     // constants only, fp32 master copy (row-major)
  int64_t numel() const;
};

// Op kinds. Semantics (x: first input; "act" attr is one of none|relu|silu|gelu|sigmoid):
//  conv2d          in: x[H,W,Ci], w[Co,Ci,kh,kw], b[Co], (residual[Ho,Wo,Co])
//                  attrs: stride, pad, act, and optional res_after_act (default 0).
//                  out = act(conv(x,w)+b (+residual)); with res_after_act 1,
//                  out = act(conv(x,w)+b) + residual (fuse_post_activation_adds)
//  batch_norm      in: x, gamma, beta, mean, var; attrs: eps. Must be folded by fold_batch_norm.
//  max_pool2d      attrs: kernel, stride, pad (padding never wins the max)
//  avg_pool2d      attrs: kernel, stride, ceil_mode; divisor = number of in-bounds elements
//  upsample_nearest2x   out[y][x] = in[y/2][x/2]
//  concat          in: N tensors; attrs: axis (0-based, batch excluded). Row concat of token
//                  tensors (axis 0) and channel concat of feature maps (axis 2) are both used.
//  add             in: a, b (b may be a constant of the same shape: broadcast over batch); attrs: act
//  mul_rows        in: x[L,C], m[L] constant; out[l,c] = x[l,c]*m[l]
//  activation      attrs: act
//  linear          in: x[L,K], w[N,K], b[N], (residual[L,N]); attrs: act. out = act(xW^T+b (+res))
//  layer_norm      in: x[L,C], gamma[C], beta[C], (residual[L,C]); attrs: eps.
//                  out = LN(x (+residual)); statistics in fp32 whatever the storage type.
//  attention       in: q[L,Wq], k[S,Wk], v[S,Wv]; out [L,C]; attrs: heads, scale, and optional
//                  q_col, k_col, v_col (default 0): the C channels used start at that column of
//                  each input (q and k of one merged projection are slices of one tensor).
//                  per head h (channels h*d..h*d+d-1): softmax(scale * q_h k_h^T) v_h
//  ms_deform_attn  in: value[Lv,C], offsets[Q,Wo], logits[Q,Wa], ref[Q,4] (cx,cy,w,h in [0,1]),
//                  points_scale[levels*points] constant.
//                  attrs: heads, levels, points, offset_scale, spatial_shapes [[H,W],...],
//                  level_start [..], and optional off_col, aw_col, v_col (default 0): the
//                  heads*levels*points*2 offsets start at column off_col of input 1, the
//                  heads*levels*points logits at column aw_col of input 2, the C value channels
//                  (C = the output's width) at column v_col of input 0, each row read with
//                  its input's width as stride (unmerged: packed tensors, Wo and Wa are
//                  exactly those widths; merge_deform_projections: both inputs name one tensor;
//                  merge_value_projections: several ops' values are slices of one tensor).
//                  Softmax over levels*points per head, bilinear sampling with zero padding and
//                  align_corners=False (see the family spec, section 3.8).
//  topk_rows       in: scores[L,Ncls]; attrs: k. out: int32 [k] = indices of the k largest
//                  per-row maxima, sorted by value descending, ties by lower index.
//  gather_rows     in: x[L,C], idx[K] (int32) -> [K,C]
//  box_refine      in: delta[Q,4], ref[Q,4] -> sigmoid(delta + inverse_sigmoid(ref)), where
//                  inverse_sigmoid(x) = log(max(x',1e-5)/max(1-x',1e-5)), x' = clamp(x,0,1)
//  reshape         in: x; attrs: shape. Alias of the same memory (numel unchanged).
enum class OpKind : uint8_t {
  conv2d, batch_norm, max_pool2d, avg_pool2d, upsample_nearest2x, concat, add, mul_rows,
  activation, linear, layer_norm, attention, ms_deform_attn, topk_rows, gather_rows, box_refine,
  reshape
};
const char* op_kind_name(OpKind k);
OpKind op_kind_from_name(const std::string& s);  // throws detforge::Error

enum class Act : uint8_t { none, relu, silu, gelu, sigmoid };
const char* act_name(Act a);
Act act_from_name(const std::string& s);  // throws detforge::Error
float apply_act(Act a, float x);          // reference scalar form (GELU is the erf form)

struct Op {
  OpKind kind;
  std::string name;  // checkpoint module it came from, e.g. "model.decoder.layers.0.fc1"
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  nlohmann::json attrs = nlohmann::json::object();

  int attr_int(const char* key) const;
  int attr_int_or(const char* key, int dflt) const;  // dflt when the attribute is absent
  float attr_float(const char* key) const;
  Act act() const;  // attrs["act"], none when absent
  bool res_after_act() const;  // conv2d attrs["res_after_act"] (residual added after the activation), false when absent
  bool has_input(size_t k) const { return inputs.size() > k && inputs[k] != kNoTensor; }  // optional input k is given
};

// An attention op's column offsets (attrs q_col, k_col, v_col; 0 when absent).
struct AttentionColumns {
  int64_t q = 0, k = 0, v = 0;
};
AttentionColumns attention_columns(const Op& op);
struct Graph;
// Why an attention op's column slices do not fit its inputs ("" when they do): every input
// [rows, W] must hold the output's C channels from its column (both backends check it at load).
std::string attention_columns_error(const Graph& g, const Op& op);

// A ms_deform_attn op's offsets, logits and value as column slices (attrs off_col, aw_col,
// v_col; 0 when absent) of rows `off_ld`, `aw_ld` and `v_ld` elements wide (the widths of inputs
// 1, 2 and 0), and the widths it reads there: heads*levels*points*2, heads*levels*points and
// the output's width C.
struct DeformColumns {
  int64_t off_col = 0, aw_col = 0, v_col = 0;
  int64_t off_ld = 0, aw_ld = 0, v_ld = 0;
  int64_t off_width = 0, aw_width = 0, v_width = 0;
};
DeformColumns deform_columns(const Graph& g, const Op& op);
// Why a ms_deform_attn op's offsets, logits or value slice does not fit its input ("" when all
// do): inputs [Q, W] of equal rows, value [Lv, W], output [Q, C], each slice inside its row
// (both backends check it at load).
std::string deform_columns_error(const Graph& g, const Op& op);

struct Graph {
  std::vector<Tensor> tensors;
  std::vector<Op> ops;  // topological order
  std::vector<TensorId> inputs;   // "pixels": [H, W, 3] fp32, rescaled (and normalized) RGB
  std::vector<TensorId> outputs;  // "logits" [Q, Ncls], "boxes" [Q, 4] (cx, cy, w, h in [0,1])

  TensorId add_tensor(Tensor t);
  TensorId add_const(std::string name, std::vector<int64_t> shape, std::vector<float> data);
  TensorId add_activation(std::string name, std::vector<int64_t> shape, DType dt = DType::f32);
  void add_op(Op op);
  TensorId find(const std::string& name) const;  // kNoTensor when absent
  const Tensor& tensor(TensorId id) const { return tensors.at(id); }
  Tensor& tensor(TensorId id) { return tensors.at(id); }

  // Topology checks: every input produced before use, shapes present, consts have data.
  void validate() const;  // throws detforge::Error
  // Graph structure (no constant data) as JSON, and back. Constant data travels separately.
  nlohmann::json to_json() const;
  static Graph from_json(const nlohmann::json& j);
};

}  // namespace detforge::graph
