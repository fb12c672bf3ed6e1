#include "eval/agreement.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace detforge::eval {

double box_iou(const Box& a, const Box& b) {
  double iw = std::min<double>(a.x1, b.x1) - std::max<double>(a.x0, b.x0);
  double ih = std::min<double>(a.y1, b.y1) - std::max<double>(a.y0, b.y0);
  if (iw <= 0 || ih <= 0) return 0;
  double inter = iw * ih;
  double ua = (static_cast<double>(a.x1) - a.x0) * (static_cast<double>(a.y1) - a.y0);
  double ub = (static_cast<double>(b.x1) - b.x0) * (static_cast<double>(b.y1) - b.y0);
  double u = ua + ub - inter;
  return u > 0 ? inter / u : 0;
}

int64_t AgreementAccumulator::add(const Detections& candidate, const Detections& reference) {
  std::vector<const Detection*> cand, ref;
  for (const Detection& d : candidate.items)
    if (d.score > opt_.threshold) cand.push_back(&d);
  for (const Detection& d : reference.items)
    if (d.score > opt_.threshold) ref.push_back(&d);
  // Detections arrive sorted, but do not rely on it: greedy order is by candidate score.
  std::stable_sort(cand.begin(), cand.end(), [](const Detection* a, const Detection* b) { return a->score > b->score; });
  std::vector<char> used(ref.size(), 0);
  int64_t matched = 0;
  for (const Detection* c : cand) {
    int best = -1;
    double best_iou = opt_.match_iou;
    for (size_t r = 0; r < ref.size(); ++r) {
      if (used[r] || ref[r]->label != c->label) continue;
      double iou = box_iou(c->box, ref[r]->box);
      if (iou >= best_iou && (best < 0 || iou > best_iou)) {
        best = static_cast<int>(r);
        best_iou = iou;
      }
    }
    if (best < 0) continue;
    used[best] = 1;
    ++matched;
    iou_sum_ += best_iou;
    if (best_iou < opt_.moved_iou) ++s_.moved;
    s_.max_abs_dscore = std::max(s_.max_abs_dscore, std::fabs(static_cast<double>(c->score) - ref[best]->score));
  }
  ++s_.images;
  s_.candidates += static_cast<int64_t>(cand.size());
  s_.references += static_cast<int64_t>(ref.size());
  s_.matched += matched;
  return matched;
}

AgreementStats AgreementAccumulator::stats() const {
  AgreementStats s = s_;
  s.precision = s.candidates ? static_cast<double>(s.matched) / s.candidates : 1.0;
  s.recall = s.references ? static_cast<double>(s.matched) / s.references : 1.0;
  s.moved_share = s.matched ? static_cast<double>(s.moved) / s.matched : 0.0;
  s.mean_iou = s.matched ? iou_sum_ / s.matched : 0.0;
  return s;
}

}  // namespace detforge::eval
