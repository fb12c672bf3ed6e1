#include "eval/nonfinite_scan.h"

#include <cmath>

namespace detforge::eval {

NonFiniteCounts& NonFiniteCounts::operator+=(const NonFiniteCounts& o) {
  values += o.values;
  nan += o.nan;
  pos_inf += o.pos_inf;
  neg_inf += o.neg_inf;
  return *this;
}

NonFiniteCounts count_nonfinite(const float* data, size_t n) {
  NonFiniteCounts c;
  c.values = static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    float v = data[i];
    if (std::isfinite(v)) continue;
    if (std::isnan(v)) ++c.nan;
    else if (v > 0) ++c.pos_inf;
    else ++c.neg_inf;
  }
  return c;
}

NonFiniteScanner::NonFiniteScanner() {
  s_.outputs = {{"logits", {}, 0, ""}, {"boxes", {}, 0, ""}};
}

bool NonFiniteScanner::add(const std::string& image_name, const RawOutputs& out) {
  const std::vector<float>* data[2] = {&out.logits, &out.boxes};
  bool any = false;
  for (int i = 0; i < 2; ++i) {
    NonFiniteCounts c = count_nonfinite(data[i]->data(), data[i]->size());
    OutputScan& o = s_.outputs[i];
    o.counts += c;
    if (c.bad()) {
      any = true;
      ++o.images_with_bad;
      if (o.first_bad_image.empty()) o.first_bad_image = image_name;
    }
  }
  ++s_.images;
  if (any) {
    if (s_.images_with_bad == 0) {
      s_.first_bad_image = image_name;
      s_.first_nonfinite_op = out.first_nonfinite_op;
    }
    ++s_.images_with_bad;
  }
  return !any;
}

namespace {

// splitmix64: a seeded, platform-independent stream (std::mt19937 distributions are not
// specified bit-for-bit across standard libraries).
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

ImageU8 filled(int w, int h, uint8_t v) {
  ImageU8 img;
  img.width = w;
  img.height = h;
  img.rgb.assign(static_cast<size_t>(w) * h * 3, v);
  return img;
}

ImageU8 saturated_noise(int w, int h, SplitMix& rng) {
  ImageU8 img = filled(w, h, 0);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = (rng.next() >> 63) ? 255 : 0;
  return img;
}

}  // namespace

std::vector<std::pair<std::string, ImageU8>> stress_images(uint64_t seed) {
  SplitMix rng{seed};
  std::vector<std::pair<std::string, ImageU8>> v;
  v.emplace_back("stress:black_640x640", filled(640, 640, 0));
  v.emplace_back("stress:white_640x640", filled(640, 640, 255));
  v.emplace_back("stress:saturated_noise_640x640", saturated_noise(640, 640, rng));
  v.emplace_back("stress:noise_1x4000", saturated_noise(1, 4000, rng));
  v.emplace_back("stress:noise_4000x1", saturated_noise(4000, 1, rng));
  return v;
}

}  // namespace detforge::eval
