#include "families/rt_detr_v2/synth.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/atomic_file.h"
#include "core/checksum.h"
#include "detforge/types.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace detforge::rt_detr_v2 {
namespace {

const char* const kCocoNames[80] = {
    "person",        "bicycle",      "car",           "motorcycle",    "airplane",     "bus",
    "train",         "truck",        "boat",          "traffic light", "fire hydrant", "stop sign",
    "parking meter", "bench",        "bird",          "cat",           "dog",          "horse",
    "sheep",         "cow",          "elephant",      "bear",          "zebra",        "giraffe",
    "backpack",      "umbrella",     "handbag",       "tie",           "suitcase",     "frisbee",
    "skis",          "snowboard",    "sports ball",   "kite",          "baseball bat", "baseball glove",
    "skateboard",    "surfboard",    "tennis racket", "bottle",        "wine glass",   "cup",
    "fork",          "knife",        "spoon",         "bowl",          "banana",       "apple",
    "sandwich",      "orange",       "broccoli",      "carrot",        "hot dog",      "pizza",
    "donut",         "cake",         "chair",         "couch",         "potted plant", "bed",
    "dining table",  "toilet",       "tv",            "laptop",        "mouse",        "remote",
    "keyboard",      "cell phone",   "microwave",     "oven",          "toaster",      "sink",
    "refrigerator",  "book",         "clock",         "vase",          "scissors",     "teddy bear",
    "hair drier",    "toothbrush"};

// splitmix64 + Box-Muller: the same numbers on every platform (std::normal_distribution is not).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); }
};

struct SpecList {
  std::vector<SynthTensorSpec> v;
  void conv(const std::string& name, int64_t out, int64_t in, int64_t k) {
    v.push_back({name, {out, in, k, k}, SynthInit::kFanIn, in * k * k});
  }
  // A BatchNorm: frozen ones (backbone) are plain buffers; nn.BatchNorm2d adds a counter.
  void bn(const std::string& p, int64_t c, bool frozen) {
    v.push_back({p + ".weight", {c}, SynthInit::kBnWeight, 1});
    v.push_back({p + ".bias", {c}, SynthInit::kBnBias, 1});
    v.push_back({p + ".running_mean", {c}, SynthInit::kBnMean, 1});
    v.push_back({p + ".running_var", {c}, SynthInit::kBnVar, 1});
    if (!frozen) v.push_back({p + ".num_batches_tracked", {}, SynthInit::kCounter, 1});
  }
  void linear(const std::string& p, int64_t out, int64_t in, SynthInit w = SynthInit::kFanIn,
              SynthInit b = SynthInit::kBias) {
    v.push_back({p + ".weight", {out, in}, w, in});
    v.push_back({p + ".bias", {out}, b, in});
  }
  void layer_norm(const std::string& p, int64_t c) {
    v.push_back({p + ".weight", {c}, SynthInit::kLnWeight, 1});
    v.push_back({p + ".bias", {c}, SynthInit::kLnBias, 1});
  }
  // ConvNorm of the hybrid encoder: `<p>.conv.weight` + BN `<p>.norm`.
  void conv_norm(const std::string& p, int64_t out, int64_t in, int64_t k) {
    conv(p + ".conv.weight", out, in, k);
    bn(p + ".norm", out, false);
  }
  void mlp(const std::string& p, int64_t in, int64_t hidden, int64_t out, int layers, SynthInit last_w) {
    for (int i = 0; i < layers; ++i) {
      int64_t a = i == 0 ? in : hidden, b = i == layers - 1 ? out : hidden;
      linear(p + ".layers." + std::to_string(i), b, a, i == layers - 1 ? last_w : SynthInit::kFanIn);
    }
  }
};

int64_t get_int(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number_integer())
    throw Error(where + ": '" + key + "' is missing or not an integer");
  return j.at(key).get<int64_t>();
}
std::vector<int64_t> get_ints(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_array()) throw Error(where + ": '" + key + "' is missing or not a list");
  return j.at(key).get<std::vector<int64_t>>();
}

}  // namespace

json synth_preprocessor_config() {
  return {{"do_convert_annotations", true}, {"do_normalize", false}, {"do_pad", false},
          {"do_rescale", true},             {"do_resize", true},     {"format", "coco_detection"},
          {"image_mean", {0.485, 0.456, 0.406}}, {"image_processor_type", "RTDetrImageProcessor"},
          {"image_std", {0.229, 0.224, 0.225}},  {"pad_size", nullptr}, {"resample", 2},
          {"rescale_factor", 0.00392156862745098}, {"size", {{"height", 640}, {"width", 640}}}};
}

