// The loops behind `detforge eval`, `compare` and `scan`: walk a COCO dataset's images (first N),
// decode each, hand it to the caller, time it and show progress. They use only the Detector
// interface, so tests drive them with a fake detector and no bundle.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "detforge/detector.h"
#include "eval/coco_dataset.h"
#include "eval/report.h"

namespace detforge::eval {

// --dataset DIR, or --annotations FILE --images DIR.
struct DatasetSource {
  std::string dir;
  std::string annotations;
  std::string images;
  // Throws detforge::Error when neither or both forms are given, or the files are bad.
  CocoDataset load() const;
  std::string name() const;  // for reports: the folder, or the annotations file
};

using ImageLoader = std::function<ImageU8(const std::filesystem::path&)>;

// The first `limit` images (all when limit <= 0), in dataset-file order.
std::vector<const CocoImage*> select_images(const CocoDataset& ds, int64_t limit);

// Calls fn(image, pixels) for each image with a progress line labelled `label` on stderr
// (show_progress false: silent). Returns the wall time of the whole loop in seconds.
double for_each_image(const std::vector<const CocoImage*>& images, const CocoDataset& ds, const ImageLoader& load,
                      const std::string& label, bool show_progress,
                      const std::function<void(const CocoImage&, const ImageU8&)>& fn);

// Runs `det` on every selected image with threshold 0, keeps the best `max_dets` detections per
// image (COCO's 100), maps labels by name and computes COCO AP.
struct EvalOptions {
  int64_t limit = 0;
  int max_dets = 100;
  bool show_progress = true;
};
EvalReport run_coco_eval(Detector& det, const CocoDataset& ds, const ImageLoader& load, const EvalOptions& opt,
                         RunInfo info, std::vector<CocoResult>* results_out = nullptr);

// Times one call in milliseconds.
double time_ms(const std::function<void()>& fn);

}  // namespace detforge::eval
