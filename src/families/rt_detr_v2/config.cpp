#include "families/rt_detr_v2/config.h"

#include "detforge/types.h"

namespace detforge::rt_detr_v2 {

namespace {

struct Reader {
  const nlohmann::json& j;
  std::string where;

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw Error(where + ": " + field + " " + why);
  }
  template <class T>
  T get(const char* key, T dflt) const {
    if (!j.contains(key) || j.at(key).is_null()) return dflt;
    try {
      return j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
      fail(key, "has the wrong type (" + j.at(key).dump() + ")");
    }
  }
  template <class T>
  T need(const char* key) const {
    if (!j.contains(key) || j.at(key).is_null()) fail(key, "is missing");
    return get<T>(key, T{});
  }
  void expect_string(const char* key, const std::string& dflt, std::initializer_list<const char*> allowed) const {
    std::string v = get<std::string>(key, dflt);
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      list += (list.empty() ? "'" : ", '") + std::string(a) + "'";
    }
    fail(key, "'" + v + "' is not supported (supported: " + list + ")");
  }
  void expect_bool(const char* key, bool dflt, bool want) const {
    bool v = get<bool>(key, dflt);
    if (v != want) fail(key, std::string(v ? "true" : "false") + " is not supported (only " + (want ? "true" : "false") + ")");
  }
  int positive(const char* key, int dflt) const {
    int v = get<int>(key, dflt);
    if (v <= 0) fail(key, std::to_string(v) + " must be positive");
    return v;
  }
};

}  // namespace