json synth_config(const std::string& preset, int num_labels, const std::string& torch_dtype) {
  if (num_labels < 1) throw Error("--num-labels must be at least 1 (got " + std::to_string(num_labels) + ")");
  bool tiny = preset == "tiny";
  if (!tiny && preset != "r18vd") throw Error("unknown preset '" + preset + "' (choose r18vd or tiny)");
  const int64_t d = tiny ? 128 : 256;
  json backbone = {{"depths", tiny ? json{1, 1, 1, 1} : json{2, 2, 2, 2}},
                   {"downsample_in_bottleneck", false},
                   {"downsample_in_first_stage", false},
                   {"embedding_size", tiny ? 32 : 64},
                   {"hidden_act", "relu"},
                   {"hidden_sizes", tiny ? json{32, 64, 128, 256} : json{64, 128, 256, 512}},
                   {"layer_type", "basic"},
                   {"model_type", "rt_detr_resnet"},
                   {"num_channels", 3},
                   {"out_features", {"stage2", "stage3", "stage4"}},
                   {"out_indices", {2, 3, 4}},
                   {"stage_names", {"stem", "stage1", "stage2", "stage3", "stage4"}}};
  json id2label = json::object(), label2id = json::object();
  for (int i = 0; i < num_labels; ++i) {
    std::string name = num_labels == 80 ? kCocoNames[i] : "LABEL_" + std::to_string(i);
    id2label[std::to_string(i)] = name;
    label2id[name] = i;
  }
  return {{"activation_dropout", 0.0},
          {"activation_function", "silu"},
          {"anchor_image_size", nullptr},
          {"architectures", {"RTDetrV2ForObjectDetection"}},
          {"attention_dropout", 0.0},
          {"auxiliary_loss", true},
          {"backbone_config", backbone},
          {"batch_norm_eps", 1e-05},
          {"box_noise_scale", 1.0},
          {"d_model", d},
          {"decoder_activation_function", "relu"},
          {"decoder_attention_heads", 8},
          {"decoder_ffn_dim", 4 * d},
          {"decoder_in_channels", {d, d, d}},
          {"decoder_layers", tiny ? 2 : 3},
          {"decoder_method", "default"},
          {"decoder_n_levels", 3},
          {"decoder_n_points", 4},
          {"decoder_offset_scale", 0.5},
          {"dropout", 0.0},
          {"dtype", torch_dtype},
          {"encode_proj_layers", {2}},
          {"encoder_activation_function", "gelu"},
          {"encoder_attention_heads", 8},
          {"encoder_ffn_dim", 4 * d},
          {"encoder_hidden_dim", d},
          {"encoder_in_channels", tiny ? json{64, 128, 256} : json{128, 256, 512}},
          {"encoder_layers", 1},
          {"eos_coefficient", 0.0001},
          {"eval_size", nullptr},
          {"feat_strides", {8, 16, 32}},
          {"focal_loss_alpha", 0.75},
          {"focal_loss_gamma", 2.0},
          {"freeze_backbone_batch_norms", true},
          {"hidden_expansion", 0.5},
          {"id2label", id2label},
          {"initializer_bias_prior_prob", nullptr},
          {"initializer_range", 0.01},
          {"is_encoder_decoder", true},
          {"label2id", label2id},
          {"label_noise_ratio", 0.5},
          {"layer_norm_eps", 1e-05},
          {"learn_initial_query", false},
          {"matcher_alpha", 0.25},
          {"matcher_bbox_cost", 5.0},
          {"matcher_class_cost", 2.0},
          {"matcher_gamma", 2.0},
          {"matcher_giou_cost", 2.0},
          {"model_type", "rt_detr_v2"},
          {"normalize_before", false},
          {"num_denoising", 100},
          {"num_feature_levels", 3},
          {"num_queries", tiny ? 100 : 300},
          {"positional_encoding_temperature", 10000},
          {"tie_word_embeddings", true},
          {"use_focal_loss", true},
          {"weight_loss_bbox", 5.0},
          {"weight_loss_giou", 2.0},
          {"weight_loss_vfl", 1.0},
          {"with_box_refine", true}};
}

