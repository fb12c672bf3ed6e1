// Non-finite scan, stress inputs, progress formatting and report writers, on hand-built cases.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "eval/nonfinite_scan.h"
#include "eval/progress.h"
#include "eval/report.h"

using namespace detforge;
using namespace detforge::eval;

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

RawOutputs raw(std::vector<float> logits, std::vector<float> boxes, std::string op = "") {
  RawOutputs r;
  r.num_queries = 1;
  r.num_classes = static_cast<int>(logits.size());
  r.logits = std::move(logits);
  r.boxes = std::move(boxes);
  r.first_nonfinite_op = std::move(op);
  return r;
}
}  // namespace

TEST(EvalScan, CountsEachKindOfNonFinite) {
  std::vector<float> v = {1, kNaN, kInf, -kInf, -kInf, 0, std::numeric_limits<float>::max(), -kNaN};
  NonFiniteCounts c = count_nonfinite(v.data(), v.size());
  EXPECT_EQ(c.values, 8);
  EXPECT_EQ(c.nan, 2);
  EXPECT_EQ(c.pos_inf, 1);
  EXPECT_EQ(c.neg_inf, 2);
  EXPECT_EQ(c.bad(), 5);
}

TEST(EvalScan, SummaryPerOutputAndFirstBadImage) {
  NonFiniteScanner s;
  EXPECT_TRUE(s.add("a.jpg", raw({1, 2}, {0.5f, 0.5f, 0.1f, 0.1f})));
  EXPECT_FALSE(s.add("b.jpg", raw({kNaN, 2}, {0.5f, 0.5f, 0.1f, 0.1f}, "decoder.layers.0.self_attn")));
  EXPECT_FALSE(s.add("c.jpg", raw({1, 2}, {kInf, -kInf, 0.1f, 0.1f}, "later.op")));
  const ScanSummary& r = s.summary();
  EXPECT_EQ(r.images, 3);
  EXPECT_EQ(r.images_with_bad, 2);
  EXPECT_FALSE(r.clean());
  EXPECT_EQ(r.first_bad_image, "b.jpg");
  EXPECT_EQ(r.first_nonfinite_op, "decoder.layers.0.self_attn");
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_EQ(r.outputs[0].name, "logits");
  EXPECT_EQ(r.outputs[0].counts.nan, 1);
  EXPECT_EQ(r.outputs[0].counts.values, 6);
  EXPECT_EQ(r.outputs[0].first_bad_image, "b.jpg");
  EXPECT_EQ(r.outputs[1].counts.pos_inf, 1);
  EXPECT_EQ(r.outputs[1].counts.neg_inf, 1);
  EXPECT_EQ(r.outputs[1].images_with_bad, 1);
  EXPECT_EQ(r.outputs[1].first_bad_image, "c.jpg");
}

TEST(EvalScan, StressImagesHaveTheAdvertisedShapesAndPixels) {
  auto v = stress_images(7);
  ASSERT_EQ(v.size(), 5u);
  for (const auto& [name, img] : v) EXPECT_EQ(img.rgb.size(), static_cast<size_t>(img.width) * img.height * 3) << name;
  EXPECT_EQ(v[0].second.rgb[123], 0);
  EXPECT_EQ(v[1].second.rgb[123], 255);
  size_t ones = 0;
  for (uint8_t p : v[2].second.rgb) {
    ASSERT_TRUE(p == 0 || p == 255);
    ones += p == 255;
  }
  double frac = static_cast<double>(ones) / v[2].second.rgb.size();
  EXPECT_NEAR(frac, 0.5, 0.01);  // saturated noise: half the channels at full scale
  EXPECT_EQ(v[3].second.width, 1);
  EXPECT_EQ(v[3].second.height, 4000);
  EXPECT_EQ(v[4].second.width, 4000);
  EXPECT_EQ(v[4].second.height, 1);
  EXPECT_EQ(stress_images(7)[2].second.rgb, v[2].second.rgb);  // seeded
  EXPECT_NE(stress_images(8)[2].second.rgb, v[2].second.rgb);
}

