// rt_detr_v2::postprocess against the plain algorithm it must equal (transformers' order: sigmoid
// of every score, top-k over queries x classes by score then lower flat index, keep score >
// threshold): the function only looks at logits near or above logit(threshold), and that must
// never change which detections come out, nor their order, at any threshold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "families/rt_detr_v2/postprocess.h"

namespace detforge::rt_detr_v2 {
namespace {

Detections reference(const std::vector<float>& logits, const std::vector<float>& boxes, int nq, int nc,
                     float threshold, int top_k) {
  const int n = nq * nc;
  if (top_k < 0 || top_k > n) top_k = std::min(nq, n);
  std::vector<float> s(n);
  for (int i = 0; i < n; ++i) s[i] = 1.f / (1.f + std::exp(-logits[i]));
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
  Detections out;
  for (int r = 0; r < top_k && s[idx[r]] > threshold; ++r) {
    const int i = idx[r], q = i / nc;
    Detection d;
    d.score = s[i];
    d.label = i % nc;
    d.box = {(boxes[4 * q] - 0.5f * boxes[4 * q + 2]) * 640, (boxes[4 * q + 1] - 0.5f * boxes[4 * q + 3]) * 480,
             (boxes[4 * q] + 0.5f * boxes[4 * q + 2]) * 640, (boxes[4 * q + 1] + 0.5f * boxes[4 * q + 3]) * 480};
    out.items.push_back(d);
  }
  return out;
}

void expect_same(const Detections& got, const Detections& want, const std::string& what) {
  ASSERT_EQ(got.items.size(), want.items.size()) << what;
  for (size_t k = 0; k < want.items.size(); ++k) {
    EXPECT_EQ(got.items[k].label, want.items[k].label) << what << " item " << k;
    EXPECT_EQ(got.items[k].score, want.items[k].score) << what << " item " << k;
    const Box &g = got.items[k].box, &w = want.items[k].box;
    EXPECT_TRUE(g.x0 == w.x0 && g.y0 == w.y0 && g.x1 == w.x1 && g.y1 == w.y1) << what << " item " << k;
  }
}

TEST(Postprocess, EqualsTheFullSortAtEveryThreshold) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(-4.f, 3.f);
  std::uniform_real_distribution<float> ud(0.05f, 0.95f);
  for (int nc : {8, 80}) {
    const int nq = 300;
    std::vector<float> logits(static_cast<size_t>(nq) * nc), boxes(static_cast<size_t>(nq) * 4);
    for (auto& v : logits) v = std::round(nd(rng) * 64.f) / 64.f;  // many exact ties
    for (auto& v : boxes) v = ud(rng);
    logits[5] = std::numeric_limits<float>::infinity();
    logits[6] = -std::numeric_limits<float>::infinity();
    logits[7] = 40.f;  // sigmoid rounds to exactly 1
    const float thresholds[] = {-1.f, 0.f, 1e-30f, 1e-6f, 0.01f, 0.3f, 0.5f, 0.9f, 0.999999f, 1.f, 2.f};
    for (float t : thresholds)
      for (int top_k : {-1, 300, 7, 0}) {
        const std::string what = "nc " + std::to_string(nc) + " threshold " + std::to_string(t) + " top_k " +
                                 std::to_string(top_k);
        const Detections got = postprocess(logits.data(), boxes.data(), nq, nc, 640, 480, t, {}, top_k);
        expect_same(got, reference(logits, boxes, nq, nc, t, top_k), what);
      }
    // A score exactly at the threshold stays out (strict >): the threshold taken from a score.
    const float at = 1.f / (1.f + std::exp(-logits[100]));
    expect_same(postprocess(logits.data(), boxes.data(), nq, nc, 640, 480, at, {}, -1),
                reference(logits, boxes, nq, nc, at, -1), "threshold at a score");
  }
}

TEST(Postprocess, NanLogitsAndNanThresholdKeepNothingThatIsNan) {
  const int nq = 4, nc = 3;
  std::vector<float> logits(nq * nc, -10.f), boxes(nq * 4, 0.25f);
  logits[1] = std::nanf("");
  logits[4] = 3.f;
  logits[8] = 2.f;
  const Detections d = postprocess(logits.data(), boxes.data(), nq, nc, 100, 100, 0.5f, {"a", "b", "c"});
  ASSERT_EQ(d.items.size(), 2u);
  EXPECT_EQ(d.items[0].label, 1);  // flat index 4: query 1, class 1
  EXPECT_EQ(d.items[0].label_name, "b");
  EXPECT_EQ(d.items[1].label, 2);  // flat index 8: query 2, class 2
  EXPECT_TRUE(postprocess(logits.data(), boxes.data(), nq, nc, 100, 100, std::nanf(""), {}).items.empty());
}

// The device's selection as detection_select.h defines it (kernels/detect_select.cu; its GPU
// test holds the kernel to this same definition): logits >= floor, by logit descending, equal
// logits by lower flat index, the first top_k, boxes through box_xyxy.
SelectedDetections device_selection(const std::vector<float>& logits, const std::vector<float>& boxes, int nc,
                                    float floor, int top_k) {
  std::vector<int> idx;
  for (int i = 0; i < static_cast<int>(logits.size()); ++i)
    if (logits[i] >= floor) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (static_cast<int>(idx.size()) > top_k) idx.resize(top_k);
  SelectedDetections s;
  for (int i : idx) {
    const float* b = boxes.data() + 4 * (i / nc);
    const Box x = box_xyxy(b[0], b[1], b[2], b[3], 640, 480);
    s.flat_index.push_back(i);
    s.logit.push_back(logits[i]);
    s.box.insert(s.box.end(), {x.x0, x.y0, x.x1, x.y1});
  }
  return s;
}

TEST(Postprocess, FinalizingTheDeviceSelectionEqualsPostprocess) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(-4.f, 3.f);
  std::uniform_real_distribution<float> ud(0.05f, 0.95f);
  for (int nc : {8, 80}) {
    const int nq = 300;
    std::vector<float> logits(static_cast<size_t>(nq) * nc), boxes(static_cast<size_t>(nq) * 4);
    for (auto& v : logits) v = std::round(nd(rng) * 64.f) / 64.f;
    for (auto& v : boxes) v = ud(rng);
    logits[5] = 40.f;  // sigmoid 1, as +inf: ranked after it by logit, before it by score (index)
    logits[9] = std::numeric_limits<float>::infinity();
    logits[11] = -0.f;
    logits[12] = 0.f;
    logits[13] = std::nanf("");
    for (float t : {-1.f, 0.f, 0.01f, 0.3f, 0.5f, 0.9f, 1.f, std::nanf("")})
      for (int top_k : {300, 7}) {
        const std::string what = "nc " + std::to_string(nc) + " threshold " + std::to_string(t) + " top_k " +
                                 std::to_string(top_k);
        const SelectedDetections sel = device_selection(logits, boxes, nc, logit_floor(t), top_k);
        expect_same(finalize_selected(sel, nc, 640, 480, t, {}),
                    postprocess(logits.data(), boxes.data(), nq, nc, 640, 480, t, {}, top_k), what);
      }
  }
  SelectedDetections bad;
  bad.flat_index = {1, 2};
  bad.logit = {1.f};
  EXPECT_THROW(finalize_selected(bad, 3, 10, 10, 0.5f, {}), Error);
}

