#include "eval/dataset_runner.h"

#include <chrono>

#include "eval/label_map.h"
#include "eval/progress.h"

namespace fs = std::filesystem;

namespace detforge::eval {

CocoDataset DatasetSource::load() const {
  bool pair = !annotations.empty() || !images.empty();
  if (!dir.empty() && pair) throw Error("give either --dataset DIR or --annotations FILE --images DIR, not both");
  if (!dir.empty()) return CocoDataset::load_dir(dir);
  if (annotations.empty() || images.empty())
    throw Error("no dataset: give --dataset DIR (with instances.json and images/) or --annotations FILE --images DIR");
  std::error_code ec;
  if (!fs::is_directory(images, ec)) throw Error("image folder " + images + " does not exist");
  return CocoDataset::load(annotations, images);
}

std::string DatasetSource::name() const { return dir.empty() ? annotations : dir; }

std::vector<const CocoImage*> select_images(const CocoDataset& ds, int64_t limit) {
  std::vector<const CocoImage*> v;
  for (const CocoImage& im : ds.images) {
    if (limit > 0 && static_cast<int64_t>(v.size()) >= limit) break;
    v.push_back(&im);
  }
  return v;
}

double time_ms(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double for_each_image(const std::vector<const CocoImage*>& images, const CocoDataset& ds, const ImageLoader& load,
                      const std::string& label, bool show_progress,
                      const std::function<void(const CocoImage&, const ImageU8&)>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  Progress progress(label, static_cast<int64_t>(images.size()), show_progress ? stderr : nullptr);
  for (const CocoImage* im : images) {
    ImageU8 pixels = load(ds.image_path(*im));
    if (im->width > 0 && im->height > 0 && (pixels.width != im->width || pixels.height != im->height))
      throw Error("image " + ds.image_path(*im).string() + " is " + std::to_string(pixels.width) + "x" +
                  std::to_string(pixels.height) + " but the annotations say " + std::to_string(im->width) + "x" +
                  std::to_string(im->height));
    fn(*im, pixels);
    progress.tick();
  }
  progress.finish();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

EvalReport run_coco_eval(Detector& det, const CocoDataset& ds, const ImageLoader& load, const EvalOptions& opt,
                         RunInfo info, std::vector<CocoResult>* results_out) {
  LabelMap map = map_labels_by_name(det.labels(), ds);
  std::vector<const CocoImage*> images = select_images(ds, opt.limit);
  std::vector<CocoResult> results;
  std::vector<int64_t> ids;
  std::vector<double> ms;
  EvalReport rep;
  double total = for_each_image(images, ds, load, "eval", opt.show_progress, [&](const CocoImage& im, const ImageU8& px) {
    Detections d;
    ms.push_back(time_ms([&] { d = det.detect(px, 0.0f); }));
    rep.dropped_unmapped += append_coco_results(d, im.id, map, opt.max_dets, results);
    ids.push_back(im.id);
  });
  info.images = static_cast<int64_t>(images.size());
  rep.run = info;
  rep.detections = static_cast<int64_t>(results.size());
  rep.unmatched_labels = map.unmatched;
  rep.timings = Timings::from(ms, total);
  // With no image selected the dataset is empty: nothing to evaluate, every stat -1.
  if (ids.empty()) {
    rep.coco.stats.fill(-1);
  } else {
    rep.coco = evaluate_coco_bbox(ds, results, ids);
  }
  if (results_out) *results_out = std::move(results);
  return rep;
}

}  // namespace detforge::eval
