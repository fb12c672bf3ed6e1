// RT-DETR input preprocessing, equal to transformers' slow (PIL-backend) RTDetrImageProcessor:
// PIL BILINEAR resize to size (no aspect kept, no padding), float32(float64(u8) * rescale_factor),
// then optionally (x - mean) / std in float32, as image_transforms.normalize computes it.
#pragma once
#include <array>
#include <nlohmann/json.hpp>

#include "backends/image_input_spec.h"
#include "detforge/types.h"

namespace detforge::rt_detr_v2 {

struct PreprocessConfig {
  bool do_resize = true;
  int height = 640;
  int width = 640;
  int resample = 2;  // PIL BILINEAR, the only one supported
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = false;
  std::array<double, 3> mean{0.485, 0.456, 0.406};
  std::array<double, 3> std{0.229, 0.224, 0.225};

  // From a Hugging Face preprocessor_config.json. Missing fields take RTDetrImageProcessor's
  // defaults, except size (required: {"height", "width"}). Throws detforge::Error naming the
  // field for resample != 2, a missing or unsupported size, or values of the wrong type.
  static PreprocessConfig from_json(const nlohmann::json& j);
};

// The uint8 image the model sees: `img` resized to width x height with PIL's BILINEAR when
// do_resize, else `img` itself (which then must already have that size).
ImageU8 resize_for_model(const ImageU8& img, const PreprocessConfig& cfg);

// Writes cfg.height * cfg.width * 3 floats, NHWC [H, W, 3]: the same values as transformers'
// pixel_values [3, H, W], transposed.
void preprocess_image(const ImageU8& img, const PreprocessConfig& cfg, float* out_nhwc);

// The same preprocessing as a backend-neutral spec, for backends that preprocess on their own
// device (CUDA's run_images); they give the bits preprocess_image gives.
ImageInputSpec image_input_spec(const PreprocessConfig& cfg);

}  // namespace detforge::rt_detr_v2
