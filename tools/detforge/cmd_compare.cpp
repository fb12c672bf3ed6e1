// detforge compare CANDIDATE.bundle REFERENCE.bundle --dataset DIR [--threshold 0.3] [--json F]
// Detection agreement of two bundles (e.g. fp16 or FP8 against fp32) on the same images, plus
// each side's COCO AP.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/atomic_file.h"
#include "detforge/detector.h"
#include "detforge/image.h"
#include "eval/agreement.h"
#include "eval/dataset_runner.h"
#include "eval/label_map.h"
#include "tools/detforge/dataset_options.h"

namespace {

struct CompareArgs {
  std::string candidate, reference;
  detforge::eval::DatasetSource data;
  std::string backend = "cpu";
  std::string reference_backend;  // "" = --backend
  int threads = 0;
  int64_t limit = 0;
  float threshold = 0.3f;
  int max_dets = 100;
  std::string json_path, markdown_path;
  bool quiet = false;
};

void run_compare(const CompareArgs& a) {
  using namespace detforge;
  using namespace detforge::eval;
  for (const std::string& p : {a.json_path, a.markdown_path})
    if (!p.empty()) check_output_path(p);
  if (!(a.threshold >= 0 && a.threshold < 1)) throw Error("--threshold must be in [0, 1)");
  CocoDataset ds = a.data.load();
  DetectorOptions copt, ropt;
  copt.backend = a.backend;
  ropt.backend = a.reference_backend.empty() ? a.backend : a.reference_backend;
  copt.threads = ropt.threads = a.threads;
  std::unique_ptr<Detector> cand = Detector::load(a.candidate, copt);
  std::unique_ptr<Detector> ref = Detector::load(a.reference, ropt);
  if (cand->labels() != ref->labels())
    throw Error("the bundles have different labels (" + std::to_string(cand->labels().size()) + " vs " +
                std::to_string(ref->labels().size()) + "): agreement needs the same label ids");
  LabelMap map = map_labels_by_name(ref->labels(), ds);

  AgreementAccumulator acc(AgreementOptions{a.threshold, 0.5, 0.95});
  std::vector<CocoResult> cres, rres;
  std::vector<int64_t> ids;
  std::vector<double> cms, rms;
  auto images = select_images(ds, a.limit);
  for_each_image(images, ds, [](const std::filesystem::path& p) { return load_image(p.string()); }, "compare",
                 !a.quiet, [&](const CocoImage& im, const ImageU8& px) {
                   Detections c, r;
                   cms.push_back(time_ms([&] { c = cand->detect(px, 0.0f); }));
                   rms.push_back(time_ms([&] { r = ref->detect(px, 0.0f); }));
                   acc.add(c, r);
                   append_coco_results(c, im.id, map, a.max_dets, cres);
                   append_coco_results(r, im.id, map, a.max_dets, rres);
                   ids.push_back(im.id);
                 });
  CompareReport rep;
  rep.candidate = RunInfo{a.candidate, cand->backend(), a.data.name(), static_cast<int64_t>(ids.size())};
  rep.reference = RunInfo{a.reference, ref->backend(), a.data.name(), static_cast<int64_t>(ids.size())};
  rep.options = acc.options();
  rep.agreement = acc.stats();
  rep.candidate_coco = evaluate_coco_bbox(ds, cres, ids);
  rep.reference_coco = evaluate_coco_bbox(ds, rres, ids);
  double csum = 0, rsum = 0;
  for (double x : cms) csum += x;
  for (double x : rms) rsum += x;
  rep.candidate_timings = Timings::from(cms, csum / 1000);
  rep.reference_timings = Timings::from(rms, rsum / 1000);
  if (!a.json_path.empty()) write_report(a.json_path, to_json(rep).dump(1) + "\n");
  std::string md = to_markdown(rep);
  if (!a.markdown_path.empty()) write_report(a.markdown_path, md);
  std::fputs(md.c_str(), stdout);
}

}  // namespace

void register_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* sub = app.add_subcommand("compare", "detection agreement of a candidate bundle with a reference bundle");
  sub->add_option("candidate", a->candidate, "the bundle under test")->required()->check(CLI::ExistingFile);
  sub->add_option("reference", a->reference, "the reference bundle")->required()->check(CLI::ExistingFile);
  detforge::cli::add_dataset_options(sub, a->data);
  sub->add_option("--threshold", a->threshold, "score threshold for agreement (both sides)");
  sub->add_option("--backend", a->backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--reference-backend", a->reference_backend, "backend of the reference (default: --backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--threads", a->threads, "CPU threads (0 = all cores)");
  sub->add_option("--limit", a->limit, "the first N images only");
  sub->add_option("--max-dets", a->max_dets, "detections per image for AP (COCO: 100)");
  sub->add_option("--json", a->json_path, "write the report as JSON");
  sub->add_option("--markdown", a->markdown_path, "write the report as Markdown");
  sub->add_flag("--quiet", a->quiet, "no progress line");
  sub->callback([a] { run_compare(*a); });
}