TEST(Postprocess, LogitFloorLetsThroughEveryPassingScoreAndIsAFloat) {
  EXPECT_TRUE(std::isnan(logit_floor(1.f)));
  EXPECT_TRUE(std::isnan(logit_floor(std::nanf(""))));
  EXPECT_EQ(logit_floor(0.f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logit_floor(-3.f), -std::numeric_limits<float>::infinity());
  for (float t : {1e-30f, 1e-6f, 0.01f, 0.3f, 0.5f, 0.9f, 0.999f, 0.999999f}) {
    const float f = logit_floor(t);
    ASSERT_TRUE(std::isfinite(f)) << t;
    // The float just below the floor, and the 2000 below that, never score above t.
    float x = f;
    for (int k = 0; k < 2000; ++k) {
      x = std::nextafter(x, -std::numeric_limits<float>::infinity());
      ASSERT_FALSE(1.f / (1.f + std::exp(-x)) > t) << "threshold " << t << " logit " << x;
    }
    // And the floor is below logit(t) by at most the margin.
    const double exact = std::log(static_cast<double>(t) / (1 - static_cast<double>(t)));
    EXPECT_LT(f, exact);
    EXPECT_GT(f, exact - 0.06 - 1e-4 / (static_cast<double>(t) * (1 - t)));
  }
}

}  // namespace
}  // namespace detforge::rt_detr_v2
