#include "families/rt_detr_v2/preprocess.h"

#include <cmath>
#include <string>

#include "io/image_resize.h"

namespace detforge::rt_detr_v2 {
namespace {

const char* kWhere = "preprocessor_config.json: ";

[[noreturn]] void bad(const std::string& msg) { throw Error(kWhere + msg); }

bool get_bool(const nlohmann::json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) bad(std::string("field '") + key + "' must be true or false, got " + j[key].dump());
  return j[key].get<bool>();
}

double get_number(const nlohmann::json& j, const char* key, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) bad(std::string("field '") + key + "' must be a number, got " + j[key].dump());
  return j[key].get<double>();
}

std::array<double, 3> get_triple(const nlohmann::json& j, const char* key, std::array<double, 3> def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  const auto& v = j[key];
  if (v.is_number()) return {v.get<double>(), v.get<double>(), v.get<double>()};  // scalar: all channels
  if (!v.is_array() || v.size() != 3 || !v[0].is_number() || !v[1].is_number() || !v[2].is_number())
    bad(std::string("field '") + key + "' must be 3 numbers, got " + v.dump());
  return {v[0].get<double>(), v[1].get<double>(), v[2].get<double>()};
}

}  // namespace

PreprocessConfig PreprocessConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) bad("not a JSON object");
  PreprocessConfig c;
  c.do_resize = get_bool(j, "do_resize", true);
  c.do_rescale = get_bool(j, "do_rescale", true);
  c.do_normalize = get_bool(j, "do_normalize", false);
  c.rescale_factor = get_number(j, "rescale_factor", 1.0 / 255.0);
  c.mean = get_triple(j, "image_mean", c.mean);
  c.std = get_triple(j, "image_std", c.std);
  for (double s : c.std)
    if (!(s != 0.0) || !std::isfinite(s)) bad("field 'image_std' has a zero or non-finite value");

  if (j.contains("resample") && !j["resample"].is_null()) {
    if (!j["resample"].is_number_integer()) bad("field 'resample' must be an integer, got " + j["resample"].dump());
    c.resample = j["resample"].get<int>();
  }
  if (c.resample != 2)
    bad("field 'resample' is " + std::to_string(c.resample) + "; only 2 (PIL BILINEAR) is supported");

  if (!j.contains("size") || !j["size"].is_object()) bad("field 'size' is missing (need {\"height\", \"width\"})");
  const auto& s = j["size"];
  if (!s.contains("height") || !s.contains("width"))
    bad("field 'size' is " + s.dump() + "; only {\"height\", \"width\"} is supported");
  if (!s["height"].is_number_integer() || !s["width"].is_number_integer())
    bad("field 'size' must hold integer height and width, got " + s.dump());
  c.height = s["height"].get<int>();
  c.width = s["width"].get<int>();
  if (c.height < 1 || c.width < 1 || c.height > 8192 || c.width > 8192)
    bad("field 'size' " + s.dump() + " is out of range (1..8192)");

  // Padding to a larger pad_size would add zero rows/columns we do not produce.
  if (get_bool(j, "do_pad", false) && j.contains("pad_size") && j["pad_size"].is_object()) {
    const auto& p = j["pad_size"];
    if (p.value("height", c.height) != c.height || p.value("width", c.width) != c.width)
      bad("field 'pad_size' " + p.dump() + " differs from 'size'; padding is not supported");
  }
  return c;
}

ImageU8 resize_for_model(const ImageU8& img, const PreprocessConfig& cfg) {
  if (cfg.do_resize) return resize_bilinear_pil(img, cfg.width, cfg.height);
  if (img.width != cfg.width || img.height != cfg.height)
    throw Error("image is " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                " but the model takes " + std::to_string(cfg.width) + "x" + std::to_string(cfg.height) +
                " and its preprocessor does not resize");
  return img;
}

void preprocess_image(const ImageU8& img, const PreprocessConfig& cfg, float* out) {
  const ImageU8 r = resize_for_model(img, cfg);
  // A table per channel: the float value of each of the 256 input bytes, computed exactly as
  // numpy does it: rescale in float64 then cast to float32; normalize in float32 with float32
  // mean and std (image_transforms.normalize casts them to the image's dtype).
  float table[3][256];
  for (int c = 0; c < 3; ++c) {
    const float mean = float(cfg.mean[c]), stdv = float(cfg.std[c]);
    for (int v = 0; v < 256; ++v) {
      float x = cfg.do_rescale ? float(double(v) * cfg.rescale_factor) : float(v);
      if (cfg.do_normalize) x = (x - mean) / stdv;
      table[c][v] = x;
    }
  }
  const size_t n = size_t(r.width) * r.height;
  const uint8_t* p = r.rgb.data();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    out[3 * i] = table[0][p[3 * i]];
    out[3 * i + 1] = table[1][p[3 * i + 1]];
    out[3 * i + 2] = table[2][p[3 * i + 2]];
  }
}

ImageInputSpec image_input_spec(const PreprocessConfig& cfg) {
  ImageInputSpec s;
  s.height = cfg.height;
  s.width = cfg.width;
  s.do_resize = cfg.do_resize;
  s.do_rescale = cfg.do_rescale;
  s.rescale_factor = cfg.rescale_factor;
  s.do_normalize = cfg.do_normalize;
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = cfg.mean[c];
    s.std[c] = cfg.std[c];
  }
  return s;
}

}  // namespace detforge::rt_detr_v2
