// Reports of eval, compare and scan: JSON for machines (ap50_95 and ap50 at the top level of the
// eval report) and a Markdown table a person reads at a glance. Written atomically.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/agreement.h"
#include "eval/coco_eval.h"
#include "eval/nonfinite_scan.h"

namespace detforge::eval {

struct Timings {
  double total_s = 0;
  double per_image_ms_mean = 0;
  double per_image_ms_p50 = 0;
  double per_image_ms_p90 = 0;
  double per_image_ms_max = 0;
  static Timings from(const std::vector<double>& per_image_ms, double total_s);
};

struct RunInfo {  // what ran on what
  std::string model;
  std::string backend;
  std::string dataset;
  int64_t images = 0;
};

struct EvalReport {
  RunInfo run;
  CocoEvalResult coco;
  int64_t detections = 0;        // COCO results handed to the evaluator
  int64_t dropped_unmapped = 0;  // detections whose label has no dataset category
  std::vector<std::string> unmatched_labels;
  Timings timings;
};

struct CompareReport {
  RunInfo candidate;  // candidate.dataset == reference.dataset
  RunInfo reference;
  AgreementOptions options;
  AgreementStats agreement;
  CocoEvalResult candidate_coco;
  CocoEvalResult reference_coco;
  Timings candidate_timings;
  Timings reference_timings;
};

struct ScanImage {  // one image with a non-finite value
  std::string image;
  NonFiniteCounts logits;
  NonFiniteCounts boxes;
  std::string first_nonfinite_op;
};

struct ScanReport {
  RunInfo run;
  bool stress = false;
  ScanSummary summary;
  std::vector<ScanImage> bad_images;  // the first few, in scan order
  Timings timings;
};

nlohmann::ordered_json to_json(const EvalReport& r);
nlohmann::ordered_json to_json(const CompareReport& r);
nlohmann::ordered_json to_json(const ScanReport& r);
std::string to_markdown(const EvalReport& r);
std::string to_markdown(const CompareReport& r);
std::string to_markdown(const ScanReport& r);

// A metric as the Markdown shows it: 4 decimals, "–" for pycocotools' -1 (no ground truth).
std::string format_metric(double v);

// Writes `text` to `path` atomically (throws detforge::Error naming the path).
void write_report(const std::filesystem::path& path, const std::string& text);

}  // namespace detforge::eval
