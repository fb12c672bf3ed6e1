// detforge eval MODEL.bundle --dataset DIR [--backend cpu|cuda] [--limit N] [--json F] [--markdown F]
// COCO bbox AP of a bundle on a COCO dataset, computed as pycocotools' COCOeval does.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/atomic_file.h"
#include "detforge/detector.h"
#include "detforge/image.h"
#include "eval/dataset_runner.h"
#include "tools/detforge/dataset_options.h"

namespace {

struct EvalArgs {
  std::string model;
  detforge::eval::DatasetSource data;
  std::string backend = "cpu";
  int threads = 0;
  int64_t limit = 0;
  int max_dets = 100;
  std::string json_path, markdown_path, results_path;
  bool quiet = false;
};

void run_eval(const EvalArgs& a) {
  using namespace detforge;
  using namespace detforge::eval;
  for (const std::string& p : {a.json_path, a.markdown_path, a.results_path})
    if (!p.empty()) check_output_path(p);  // fail before minutes of work, not after
  if (a.max_dets < 1) throw Error("--max-dets must be at least 1");
  CocoDataset ds = a.data.load();
  DetectorOptions opt;
  opt.backend = a.backend;
  opt.threads = a.threads;
  std::unique_ptr<Detector> det = Detector::load(a.model, opt);
  std::vector<CocoResult> results;
  EvalReport rep = run_coco_eval(*det, ds, [](const std::filesystem::path& p) { return load_image(p.string()); },
                                 EvalOptions{a.limit, a.max_dets, !a.quiet},
                                 RunInfo{a.model, det->backend(), a.data.name(), 0}, &results);
  if (!a.results_path.empty()) save_coco_results(results, a.results_path);
  if (!a.json_path.empty()) write_report(a.json_path, to_json(rep).dump(1) + "\n");
  std::string md = to_markdown(rep);
  if (!a.markdown_path.empty()) write_report(a.markdown_path, md);
  std::fputs(md.c_str(), stdout);
}

}  // namespace

void register_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "COCO bbox AP of a bundle on a COCO dataset (as pycocotools computes it)");
  sub->add_option("model", a->model, "the bundle")->required()->check(CLI::ExistingFile);
  detforge::cli::add_dataset_options(sub, a->data);
  sub->add_option("--backend", a->backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--threads", a->threads, "CPU threads (0 = all cores)");
  sub->add_option("--limit", a->limit, "evaluate the first N images only (AP over those images)");
  sub->add_option("--max-dets", a->max_dets, "detections kept per image, best first (COCO: 100)");
  sub->add_option("--json", a->json_path, "write the report as JSON");
  sub->add_option("--markdown", a->markdown_path, "write the report as Markdown");
  sub->add_option("--results", a->results_path, "write the detections as a COCO results file");
  sub->add_flag("--quiet", a->quiet, "no progress line");
  sub->callback([a] { run_eval(*a); });
}
