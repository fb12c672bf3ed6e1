// draw_detections: outlines land on the box edges in one colour per label, the inside of a
// large box stays untouched, the source image is not modified, and boxes partly or wholly
// outside the image (or non-finite) are clipped instead of crashing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "detforge/image.h"

namespace {

detforge::ImageU8 grey(int w, int h) { return {w, h, std::vector<uint8_t>(size_t(w) * h * 3, 128)}; }

const uint8_t* px(const detforge::ImageU8& img, int x, int y) { return &img.rgb[(size_t(y) * img.width + x) * 3]; }

TEST(ImageDraw, OutlinesAndTags) {
  const auto img = grey(200, 150);
  detforge::Detections dets;
  detforge::Detection a;
  a.box = {40, 50, 160, 140};
  a.score = 0.93f;
  a.label = 2;
  a.label_name = "triangle";
  detforge::Detection b = a;
  b.box = {10, 10, 30, 30};
  b.label = 5;
  dets.items = {a, b};
  const auto out = detforge::draw_detections(img, dets);
  EXPECT_EQ(img.rgb, grey(200, 150).rgb);  // input untouched
  ASSERT_EQ(out.width, 200);
  const uint8_t* left = px(out, 40, 100);
  const uint8_t* right = px(out, 159, 100);
  const uint8_t* bottom = px(out, 100, 139);
  EXPECT_NE(left[0] * 65536 + left[1] * 256 + left[2], 128 * 65793);
  EXPECT_TRUE(std::equal(left, left + 3, right));
  EXPECT_TRUE(std::equal(left, left + 3, bottom));
  const uint8_t* inside = px(out, 100, 100);
  EXPECT_EQ(inside[0], 128);
  EXPECT_EQ(inside[1], 128);
  const uint8_t* other = px(out, 10, 20);  // label 5 has another colour
  EXPECT_FALSE(std::equal(left, left + 3, other));
  // The tag above box a holds text: more than one colour in its row band.
  int changed = 0;
  for (int x = 40; x < 120; ++x) changed += px(out, x, 45)[0] != 128;
  EXPECT_GT(changed, 10);
}

TEST(ImageDraw, ClipsBoxesOutsideTheImage) {
  const auto img = grey(50, 40);
  detforge::Detections dets;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (detforge::Box box : {detforge::Box{-100, -100, 500, 500}, detforge::Box{60, 60, 90, 90},
                            detforge::Box{nan, 0, inf, -inf}, detforge::Box{30, 30, 10, 10}}) {
    detforge::Detection d;
    d.box = box;
    d.score = 0.5f;
    d.label = -3;
    dets.items.push_back(d);
  }
  const auto out = detforge::draw_detections(img, dets);
  EXPECT_EQ(out.rgb.size(), img.rgb.size());
}

}  // namespace