std::vector<SynthTensorSpec> rt_detr_v2_tensor_specs(const json& c) {
  const std::string W = "synth: config.json";
  if (!c.is_object() || !c.contains("backbone_config")) throw Error(W + ": no backbone_config");
  const json& b = c.at("backbone_config");
  if (b.value("layer_type", "bottleneck") != "basic")
    throw Error(W + ": backbone layer_type must be 'basic' (bottleneck ResNets are not synthesised)");
  if (b.value("downsample_in_first_stage", false)) throw Error(W + ": downsample_in_first_stage is not supported");
  if (c.value("learn_initial_query", false)) throw Error(W + ": learn_initial_query is not supported");
  const std::string BW = W + " backbone_config";
  const int64_t emb = get_int(b, "embedding_size", BW);
  const auto depths = get_ints(b, "depths", BW), widths = get_ints(b, "hidden_sizes", BW);
  if (depths.size() != widths.size() || depths.empty()) throw Error(BW + ": depths and hidden_sizes differ in length");
  const int64_t d = get_int(c, "d_model", W), eh = get_int(c, "encoder_hidden_dim", W);
  const auto enc_in = get_ints(c, "encoder_in_channels", W), dec_in = get_ints(c, "decoder_in_channels", W);
  const int64_t levels = get_int(c, "num_feature_levels", W);
  if (levels != static_cast<int64_t>(dec_in.size()))
    throw Error(W + ": num_feature_levels must equal the length of decoder_in_channels");
  const int64_t n_labels = c.contains("id2label") ? static_cast<int64_t>(c.at("id2label").size()) : 80;
  const int64_t heads = get_int(c, "decoder_attention_heads", W), n_lvl = get_int(c, "decoder_n_levels", W),
                n_pts = get_int(c, "decoder_n_points", W);
  const double expansion = c.value("hidden_expansion", 1.0);

  SpecList s;
  // Backbone (RTDetrResNet, "vd" stem of three 3x3 convs; frozen BatchNorms are buffers).
  const std::string bb = "model.backbone.model.";
  const int64_t stem[3][2] = {{emb / 2, 3}, {emb / 2, emb / 2}, {emb, emb / 2}};
  for (int i = 0; i < 3; ++i) {
    std::string p = bb + "embedder.embedder." + std::to_string(i);
    s.conv(p + ".convolution.weight", stem[i][0], stem[i][1], 3);
    s.bn(p + ".normalization", stem[i][0], true);
  }
  for (size_t st = 0; st < widths.size(); ++st) {
    const int64_t in = st == 0 ? emb : widths[st - 1], out = widths[st];
    for (int64_t blk = 0; blk < depths[st]; ++blk) {
      std::string p = bb + "encoder.stages." + std::to_string(st) + ".layers." + std::to_string(blk) + ".";
      const int64_t bin = blk == 0 ? in : out;
      s.conv(p + "layer.0.convolution.weight", out, bin, 3);
      s.bn(p + "layer.0.normalization", out, true);
      s.conv(p + "layer.1.convolution.weight", out, out, 3);
      s.bn(p + "layer.1.normalization", out, true);
      if (blk == 0) {  // stage 0 projects directly; later stages avg-pool first (index 0)
        std::string sc = p + (st == 0 ? "shortcut." : "shortcut.1.");
        s.conv(sc + "convolution.weight", out, in, 1);
        s.bn(sc + "normalization", out, true);
      }
    }
  }
  // Hybrid encoder.
  for (size_t i = 0; i < enc_in.size(); ++i) {
    std::string p = "model.encoder_input_proj." + std::to_string(i);
    s.conv(p + ".0.weight", eh, enc_in[i], 1);
    s.bn(p + ".1", eh, false);
  }
  const auto proj_layers = get_ints(c, "encode_proj_layers", W);
  const int64_t enc_layers = get_int(c, "encoder_layers", W), enc_ffn = get_int(c, "encoder_ffn_dim", W);
  for (size_t k = 0; k < proj_layers.size(); ++k)
    for (int64_t l = 0; l < enc_layers; ++l) {
      std::string p = "model.encoder.encoder." + std::to_string(k) + ".layers." + std::to_string(l) + ".";
      for (const char* proj : {"k_proj", "out_proj", "q_proj", "v_proj"}) s.linear(p + "self_attn." + proj, eh, eh);
      s.layer_norm(p + "self_attn_layer_norm", eh);
      s.linear(p + "fc1", enc_ffn, eh);
      s.linear(p + "fc2", eh, enc_ffn);
      s.layer_norm(p + "final_layer_norm", eh);
    }
  const int64_t hidden = static_cast<int64_t>(eh * expansion);
  for (size_t i = 0; i + 1 < enc_in.size(); ++i) {
    const std::string n = std::to_string(i);
    s.conv_norm("model.encoder.lateral_convs." + n, eh, eh, 1);
    s.conv_norm("model.encoder.downsample_convs." + n, eh, eh, 3);
    for (const char* kind : {"fpn_blocks", "pan_blocks"}) {  // CSPRepLayer, 3 RepVGG blocks
      std::string p = std::string("model.encoder.") + kind + "." + n + ".";
      s.conv_norm(p + "conv1", hidden, 2 * eh, 1);
      s.conv_norm(p + "conv2", hidden, 2 * eh, 1);
      if (hidden != eh) s.conv_norm(p + "conv3", eh, hidden, 1);
      for (int r = 0; r < 3; ++r) {
        std::string q = p + "bottlenecks." + std::to_string(r) + ".";
        s.conv_norm(q + "conv1", hidden, hidden, 3);
        s.conv_norm(q + "conv2", hidden, hidden, 1);
      }
    }
  }
  // Decoder inputs and query selection.
  for (int64_t i = 0; i < levels; ++i) {
    std::string p = "model.decoder_input_proj." + std::to_string(i);
    s.conv(p + ".0.weight", d, dec_in[i], 1);
    s.bn(p + ".1", d, false);
  }
  // Zero bias, as transformers initialises it: masked (invalid) anchors carry memory 0, so their
  // query-selection score is then LN-bias-only, about the prior -4.6 and far below valid anchors'
  // best class. With a random bias (std 0.02, which LayerNorm rescales to unit variance) the 316
  // identical invalid anchors outranked every valid one on a random r18vd and filled all 300
  // queries with boxes of exactly 1.0 (measured with transformers 5.17).
  s.linear("model.enc_output.0", d, d, SynthInit::kFanIn, SynthInit::kZero);
  s.layer_norm("model.enc_output.1", d);
  s.linear("model.enc_score_head", n_labels, d, SynthInit::kFanIn, SynthInit::kPriorBias);
  s.mlp("model.enc_bbox_head", d, d, 4, 3, SynthInit::kSmallWeight);
  if (c.value("num_denoising", 100) > 0)
    s.v.push_back({"model.denoising_class_embed.weight", {n_labels + 1, d}, SynthInit::kEmbedding, 1});
  // Decoder.
  s.mlp("model.decoder.query_pos_head", 4, 2 * d, d, 2, SynthInit::kFanIn);
  const int64_t dec_layers = get_int(c, "decoder_layers", W), dec_ffn = get_int(c, "decoder_ffn_dim", W);
  for (int64_t l = 0; l < dec_layers; ++l) {
    std::string p = "model.decoder.layers." + std::to_string(l) + ".";
    for (const char* proj : {"k_proj", "out_proj", "q_proj", "v_proj"}) s.linear(p + "self_attn." + proj, d, d);
    s.layer_norm(p + "self_attn_layer_norm", d);
    std::string a = p + "encoder_attn.";
    s.linear(a + "sampling_offsets", heads * n_lvl * n_pts * 2, d, SynthInit::kSmallWeight, SynthInit::kOffsetsBias);
    s.v.back().heads = heads;  // the bias: its grid init needs the geometry
    s.v.back().levels = n_lvl;
    s.v.back().points = n_pts;
    s.linear(a + "attention_weights", heads * n_lvl * n_pts, d, SynthInit::kSmallWeight, SynthInit::kBias);
    s.linear(a + "value_proj", d, d);
    s.linear(a + "output_proj", d, d);
    s.v.push_back({a + "n_points_scale", {n_lvl * n_pts}, SynthInit::kPointsScale, 1, heads, n_lvl, n_pts});
    s.layer_norm(p + "encoder_attn_layer_norm", d);
    s.linear(p + "fc1", dec_ffn, d);
    s.linear(p + "fc2", d, dec_ffn);
    s.layer_norm(p + "final_layer_norm", d);
  }
  for (int64_t l = 0; l < dec_layers; ++l) {
    s.linear("model.decoder.class_embed." + std::to_string(l), n_labels, d, SynthInit::kFanIn, SynthInit::kPriorBias);
    s.mlp("model.decoder.bbox_embed." + std::to_string(l), d, d, 4, 3, SynthInit::kSmallWeight);
  }
  return s.v;
}

