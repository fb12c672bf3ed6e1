// COCO bbox AP computed as pycocotools' COCOeval (evaluate, accumulate, summarize) computes it,
// re-implemented from its documented algorithm so that the 12 stats match to ~1e-12:
//  - per image and category, detections sorted by score with a stable sort (numpy's mergesort on
//    -score, so ties keep results-file order) and cut to maxDets[-1] = 100 *per image and
//    category*; IoU on xywh boxes; for a crowd ground truth IoU = intersection / detection area;
//  - ground truth is ignored when iscrowd or its JSON "area" lies outside the area range
//    (bounds inclusive); an unmatched detection whose w*h lies outside the range is ignored;
//  - greedy matching per IoU threshold (.50:.05:.95, as np.linspace makes them), 101-point
//    interpolated precision, -1 for a category with no (non-ignored) ground truth;
//  - a matched pair is stored as the ground truth's id, and "matched" means id != 0, as in
//    pycocotools: a ground truth with id 0 can never count as a true positive.
// Differences, on purpose: pycocotools' loadRes crashes on an empty results list (we evaluate it:
// AP 0 for every category with ground truth). A result naming an image that is not in the
// dataset is an error in both. Results for categories the dataset does not list are dropped, as
// pycocotools drops them.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "eval/coco_dataset.h"

namespace detforge::eval {

inline constexpr int kCocoNumStats = 12;
// Names of COCOeval.stats in order (the JSON report's keys).
inline constexpr std::array<const char*, kCocoNumStats> kCocoStatNames = {
    "ap50_95", "ap50", "ap75", "ap_small", "ap_medium", "ap_large",
    "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large"};
// The labels summarize() prints, for Markdown reports.
inline constexpr std::array<const char*, kCocoNumStats> kCocoStatLabels = {
    "AP @[.50:.95]", "AP @.50", "AP @.75", "AP small", "AP medium", "AP large",
    "AR @1", "AR @10", "AR @100", "AR small", "AR medium", "AR large"};

struct CocoClassResult {
  int64_t category_id = 0;
  std::string name;
  int64_t num_gt = 0;        // ground-truth boxes that are not crowd (over the evaluated images)
  int64_t num_dets = 0;      // results of this category on the evaluated images
  double ap50_95 = -1;       // mean precision over IoU .50:.95, area all, 100 dets; -1: no gt
  double ap50 = -1;          // the same at IoU .50
};

struct CocoEvalResult {
  std::array<double, kCocoNumStats> stats{};  // exactly COCOeval.stats
  std::vector<CocoClassResult> per_class;     // by category id, ascending
  int64_t num_images = 0;
  int64_t num_gt = 0;         // all annotations on the evaluated images, crowd included
  int64_t num_crowd = 0;
  int64_t num_results = 0;    // results used (on evaluated images and known categories)
};

// Evaluates `results` against `gt`. `image_ids` restricts evaluation to those images (as setting
// COCOeval.params.imgIds does); empty means every image of the dataset. Throws detforge::Error
// for a result on an image the dataset lacks, or an image id in `image_ids` it lacks.
CocoEvalResult evaluate_coco_bbox(const CocoDataset& gt, const std::vector<CocoResult>& results,
                                  const std::vector<int64_t>& image_ids = {});

// The IoU pycocotools' maskApi bbIou computes for xywh boxes (0 when they do not overlap).
double coco_bbox_iou(const double det[4], const double gt[4], bool gt_is_crowd);

// COCOeval.params.iouThrs and recThrs, bit for bit as np.linspace makes them.
const std::array<double, 10>& coco_iou_thresholds();
const std::array<double, 101>& coco_recall_thresholds();

}  // namespace detforge::eval
