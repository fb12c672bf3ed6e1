#include "eval/coco_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_map>

#include "detforge/types.h"

namespace detforge::eval {
namespace {

constexpr int kT = 10;    // IoU thresholds
constexpr int kR = 101;   // recall thresholds
constexpr int kA = 4;     // area ranges: all, small, medium, large
constexpr int kM = 3;     // maxDets 1, 10, 100
constexpr int kMaxDets[kM] = {1, 10, 100};
// Params.areaRng: [0, 1e5^2], [0, 32^2], [32^2, 96^2], [96^2, 1e5^2].
constexpr double kAreaRng[kA][2] = {{0, 1e10}, {0, 1024}, {1024, 9216}, {9216, 1e10}};
// np.spacing(1): the epsilon accumulate() adds to tp + fp.
constexpr double kEps = std::numeric_limits<double>::epsilon();

// Per image, category and area range: what evaluateImg returns (dtScores, dtMatches, dtIgnore,
// gtIgnore); dt arrays are [T][D].
struct EvalImg {
  int d = 0;
  std::vector<double> dt_scores;
  std::vector<int64_t> dt_matches;  // matched gt id, 0 = none
  std::vector<uint8_t> dt_ignore;
  std::vector<uint8_t> gt_ignore;
};

// One (image, category) cell: ground truth in file order, results in file order.
struct Cell {
  std::vector<const CocoAnnotation*> gt;
  std::vector<const CocoResult*> dt;
  std::vector<int64_t> dt_ids;  // loadRes' ids: position in the results list + 1
};

// Stable descending sort of indices by score (numpy argsort(-score, kind='mergesort')).
std::vector<int> stable_order_desc(const std::vector<double>& scores) {
  std::vector<int> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return -scores[a] < -scores[b]; });
  return idx;
}

// evaluateImg for one area range, on the already score-sorted and truncated detections of a
// cell; `ious` is [D][G] over the cell's ground truth in file order.
EvalImg evaluate_img(const Cell& cell, const std::vector<int>& dt_order, const std::vector<double>& ious,
                     const double area_rng[2]) {
  const int G = static_cast<int>(cell.gt.size());
  const int D = static_cast<int>(dt_order.size());
  std::vector<uint8_t> ig(G);
  for (int g = 0; g < G; ++g) {
    const CocoAnnotation* a = cell.gt[g];
    ig[g] = (a->iscrowd || a->area < area_rng[0] || a->area > area_rng[1]) ? 1 : 0;
  }
  // gtind: stable sort, not-ignored first.
  std::vector<int> gtind(G);
  std::iota(gtind.begin(), gtind.end(), 0);
  std::stable_sort(gtind.begin(), gtind.end(), [&](int a, int b) { return ig[a] < ig[b]; });

  EvalImg e;
  e.d = D;
  e.dt_scores.resize(D);
  for (int d = 0; d < D; ++d) e.dt_scores[d] = cell.dt[dt_order[d]]->score;
  e.gt_ignore.resize(G);
  std::vector<uint8_t> crowd(G);
  std::vector<int64_t> gt_ids(G);
  for (int g = 0; g < G; ++g) {
    e.gt_ignore[g] = ig[gtind[g]];
    crowd[g] = cell.gt[gtind[g]]->iscrowd ? 1 : 0;
    gt_ids[g] = cell.gt[gtind[g]]->id;
  }
  e.dt_matches.assign(static_cast<size_t>(kT) * D, 0);
  e.dt_ignore.assign(static_cast<size_t>(kT) * D, 0);
  if (D > 0 && G > 0) {
    std::vector<int64_t> gtm(static_cast<size_t>(kT) * G, 0);
    const auto& thr = coco_iou_thresholds();
    for (int t = 0; t < kT; ++t) {
      for (int d = 0; d < D; ++d) {
        double best = std::min(thr[t], 1 - 1e-10);
        int m = -1;
        for (int g = 0; g < G; ++g) {
          if (gtm[t * G + g] > 0 && !crowd[g]) continue;
          if (m > -1 && e.gt_ignore[m] == 0 && e.gt_ignore[g] == 1) break;
          double iou = ious[static_cast<size_t>(d) * G + gtind[g]];
          if (iou < best) continue;
          best = iou;
          m = g;
        }
        if (m == -1) continue;
        e.dt_ignore[t * D + d] = e.gt_ignore[m];
        e.dt_matches[t * D + d] = gt_ids[m];
        gtm[t * G + m] = cell.dt_ids[dt_order[d]];
      }
    }
  }
  // Unmatched detections outside the area range are ignored (area = w*h, as loadRes sets it).
  for (int d = 0; d < D; ++d) {
    const double* bb = cell.dt[dt_order[d]]->bbox;
    double area = bb[2] * bb[3];
    bool out = area < area_rng[0] || area > area_rng[1];
    if (!out) continue;
    for (int t = 0; t < kT; ++t)
      if (e.dt_matches[t * D + d] == 0) e.dt_ignore[t * D + d] = 1;
  }
  return e;
}

