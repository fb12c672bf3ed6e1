// detforge's COCO bbox evaluator against pycocotools: every case of tests/golden/eval/cases.json
// (expected values written by tests/reference/pycocotools_expected.py) must match within 1e-6,
// plus hand-built cases whose answer follows from the COCOeval rules.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "detforge/types.h"
#include "eval/coco_dataset.h"
#include "eval/coco_eval.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detforge::eval;

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

fs::path resolve(const std::string& rel) {
  if (rel.rfind("../shared/", 0) == 0) return detforge::test::shared_dir() / rel.substr(10);
  return detforge::test::source_dir() / rel;
}

void check_case(const std::string& name) {
  const fs::path golden = detforge::test::source_dir() / "tests/golden/eval";
  json cases = read_json(golden / "cases.json")["cases"];
  const json* c = nullptr;
  for (const json& x : cases)
    if (x["name"] == name) c = &x;
  ASSERT_NE(c, nullptr) << "case " << name << " is not in cases.json";
  if ((*c).value("needs_shared", false) && !detforge::test::shared_available())
    GTEST_SKIP() << "../shared is absent: case " << name << " needs its data";
  fs::path results = resolve((*c)["results"]);
  fs::path expected = golden / (name + ".expected.json");
  if ((*c).value("optional", false) && !fs::exists(results))
    GTEST_SKIP() << results << " is absent (made by the transformers reference run)";
  ASSERT_TRUE(fs::exists(expected)) << expected << " is absent: run tests/reference/pycocotools_expected.py";

  CocoDataset gt = CocoDataset::load(resolve((*c)["gt"]), "/nonexistent");
  std::vector<int64_t> ids;  // "limit": the first N images in file order, as eval --limit
  for (size_t i = 0; i < gt.images.size() && i < (*c).value("limit", size_t{0}); ++i) ids.push_back(gt.images[i].id);
  CocoEvalResult got = evaluate_coco_bbox(gt, load_coco_results(results), ids);
  json exp = read_json(expected);
  ASSERT_EQ(exp["stats"].size(), 12u);
  if (exp.contains("limit")) EXPECT_EQ(got.num_images, exp["limit"].get<int64_t>());
  for (int i = 0; i < 12; ++i)
    EXPECT_NEAR(got.stats[i], exp["stats"][i].get<double>(), 1e-6) << name << " stat " << kCocoStatNames[i];
  ASSERT_EQ(got.per_class.size(), exp["per_class"].size());
  for (size_t k = 0; k < got.per_class.size(); ++k) {
    const json& e = exp["per_class"][k];
    EXPECT_EQ(got.per_class[k].category_id, e["category_id"].get<int64_t>());
    EXPECT_EQ(got.per_class[k].name, e["name"].get<std::string>());
    EXPECT_NEAR(got.per_class[k].ap50_95, e["ap50_95"].get<double>(), 1e-6) << name << " class " << e["name"];
    EXPECT_NEAR(got.per_class[k].ap50, e["ap50"].get<double>(), 1e-6) << name << " class " << e["name"];
  }
}

CocoDataset tiny_gt(bool crowd = false) {
  return CocoDataset::parse(R"({"images":[{"id":1,"file_name":"a.jpg","width":100,"height":100},
      {"id":2,"file_name":"b.jpg","width":100,"height":100}],
    "categories":[{"id":3,"name":"cat"},{"id":7,"name":"dog"}],
    "annotations":[{"id":1,"image_id":1,"category_id":3,"bbox":[0,0,50,50],"area":2500,"iscrowd":)" +
                                std::string(crowd ? "1" : "0") + R"(}]})",
                            "tiny");
}

}  // namespace

TEST(EvalCocoEval, MatchesPycocotoolsCocoVal80Jitter) { check_case("coco_val80_jitter"); }
TEST(EvalCocoEval, MatchesPycocotoolsShapesVal256Jitter) { check_case("shapes_val256_jitter"); }
TEST(EvalCocoEval, MatchesPycocotoolsCocoVal80FirstFortyImages) { check_case("coco_val80_jitter_first40"); }
TEST(EvalCocoEval, MatchesPycocotoolsEmptyImages) { check_case("empty_images"); }
TEST(EvalCocoEval, MatchesPycocotoolsClassesWithoutGroundTruth) { check_case("no_gt_classes"); }
TEST(EvalCocoEval, MatchesPycocotoolsShapesR18vdModel) { check_case("shapes_r18vd"); }

TEST(EvalCocoEval, ThresholdsAreLinspaceValues) {
  // np.linspace(.5, .95, 10) gives 0.8999999999999999 at index 8 and exactly .75 at index 5;
  // summarize() finds AP75 by exact comparison, so these bits matter.
  EXPECT_EQ(coco_iou_thresholds()[5], 0.75);
  EXPECT_EQ(coco_iou_thresholds()[8], 0.8999999999999999);
  EXPECT_NE(coco_iou_thresholds()[8], 0.9);
  EXPECT_EQ(coco_recall_thresholds()[100], 1.0);
}

