// Post-processing exactly as transformers' RTDetrImageProcessor.post_process_object_detection
// with use_focal_loss=True: sigmoid, top-k over queries x classes (not per-query argmax),
// cxcywh -> xyxy scaled to the ORIGINAL image size (not clipped), keep score > threshold.
#pragma once
#include <string>
#include <vector>

#include "backends/detection_select.h"
#include "detforge/types.h"

namespace detforge::rt_detr_v2 {

// logits [Q, C], boxes [Q, 4]; top_k defaults to Q as transformers does.
Detections postprocess(const float* logits, const float* boxes, int num_queries, int num_classes, int image_width,
                       int image_height, float threshold, const std::vector<std::string>& labels, int top_k = -1);

// The smallest logit whose sigmoid can pass `threshold` (score > threshold), with a margin for
// the sigmoid's fp32 rounding; -inf for a threshold <= 0, NaN (nothing passes) for >= 1 or NaN.
float logit_floor(float threshold);
// cxcywh in [0, 1] -> x0, y0, x1, y1 in pixels of a width x height image.
Box box_xyxy(float cx, float cy, float w, float h, int image_width, int image_height);
// The detections of a device selection (Engine::run_images_selected, DetectionSelect with
// logit_floor(threshold) and the same top_k): the same list postprocess() returns, except where
// more than top_k logits reach the floor and two distinct logits at the k-th place round to one
// fp32 score (the device ranks by logit, postprocess() by score).
Detections finalize_selected(const SelectedDetections& sel, int num_classes, int image_width, int image_height,
                             float threshold, const std::vector<std::string>& labels);

}  // namespace detforge::rt_detr_v2
