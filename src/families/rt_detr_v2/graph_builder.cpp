#include "families/rt_detr_v2/graph_builder.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <algorithm>

#include "detforge/types.h"

namespace detforge::rt_detr_v2 {

using graph::Act;
using graph::Graph;
using graph::Op;
using graph::OpKind;
using graph::TensorId;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Act act_of(const std::string& name) {
  if (name == "relu") return Act::relu;
  if (name == "silu") return Act::silu;
  if (name == "gelu") return Act::gelu;
  throw Error("unsupported activation '" + name + "'");
}

// Emits ops into a Graph while tracking activation shapes ([H,W,C] or [L,C]).
class Builder {
 public:
  Builder(const Config& cfg, const WeightSource& w) : cfg_(cfg), w_(w) {}
  Graph g;

  TensorId weight(const std::string& name, const std::vector<int64_t>& expect) {
    TensorId existing = g.find(name);
    if (existing != graph::kNoTensor) return existing;
    if (!w_.has(name)) throw Error(w_.where() + ": missing tensor '" + name + "'");
    auto shape = w_.shape(name);
    if (shape != expect)
      throw Error(w_.where() + ": tensor '" + name + "' has shape " + shape_str(shape) + ", expected " + shape_str(expect));
    return g.add_const(name, shape, w_.read_f32(name));
  }
  const std::vector<int64_t>& shape(TensorId t) const { return g.tensor(t).shape; }
  bool has_weight(const std::string& name) const { return w_.has(name); }

  TensorId op(OpKind kind, const std::string& name, std::vector<TensorId> in, std::vector<int64_t> out_shape,
              nlohmann::json attrs = nlohmann::json::object(), const std::string& suffix = "") {
    // Tensor names stay unique: a module used again (query_pos_head in every decoder layer)
    // gets "#2", "#3", ... on its later outputs.
    std::string tname = name + (suffix.empty() ? ":out" : ":" + suffix);
    int& uses = name_uses_[tname];
    if (++uses > 1) tname += "#" + std::to_string(uses);
    TensorId out = g.add_activation(tname, std::move(out_shape));
    Op o;
    o.kind = kind;
    o.name = name;
    o.inputs = std::move(in);
    o.outputs = {out};
    o.attrs = std::move(attrs);
    g.add_op(std::move(o));
    return out;
  }

