// Post-processing exactly as transformers' RTDetrImageProcessor.post_process_object_detection
// with use_focal_loss=True: sigmoid, top-k over queries x classes (not per-query argmax),
// cxcywh -> xyxy scaled to the ORIGINAL image size (not clipped), keep score > threshold.
#pragma once
#include <string>
#include <vector>

#include "detforge/types.h"

namespace detforge::rt_detr_v2 {

// logits [Q, C], boxes [Q, 4]; top_k defaults to Q as transformers does.
Detections postprocess(const float* logits, const float* boxes, int num_queries, int num_classes, int image_width,
                       int image_height, float threshold, const std::vector<std::string>& labels, int top_k = -1);

}  // namespace detforge::rt_detr_v2
