#include "families/rt_detr_v2/postprocess.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace detforge::rt_detr_v2 {

Detections postprocess(const float* logits, const float* boxes, int nq, int nc, int image_width, int image_height,
                       float threshold, const std::vector<std::string>& labels, int top_k) {
  const int n = nq * nc;
  if (top_k < 0 || top_k > n) top_k = std::min(nq, n);
  std::vector<float> scores(n);
  for (int i = 0; i < n; ++i) scores[i] = 1.f / (1.f + std::exp(-logits[i]));
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  // Sorted descending; equal scores keep the lower flat index first.
  std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(), [&](int a, int b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  Detections out;
  out.image_width = image_width;
  out.image_height = image_height;
  const float sw = static_cast<float>(image_width), sh = static_cast<float>(image_height);
  for (int r = 0; r < top_k; ++r) {
    int i = idx[r];
    float s = scores[i];
    if (!(s > threshold)) break;  // strict, as transformers; NaN never passes
    int q = i / nc, label = i % nc;
    const float* b = boxes + 4 * q;
    float cx = b[0], cy = b[1], w = b[2], h = b[3];
    Detection d;
    d.box = {(cx - 0.5f * w) * sw, (cy - 0.5f * h) * sh, (cx + 0.5f * w) * sw, (cy + 0.5f * h) * sh};
    d.score = s;
    d.label = label;
    if (label < static_cast<int>(labels.size())) d.label_name = labels[label];
    out.items.push_back(std::move(d));
  }
  return out;
}

}  // namespace detforge::rt_detr_v2