// accumulate() for one category, area range and maxDet over the cells of the evaluated images
// (in image-id order). Writes precision[T][R] and recall[T]; leaves them at -1 when every
// ground truth is ignored.
void accumulate_one(const std::vector<const EvalImg*>& E, int max_det, double* precision /*[T*R]*/,
                    double* recall /*[T]*/) {
  std::vector<double> scores;
  std::vector<std::pair<const EvalImg*, int>> src;  // which image and column each score came from
  int64_t npig = 0;
  for (const EvalImg* e : E) {
    int n = std::min(e->d, max_det);
    for (int d = 0; d < n; ++d) {
      scores.push_back(e->dt_scores[d]);
      src.emplace_back(e, d);
    }
    for (uint8_t g : e->gt_ignore) npig += g == 0;
  }
  if (npig == 0) return;
  std::vector<int> order = stable_order_desc(scores);
  const int nd = static_cast<int>(order.size());
  const auto& rec_thr = coco_recall_thresholds();
  std::vector<double> rc(nd), pr(nd);
  for (int t = 0; t < kT; ++t) {
    double tp = 0, fp = 0;
    for (int i = 0; i < nd; ++i) {
      const auto& [e, d] = src[order[i]];
      bool matched = e->dt_matches[t * e->d + d] != 0;
      bool ignored = e->dt_ignore[t * e->d + d] != 0;
      if (!ignored) (matched ? tp : fp) += 1;
      rc[i] = tp / static_cast<double>(npig);
      pr[i] = tp / (fp + tp + kEps);
    }
    recall[t] = nd ? rc[nd - 1] : 0;
    for (int i = nd - 1; i > 0; --i)
      if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
    double* q = precision + t * kR;
    for (int r = 0; r < kR; ++r) q[r] = 0;
    for (int r = 0; r < kR; ++r) {
      // np.searchsorted(rc, recThrs, side='left'): first i with rc[i] >= thr.
      int pi = static_cast<int>(std::lower_bound(rc.begin(), rc.end(), rec_thr[r]) - rc.begin());
      if (pi >= nd) break;  // pycocotools' try/except stops at the first index out of range
      q[r] = pr[pi];
    }
  }
}

double mean_valid(const std::vector<double>& v) {
  double sum = 0;
  int64_t n = 0;
  for (double x : v)
    if (x > -1) {
      sum += x;
      ++n;
    }
  return n ? sum / static_cast<double>(n) : -1;
}

}  // namespace

const std::array<double, 10>& coco_iou_thresholds() {
  static const std::array<double, 10> thr = [] {
    std::array<double, 10> a{};
    const double step = (0.95 - 0.5) / 9;  // np.linspace: i * step + start, last = stop
    for (int i = 0; i < 10; ++i) a[i] = static_cast<double>(i) * step + 0.5;
    a[9] = 0.95;
    return a;
  }();
  return thr;
}

const std::array<double, 101>& coco_recall_thresholds() {
  static const std::array<double, 101> thr = [] {
    std::array<double, 101> a{};
    const double step = 1.0 / 100;
    for (int i = 0; i < 101; ++i) a[i] = static_cast<double>(i) * step + 0.0;
    a[100] = 1.0;
    return a;
  }();
  return thr;
}

