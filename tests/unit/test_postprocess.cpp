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

}  // namespace
}  // namespace detforge::rt_detr_v2
