// Detection selection on the engine's device (Engine::run_images_selected): the top-k over
// queries x classes of a DETR-style head and its box decode, so that only the kept detections
// leave the device. The backend knows no model family: it is told which outputs hold the logits
// [Q, C] and the boxes [Q, 4] (cx, cy, w, h in [0, 1]) and which logits can pass.
#pragma once
#include <vector>

namespace detforge {

struct DetectionSelect {
  int logits_output = 0;  // graph output [Q, C]
  int boxes_output = 1;   // graph output [Q, 4]
  int top_k = 300;        // at most this many per image
  // Only logits >= logit_floor are candidates (NaN never is). Candidates are ranked by logit,
  // descending, equal logits by the lower flat index q * C + c; the top_k first are returned.
  float logit_floor = 0.f;
};

// One image's selection, in rank order. Boxes are x0, y0, x1, y1 in the image's own pixels:
// ((cx - w / 2) * width, ...), each step rounded as fp32 without contraction, so the same bits as
// the host formula of the family's post-processing.
struct SelectedDetections {
  std::vector<int> flat_index;  // q * C + c
  std::vector<float> logit;
  std::vector<float> box;  // 4 per entry
};

}  // namespace detforge
