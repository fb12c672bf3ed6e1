// The rt_detr_v2 family's view of a Hugging Face config.json: only the fields inference needs,
// each checked. Anything this engine cannot run is refused with a message naming field and value.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace detforge::rt_detr_v2 {

struct BackboneConfig {
  int embedding_size = 64;
  std::vector<int> depths;        // blocks per stage
  std::vector<int> hidden_sizes;  // channels per stage
  std::vector<int> out_indices;   // stages whose output feeds the encoder (1-based as HF: 2,3,4)
};

struct Config {
  BackboneConfig backbone;
  int d_model = 256;
  int encoder_hidden_dim = 256;
  std::vector<int> encoder_in_channels;
  std::vector<int> feat_strides;
  std::vector<int> encode_proj_layers;
  int encoder_layers = 1;
  int encoder_attention_heads = 8;
  int encoder_ffn_dim = 1024;
  std::string encoder_activation = "gelu";
  std::string activation = "silu";  // CCFM activation
  float hidden_expansion = 0.5f;
  float positional_encoding_temperature = 10000.f;
  int num_feature_levels = 3;
  std::vector<int> decoder_in_channels;
  int decoder_layers = 3;
  int decoder_attention_heads = 8;
  int decoder_ffn_dim = 1024;
  std::string decoder_activation = "relu";
  int decoder_n_points = 4;
  int decoder_n_levels = 3;
  float decoder_offset_scale = 0.5f;
  int num_queries = 300;
  int num_labels = 80;
  float batch_norm_eps = 1e-5f;
  float layer_norm_eps = 1e-5f;
  std::vector<std::string> id2label;  // by label id

  // Parses and checks config.json. Throws detforge::Error like
  // "config.json: decoder_method 'discrete' is not supported (only 'default')".
  static Config from_json(const nlohmann::json& j, const std::string& where = "config.json");
};

}  // namespace detforge::rt_detr_v2
