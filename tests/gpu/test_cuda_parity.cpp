// The CUDA backend end to end on the r18vd-shaped checkpoint against transformers' goldens
// (tests/golden/shapes_r18vd, CPU fp32, TF32 off): fp32 logits and boxes within 1e-3 query by
// query (matched by encoder token, as tests/e2e/test_parity_transformers.cpp does), fp16 with
// detections agreeing with fp32 and no non-finite value anywhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "detforge/detector.h"
#include "detforge/image.h"
#include "families/rt_detr_v2/bundle_builder.h"
#include "gpu_test_util.h"
#include "r18_bundle.h"
#include "test_paths.h"

namespace fs = std::filesystem;

namespace detforge::test {
namespace {

float iou(const Box& a, const Box& b) {
  const float ix = std::max(0.f, std::min(a.x1, b.x1) - std::max(a.x0, b.x0));
  const float iy = std::max(0.f, std::min(a.y1, b.y1) - std::max(a.y0, b.y0));
  const float u = (a.x1 - a.x0) * (a.y1 - a.y0) + (b.x1 - b.x0) * (b.y1 - b.y0) - ix * iy;
  return u > 0 ? ix * iy / u : 0.f;
}

TEST(CudaParity, R18vdFp32WithinOneThousandthOfTransformersAndFp16Agrees) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  nlohmann::json gold = nlohmann::json::parse(std::ifstream(source_dir() / "tests/golden/shapes_r18vd/goldens.json"));
  DetectorOptions o32;
  o32.backend = "cuda";
  o32.precision = "fp32";
  DetectorOptions o16 = o32;
  o16.precision = "fp16";
  o16.check_finite = true;
  auto d32 = Detector::load(r18_bundle(), o32);
  auto d16 = Detector::load(r18_bundle(), o16);
  const int nc = gold.at("num_labels").get<int>();
  int images = 0, matched16 = 0, total32 = 0, total16 = 0;
  float worst = 0, worst16 = 0;
  for (const auto& im : gold.at("images")) {
    SCOPED_TRACE(im.at("file").get<std::string>());
    auto img = load_image((shared_dir() / "data" / im.at("file").get<std::string>()).string());
    auto raw = d32->run_raw(img);
    auto gidx = im.at("enc_topk_indices").get<std::vector<int>>();
    ASSERT_EQ(raw.query_indices.size(), gidx.size());
    std::map<int, int> ours;
    for (size_t q = 0; q < raw.query_indices.size(); ++q) ours[raw.query_indices[q]] = static_cast<int>(q);
    const auto& gl = im.at("logits");
    const auto& gb = im.at("pred_boxes");
    int agreed = 0, bad = 0;
    for (size_t q = 0; q < gidx.size(); ++q) {
      auto it = ours.find(gidx[q]);
      if (it == ours.end()) continue;
      ++agreed;
      for (int c = 0; c < nc; ++c) {
        const float d = std::fabs(raw.logits[it->second * nc + c] - gl[q][c].get<float>());
        worst = std::max(worst, d);
        bad += d > 1e-3f;
      }
      for (int k = 0; k < 4; ++k) {
        const float d = std::fabs(raw.boxes[it->second * 4 + k] - gb[q][k].get<float>());
        worst = std::max(worst, d);
        bad += d > 1e-3f;
      }
    }
    EXPECT_EQ(bad, 0) << "fp32 values beyond 1e-3; worst |diff| " << worst;
    EXPECT_GE(agreed, static_cast<int>(gidx.size()) - 2);

    auto raw16 = d16->run_raw(img);
    EXPECT_EQ(raw16.first_nonfinite_op, "");
    for (float v : raw16.logits) ASSERT_TRUE(std::isfinite(v));
    for (float v : raw16.boxes) ASSERT_TRUE(std::isfinite(v));
    auto a = d32->detect(img, 0.3f), b = d16->detect(img, 0.3f);
    total32 += static_cast<int>(a.items.size());
    total16 += static_cast<int>(b.items.size());
    // Each fp32 detection pairs with the unused fp16 one of the same label, IoU >= 0.9 and the
    // closest score (a query may repeat a box under another label; duplicates must not cross).
    std::vector<char> used(b.items.size(), 0);
    for (const auto& x : a.items) {
      int best = -1;
      for (size_t k = 0; k < b.items.size(); ++k) {
        const auto& y = b.items[k];
        if (used[k] || x.label != y.label || iou(x.box, y.box) < 0.9f) continue;
        if (best < 0 || std::fabs(y.score - x.score) < std::fabs(b.items[best].score - x.score)) best = static_cast<int>(k);
      }
      if (best < 0) {
        std::cout << "  fp32 detection without fp16 partner: label " << x.label << " score " << x.score << "\n";
        continue;
      }
      used[best] = 1;
      ++matched16;
      const float ds = std::fabs(x.score - b.items[best].score);
      if (ds > 0.05f)
        std::cout << "  fp16 score differs: label " << x.label << " fp32 " << x.score << " fp16 " << b.items[best].score
                  << "\n";
      worst16 = std::max(worst16, ds);
    }
    ++images;
  }
  EXPECT_GE(images, 8);
  std::cout << "[ cuda parity ] fp32 worst |diff| vs transformers " << worst << "; fp16 matched " << matched16
            << " of " << total32 << " fp32 detections (" << total16 << " fp16), worst |dscore| " << worst16 << "\n";
  ASSERT_GT(total32, 0);
  EXPECT_GE(matched16, 0.99 * total32);
  EXPECT_LE(total16, total32 + total32 / 100 + 1);
}

}  // namespace
}  // namespace detforge::test
