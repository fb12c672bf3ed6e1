// Detection agreement between a candidate (e.g. an fp16 or FP8 bundle) and a reference (the fp32
// bundle, or transformers) on the same images.
//
// Definitions (per image, then summed over images):
//  - both sides keep detections with score > threshold (as Detector::detect does);
//  - candidates are taken in descending score order (stable); each is matched to the unmatched
//    reference detection of the same label with the highest IoU, if that IoU >= match_iou (0.5);
//    ties in IoU go to the earlier reference detection;
//  - precision = matched / candidates, recall = matched / references (1 when the denominator is 0);
//  - a matched pair "moved" when its IoU < moved_iou (0.95): the box is the same object but
//    visibly elsewhere; moved_share = moved / matched (0 when nothing matched);
//  - max_abs_dscore = max |score_candidate - score_reference| over matched pairs.
#pragma once
#include <cstdint>

#include "detforge/types.h"

namespace detforge::eval {

struct AgreementOptions {
  float threshold = 0.3f;
  double match_iou = 0.5;
  double moved_iou = 0.95;
};

struct AgreementStats {
  int64_t images = 0;
  int64_t candidates = 0;
  int64_t references = 0;
  int64_t matched = 0;
  int64_t moved = 0;
  double precision = 1;
  double recall = 1;
  double moved_share = 0;
  double max_abs_dscore = 0;
  double mean_iou = 0;  // mean IoU of matched pairs (0 when none)
};

// IoU of two x0,y0,x1,y1 boxes (0 for empty or disjoint boxes).
double box_iou(const Box& a, const Box& b);

class AgreementAccumulator {
 public:
  explicit AgreementAccumulator(AgreementOptions opt = {}) : opt_(opt) {}
  // Adds one image's detections of both sides; returns that image's matched-pair count.
  int64_t add(const Detections& candidate, const Detections& reference);
  AgreementStats stats() const;
  const AgreementOptions& options() const { return opt_; }

 private:
  AgreementOptions opt_;
  AgreementStats s_;
  double iou_sum_ = 0;
};

}  // namespace detforge::eval
