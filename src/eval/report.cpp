#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/atomic_file.h"

using json = nlohmann::ordered_json;

namespace detforge::eval {
namespace {

#ifdef DETFORGE_VERSION
constexpr const char* kVersion = DETFORGE_VERSION;
#else
constexpr const char* kVersion = "unknown";
#endif

json run_json(const RunInfo& r) {
  return {{"model", r.model}, {"backend", r.backend}, {"dataset", r.dataset}, {"images", r.images}};
}

json timings_json(const Timings& t) {
  return {{"total_s", t.total_s},
          {"per_image_ms_mean", t.per_image_ms_mean},
          {"per_image_ms_p50", t.per_image_ms_p50},
          {"per_image_ms_p90", t.per_image_ms_p90},
          {"per_image_ms_max", t.per_image_ms_max}};
}

json stats_json(const CocoEvalResult& c) {
  json s = json::object();
  for (int i = 0; i < kCocoNumStats; ++i) s[kCocoStatNames[i]] = c.stats[i];
  return s;
}

json counts_json(const NonFiniteCounts& c) {
  return {{"values", c.values}, {"nan", c.nan}, {"pos_inf", c.pos_inf}, {"neg_inf", c.neg_inf}};
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string md_cell(std::string s) {  // a table cell must not contain '|' or a newline
  for (char& c : s)
    if (c == '|' || c == '\n') c = ' ';
  return s;
}

std::string timings_md(const Timings& t) {
  return "Time: " + fmt("%.1f", t.total_s) + " s in all, " + fmt("%.1f", t.per_image_ms_mean) +
         " ms per image (p50 " + fmt("%.1f", t.per_image_ms_p50) + ", p90 " + fmt("%.1f", t.per_image_ms_p90) +
         ", max " + fmt("%.1f", t.per_image_ms_max) + ").\n";
}

}  // namespace

Timings Timings::from(const std::vector<double>& ms, double total_s) {
  Timings t;
  t.total_s = total_s;
  if (ms.empty()) return t;
  std::vector<double> v = ms;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  t.per_image_ms_mean = sum / v.size();
  auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))]; };
  t.per_image_ms_p50 = pct(0.5);
  t.per_image_ms_p90 = pct(0.9);
  t.per_image_ms_max = v.back();
  return t;
}

std::string format_metric(double v) { return v <= -1 ? "–" : fmt("%.4f", v); }

json to_json(const EvalReport& r) {
  json per_class = json::array();
  for (const CocoClassResult& c : r.coco.per_class)
    per_class.push_back({{"category_id", c.category_id}, {"name", c.name}, {"ap50_95", c.ap50_95},
                         {"ap50", c.ap50}, {"num_gt", c.num_gt}, {"num_dets", c.num_dets}});
  return {{"command", "eval"},
          {"detforge_version", kVersion},
          {"ap50_95", r.coco.stats[0]},
          {"ap50", r.coco.stats[1]},
          {"run", run_json(r.run)},
          {"stats", stats_json(r.coco)},
          {"per_class", per_class},
          {"counts",
           {{"images", r.coco.num_images},
            {"gt_boxes", r.coco.num_gt},
            {"crowd_boxes", r.coco.num_crowd},
            {"detections", r.detections},
            {"detections_evaluated", r.coco.num_results},
            {"dropped_unmapped_label", r.dropped_unmapped}}},
          {"unmatched_labels", r.unmatched_labels},
          {"timings", timings_json(r.timings)},
          {"notes", "stats as pycocotools COCOeval (bbox), best max_dets detections per image; -1 = no ground "
                    "truth in that range; per_image_ms = Detector::detect time (decoding excluded), total_s = "
                    "the whole loop"}};
}

