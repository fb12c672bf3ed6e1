// detforge bench model.bundle [--backend cpu|cuda] [--batch N] [--warmup W] [--iters N] [--json FILE]
// Engine time: Engine::run on preprocessed pixels (host to host). End-to-end: Detector::detect_batch
// from decoded images to detections (preprocess + run + post-process). Reports p50/p95/min and a
// stability verdict: the medians of the first and second half of the samples differ by <= 5 %.
#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "backends/engine.h"
#include "core/atomic_file.h"
#include "detforge/detector.h"
#include "io/bundle_graph.h"
#include "tools/detforge/cli_util.h"
#include "tools/detforge/commands.h"

namespace detforge::cli {

namespace {

struct BenchArgs {
  std::string bundle, backend = "cpu", json_out, precision;
  int batch = 1, warmup = 5, iters = 30, threads = 0;
};

struct Stats {
  double p50 = 0, p95 = 0, min = 0, mean = 0, half_change = 0;
  bool stable = false;
};

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t i = static_cast<size_t>(pos);
  double f = pos - i;
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

Stats stats_of(const std::vector<double>& ms) {
  Stats s;
  s.p50 = pct(ms, 0.5);
  s.p95 = pct(ms, 0.95);
  s.min = *std::min_element(ms.begin(), ms.end());
  for (double x : ms) s.mean += x / ms.size();
  size_t h = ms.size() / 2;
  double a = pct({ms.begin(), ms.begin() + h}, 0.5), b = pct({ms.begin() + h, ms.end()}, 0.5);
  s.half_change = std::fabs(b - a) / std::max(1e-12, std::min(a, b));
  s.stable = s.half_change <= 0.05;
  return s;
}

nlohmann::json stats_json(const Stats& s) {
  return {{"p50", s.p50}, {"p95", s.p95}, {"min", s.min}, {"mean", s.mean}, {"half_to_half_change", s.half_change},
          {"stable", s.stable}};
}

template <class F>
std::vector<double> time_ms(int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> out;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    out.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

// A deterministic textured image of the model's aspect (content does not change the cost).
ImageU8 bench_image(int w, int h) {
  ImageU8 im;
  im.width = w;
  im.height = h;
  im.rgb.resize(static_cast<size_t>(w) * h * 3);
  uint32_t x = 12345;
  for (auto& v : im.rgb) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(x >> 24);
  }
  return im;
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Measure engine and end-to-end latency of a bundle");
  cmd->add_option("bundle", a->bundle, "bundle file")->required();
  cmd->add_option("--backend", a->backend, "cpu | cuda")->capture_default_str();
  cmd->add_option("--batch", a->batch, "images per run (1..64)")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--warmup", a->warmup, "untimed runs first")->capture_default_str()->check(CLI::Range(0, 100000));
  cmd->add_option("--iters", a->iters, "timed runs")->capture_default_str()->check(CLI::Range(2, 1000000));
  cmd->add_option("--threads", a->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--precision", a->precision, "override the bundle's precision (fp32 | fp16)");
  cmd->add_option("--json", a->json_out, "write the result as JSON");
  cmd->callback([a]() {
    if (!a->json_out.empty()) check_output_path(a->json_out);
    LoadedBundle lb = load_bundle_graph(a->bundle);
    const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
    EngineOptions eo;
    eo.max_batch = a->batch;
    eo.threads = a->threads;
    eo.precision = !a->precision.empty()  ? a->precision
                   : a->backend == "cpu"   ? "fp32"
                                           : lb.header.value("precision", "fp32");
    note("bench: compiling engine (" + a->backend + ", " + eo.precision + ", batch " + std::to_string(a->batch) + ")");
    auto engine = make_engine(a->backend, lb.graph, eo);
    std::vector<float> pixels(static_cast<size_t>(a->batch) * in[0] * in[1] * in[2], 0.5f);
    auto engine_ms = stats_of(time_ms(a->warmup, a->iters, [&] { engine->run(pixels.data(), a->batch); }));
    engine.reset();

    DetectorOptions dopt;
    dopt.backend = a->backend;
    dopt.max_batch = a->batch;
    dopt.threads = a->threads;
    dopt.precision = eo.precision;
    auto det = Detector::load(a->bundle, dopt);
    std::vector<ImageU8> images(a->batch, bench_image(640, 480));
    auto e2e_ms = stats_of(time_ms(a->warmup, a->iters, [&] { det->detect_batch(images, 0.5f); }));

    nlohmann::json out = {
        {"bundle", a->bundle}, {"backend", a->backend}, {"precision", eo.precision}, {"batch", a->batch},
        {"warmup", a->warmup}, {"iters", a->iters},
        {"threads", a->threads > 0 ? a->threads : static_cast<int>(std::thread::hardware_concurrency())},
        {"engine_ms", stats_json(engine_ms)}, {"e2e_ms", stats_json(e2e_ms)},
        {"images_per_s", 1000.0 * a->batch / engine_ms.p50},
        {"stability_rule", "medians of the first and second half of the timed runs differ by <= 5%"}};
    std::printf("engine  p50 %8.3f ms  p95 %8.3f ms  min %8.3f ms  %s\n", engine_ms.p50, engine_ms.p95, engine_ms.min,
                engine_ms.stable ? "stable" : "UNSTABLE (half-to-half median change > 5%)");
    std::printf("e2e     p50 %8.3f ms  p95 %8.3f ms  min %8.3f ms  %s\n", e2e_ms.p50, e2e_ms.p95, e2e_ms.min,
                e2e_ms.stable ? "stable" : "UNSTABLE (half-to-half median change > 5%)");
    std::printf("images/s (engine) %.1f\n", 1000.0 * a->batch / engine_ms.p50);
    if (!a->json_out.empty()) write_file_atomically(a->json_out, out.dump(2) + "\n");
  });
}

}  // namespace detforge::cli