  // conv (no bias in the checkpoint) → BatchNorm → activation, as separate ops.
  TensorId conv_bn(TensorId x, const std::string& conv_w, const std::string& bn, int cout, int k, int stride,
                   Act act) {
    auto in = shape(x);
    int cin = static_cast<int>(in[2]);
    TensorId w = weight(conv_w, {cout, cin, k, k});
    std::string module = conv_w.substr(0, conv_w.rfind('.'));
    TensorId zero_b = g.add_const(module + ".bias(zero)", {cout}, std::vector<float>(cout, 0.f));
    int pad = (k - 1) / 2;
    int64_t ho = (in[0] + 2 * pad - k) / stride + 1, wo = (in[1] + 2 * pad - k) / stride + 1;
    TensorId y = op(OpKind::conv2d, module, {x, w, zero_b}, {ho, wo, cout},
                    {{"stride", stride}, {"pad", pad}, {"act", "none"}});
    TensorId gamma = weight(bn + ".weight", {cout}), beta = weight(bn + ".bias", {cout});
    TensorId mean = weight(bn + ".running_mean", {cout}), var = weight(bn + ".running_var", {cout});
    y = op(OpKind::batch_norm, bn, {y, gamma, beta, mean, var}, {ho, wo, cout}, {{"eps", cfg_.batch_norm_eps}});
    if (act != Act::none) y = activation(y, bn, act);
    return y;
  }
  TensorId activation(TensorId x, const std::string& name, Act act) {
    return op(OpKind::activation, name, {x}, shape(x), {{"act", graph::act_name(act)}}, "act");
  }
  TensorId add(TensorId a, TensorId b, const std::string& name, Act act = Act::none) {
    if (shape(a) != shape(b))
      throw Error("graph build: add at " + name + " of shapes " + shape_str(shape(a)) + " and " + shape_str(shape(b)));
    return op(OpKind::add, name, {a, b}, shape(a), {{"act", graph::act_name(act)}}, "add");
  }
  TensorId linear(TensorId x, const std::string& module, int out, Act act = Act::none) {
    auto in = shape(x);
    int k = static_cast<int>(in[1]);
    TensorId w = weight(module + ".weight", {out, k});
    TensorId b = weight(module + ".bias", {out});
    TensorId y = op(OpKind::linear, module, {x, w, b}, {in[0], out}, {{"act", "none"}});
    if (act != Act::none) y = activation(y, module, act);
    return y;
  }
  TensorId layer_norm(TensorId x, const std::string& module) {
    int c = static_cast<int>(shape(x)[1]);
    TensorId gmm = weight(module + ".weight", {c}), bta = weight(module + ".bias", {c});
    return op(OpKind::layer_norm, module, {x, gmm, bta}, shape(x), {{"eps", cfg_.layer_norm_eps}});
  }
  TensorId reshape(TensorId x, std::vector<int64_t> to, const std::string& name) {
    return op(OpKind::reshape, name, {x}, to, {{"shape", to}}, "reshape");
  }
  TensorId concat(std::vector<TensorId> xs, int axis, const std::string& name) {
    auto s = shape(xs[0]);
    s[axis] = 0;
    for (TensorId t : xs) s[axis] += shape(t)[axis];
    return op(OpKind::concat, name, std::move(xs), s, {{"axis", axis}}, "concat");
  }
  TensorId mlp(TensorId x, const std::string& prefix, int layers, int hidden, int out) {
    for (int i = 0; i < layers; ++i) {
      bool last = i == layers - 1;
      x = linear(x, prefix + ".layers." + std::to_string(i), last ? out : hidden, last ? Act::none : Act::relu);
    }
    return x;
  }

 private:
  const Config& cfg_;
  const WeightSource& w_;
  std::unordered_map<std::string, int> name_uses_;
};

}  // namespace

void make_anchors(const std::vector<std::pair<int, int>>& level_hw, std::vector<float>& anchors, std::vector<float>& valid) {
  anchors.clear();
  valid.clear();
  for (size_t l = 0; l < level_hw.size(); ++l) {
    auto [h, w] = level_hw[l];
    // fp32 arithmetic throughout, as transformers' generate_anchors in the model dtype.
    float wh = 0.05f * std::ldexp(1.0f, static_cast<int>(l));
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        float a[4] = {(static_cast<float>(x) + 0.5f) / static_cast<float>(w),
                      (static_cast<float>(y) + 0.5f) / static_cast<float>(h), wh, wh};
        bool ok = true;
        for (float v : a) ok = ok && v > 0.01f && v < 0.99f;
        valid.push_back(ok ? 1.f : 0.f);
        for (float v : a) anchors.push_back(ok ? std::log(v / (1.f - v)) : std::numeric_limits<float>::max());
      }
  }
}

std::vector<float> make_sincos_position_embedding(int h, int w, int dim, float temperature) {
  int pd = dim / 4;
  std::vector<float> omega(pd);
  for (int i = 0; i < pd; ++i) {
    float e = static_cast<float>(i) / static_cast<float>(pd);
    omega[i] = 1.f / std::pow(temperature, e);
  }
  // meshgrid(arange(W), arange(H), indexing="ij") flattened: token t -> a = t / H, c = t % H.
  std::vector<float> pos(static_cast<size_t>(h) * w * dim);
  for (int t = 0; t < h * w; ++t) {
    float a = static_cast<float>(t / h), c = static_cast<float>(t % h);
    float* p = &pos[static_cast<size_t>(t) * dim];
    for (int i = 0; i < pd; ++i) {
      float ow = a * omega[i], oh = c * omega[i];
      p[i] = std::sin(ow);
      p[pd + i] = std::cos(ow);
      p[2 * pd + i] = std::sin(oh);
      p[3 * pd + i] = std::cos(oh);
    }
  }
  return pos;
}