std::string to_markdown(const EvalReport& r) {
  std::string s = "# detforge eval: " + md_cell(r.run.model) + "\n\n";
  s += "Dataset `" + md_cell(r.run.dataset) + "`, " + std::to_string(r.coco.num_images) + " images, " +
       std::to_string(r.coco.num_gt) + " boxes (" + std::to_string(r.coco.num_crowd) + " crowd); backend " +
       md_cell(r.run.backend) + "; " + std::to_string(r.detections) + " detections.\n\n";
  s += "| metric | value |\n| --- | ---: |\n";
  for (int i = 0; i < kCocoNumStats; ++i)
    s += std::string("| ") + kCocoStatLabels[i] + " | " + format_metric(r.coco.stats[i]) + " |\n";
  s += "\n| class | id | boxes | detections | AP | AP50 |\n| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const CocoClassResult& c : r.coco.per_class)
    s += "| " + md_cell(c.name) + " | " + std::to_string(c.category_id) + " | " + std::to_string(c.num_gt) + " | " +
         std::to_string(c.num_dets) + " | " + format_metric(c.ap50_95) + " | " + format_metric(c.ap50) + " |\n";
  if (!r.unmatched_labels.empty()) {
    s += "\nModel labels with no dataset category (their " + std::to_string(r.dropped_unmapped) +
         " detections are not scored):";
    for (const std::string& l : r.unmatched_labels) s += " `" + md_cell(l) + "`";
    s += "\n";
  }
  s += "\n" + timings_md(r.timings);
  return s;
}

json to_json(const CompareReport& r) {
  const AgreementStats& a = r.agreement;
  return {{"command", "compare"},
          {"detforge_version", kVersion},
          {"candidate", run_json(r.candidate)},
          {"reference", run_json(r.reference)},
          {"threshold", r.options.threshold},
          {"match_iou", r.options.match_iou},
          {"moved_iou", r.options.moved_iou},
          {"precision", a.precision},
          {"recall", a.recall},
          {"moved_share", a.moved_share},
          {"max_abs_dscore", a.max_abs_dscore},
          {"mean_iou", a.mean_iou},
          {"counts",
           {{"images", a.images}, {"candidate", a.candidates}, {"reference", a.references},
            {"matched", a.matched}, {"moved", a.moved}}},
          {"candidate_ap50_95", r.candidate_coco.stats[0]},
          {"candidate_ap50", r.candidate_coco.stats[1]},
          {"reference_ap50_95", r.reference_coco.stats[0]},
          {"reference_ap50", r.reference_coco.stats[1]},
          {"candidate_stats", stats_json(r.candidate_coco)},
          {"reference_stats", stats_json(r.reference_coco)},
          {"timings", {{"candidate", timings_json(r.candidate_timings)}, {"reference", timings_json(r.reference_timings)}}},
          {"notes", "greedy by candidate score, same label, IoU >= match_iou; moved = matched pair with IoU < moved_iou"}};
}

std::string to_markdown(const CompareReport& r) {
  const AgreementStats& a = r.agreement;
  std::string s = "# detforge compare: " + md_cell(r.candidate.model) + " vs " + md_cell(r.reference.model) + "\n\n";
  s += "Dataset `" + md_cell(r.candidate.dataset) + "`, " + std::to_string(a.images) + " images; detections with score > " +
       fmt("%.2f", r.options.threshold) + "; a pair matches with the same label and IoU ≥ " + fmt("%.2f", r.options.match_iou) +
       " (greedy by candidate score) and has moved when its IoU < " + fmt("%.2f", r.options.moved_iou) + ".\n\n";
  s += "| agreement | value |\n| --- | ---: |\n";
  s += "| precision (candidate → reference) | " + fmt("%.4f", a.precision) + " |\n";
  s += "| recall | " + fmt("%.4f", a.recall) + " |\n";
  s += "| matched / candidate / reference | " + std::to_string(a.matched) + " / " + std::to_string(a.candidates) +
       " / " + std::to_string(a.references) + " |\n";
  s += "| moved (share of matched) | " + std::to_string(a.moved) + " (" + fmt("%.4f", a.moved_share) + ") |\n";
  s += "| mean IoU of matched pairs | " + fmt("%.4f", a.mean_iou) + " |\n";
  s += "| max abs score change | " + fmt("%.6f", a.max_abs_dscore) + " |\n\n";
  s += "| AP | candidate | reference | difference |\n| --- | ---: | ---: | ---: |\n";
  for (int i : {0, 1, 2}) {
    double c = r.candidate_coco.stats[i], f = r.reference_coco.stats[i];
    s += std::string("| ") + kCocoStatLabels[i] + " | " + format_metric(c) + " | " + format_metric(f) + " | " +
         (c > -1 && f > -1 ? fmt("%+.4f", c - f) : std::string("–")) + " |\n";
  }
  s += "\nCandidate. " + timings_md(r.candidate_timings) + "Reference. " + timings_md(r.reference_timings);
  return s;
}