double coco_bbox_iou(const double D[4], const double G[4], bool crowd) {
  // Same operations, same order as maskApi.c bbIou, so the doubles agree bit for bit.
  double ga = G[2] * G[3], da = D[2] * D[3];
  double w = std::fmin(D[2] + D[0], G[2] + G[0]) - std::fmax(D[0], G[0]);
  if (w <= 0) return 0;
  double h = std::fmin(D[3] + D[1], G[3] + G[1]) - std::fmax(D[1], G[1]);
  if (h <= 0) return 0;
  double i = w * h;
  double u = crowd ? da : da + ga - i;
  return i / u;
}

CocoEvalResult evaluate_coco_bbox(const CocoDataset& gt, const std::vector<CocoResult>& results,
                                  const std::vector<int64_t>& image_ids) {
  // params.imgIds / catIds: sorted unique.
  std::vector<int64_t> img_ids;
  if (image_ids.empty()) {
    for (const CocoImage& im : gt.images) img_ids.push_back(im.id);
  } else {
    for (int64_t id : image_ids) {
      if (!gt.find_image(id)) throw Error("cannot evaluate image id " + std::to_string(id) + ": it is not in the dataset");
      img_ids.push_back(id);
    }
  }
  std::sort(img_ids.begin(), img_ids.end());
  img_ids.erase(std::unique(img_ids.begin(), img_ids.end()), img_ids.end());
  std::vector<int64_t> cat_ids;
  for (const CocoCategory& c : gt.categories) cat_ids.push_back(c.id);
  std::sort(cat_ids.begin(), cat_ids.end());
  const int I = static_cast<int>(img_ids.size());
  const int K = static_cast<int>(cat_ids.size());
  std::unordered_map<int64_t, int> img_pos, cat_pos;
  for (int i = 0; i < I; ++i) img_pos[img_ids[i]] = i;
  for (int k = 0; k < K; ++k) cat_pos[cat_ids[k]] = k;

  CocoEvalResult res;
  res.num_images = I;
  res.per_class.resize(K);
  for (int k = 0; k < K; ++k) {
    res.per_class[k].category_id = cat_ids[k];
    res.per_class[k].name = gt.find_category(cat_ids[k])->name;
  }

  // cells[k] maps image position -> cell; std::map keeps image-id order for accumulate().
  std::vector<std::map<int, Cell>> cells(K);
  for (const CocoAnnotation& a : gt.annotations) {
    auto ii = img_pos.find(a.image_id);
    auto kk = cat_pos.find(a.category_id);
    if (ii == img_pos.end() || kk == cat_pos.end()) continue;
    cells[kk->second][ii->second].gt.push_back(&a);
    ++res.num_gt;
    res.num_crowd += a.iscrowd;
    if (!a.iscrowd) ++res.per_class[kk->second].num_gt;
  }
  for (size_t n = 0; n < results.size(); ++n) {
    const CocoResult& r = results[n];
    if (!gt.find_image(r.image_id))
      throw Error("result " + std::to_string(n) + " names image id " + std::to_string(r.image_id) +
                  ", which is not in the dataset (pycocotools: results do not correspond to current coco set)");
    if (std::isnan(r.score)) throw Error("result " + std::to_string(n) + " has a NaN score");
    auto ii = img_pos.find(r.image_id);
    auto kk = cat_pos.find(r.category_id);
    if (ii == img_pos.end() || kk == cat_pos.end()) continue;
    Cell& c = cells[kk->second][ii->second];
    c.dt.push_back(&r);
    c.dt_ids.push_back(static_cast<int64_t>(n) + 1);
    ++res.num_results;
    ++res.per_class[kk->second].num_dets;
  }

  // precision[T][R][K][A][M], recall[T][K][A][M], -1 where no ground truth.
  auto pidx = [&](int t, int r, int k, int a, int m) {
    return (((static_cast<size_t>(t) * kR + r) * K + k) * kA + a) * kM + m;
  };
  auto ridx = [&](int t, int k, int a, int m) { return ((static_cast<size_t>(t) * K + k) * kA + a) * kM + m; };
  std::vector<double> precision(static_cast<size_t>(kT) * kR * K * kA * kM, -1.0);
  std::vector<double> recall(static_cast<size_t>(kT) * K * kA * kM, -1.0);

  const int max_det = kMaxDets[kM - 1];
  for (int k = 0; k < K; ++k) {
    std::vector<std::vector<EvalImg>> per_area(kA);
    for (auto& [img, cell] : cells[k]) {
      // computeIoU: detections sorted by score (stable) and cut to maxDets[-1].
      std::vector<double> sc(cell.dt.size());
      for (size_t d = 0; d < sc.size(); ++d) sc[d] = cell.dt[d]->score;
      std::vector<int> order = stable_order_desc(sc);
      if (static_cast<int>(order.size()) > max_det) order.resize(max_det);
      const size_t G = cell.gt.size();
      std::vector<double> ious(order.size() * G);
      for (size_t d = 0; d < order.size(); ++d)
        for (size_t g = 0; g < G; ++g)
          ious[d * G + g] = coco_bbox_iou(cell.dt[order[d]]->bbox, cell.gt[g]->bbox, cell.gt[g]->iscrowd);
      for (int a = 0; a < kA; ++a) per_area[a].push_back(evaluate_img(cell, order, ious, kAreaRng[a]));
    }
    for (int a = 0; a < kA; ++a) {
      std::vector<const EvalImg*> E;
      for (const EvalImg& e : per_area[a]) E.push_back(&e);
      if (E.empty()) continue;
      for (int m = 0; m < kM; ++m) {
        double p[kT * kR], rc[kT];
        std::fill(std::begin(p), std::end(p), -1.0);
        std::fill(std::begin(rc), std::end(rc), -1.0);
        accumulate_one(E, kMaxDets[m], p, rc);
        for (int t = 0; t < kT; ++t) {
          recall[ridx(t, k, a, m)] = rc[t];
          for (int r = 0; r < kR; ++r) precision[pidx(t, r, k, a, m)] = p[t * kR + r];
        }
      }
    }
  }

  // summarize(): mean of the entries > -1 of the selected slice.
  const auto& thr = coco_iou_thresholds();
  auto ap = [&](int iou_t /*-1: all*/, int a, int m, int k_only = -1) {
    std::vector<double> v;
    for (int t = 0; t < kT; ++t) {
      if (iou_t >= 0 && t != iou_t) continue;
      for (int r = 0; r < kR; ++r)
        for (int k = 0; k < K; ++k)
          if (k_only < 0 || k == k_only) v.push_back(precision[pidx(t, r, k, a, m)]);
    }
    return mean_valid(v);
  };
  auto ar = [&](int a, int m) {
    std::vector<double> v;
    for (int t = 0; t < kT; ++t)
      for (int k = 0; k < K; ++k) v.push_back(recall[ridx(t, k, a, m)]);
    return mean_valid(v);
  };
  // summarize() finds IoU .5 and .75 with np.where(iouThr == iouThrs): exact comparison.
  auto t_of = [&](double v) {
    for (int t = 0; t < kT; ++t)
      if (thr[t] == v) return t;
    return -2;  // no such threshold: an empty slice, -1 as in pycocotools
  };
  auto ap_at = [&](double v, int a, int m) { int t = t_of(v); return t == -2 ? -1.0 : ap(t, a, m); };
  res.stats = {ap(-1, 0, 2),      ap_at(0.5, 0, 2), ap_at(0.75, 0, 2), ap(-1, 1, 2),
               ap(-1, 2, 2),      ap(-1, 3, 2),     ar(0, 0),          ar(0, 1),
               ar(0, 2),          ar(1, 2),         ar(2, 2),          ar(3, 2)};
  for (int k = 0; k < K; ++k) {
    res.per_class[k].ap50_95 = ap(-1, 0, 2, k);
    res.per_class[k].ap50 = ap(0, 0, 2, k);
  }
  return res;
}

}  // namespace detforge::eval