namespace {

// ResNet-vd basic blocks, as HF's RTDetrResNet* modules. Returns the stage outputs.
std::vector<TensorId> build_backbone(Builder& b, const Config& cfg, TensorId x) {
  const std::string bb = "model.backbone.model.";
  const int e = cfg.backbone.embedding_size;
  for (int i = 0; i < 3; ++i) {
    std::string p = bb + "embedder.embedder." + std::to_string(i);
    int cout = i == 2 ? e : e / 2;
    x = b.conv_bn(x, p + ".convolution.weight", p + ".normalization", cout, 3, i == 0 ? 2 : 1, Act::relu);
  }
  auto s = b.shape(x);
  x = b.op(OpKind::max_pool2d, bb + "embedder.pooler", {x}, {(s[0] + 1) / 2, (s[1] + 1) / 2, s[2]},
           {{"kernel", 3}, {"stride", 2}, {"pad", 1}});
  std::vector<TensorId> stages;
  for (size_t st = 0; st < cfg.backbone.depths.size(); ++st) {
    int cout = cfg.backbone.hidden_sizes[st];
    for (int blk = 0; blk < cfg.backbone.depths[st]; ++blk) {
      std::string p = bb + "encoder.stages." + std::to_string(st) + ".layers." + std::to_string(blk);
      int stride = (st > 0 && blk == 0) ? 2 : 1;
      TensorId h = b.conv_bn(x, p + ".layer.0.convolution.weight", p + ".layer.0.normalization", cout, 3, stride, Act::relu);
      h = b.conv_bn(h, p + ".layer.1.convolution.weight", p + ".layer.1.normalization", cout, 3, 1, Act::none);
      TensorId sc = x;
      // The checkpoint decides the shortcut form: a plain 1x1 projection (stage 0, block 0, even
      // at equal widths), AvgPool(2, ceil) + 1x1 (".shortcut.1", later stages), or identity.
      if (b.has_weight(p + ".shortcut.convolution.weight")) {
        sc = b.conv_bn(x, p + ".shortcut.convolution.weight", p + ".shortcut.normalization", cout, 1, stride, Act::none);
      } else if (blk == 0 && (stride != 1 || b.shape(x)[2] != cout)) {
        auto xs = b.shape(x);
        TensorId pooled = b.op(OpKind::avg_pool2d, p + ".shortcut.0", {x}, {(xs[0] + 1) / 2, (xs[1] + 1) / 2, xs[2]},
                               {{"kernel", 2}, {"stride", 2}, {"ceil_mode", true}});
        sc = b.conv_bn(pooled, p + ".shortcut.1.convolution.weight", p + ".shortcut.1.normalization", cout, 1, 1, Act::none);
      }
      x = b.add(h, sc, p, Act::relu);
    }
    stages.push_back(x);
  }
  return stages;
}

// CSPRepLayer: conv3(RepVGG^3(conv1(x)) + conv2(x)); conv3 only when hidden != out channels.
TensorId csp_rep(Builder& b, const Config& cfg, TensorId x, const std::string& p, Act act) {
  const int out = cfg.encoder_hidden_dim;
  const int hidden = static_cast<int>(out * cfg.hidden_expansion);
  TensorId a = b.conv_bn(x, p + ".conv1.conv.weight", p + ".conv1.norm", hidden, 1, 1, act);
  for (int i = 0; i < 3; ++i) {
    std::string q = p + ".bottlenecks." + std::to_string(i);
    TensorId c3 = b.conv_bn(a, q + ".conv1.conv.weight", q + ".conv1.norm", hidden, 3, 1, Act::none);
    TensorId c1 = b.conv_bn(a, q + ".conv2.conv.weight", q + ".conv2.norm", hidden, 1, 1, Act::none);
    a = b.add(c3, c1, q, act);
  }
  TensorId c = b.conv_bn(x, p + ".conv2.conv.weight", p + ".conv2.norm", hidden, 1, 1, act);
  TensorId sum = b.add(a, c, p);
  if (hidden == out) return sum;
  return b.conv_bn(sum, p + ".conv3.conv.weight", p + ".conv3.norm", out, 1, 1, act);
}

// One post-norm transformer encoder layer (AIFI) on tokens [L, C] with position embedding pos.
TensorId aifi_layer(Builder& b, const Config& cfg, TensorId src, TensorId pos, const std::string& p) {
  const int c = cfg.encoder_hidden_dim;
  TensorId qk_in = b.add(src, pos, p + ".self_attn.pos");
  TensorId q = b.linear(qk_in, p + ".self_attn.q_proj", c);
  TensorId k = b.linear(qk_in, p + ".self_attn.k_proj", c);
  TensorId v = b.linear(src, p + ".self_attn.v_proj", c);
  int heads = cfg.encoder_attention_heads;
  float scale = 1.f / std::sqrt(static_cast<float>(c / heads));
  TensorId att = b.op(OpKind::attention, p + ".self_attn", {q, k, v}, b.shape(q), {{"heads", heads}, {"scale", scale}});
  TensorId o = b.linear(att, p + ".self_attn.out_proj", c);
  TensorId x = b.layer_norm(b.add(src, o, p + ".self_attn.residual"), p + ".self_attn_layer_norm");
  TensorId f = b.linear(x, p + ".fc1", cfg.encoder_ffn_dim, act_of(cfg.encoder_activation));
  f = b.linear(f, p + ".fc2", c);
  return b.layer_norm(b.add(x, f, p + ".ffn.residual"), p + ".final_layer_norm");
}

}  // namespace