json to_json(const ScanReport& r) {
  json outputs = json::array();
  for (const OutputScan& o : r.summary.outputs)
    outputs.push_back({{"name", o.name}, {"counts", counts_json(o.counts)}, {"images_with_nonfinite", o.images_with_bad},
                       {"first_image", o.first_bad_image}});
  json bad = json::array();
  for (const ScanImage& b : r.bad_images)
    bad.push_back({{"image", b.image}, {"logits", counts_json(b.logits)}, {"boxes", counts_json(b.boxes)},
                   {"first_nonfinite_op", b.first_nonfinite_op}});
  return {{"command", "scan"},
          {"detforge_version", kVersion},
          {"run", run_json(r.run)},
          {"stress", r.stress},
          {"clean", r.summary.clean()},
          {"images", r.summary.images},
          {"images_with_nonfinite", r.summary.images_with_bad},
          {"first_image", r.summary.first_bad_image},
          {"first_nonfinite_op", r.summary.first_nonfinite_op},
          {"outputs", outputs},
          {"nonfinite_images", bad},
          {"timings", timings_json(r.timings)}};
}

std::string to_markdown(const ScanReport& r) {
  const ScanSummary& s = r.summary;
  std::string m = "# detforge scan: " + md_cell(r.run.model) + "\n\n";
  m += "Dataset `" + md_cell(r.run.dataset) + "`" + (r.stress ? " plus stress inputs" : "") + ", " +
       std::to_string(s.images) + " images; backend " + md_cell(r.run.backend) + ". " +
       (s.clean() ? std::string("**Every output value is finite.**")
                  : "**" + std::to_string(s.images_with_bad) + " images have non-finite outputs**; first: `" +
                        md_cell(s.first_bad_image) + "`" +
                        (s.first_nonfinite_op.empty() ? std::string(" (the backend did not name an op)")
                                                      : ", first op `" + md_cell(s.first_nonfinite_op) + "`") +
                        ".") +
       "\n\n";
  m += "| output | values | NaN | +Inf | -Inf | images affected |\n| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const OutputScan& o : s.outputs)
    m += "| " + o.name + " | " + std::to_string(o.counts.values) + " | " + std::to_string(o.counts.nan) + " | " +
         std::to_string(o.counts.pos_inf) + " | " + std::to_string(o.counts.neg_inf) + " | " +
         std::to_string(o.images_with_bad) + " |\n";
  if (!r.bad_images.empty()) {
    m += "\n| image | logits NaN/±Inf | boxes NaN/±Inf | first op |\n| --- | ---: | ---: | --- |\n";
    for (const ScanImage& b : r.bad_images)
      m += "| " + md_cell(b.image) + " | " + std::to_string(b.logits.bad()) + " | " + std::to_string(b.boxes.bad()) +
           " | " + md_cell(b.first_nonfinite_op.empty() ? "–" : b.first_nonfinite_op) + " |\n";
  }
  m += "\n" + timings_md(r.timings);
  return m;
}

void write_report(const std::filesystem::path& path, const std::string& text) { write_file_atomically(path, text); }

}  // namespace detforge::eval
