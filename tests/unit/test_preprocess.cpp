// RT-DETR preprocessing against transformers' RTDetrImageProcessor(Pil) pixel_values
// (checksums from tests/reference/make_resize_checksums.py), and preprocessor_config.json parsing.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "detforge/image.h"
#include "families/rt_detr_v2/preprocess.h"
#include "test_paths.h"

using detforge::rt_detr_v2::PreprocessConfig;

namespace {

std::string error_of(const nlohmann::json& j) {
  try {
    PreprocessConfig::from_json(j);
  } catch (const detforge::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Preprocess, PixelValuesMatchTransformers) {
  DETFORGE_REQUIRE_SHARED();
  std::ifstream f(detforge::test::source_dir() / "tests/golden/resize/coco_val80_640.json");
  ASSERT_TRUE(f.good());
  const auto g = nlohmann::json::parse(f);
  if (g["pixel_values"].is_null()) GTEST_SKIP() << "golden JSON was made without transformers";
  const auto dir = detforge::test::shared_dir() / "data/coco_val80/images";
  int checked = 0;
  for (const auto& [variant, entry] : g["pixel_values"]["configs"].items()) {
    const PreprocessConfig cfg = PreprocessConfig::from_json(entry["config"]);
    for (const auto& [name, ref] : entry["images"].items()) {
      const detforge::ImageU8 img = detforge::load_image((dir / name).string());
      std::vector<float> out(size_t(cfg.height) * cfg.width * 3, -99.f);
      detforge::rt_detr_v2::preprocess_image(img, cfg, out.data());
      for (size_t i = 0; i < ref["first"].size(); ++i)
        EXPECT_EQ(out[i], ref["first"][i].get<float>()) << variant << " " << name << " value " << i;
      EXPECT_EQ(detforge::hex64(detforge::fnv1a64(out.data(), out.size() * sizeof(float))), ref["fnv"].get<std::string>())
          << variant << " " << name;
      ++checked;
    }
  }
  EXPECT_GE(checked, 6);
}

TEST(Preprocess, ReadsTheShapesCheckpointConfig) {
  DETFORGE_REQUIRE_SHARED();
  std::ifstream f(detforge::test::shared_dir() / "models/rtdetr_v2_r18vd_shapes/preprocessor_config.json");
  const PreprocessConfig c = PreprocessConfig::from_json(nlohmann::json::parse(f));
  EXPECT_TRUE(c.do_resize);
  EXPECT_EQ(c.height, 640);
  EXPECT_EQ(c.width, 640);
  EXPECT_TRUE(c.do_rescale);
  EXPECT_FALSE(c.do_normalize);
  EXPECT_DOUBLE_EQ(c.rescale_factor, 0.00392156862745098);
}

TEST(Preprocess, RejectsUnsupportedConfigsNamingTheField) {
  const nlohmann::json ok = {{"size", {{"height", 64}, {"width", 32}}}, {"resample", 2}};
  EXPECT_EQ(error_of(ok), "");
  auto j = ok;
  j["resample"] = 3;
  EXPECT_NE(error_of(j).find("'resample'"), std::string::npos) << error_of(j);
  j = ok;
  j.erase("size");
  EXPECT_NE(error_of(j).find("'size'"), std::string::npos) << error_of(j);
  j = ok;
  j["size"] = {{"shortest_edge", 800}};
  EXPECT_NE(error_of(j).find("'size'"), std::string::npos) << error_of(j);
  j = ok;
  j["image_std"] = {0.2, 0.0, 0.2};
  EXPECT_NE(error_of(j).find("'image_std'"), std::string::npos) << error_of(j);
  j = ok;
  j["do_rescale"] = "yes";
  EXPECT_NE(error_of(j).find("'do_rescale'"), std::string::npos) << error_of(j);
  for (const auto& bad : {j, ok}) EXPECT_EQ(error_of(bad).find('\n'), std::string::npos);
}

TEST(Preprocess, NoResizeNeedsTheModelSize) {
  PreprocessConfig c;
  c.do_resize = false;
  c.height = 2;
  c.width = 2;
  detforge::ImageU8 img{2, 2, {0, 51, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  std::vector<float> out(12);
  detforge::rt_detr_v2::preprocess_image(img, c, out.data());
  EXPECT_EQ(out[1], float(51.0 / 255.0));
  EXPECT_EQ(out[2], 1.0f);
  img.width = 3;
  img.rgb.resize(18);
  EXPECT_THROW(detforge::rt_detr_v2::preprocess_image(img, c, out.data()), detforge::Error);
}

}  // namespace
