// The eval loop end to end with a fake detector (no bundle): label mapping by name, threshold 0,
// top-100 cut, timings, and AP 1 for detections equal to the ground truth.
#include <gtest/gtest.h>

#include <deque>

#include "eval/dataset_runner.h"
#include "test_paths.h"

using namespace detforge;
using namespace detforge::eval;

namespace {

class FakeDetector : public Detector {
 public:
  std::vector<std::string> names;
  std::deque<Detections> queue;  // answers, in call order
  float last_threshold = -1;
  Detections detect(const ImageU8&, float threshold) override {
    last_threshold = threshold;
    Detections d = queue.front();
    queue.pop_front();
    return d;
  }
  std::vector<Detections> detect_batch(const std::vector<ImageU8>&, float) override { return {}; }
  RawOutputs run_raw(const ImageU8&) override { return {}; }
  std::vector<float> preprocess(const ImageU8&) const override { return {}; }
  const std::vector<std::string>& labels() const override { return names; }
  std::string backend() const override { return "fake"; }
  int input_height() const override { return 640; }
  int input_width() const override { return 640; }
};

ImageU8 blank(const std::filesystem::path&) {
  ImageU8 im;
  im.width = im.height = 640;
  im.rgb.assign(640 * 640 * 3, 0);
  return im;
}

}  // namespace

TEST(EvalRunner, PerfectDetectionsScoreOneWithLabelsMappedByName) {
  CocoDataset ds = CocoDataset::load(detforge::test::source_dir() / "tests/golden/eval/no_gt_classes.gt.json", "/tmp");
  FakeDetector det;
  // Model label ids differ from category ids: model 0 = class_5, 1 = class_1, ..., 4 = unknown.
  det.names = {"CLASS_5", "class_1", "class_2", "class_3", "unknown"};
  auto label_of = [](int64_t cat) { return cat == 5 ? 0 : static_cast<int>(cat); };
  int64_t unknown = 0;
  for (const CocoImage& im : ds.images) {
    Detections d;
    for (const CocoAnnotation& a : ds.annotations) {
      if (a.image_id != im.id || a.iscrowd) continue;
      Detection x;
      x.box = {float(a.bbox[0]), float(a.bbox[1]), float(a.bbox[0] + a.bbox[2]), float(a.bbox[1] + a.bbox[3])};
      x.score = 0.9f;
      x.label = label_of(a.category_id);
      d.items.push_back(x);
    }
    Detection u;  // an unmapped label, scored highest: dropped, not scored
    u.box = {0, 0, 10, 10};
    u.score = 0.95f;
    u.label = 4;
    d.items.insert(d.items.begin(), u);
    ++unknown;
    det.queue.push_back(d);
  }
  std::vector<CocoResult> results;
  EvalReport r = run_coco_eval(det, ds, blank, EvalOptions{0, 100, false}, RunInfo{"fake", "fake", "no_gt_classes", 0},
                               &results);
  EXPECT_EQ(det.last_threshold, 0.0f);
  EXPECT_EQ(r.run.images, static_cast<int64_t>(ds.images.size()));
  EXPECT_EQ(r.dropped_unmapped, unknown);
  ASSERT_EQ(r.unmatched_labels.size(), 1u);
  EXPECT_NEAR(r.coco.stats[0], 1.0, 1e-12);
  EXPECT_NEAR(r.coco.stats[8], 1.0, 1e-12);
  for (const CocoClassResult& c : r.coco.per_class) {
    if (c.category_id == 4 || c.category_id == 6) EXPECT_EQ(c.ap50_95, -1) << c.name;
    else EXPECT_NEAR(c.ap50_95, 1.0, 1e-12) << c.name;
  }
  EXPECT_EQ(r.timings.total_s >= 0, true);
  EXPECT_EQ(results.size(), static_cast<size_t>(r.detections));
}

TEST(EvalRunner, LimitEvaluatesOnlyTheFirstImagesAndMaxDetsCuts) {
  CocoDataset ds = CocoDataset::load(detforge::test::source_dir() / "tests/golden/eval/no_gt_classes.gt.json", "/tmp");
  FakeDetector det;
  det.names = {"class_1"};
  for (int i = 0; i < 3; ++i) {
    Detections d;
    for (int k = 0; k < 150; ++k) {
      Detection x;
      x.box = {float(k), 0, float(k + 5), 5};
      x.score = 1.0f - k * 0.001f;
      d.items.push_back(x);
    }
    det.queue.push_back(d);
  }
  std::vector<CocoResult> results;
  EvalReport r = run_coco_eval(det, ds, blank, EvalOptions{3, 100, false}, RunInfo{}, &results);
  EXPECT_EQ(r.coco.num_images, 3);
  EXPECT_EQ(results.size(), 300u);
  EXPECT_EQ(det.queue.size(), 0u);
}

TEST(EvalRunner, DatasetSourceNeedsOneForm) {
  EXPECT_THROW(DatasetSource{}.load(), Error);
  EXPECT_THROW((DatasetSource{"a", "b", "c"}.load()), Error);
  EXPECT_THROW((DatasetSource{"", "x.json", "/nonexistent"}.load()), Error);
}

TEST(EvalRunner, SizeMismatchBetweenImageAndAnnotationsIsAnError) {
  CocoDataset ds = CocoDataset::load(detforge::test::source_dir() / "tests/golden/eval/no_gt_classes.gt.json", "/tmp");
  auto small = [](const std::filesystem::path&) {
    ImageU8 im;
    im.width = im.height = 10;
    im.rgb.assign(300, 0);
    return im;
  };
  EXPECT_THROW(for_each_image(select_images(ds, 1), ds, small, "x", false, [](const CocoImage&, const ImageU8&) {}),
               Error);
}
