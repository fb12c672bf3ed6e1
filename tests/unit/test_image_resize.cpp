// detforge's decode and PIL-exact resize against Pillow's own output
// (tests/golden/resize/coco_val80_640.json, made by tests/reference/make_resize_checksums.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "detforge/image.h"
#include "io/image_resize.h"
#include "test_paths.h"

namespace {

using detforge::ImageU8;

nlohmann::json golden() {
  std::ifstream f(detforge::test::source_dir() / "tests/golden/resize/coco_val80_640.json");
  EXPECT_TRUE(f.good()) << "golden JSON missing";
  return nlohmann::json::parse(f);
}

std::string fnv(const ImageU8& img) { return detforge::hex64(detforge::fnv1a64(img.rgb.data(), img.rgb.size())); }

TEST(ImageResize, CocoVal80DecodeAndResizeMatchPil) {
  DETFORGE_REQUIRE_SHARED();
  const auto g = golden();
  const auto dir = detforge::test::shared_dir() / "data/coco_val80/images";
  int checked = 0, decode_bad = 0, resize_bad = 0;
  for (const auto& [name, ref] : g["images"].items()) {
    const ImageU8 img = detforge::load_image((dir / name).string());
    EXPECT_EQ(img.width, ref["width"].get<int>()) << name;
    EXPECT_EQ(img.height, ref["height"].get<int>()) << name;
    if (fnv(img) != ref["decode_fnv"]) {
      ++decode_bad;
      ADD_FAILURE() << name << ": decoded RGB differs from PIL's";
    }
    const ImageU8 r = detforge::resize_bilinear_pil(img, 640, 640);
    if (fnv(r) != ref["resize_fnv"]) {
      ++resize_bad;
      ADD_FAILURE() << name << ": 640x640 resize differs from PIL's";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 80);
  EXPECT_EQ(decode_bad, 0);
  EXPECT_EQ(resize_bad, 0);
}

TEST(ImageResize, OddSizesUpAndDownMatchPil) {
  DETFORGE_REQUIRE_SHARED();
  const auto g = golden();
  const auto dir = detforge::test::shared_dir() / "data/coco_val80/images";
  ASSERT_FALSE(g["odd_sizes"].empty());
  for (const auto& [name, sizes] : g["odd_sizes"].items()) {
    const ImageU8 img = detforge::load_image((dir / name).string());
    for (const auto& [wh, ref] : sizes.items()) {
      const int w = std::stoi(wh.substr(0, wh.find('x')));
      const int h = std::stoi(wh.substr(wh.find('x') + 1));
      EXPECT_EQ(fnv(detforge::resize_bilinear_pil(img, w, h)), ref.get<std::string>()) << name << " -> " << wh;
    }
  }
}

TEST(ImageResize, SameSizeIsIdentityAndConstantStaysConstant) {
  ImageU8 img{5, 4, std::vector<uint8_t>(5 * 4 * 3)};
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t(i * 37);
  EXPECT_EQ(detforge::resize_bilinear_pil(img, 5, 4).rgb, img.rgb);
  ImageU8 flat{9, 7, std::vector<uint8_t>(9 * 7 * 3, 200)};
  for (auto [w, h] : {std::pair{3, 2}, {20, 31}, {9, 1}, {1, 7}}) {
    const ImageU8 r = detforge::resize_bilinear_pil(flat, w, h);
    ASSERT_EQ(r.rgb.size(), size_t(w) * h * 3);
    for (uint8_t v : r.rgb) ASSERT_EQ(v, 200);
  }
}

TEST(ImageResize, RejectsBadSizes) {
  ImageU8 img{2, 2, std::vector<uint8_t>(12, 1)};
  EXPECT_THROW(detforge::resize_bilinear_pil(img, 0, 5), detforge::Error);
  EXPECT_THROW(detforge::resize_bilinear_pil(ImageU8{}, 5, 5), detforge::Error);
}

}  // namespace