namespace {

std::vector<float> fill(const SynthTensorSpec& t, Rng& r) {
  int64_t n = 1;
  for (int64_t x : t.shape) n *= x;
  std::vector<float> v(static_cast<size_t>(n));
  const double fan_std = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(t.fan_in, 1)));
  for (auto& x : v) {
    double y = 0;
    switch (t.init) {
      case SynthInit::kFanIn: y = r.normal() * fan_std; break;
      case SynthInit::kBias: y = r.normal() * 0.02; break;
      case SynthInit::kBnWeight: y = 0.8 + 0.4 * r.uniform(); break;
      case SynthInit::kBnBias: y = r.normal() * 0.05; break;
      case SynthInit::kBnMean: y = r.normal() * 0.1; break;
      case SynthInit::kBnVar: y = 0.5 + r.uniform(); break;
      case SynthInit::kLnWeight: y = 1.0 + r.normal() * 0.05; break;
      case SynthInit::kLnBias: y = r.normal() * 0.02; break;
      case SynthInit::kCounter: y = 0; break;
      case SynthInit::kPointsScale: y = 1.0 / static_cast<double>(t.points); break;
      case SynthInit::kPriorBias: y = -std::log((1.0 - 0.01) / 0.01); break;
      case SynthInit::kSmallWeight: y = r.normal() * 0.01 * fan_std; break;
      case SynthInit::kEmbedding: y = r.normal(); break;
      case SynthInit::kZero: y = 0; break;
      case SynthInit::kOffsetsBias: break;  // below
    }
    x = static_cast<float>(y);
  }
  if (t.init == SynthInit::kOffsetsBias) {
    // transformers' init: head h points along angle 2*pi*h/heads, scaled so the larger component
    // is 1, point p at distance p+1; layout ((h*levels + l)*points + p)*2 + {x,y}.
    const int64_t heads = t.heads, lv = t.levels, pts = t.points;
    for (int64_t h = 0; h < heads; ++h) {
      float th = static_cast<float>(h) * (2.0f * static_cast<float>(M_PI) / static_cast<float>(heads));
      float gx = std::cos(th), gy = std::sin(th), m = std::max(std::fabs(gx), std::fabs(gy));
      for (int64_t l = 0; l < lv; ++l)
        for (int64_t p = 0; p < pts; ++p) {
          size_t i = static_cast<size_t>(((h * lv + l) * pts + p) * 2);
          v[i] = gx / m * static_cast<float>(p + 1);
          v[i + 1] = gy / m * static_cast<float>(p + 1);
        }
    }
  }
  return v;
}

}  // namespace