Graph build_graph(const Config& cfg, const WeightSource& weights, int height, int width) {
  const int max_stride = cfg.feat_strides.back();
  if (height <= 0 || width <= 0 || height % max_stride || width % max_stride)
    throw Error("input size " + std::to_string(height) + "x" + std::to_string(width) + " must be a positive multiple of " +
                std::to_string(max_stride));
  Builder b(cfg, weights);
  Graph& g = b.g;
  TensorId pixels = g.add_activation("pixels", {height, width, 3});
  g.inputs = {pixels};
  const int d = cfg.encoder_hidden_dim;
  const Act act = act_of(cfg.activation);

  // Backbone and encoder input projections (conv1x1 + BN, no activation).
  auto stages = build_backbone(b, cfg, pixels);
  std::vector<TensorId> feats;
  for (size_t i = 0; i < cfg.backbone.out_indices.size(); ++i) {
    std::string p = "model.encoder_input_proj." + std::to_string(i);
    feats.push_back(b.conv_bn(stages[cfg.backbone.out_indices[i] - 1], p + ".0.weight", p + ".1", d, 1, 1, Act::none));
  }

  // AIFI on the last level.
  const int nl = static_cast<int>(feats.size());
  {
    auto s = b.shape(feats[nl - 1]);
    int h = static_cast<int>(s[0]), w = static_cast<int>(s[1]);
    TensorId pos = g.add_const("model.encoder.encoder.0.position_embedding", {h * w, d},
                               make_sincos_position_embedding(h, w, d, cfg.positional_encoding_temperature));
    TensorId src = b.reshape(feats[nl - 1], {h * w, d}, "model.encoder.encoder.0.flatten");
    for (int l = 0; l < cfg.encoder_layers; ++l)
      src = aifi_layer(b, cfg, src, pos, "model.encoder.encoder.0.layers." + std::to_string(l));
    feats[nl - 1] = b.reshape(src, s, "model.encoder.encoder.0.unflatten");
  }

  // CCFM: top-down FPN, then bottom-up PAN (see the spec, section 3.4).
  std::vector<TensorId> fpn = {feats[nl - 1]};
  for (int idx = 0; idx < nl - 1; ++idx) {
    std::string li = std::to_string(idx);
    TensorId lat = b.conv_bn(fpn.back(), "model.encoder.lateral_convs." + li + ".conv.weight",
                             "model.encoder.lateral_convs." + li + ".norm", d, 1, 1, act);
    fpn.back() = lat;
    auto s = b.shape(lat);
    TensorId up = b.op(OpKind::upsample_nearest2x, "model.encoder.fpn_upsample." + li, {lat}, {s[0] * 2, s[1] * 2, s[2]});
    TensorId cat = b.concat({up, feats[nl - 2 - idx]}, 2, "model.encoder.fpn_blocks." + li);
    fpn.push_back(csp_rep(b, cfg, cat, "model.encoder.fpn_blocks." + li, act));
  }
  std::reverse(fpn.begin(), fpn.end());
  std::vector<TensorId> pan = {fpn[0]};
  for (int idx = 0; idx < nl - 1; ++idx) {
    std::string li = std::to_string(idx);
    TensorId down = b.conv_bn(pan.back(), "model.encoder.downsample_convs." + li + ".conv.weight",
                              "model.encoder.downsample_convs." + li + ".norm", d, 3, 2, act);
    TensorId cat = b.concat({down, fpn[idx + 1]}, 2, "model.encoder.pan_blocks." + li);
    pan.push_back(csp_rep(b, cfg, cat, "model.encoder.pan_blocks." + li, act));
  }

  // Decoder memory: decoder_input_proj (conv1x1 + BN), flattened and concatenated.
  std::vector<TensorId> flat;
  std::vector<std::pair<int, int>> level_hw;
  std::vector<int> level_start;
  int total = 0;
  for (int l = 0; l < nl; ++l) {
    std::string p = "model.decoder_input_proj." + std::to_string(l);
    TensorId s = b.conv_bn(pan[l], p + ".0.weight", p + ".1", d, 1, 1, Act::none);
    auto sh = b.shape(s);
    level_hw.push_back({static_cast<int>(sh[0]), static_cast<int>(sh[1])});
    level_start.push_back(total);
    total += static_cast<int>(sh[0] * sh[1]);
    flat.push_back(b.reshape(s, {sh[0] * sh[1], d}, p + ".flatten"));
  }
  TensorId memory = b.concat(flat, 0, "model.memory");

  // Query selection on the masked memory.
  std::vector<float> anchors, valid;
  make_anchors(level_hw, anchors, valid);
  TensorId anchor_t = g.add_const("model.anchors", {total, 4}, anchors);
  TensorId valid_t = g.add_const("model.valid_mask", {total}, valid);
  TensorId masked = b.op(OpKind::mul_rows, "model.valid_mask", {memory, valid_t}, {total, d}, {}, "masked");
  TensorId om = b.layer_norm(b.linear(masked, "model.enc_output.0", d), "model.enc_output.1");
  TensorId enc_cls = b.linear(om, "model.enc_score_head", cfg.num_labels);
  TensorId enc_coord = b.add(b.mlp(om, "model.enc_bbox_head", 3, d, 4), anchor_t, "model.enc_bbox_head.anchors");
  const int nq = cfg.num_queries;
  TensorId topk = b.op(OpKind::topk_rows, "model.topk", {enc_cls}, {nq}, {{"k", nq}}, "indices");
  g.tensor(topk).dtype = graph::DType::i32;
  TensorId ref_unact = b.op(OpKind::gather_rows, "model.topk.reference_points", {enc_coord, topk}, {nq, 4});
  TensorId h = b.op(OpKind::gather_rows, "model.topk.target", {om, topk}, {nq, d});
  TensorId ref = b.op(OpKind::activation, "model.decoder.init_reference_points", {ref_unact}, {nq, 4},
                      {{"act", "sigmoid"}}, "sigmoid");

  // Decoder layers.
  nlohmann::json shapes_j = nlohmann::json::array();
  for (auto [hh, ww] : level_hw) shapes_j.push_back({hh, ww});
  const int heads = cfg.decoder_attention_heads, pts = cfg.decoder_n_points;
  const float scale = 1.f / std::sqrt(static_cast<float>(d / heads));
  TensorId logits = graph::kNoTensor;
  for (int i = 0; i < cfg.decoder_layers; ++i) {
    std::string p = "model.decoder.layers." + std::to_string(i);
    std::string li = std::to_string(i);
    TensorId qpos = b.mlp(ref, "model.decoder.query_pos_head", 2, 2 * d, d);
    // Self-attention: q = k = h + qpos, v = h.
    TensorId qk_in = b.add(h, qpos, p + ".self_attn.pos");
    TensorId q = b.linear(qk_in, p + ".self_attn.q_proj", d);
    TensorId k = b.linear(qk_in, p + ".self_attn.k_proj", d);
    TensorId v = b.linear(h, p + ".self_attn.v_proj", d);
    TensorId att = b.op(OpKind::attention, p + ".self_attn", {q, k, v}, {nq, d}, {{"heads", heads}, {"scale", scale}});
    TensorId o = b.linear(att, p + ".self_attn.out_proj", d);
    h = b.layer_norm(b.add(h, o, p + ".self_attn.residual"), p + ".self_attn_layer_norm");
    // Deformable cross-attention on the unmasked memory.
    TensorId cq = b.add(h, qpos, p + ".encoder_attn.pos");
    TensorId value = b.linear(memory, p + ".encoder_attn.value_proj", d);
    TensorId off = b.linear(cq, p + ".encoder_attn.sampling_offsets", heads * nl * pts * 2);
    TensorId aw = b.linear(cq, p + ".encoder_attn.attention_weights", heads * nl * pts);
    TensorId ps = b.weight(p + ".encoder_attn.n_points_scale", {nl * pts});
    TensorId ca = b.op(OpKind::ms_deform_attn, p + ".encoder_attn", {value, off, aw, ref, ps}, {nq, d},
                       {{"heads", heads}, {"levels", nl}, {"points", pts},
                        {"offset_scale", cfg.decoder_offset_scale}, {"spatial_shapes", shapes_j},
                        {"level_start", level_start}});
    ca = b.linear(ca, p + ".encoder_attn.output_proj", d);
    h = b.layer_norm(b.add(h, ca, p + ".encoder_attn.residual"), p + ".encoder_attn_layer_norm");
    // FFN.
    TensorId f = b.linear(h, p + ".fc1", cfg.decoder_ffn_dim, act_of(cfg.decoder_activation));
    f = b.linear(f, p + ".fc2", d);
    h = b.layer_norm(b.add(h, f, p + ".ffn.residual"), p + ".final_layer_norm");
    // Box refinement and class head of this layer.
    TensorId delta = b.mlp(h, "model.decoder.bbox_embed." + li, 3, d, 4);
    ref = b.op(OpKind::box_refine, "model.decoder.bbox_embed." + li + ".refine", {delta, ref}, {nq, 4});
    logits = b.linear(h, "model.decoder.class_embed." + li, cfg.num_labels);
  }
  g.tensor(logits).name = "logits";
  g.tensor(ref).name = "boxes";
  // The encoder's query selection is an output too: it lets tests compare query by query where
  // near-ties reorder the top-k (the spec's "numerical pitfalls").
  g.tensor(topk).name = "query_indices";
  g.outputs = {logits, ref, topk};
  g.validate();
  return g;
}

}  // namespace detforge::rt_detr_v2