TEST(EvalCocoEval, PerfectDetectionScoresOneAndAbsentClassIsMinusOne) {
  CocoDataset gt = tiny_gt();
  CocoEvalResult r = evaluate_coco_bbox(gt, {{1, 3, {0, 0, 50, 50}, 0.9}});
  EXPECT_DOUBLE_EQ(r.stats[0], 1.0);
  EXPECT_DOUBLE_EQ(r.stats[1], 1.0);
  EXPECT_DOUBLE_EQ(r.stats[4], 1.0);   // 2500 px: medium
  EXPECT_DOUBLE_EQ(r.stats[3], -1.0);  // no small ground truth
  EXPECT_DOUBLE_EQ(r.stats[5], -1.0);
  ASSERT_EQ(r.per_class.size(), 2u);
  EXPECT_DOUBLE_EQ(r.per_class[0].ap50_95, 1.0);
  EXPECT_DOUBLE_EQ(r.per_class[1].ap50_95, -1.0);  // "dog" has no ground truth
}

TEST(EvalCocoEval, EmptyResultsGiveZeroNotACrash) {
  CocoEvalResult r = evaluate_coco_bbox(tiny_gt(), {});
  EXPECT_DOUBLE_EQ(r.stats[0], 0.0);
  EXPECT_DOUBLE_EQ(r.stats[8], 0.0);
}

TEST(EvalCocoEval, CrowdIouIsIntersectionOverDetectionArea) {
  const double det[4] = {10, 10, 10, 10}, gt[4] = {0, 0, 50, 50};
  EXPECT_DOUBLE_EQ(coco_bbox_iou(det, gt, true), 1.0);
  EXPECT_DOUBLE_EQ(coco_bbox_iou(det, gt, false), 100.0 / 2500.0);
  const double apart[4] = {50, 0, 5, 5};
  EXPECT_DOUBLE_EQ(coco_bbox_iou(apart, gt, false), 0.0);  // touching edges: no overlap
}

TEST(EvalCocoEval, DetectionsOnCrowdAreIgnoredNotFalsePositives) {
  // One crowd box only: nothing to find, every category is -1.
  CocoEvalResult r = evaluate_coco_bbox(tiny_gt(true), {{1, 3, {5, 5, 10, 10}, 0.9}});
  EXPECT_DOUBLE_EQ(r.stats[0], -1.0);
  EXPECT_EQ(r.num_crowd, 1);
}

TEST(EvalCocoEval, HigherScoredFalsePositiveHalvesPrecision) {
  // A false positive scored above the true positive: precision 0.5 at every recall, AP = 0.5.
  CocoEvalResult r =
      evaluate_coco_bbox(tiny_gt(), {{1, 3, {0, 0, 50, 50}, 0.5}, {2, 3, {0, 0, 50, 50}, 0.9}});
  EXPECT_NEAR(r.stats[0], 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(r.stats[6], 1.0);  // AR@1: maxDets counts per image, so image 1 keeps its match
}

TEST(EvalCocoEval, ResultOnUnknownImageIsAnError) {
  EXPECT_THROW(evaluate_coco_bbox(tiny_gt(), {{42, 3, {0, 0, 5, 5}, 0.5}}), detforge::Error);
  EXPECT_THROW(evaluate_coco_bbox(tiny_gt(), {}, {99}), detforge::Error);
}

TEST(EvalCocoEval, ImageSubsetDropsOtherImages) {
  // Restricting to image 1 drops the false positive on image 2: AP back to 1.
  CocoEvalResult r =
      evaluate_coco_bbox(tiny_gt(), {{1, 3, {0, 0, 50, 50}, 0.5}, {2, 3, {0, 0, 50, 50}, 0.9}}, {1});
  EXPECT_DOUBLE_EQ(r.stats[0], 1.0);
  EXPECT_EQ(r.num_results, 1);
}

TEST(EvalCocoDataset, BadInputNamesTheProblem) {
  auto msg = [](const std::string& text) {
    try {
      CocoDataset::parse(text, "x.json");
    } catch (const detforge::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(msg(R"({"images":[],"categories":[]})").find("missing \"annotations\""), std::string::npos);
  EXPECT_NE(msg(R"({"images":[{"id":1}],"categories":[{"id":1,"name":"a"}],
      "annotations":[{"id":1,"image_id":2,"category_id":1,"bbox":[0,0,1,1]}]})")
                .find("image_id 2 is not in"),
            std::string::npos);
  EXPECT_NE(msg(R"({"images":[{"id":1}],"categories":[{"id":1,"name":"a"}],
      "annotations":[{"id":1,"image_id":1,"category_id":1,"bbox":[0,0,1]}]})")
                .find("bbox"),
            std::string::npos);
  EXPECT_THROW(CocoDataset::load_dir("/nonexistent/dir"), detforge::Error);
  EXPECT_THROW(load_coco_results("/nonexistent/results.json"), detforge::Error);
}

TEST(EvalCocoDataset, LoadsSharedCocoVal80) {
  DETFORGE_REQUIRE_SHARED();
  CocoDataset ds = CocoDataset::load_dir(detforge::test::shared_dir() / "data/coco_val80");
  EXPECT_EQ(ds.images.size(), 80u);
  EXPECT_EQ(ds.annotations.size(), 815u);
  int crowd = 0;
  for (const auto& a : ds.annotations) crowd += a.iscrowd;
  EXPECT_EQ(crowd, 11);
  EXPECT_TRUE(fs::exists(ds.image_path(ds.images[0])));
}
