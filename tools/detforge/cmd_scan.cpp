// detforge scan MODEL.bundle --dataset DIR [--stress] [--json F] [--markdown F] [--strict]
// Checks every raw output value of every image for NaN and Inf; with --stress adds inputs that
// provoke overflow. The backend records the first op with a non-finite output (check_finite).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/atomic_file.h"
#include "detforge/detector.h"
#include "detforge/image.h"
#include "eval/dataset_runner.h"
#include "eval/nonfinite_scan.h"
#include "eval/progress.h"
#include "tools/detforge/dataset_options.h"

namespace {

constexpr size_t kMaxListedImages = 50;

struct ScanArgs {
  std::string model;
  detforge::eval::DatasetSource data;
  std::string backend = "cpu";
  int threads = 0;
  int64_t limit = 0;
  bool stress = false;
  bool strict = false;
  bool quiet = false;
  std::string json_path, markdown_path;
};

void run_scan(const ScanArgs& a) {
  using namespace detforge;
  using namespace detforge::eval;
  for (const std::string& p : {a.json_path, a.markdown_path})
    if (!p.empty()) check_output_path(p);
  bool have_data = !a.data.dir.empty() || !a.data.annotations.empty() || !a.data.images.empty();
  if (!have_data && !a.stress) throw Error("nothing to scan: give --dataset DIR (or --annotations/--images) and/or --stress");
  DetectorOptions opt;
  opt.backend = a.backend;
  opt.threads = a.threads;
  opt.check_finite = true;
  std::unique_ptr<Detector> det = Detector::load(a.model, opt);

  NonFiniteScanner scanner;
  ScanReport rep;
  std::vector<double> ms;
  auto scan_one = [&](const std::string& name, const ImageU8& px) {
    RawOutputs out;
    ms.push_back(time_ms([&] { out = det->run_raw(px); }));
    if (!scanner.add(name, out) && rep.bad_images.size() < kMaxListedImages)
      rep.bad_images.push_back({name, count_nonfinite(out.logits.data(), out.logits.size()),
                                count_nonfinite(out.boxes.data(), out.boxes.size()), out.first_nonfinite_op});
  };
  double total = 0;
  if (have_data) {
    CocoDataset ds = a.data.load();
    total += for_each_image(select_images(ds, a.limit), ds,
                            [](const std::filesystem::path& p) { return load_image(p.string()); }, "scan", !a.quiet,
                            [&](const CocoImage& im, const ImageU8& px) { scan_one(im.file_name, px); });
  }
  if (a.stress) {
    auto stress = stress_images();
    Progress progress("stress", static_cast<int64_t>(stress.size()), a.quiet ? nullptr : stderr);
    for (const auto& [name, img] : stress) {
      total += time_ms([&] { scan_one(name, img); }) / 1000;
      progress.tick();
    }
  }
  rep.run = RunInfo{a.model, det->backend(), have_data ? a.data.name() : "(none)", scanner.summary().images};
  rep.stress = a.stress;
  rep.summary = scanner.summary();
  rep.timings = Timings::from(ms, total);
  if (!a.json_path.empty()) write_report(a.json_path, to_json(rep).dump(1) + "\n");
  std::string md = to_markdown(rep);
  if (!a.markdown_path.empty()) write_report(a.markdown_path, md);
  std::fputs(md.c_str(), stdout);
  if (a.strict && !rep.summary.clean())
    throw Error(std::to_string(rep.summary.images_with_bad) + " of " + std::to_string(rep.summary.images) +
                " images have non-finite outputs (first: " + rep.summary.first_bad_image + ")");
}

}  // namespace

void register_scan_command(CLI::App& app) {
  auto a = std::make_shared<ScanArgs>();
  CLI::App* sub = app.add_subcommand("scan", "check every output value for NaN and Inf");
  sub->add_option("model", a->model, "the bundle")->required()->check(CLI::ExistingFile);
  detforge::cli::add_dataset_options(sub, a->data);
  sub->add_option("--backend", a->backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--threads", a->threads, "CPU threads (0 = all cores)");
  sub->add_option("--limit", a->limit, "the first N dataset images only");
  sub->add_flag("--stress", a->stress, "add black, white, saturated-noise, 1x4000 and 4000x1 inputs");
  sub->add_flag("--strict", a->strict, "exit 1 when any value is not finite");
  sub->add_option("--json", a->json_path, "write the report as JSON");
  sub->add_option("--markdown", a->markdown_path, "write the report as Markdown");
  sub->add_flag("--quiet", a->quiet, "no progress line");
  sub->callback([a] { run_scan(*a); });
}
