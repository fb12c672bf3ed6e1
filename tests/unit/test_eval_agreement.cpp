// Detection agreement and label mapping on hand-built detections whose answer is known.
#include <gtest/gtest.h>

#include "detforge/types.h"
#include "eval/agreement.h"
#include "eval/label_map.h"

using namespace detforge;
using namespace detforge::eval;

namespace {

Detection det(float x0, float y0, float x1, float y1, float score, int label) {
  Detection d;
  d.box = {x0, y0, x1, y1};
  d.score = score;
  d.label = label;
  return d;
}

Detections dets(std::vector<Detection> v) {
  Detections d;
  d.image_width = d.image_height = 100;
  d.items = std::move(v);
  return d;
}

}  // namespace

TEST(EvalAgreement, BoxIou) {
  EXPECT_DOUBLE_EQ(box_iou({0, 0, 10, 10}, {0, 0, 10, 10}), 1.0);
  EXPECT_DOUBLE_EQ(box_iou({0, 0, 10, 10}, {5, 0, 15, 10}), 50.0 / 150.0);
  EXPECT_DOUBLE_EQ(box_iou({0, 0, 10, 10}, {10, 0, 20, 10}), 0.0);
  EXPECT_DOUBLE_EQ(box_iou({0, 0, 0, 0}, {0, 0, 0, 0}), 0.0);  // empty boxes: 0, not NaN
}

TEST(EvalAgreement, IdenticalDetectionsAgreeFully) {
  Detections a = dets({det(0, 0, 10, 10, 0.9f, 1), det(20, 20, 40, 40, 0.6f, 2)});
  AgreementAccumulator acc;
  EXPECT_EQ(acc.add(a, a), 2);
  AgreementStats s = acc.stats();
  EXPECT_DOUBLE_EQ(s.precision, 1.0);
  EXPECT_DOUBLE_EQ(s.recall, 1.0);
  EXPECT_EQ(s.moved, 0);
  EXPECT_DOUBLE_EQ(s.max_abs_dscore, 0.0);
  EXPECT_DOUBLE_EQ(s.mean_iou, 1.0);
}

TEST(EvalAgreement, CountsExtraMissedMovedAndScoreChange) {
  // Reference: A (label 1), B (label 2), C (label 1).
  Detections ref = dets({det(0, 0, 10, 10, 0.9f, 1), det(50, 50, 70, 70, 0.8f, 2), det(80, 0, 100, 20, 0.7f, 1)});
  // Candidate: A exact (score -0.1), B shifted by 2 px in x (IoU 18*20/(2*400-360) = 0.818:
  // matched but moved), C with the wrong label (no match), an extra box nowhere, and a box
  // under the threshold that must be ignored.
  Detections cand = dets({det(0, 0, 10, 10, 0.8f, 1), det(52, 50, 72, 70, 0.75f, 2), det(80, 0, 100, 20, 0.7f, 3),
                          det(30, 30, 35, 35, 0.5f, 1), det(80, 0, 100, 20, 0.2f, 1)});
  AgreementAccumulator acc(AgreementOptions{0.3f, 0.5, 0.95});
  EXPECT_EQ(acc.add(cand, ref), 2);
  AgreementStats s = acc.stats();
  EXPECT_EQ(s.candidates, 4);
  EXPECT_EQ(s.references, 3);
  EXPECT_EQ(s.matched, 2);
  EXPECT_DOUBLE_EQ(s.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.recall, 2.0 / 3.0);
  EXPECT_EQ(s.moved, 1);
  EXPECT_DOUBLE_EQ(s.moved_share, 0.5);
  EXPECT_NEAR(s.max_abs_dscore, 0.1, 1e-6);
  EXPECT_NEAR(s.mean_iou, (1.0 + 360.0 / 440.0) / 2, 1e-12);
}

TEST(EvalAgreement, GreedyByCandidateScoreTakesBestIou) {
  // Two references of one label; the higher-scored candidate overlaps both and takes the better
  // one (IoU 1), leaving the other for the second candidate.
  Detections ref = dets({det(0, 0, 10, 10, 0.9f, 0), det(4, 0, 14, 10, 0.9f, 0)});
  Detections cand = dets({det(3, 0, 13, 10, 0.5f, 0), det(4, 0, 14, 10, 0.6f, 0)});
  AgreementAccumulator acc;
  acc.add(cand, ref);
  AgreementStats s = acc.stats();
  EXPECT_EQ(s.matched, 2);  // 0.6 takes ref[1] (IoU 1), 0.5 takes ref[0] (IoU 70/130 = 0.54)
  EXPECT_EQ(s.moved, 1);
}

TEST(EvalAgreement, BelowMatchIouIsNotAMatch) {
  Detections ref = dets({det(0, 0, 10, 10, 0.9f, 0)});
  Detections cand = dets({det(5, 0, 15, 10, 0.9f, 0)});  // IoU 1/3
  AgreementAccumulator acc;
  EXPECT_EQ(acc.add(cand, ref), 0);
  EXPECT_DOUBLE_EQ(acc.stats().precision, 0.0);
  EXPECT_DOUBLE_EQ(acc.stats().recall, 0.0);
}

TEST(EvalAgreement, EmptySidesAreVacuouslyInAgreement) {
  AgreementAccumulator acc;
  acc.add(dets({}), dets({}));
  EXPECT_DOUBLE_EQ(acc.stats().precision, 1.0);
  EXPECT_DOUBLE_EQ(acc.stats().recall, 1.0);
  EXPECT_EQ(acc.stats().images, 1);
}

TEST(EvalLabelMap, MapsByNameIgnoringCase) {
  CocoDataset ds = CocoDataset::parse(R"({"images":[],"annotations":[],
      "categories":[{"id":1,"name":"person"},{"id":3,"name":"Car"},{"id":90,"name":"toothbrush"}]})", "ds");
  LabelMap m = map_labels_by_name({"car", "person", "LABEL_2"}, ds);
  EXPECT_EQ(m.category(0), 3);
  EXPECT_EQ(m.category(1), 1);
  EXPECT_EQ(m.category(2), -1);
  EXPECT_EQ(m.category(7), -1);
  ASSERT_EQ(m.unmatched.size(), 1u);
  EXPECT_EQ(m.unmatched[0], "LABEL_2");

  std::vector<CocoResult> out;
  Detections d = dets({det(1, 2, 11, 22, 0.9f, 0), det(0, 0, 5, 5, 0.8f, 2), det(0, 0, 5, 5, 0.7f, 1),
                       det(0, 0, 5, 5, 0.6f, 1)});
  EXPECT_EQ(append_coco_results(d, 42, m, 2, out), 1);  // LABEL_2 dropped, then cut at 2
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].image_id, 42);
  EXPECT_EQ(out[0].category_id, 3);
  EXPECT_DOUBLE_EQ(out[0].bbox[2], 10.0);
  EXPECT_DOUBLE_EQ(out[0].bbox[3], 20.0);
  EXPECT_EQ(out[1].category_id, 1);
}

TEST(EvalLabelMap, NoMatchListsBothSides) {
  CocoDataset ds = CocoDataset::parse(R"({"images":[],"annotations":[],"categories":[{"id":1,"name":"person"}]})", "ds");
  try {
    map_labels_by_name({"circle", "square"}, ds);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("\"circle\""), std::string::npos) << m;
    EXPECT_NE(m.find("\"person\""), std::string::npos) << m;
  }
}
