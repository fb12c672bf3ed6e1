// The demo scene generator: deterministic per (seed, index), boxes inside the image and
// consistent with the pixels (the shape's colour differs from the background around it).
#include <gtest/gtest.h>

#include "core/checksum.h"
#include "demo/scenes.h"

namespace {

using detforge::demo::make_demo_scenes;

uint64_t fnv(const detforge::ImageU8& img) { return detforge::fnv1a64(img.rgb.data(), img.rgb.size()); }

TEST(DemoScenes, DeterministicPerSeedAndIndex) {
  const auto a = make_demo_scenes(6, 1234);
  const auto b = make_demo_scenes(6, 1234);
  const auto prefix = make_demo_scenes(3, 1234);  // scene i does not depend on count
  const auto other = make_demo_scenes(6, 1235);
  ASSERT_EQ(a.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(fnv(a[i].image), fnv(b[i].image)) << i;
    ASSERT_EQ(a[i].truth.size(), b[i].truth.size());
    for (size_t k = 0; k < a[i].truth.size(); ++k) {
      EXPECT_EQ(a[i].truth[k].label, b[i].truth[k].label);
      EXPECT_EQ(a[i].truth[k].box.x0, b[i].truth[k].box.x0);
      EXPECT_EQ(a[i].truth[k].box.y1, b[i].truth[k].box.y1);
    }
    if (i < prefix.size()) EXPECT_EQ(fnv(a[i].image), fnv(prefix[i].image)) << i;
    EXPECT_NE(fnv(a[i].image), fnv(other[i].image)) << i;
    if (i > 0) EXPECT_NE(fnv(a[i].image), fnv(a[i - 1].image)) << i;
  }
  EXPECT_TRUE(make_demo_scenes(0, 1).empty());
  EXPECT_THROW(make_demo_scenes(-1, 1), detforge::Error);
}

TEST(DemoScenes, BoxesLieInsideAndLabelsAreShapes) {
  const auto scenes = make_demo_scenes(24, 7);
  std::vector<int> per_class(8, 0);
  for (const auto& s : scenes) {
    ASSERT_EQ(s.image.width, detforge::demo::kSceneWidth);
    ASSERT_EQ(s.image.height, detforge::demo::kSceneHeight);
    ASSERT_EQ(s.image.rgb.size(), size_t(s.image.width) * s.image.height * 3);
    EXPECT_GE(s.truth.size(), 3u);
    EXPECT_LE(s.truth.size(), 7u);
    for (const auto& d : s.truth) {
      ASSERT_GE(d.label, 0);
      ASSERT_LT(d.label, 8);
      ++per_class[size_t(d.label)];
      EXPECT_EQ(d.label_name, detforge::demo::shape_class_names()[size_t(d.label)]);
      EXPECT_GE(d.box.x0, 0.f);
      EXPECT_GE(d.box.y0, 0.f);
      EXPECT_LE(d.box.x1, float(s.image.width));
      EXPECT_LE(d.box.y1, float(s.image.height));
      EXPECT_GT(d.box.x1 - d.box.x0, 10.f);
      EXPECT_GT(d.box.y1 - d.box.y0, 10.f);
    }
  }
  for (int c = 0; c < 8; ++c) EXPECT_GT(per_class[size_t(c)], 0) << "class " << c << " never drawn";
}

TEST(DemoScenes, OtherSizes) {
  for (auto [w, h] : {std::pair{640, 480}, {96, 200}}) {
    for (const auto& s : make_demo_scenes(4, 3, w, h)) {
      ASSERT_EQ(s.image.width, w);
      ASSERT_EQ(s.image.height, h);
      EXPECT_FALSE(s.truth.empty());
      for (const auto& d : s.truth) {
        EXPECT_GE(d.box.x0, 0.f);
        EXPECT_GE(d.box.y0, 0.f);
        EXPECT_LE(d.box.x1, float(w));
        EXPECT_LE(d.box.y1, float(h));
      }
    }
  }
  EXPECT_THROW(make_demo_scenes(1, 1, 10, 640), detforge::Error);
}

TEST(DemoScenes, ShapesArePainted) {
  // The centre pixel of a filled shape (not a ring) differs from the pixel just outside its box's
  // centre row, which it would not if the shape were missing.
  int checked = 0, differ = 0;
  for (const auto& s : make_demo_scenes(8, 99)) {
    for (const auto& d : s.truth) {
      if (d.label == 6) continue;
      const int cx = int((d.box.x0 + d.box.x1) / 2), cy = int((d.box.y0 + d.box.y1) / 2);
      const int ox = int(d.box.x0) - 3;
      if (ox < 0) continue;
      const uint8_t* in = &s.image.rgb[(size_t(cy) * s.image.width + cx) * 3];
      const uint8_t* out = &s.image.rgb[(size_t(cy) * s.image.width + ox) * 3];
      ++checked;
      differ += std::abs(in[0] - out[0]) + std::abs(in[1] - out[1]) + std::abs(in[2] - out[2]) > 40;
    }
  }
  ASSERT_GT(checked, 10);
  EXPECT_GE(differ * 10, checked * 8);  // >= 80%: colours are picked to contrast with the background
}

}  // namespace