TEST(EvalProgress, FormatsEtaAndRate) {
  EXPECT_EQ(Progress::format_duration(65), "1:05");
  EXPECT_EQ(Progress::format_duration(3723), "1:02:03");
  EXPECT_EQ(Progress::format_duration(-1), "?");
  // 20 of 80 in 10 s: 2/s, 60 left, ETA 30 s.
  std::string l = Progress::format_line("eval", 20, 80, 10.0, 8);
  EXPECT_EQ(l, "eval [##......] 20/80  25% 2.0/s ETA 0:30");
  EXPECT_EQ(Progress::format_line("eval", 80, 80, 40.0, 0), "eval 80/80 100% 2.0/s in 0:40");
}

TEST(EvalProgress, NonTtyPrintsAFewLines) {
  std::FILE* f = std::tmpfile();
  {
    Progress p("scan", 100, f, 0);
    for (int i = 0; i < 100; ++i) p.tick();
  }
  std::rewind(f);
  int lines = 0;
  for (int c; (c = std::fgetc(f)) != EOF;) lines += c == '\n';
  std::fclose(f);
  EXPECT_EQ(lines, 10);  // at 10, 20, ..., 90 and the final line
}

TEST(EvalReport, JsonHasTopLevelApAndMarkdownIsATable) {
  EvalReport r;
  r.run = {"m.bundle", "cpu", "coco_val80", 2};
  r.coco.stats = {0.5, 0.7, 0.4, -1, 0.3, 0.6, 0.2, 0.5, 0.55, -1, 0.4, 0.6};
  r.coco.per_class.push_back({1, "person", 3, 4, 0.5, 0.7});
  r.coco.per_class.push_back({2, "bi|cycle", 0, 1, -1, -1});
  r.timings = Timings::from({10, 20, 30, 40}, 0.2);
  nlohmann::ordered_json j = to_json(r);
  EXPECT_DOUBLE_EQ(j["ap50_95"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["ap50"].get<double>(), 0.7);
  EXPECT_DOUBLE_EQ(j["stats"]["ar100"].get<double>(), 0.55);
  int i = 0;  // stats keep summarize()'s order, not alphabetical
  for (auto it = j["stats"].begin(); it != j["stats"].end(); ++it) EXPECT_EQ(it.key(), kCocoStatNames[i++]);
  EXPECT_EQ(j["per_class"][0]["name"], "person");
  EXPECT_DOUBLE_EQ(j["timings"]["per_image_ms_mean"].get<double>(), 25.0);
  std::string md = to_markdown(r);
  EXPECT_NE(md.find("| AP @[.50:.95] | 0.5000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| AP small | – |"), std::string::npos) << md;
  EXPECT_NE(md.find("| bi cycle |"), std::string::npos) << md;  // '|' cannot break the table

  auto dir = std::filesystem::temp_directory_path() / "detforge_eval_report_test";
  std::filesystem::create_directories(dir);
  write_report(dir / "r.md", md);
  std::ifstream in(dir / "r.md");
  std::string back((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(back, md);
  EXPECT_THROW(write_report(dir / "missing_folder" / "r.md", md), Error);
  std::filesystem::remove_all(dir);
}

TEST(EvalReport, ScanAndCompareReportsSayWhatHappened) {
  NonFiniteScanner s;
  s.add("x.png", raw({kNaN}, {0, 0, 0, 0}, "encoder.fc1"));
  ScanReport sr;
  sr.summary = s.summary();
  nlohmann::ordered_json j = to_json(sr);
  EXPECT_FALSE(j["clean"].get<bool>());
  EXPECT_EQ(j["first_nonfinite_op"], "encoder.fc1");
  EXPECT_EQ(j["outputs"][0]["counts"]["nan"], 1);
  EXPECT_NE(to_markdown(sr).find("first op `encoder.fc1`"), std::string::npos);

  CompareReport cr;
  cr.agreement.precision = 0.75;
  cr.candidate_coco.stats[0] = 0.41;
  cr.reference_coco.stats[0] = 0.42;
  nlohmann::ordered_json c = to_json(cr);
  EXPECT_DOUBLE_EQ(c["precision"].get<double>(), 0.75);
  EXPECT_NE(to_markdown(cr).find("-0.0100"), std::string::npos);
}
