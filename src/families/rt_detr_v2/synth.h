// Synthetic RT-DETR v2 checkpoints: a Hugging Face folder (config.json, preprocessor_config.json,
// model.safetensors) with exactly the tensor names and shapes transformers'
// RTDetrV2ForObjectDetection saves, filled with seeded random weights of sane scale. Used to
// test building and running without downloading a checkpoint, and for any label count.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace detforge::rt_detr_v2 {

// How a synthetic tensor is filled (see synth.cpp for the distributions).
enum class SynthInit {
  kFanIn,          // conv / linear weight: N(0, 1/fan_in)
  kBias,           // linear bias: N(0, 0.02^2)
  kBnWeight,       // U(0.8, 1.2)
  kBnBias,         // N(0, 0.05^2)
  kBnMean,         // N(0, 0.1^2)
  kBnVar,          // U(0.5, 1.5): positive, around 1
  kLnWeight,       // 1 + N(0, 0.05^2)
  kLnBias,         // N(0, 0.02^2)
  kCounter,        // num_batches_tracked (I64 0)
  kPointsScale,    // n_points_scale: 1/points, as the converter writes it
  kPriorBias,      // class heads: -log((1-0.01)/0.01), transformers' focal-loss prior
  kSmallWeight,    // last box-regression layers, sampling offsets, attention weights: N(0, (0.01/sqrt(fan_in))^2)
  kOffsetsBias,    // sampling_offsets.bias: transformers' radial grid init
  kEmbedding,      // denoising_class_embed: N(0, 1)
  kZero,           // enc_output.0.bias (see synth.cpp)
};

struct SynthTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  SynthInit init = SynthInit::kFanIn;
  int64_t fan_in = 1;
  int64_t heads = 0, levels = 0, points = 0;  // deformable attention geometry (kPointsScale, kOffsetsBias)
  bool is_counter() const { return init == SynthInit::kCounter; }
};

// The full HF config.json of a preset: "r18vd" (PekingU/rtdetr_v2_r18vd's architecture) or
// "tiny" (ResNet-vd with one basic block per stage at widths 32/64/128/256, d_model 128,
// 2 decoder layers, 100 queries). num_labels 80 gives COCO's names, any other count LABEL_<i>.
nlohmann::json synth_config(const std::string& preset, int num_labels = 80,
                            const std::string& torch_dtype = "float32");
nlohmann::json synth_preprocessor_config();

// Every tensor RTDetrV2ForObjectDetection saves for `config` (the HF config.json), with shapes
// derived from its widths, depths and layer counts. Throws detforge::Error for configs it
// cannot describe (bottleneck backbones, learned initial queries, extra feature levels).
std::vector<SynthTensorSpec> rt_detr_v2_tensor_specs(const nlohmann::json& config);

// Seeded weights for every spec: floats stored as `dtype` ("F32" or "F16"), counters as I64.
// Each tensor draws from its own stream keyed by (seed, name), so values do not depend on order.
std::vector<SafetensorsTensor> synth_weights(const nlohmann::json& config, uint64_t seed,
                                             const std::string& dtype);

struct SynthOptions {
  std::string preset = "r18vd";
  uint64_t seed = 0;
  int num_labels = 80;
  std::string dtype = "f32";  // "f32" or "f16"
  bool force = false;         // replace an existing non-empty output folder
};

// Writes the three files into a temporary sibling of `out_dir` and renames it into place.
void write_synth_checkpoint(const std::filesystem::path& out_dir, const SynthOptions& options);

}  // namespace detforge::rt_detr_v2