Config Config::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": not a JSON object");
  Reader r{j, where};
  Config c;
  std::string model_type = r.get<std::string>("model_type", "");
  if (model_type != "rt_detr_v2")
    r.fail("model_type", "'" + model_type + "' is not supported (this family reads 'rt_detr_v2')");

  // Inference-path choices this engine implements; everything else is refused.
  r.expect_string("decoder_method", "default", {"default"});
  r.expect_bool("with_box_refine", true, true);
  r.expect_bool("normalize_before", false, false);
  r.expect_bool("learn_initial_query", false, false);
  r.expect_bool("use_focal_loss", true, true);
  r.expect_string("activation_function", "silu", {"silu", "relu", "gelu"});
  r.expect_string("encoder_activation_function", "gelu", {"gelu", "relu", "silu"});
  r.expect_string("decoder_activation_function", "relu", {"relu", "gelu", "silu"});
  if (j.contains("anchor_image_size") && !j.at("anchor_image_size").is_null())
    r.fail("anchor_image_size", j.at("anchor_image_size").dump() + " is not supported (only null: anchors follow the input size)");

  c.activation = r.get<std::string>("activation_function", "silu");
  c.encoder_activation = r.get<std::string>("encoder_activation_function", "gelu");
  c.decoder_activation = r.get<std::string>("decoder_activation_function", "relu");
  c.d_model = r.positive("d_model", 256);
  c.encoder_hidden_dim = r.positive("encoder_hidden_dim", 256);
  c.encoder_in_channels = r.get<std::vector<int>>("encoder_in_channels", {512, 1024, 2048});
  c.feat_strides = r.get<std::vector<int>>("feat_strides", {8, 16, 32});
  c.encode_proj_layers = r.get<std::vector<int>>("encode_proj_layers", {2});
  c.encoder_layers = r.positive("encoder_layers", 1);
  c.encoder_attention_heads = r.positive("encoder_attention_heads", 8);
  c.encoder_ffn_dim = r.positive("encoder_ffn_dim", 1024);
  c.hidden_expansion = r.get<float>("hidden_expansion", 1.0f);
  c.positional_encoding_temperature = r.get<float>("positional_encoding_temperature", 10000.f);
  c.num_feature_levels = r.positive("num_feature_levels", 3);
  c.decoder_in_channels = r.get<std::vector<int>>("decoder_in_channels", {256, 256, 256});
  c.decoder_layers = r.positive("decoder_layers", 6);
  c.decoder_attention_heads = r.positive("decoder_attention_heads", 8);
  c.decoder_ffn_dim = r.positive("decoder_ffn_dim", 1024);
  c.decoder_n_points = r.positive("decoder_n_points", 4);
  c.decoder_n_levels = r.positive("decoder_n_levels", 3);
  c.decoder_offset_scale = r.get<float>("decoder_offset_scale", 0.5f);
  c.num_queries = r.positive("num_queries", 300);
  c.batch_norm_eps = r.get<float>("batch_norm_eps", 1e-5f);
  c.layer_norm_eps = r.get<float>("layer_norm_eps", 1e-5f);

  if (c.encoder_in_channels.size() != c.feat_strides.size())
    r.fail("encoder_in_channels", "has " + std::to_string(c.encoder_in_channels.size()) + " entries but feat_strides has " +
                                      std::to_string(c.feat_strides.size()));
  if (static_cast<int>(c.encoder_in_channels.size()) != c.num_feature_levels ||
      c.decoder_n_levels != c.num_feature_levels)
    r.fail("num_feature_levels", std::to_string(c.num_feature_levels) +
                                     " must equal the number of encoder inputs and decoder_n_levels");
  for (int s : c.feat_strides)
    if (s <= 0 || (s & (s - 1))) r.fail("feat_strides", "must be powers of two");
  for (int i = 1; i < static_cast<int>(c.feat_strides.size()); ++i)
    if (c.feat_strides[i] != 2 * c.feat_strides[i - 1]) r.fail("feat_strides", "must double from level to level");
  if (c.encode_proj_layers.size() != 1 || c.encode_proj_layers[0] != c.num_feature_levels - 1)
    r.fail("encode_proj_layers", "must be [" + std::to_string(c.num_feature_levels - 1) + "] (AIFI on the last level)");
  for (int ch : c.decoder_in_channels)
    if (ch != c.encoder_hidden_dim) r.fail("decoder_in_channels", "must all equal encoder_hidden_dim");
  if (static_cast<int>(c.decoder_in_channels.size()) != c.num_feature_levels)
    r.fail("decoder_in_channels", "must have num_feature_levels entries");
  if (c.d_model % c.decoder_attention_heads || c.encoder_hidden_dim % c.encoder_attention_heads)
    r.fail("d_model", "must be divisible by the number of attention heads");
  if (c.encoder_hidden_dim % 4) r.fail("encoder_hidden_dim", "must be divisible by 4 (2-D sine position embedding)");
  if (c.d_model != c.encoder_hidden_dim) r.fail("d_model", "must equal encoder_hidden_dim");
  if (c.hidden_expansion <= 0) r.fail("hidden_expansion", "must be positive");

  if (!j.contains("backbone_config") || !j.at("backbone_config").is_object()) r.fail("backbone_config", "is missing");
  Reader b{j.at("backbone_config"), where + ": backbone_config"};
  std::string bt = b.get<std::string>("model_type", "rt_detr_resnet");
  if (bt != "rt_detr_resnet") b.fail("model_type", "'" + bt + "' is not supported (only 'rt_detr_resnet')");
  b.expect_string("layer_type", "bottleneck", {"basic"});
  b.expect_string("hidden_act", "relu", {"relu"});
  b.expect_bool("downsample_in_first_stage", false, false);
  if (b.get<int>("num_channels", 3) != 3) b.fail("num_channels", "must be 3 (RGB)");
  c.backbone.embedding_size = b.positive("embedding_size", 64);
  c.backbone.depths = b.need<std::vector<int>>("depths");
  c.backbone.hidden_sizes = b.need<std::vector<int>>("hidden_sizes");
  c.backbone.out_indices = b.get<std::vector<int>>("out_indices", {2, 3, 4});
  if (c.backbone.depths.size() != c.backbone.hidden_sizes.size() || c.backbone.depths.empty())
    b.fail("depths", "and hidden_sizes must have the same non-zero length");
  for (int d : c.backbone.depths)
    if (d <= 0) b.fail("depths", "must be positive");
  if (c.backbone.out_indices.size() != c.encoder_in_channels.size())
    b.fail("out_indices", "must have one entry per encoder input");
  for (size_t i = 0; i < c.backbone.out_indices.size(); ++i) {
    int s = c.backbone.out_indices[i];
    if (s < 1 || s > static_cast<int>(c.backbone.hidden_sizes.size()))
      b.fail("out_indices", "entry " + std::to_string(s) + " is out of range");
    if (c.backbone.hidden_sizes[s - 1] != c.encoder_in_channels[i])
      r.fail("encoder_in_channels", "entry " + std::to_string(i) + " (" + std::to_string(c.encoder_in_channels[i]) +
                                        ") does not match backbone hidden_sizes of stage " + std::to_string(s));
    // Stage s (1-based) has stride 4 * 2^(s-1) for the basic ResNet-vd: stem /4, then /2 per later stage.
    if ((4 << (s - 1)) != c.feat_strides[i])
      r.fail("feat_strides", "entry " + std::to_string(c.feat_strides[i]) + " does not match the backbone stage stride");
  }

  // Labels: id2label keys are strings "0".."N-1".
  if (!j.contains("id2label") || !j.at("id2label").is_object()) r.fail("id2label", "is missing");
  const auto& labels = j.at("id2label");
  int n = static_cast<int>(labels.size());
  if (j.contains("num_labels") && j.at("num_labels").get<int>() != n)
    r.fail("num_labels", std::to_string(j.at("num_labels").get<int>()) + " disagrees with id2label's " + std::to_string(n) + " entries");
  c.num_labels = n;
  if (n <= 0) r.fail("id2label", "is empty");
  c.id2label.resize(n);
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    int id = -1;
    try {
      id = std::stoi(it.key());
    } catch (...) {
    }
    if (id < 0 || id >= n) r.fail("id2label", "key '" + it.key() + "' is not a label id in 0.." + std::to_string(n - 1));
    if (!it.value().is_string()) r.fail("id2label", "entry '" + it.key() + "' is not a string");
    c.id2label[id] = it.value().get<std::string>();
  }
  if (c.num_queries > 8400) r.fail("num_queries", "is too large");
  return c;
}

}  // namespace detforge::rt_detr_v2
