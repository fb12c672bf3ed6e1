// Maps a model's label ids to a dataset's category ids by name (case-insensitive, exact), so a
// COCO model's contiguous 0-79 ids meet COCO's 91-range ids, and the shapes models' 0-7 meet
// shapes_val256. Then turns a model's Detections into COCO results.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "detforge/types.h"
#include "eval/coco_dataset.h"

namespace detforge::eval {

struct LabelMap {
  std::vector<int64_t> category_of_label;   // by model label id; -1 = no category of that name
  std::vector<std::string> unmatched;       // model label names with no category
  int64_t category(int label) const {
    return label >= 0 && label < static_cast<int>(category_of_label.size()) ? category_of_label[label] : -1;
  }
  int matched() const;
};

// Throws detforge::Error when no label matches (listing some names of each side) or when two
// categories share a name.
LabelMap map_labels_by_name(const std::vector<std::string>& model_labels, const CocoDataset& ds);

// COCO results for one image: the best `max_dets` detections (they come sorted by score) with a
// mapped label, boxes as x, y, w, h. Returns how many were dropped for an unmapped label.
int64_t append_coco_results(const Detections& dets, int64_t image_id, const LabelMap& map, int max_dets,
                            std::vector<CocoResult>& out);

}  // namespace detforge::eval