std::vector<SafetensorsTensor> synth_weights(const json& config, uint64_t seed, const std::string& dtype) {
  if (dtype != "F32" && dtype != "F16") throw Error("synth: dtype must be F32 or F16 (got '" + dtype + "')");
  std::vector<SafetensorsTensor> out;
  for (const SynthTensorSpec& t : rt_detr_v2_tensor_specs(config)) {
    SafetensorsTensor st;
    st.name = t.name;
    st.shape = t.shape;
    if (t.is_counter()) {
      st.dtype = "I64";
      st.raw.assign(8, 0);
    } else {
      st.dtype = dtype;
      Rng r{seed * 0x9E3779B97F4A7C15ull ^ fnv1a64(t.name.data(), t.name.size())};
      st.values = fill(t, r);
    }
    out.push_back(std::move(st));
  }
  return out;
}

void write_synth_checkpoint(const fs::path& out_dir, const SynthOptions& o) {
  if (o.dtype != "f32" && o.dtype != "f16") throw Error("--dtype must be f32 or f16 (got '" + o.dtype + "')");
  if (out_dir.empty()) throw Error("output folder is empty");
  json config = synth_config(o.preset, o.num_labels, o.dtype == "f16" ? "float16" : "float32");
  std::error_code ec;
  fs::path target = out_dir.filename().empty() ? out_dir.parent_path() : out_dir;
  fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(parent, ec)) throw Error("cannot write " + target.string() + ": folder " + parent.string() + " does not exist");
  bool exists = fs::exists(target, ec);
  if (exists && !fs::is_directory(target, ec)) throw Error("cannot write " + target.string() + ": it is a file");
  if (exists && !fs::is_empty(target, ec) && !o.force)
    throw Error("cannot write " + target.string() + ": folder exists and is not empty (pass --force to replace it)");
  std::random_device rd;
  fs::path tmp = parent / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  try {
    fs::create_directory(tmp);
    write_file_atomically(tmp / "config.json", config.dump(2) + "\n");
    write_file_atomically(tmp / "preprocessor_config.json", synth_preprocessor_config().dump(2) + "\n");
    write_safetensors(tmp / "model.safetensors", synth_weights(config, o.seed, o.dtype == "f16" ? "F16" : "F32"),
                      {{"format", "pt"}, {"producer", "detforge synth-checkpoint"},
                       {"preset", o.preset}, {"seed", std::to_string(o.seed)}});
    if (exists) fs::remove_all(target);
    fs::rename(tmp, target);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw Error("cannot write " + target.string() + ": " + e.code().message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace detforge::rt_detr_v2
