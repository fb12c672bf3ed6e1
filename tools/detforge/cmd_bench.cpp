// detforge bench model.bundle [--backend cpu|cuda] [--batch N] [--precision P] [--warmup W]
//                [--iters N] [--profile] [--profile-e2e] [--json FILE]
// Engine time: on CUDA, CUDA events around the captured graph launch alone; on the CPU, the host
// clock around Engine::run (src/bench/engine_bench). End-to-end: Detector::detect_batch from
// decoded 640x480 images to detections (preprocess + upload + run + download + post-process).
// Stability rule: the medians of the first and second half of the timed runs differ by <= 5 %.
#include <algorithm>
#include <chrono>
#include <memory>

#include "backends/engine.h"
#include "bench/engine_bench.h"
#include "bench/environment.h"
#include "bench/kernel_profile.h"
#include "bench/latency.h"
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
  bool profile = false, profile_ops = false, profile_e2e = false, skip_e2e = false;
};

// A deterministic textured image (content does not change the cost).
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

void print_stats(const char* what, const bench::LatencyStats& s) {
  std::printf("%-7s p50 %8.3f ms  p95 %8.3f ms  min %8.3f ms  %s\n", what, s.p50, s.p95, s.min,
              s.stable ? "stable" : "UNSTABLE (half-to-half median change > 5%)");
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
  cmd->add_flag("--profile", a->profile, "CUDA: kernel count and time per kernel group (CUPTI)");
  cmd->add_flag("--profile-ops", a->profile_ops,
                "CUDA: kernel time per op from eager forwards (CUPTI external correlation); the 25 largest are printed");
  cmd->add_flag("--skip-e2e", a->skip_e2e, "time the engine only (no end-to-end detect() runs)");
  cmd->add_flag("--profile-e2e", a->profile_e2e,
                "CUDA: the device's timeline of one detect() call (uploads, preprocessing, graph, downloads; CUPTI)");
  cmd->add_option("--json", a->json_out, "write the result as JSON");
  cmd->callback([a]() {
    if (!a->json_out.empty()) check_output_path(a->json_out);
    LoadedBundle lb = load_bundle_graph(a->bundle);
    const auto& in = lb.graph.tensor(lb.graph.inputs[0]).shape;
    EngineOptions eo;
    eo.max_batch = a->batch;
    eo.threads = a->threads;
    eo.precision = !a->precision.empty() ? a->precision
                   : a->backend == "cpu" ? "fp32"
                                         : lb.header.value("precision", "fp32");
    note("bench: compiling engine (" + a->backend + ", " + eo.precision + ", batch " + std::to_string(a->batch) + ")");
    const auto t_load = std::chrono::steady_clock::now();
    auto engine = make_engine(a->backend, lb.graph, eo);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    std::printf("engine load %.1f s (plans, kernel builds and graph capture)\n", load_s);
    std::vector<float> pixels(static_cast<size_t>(a->batch) * in[0] * in[1] * in[2]);
    uint32_t x = 7;
    for (auto& v : pixels) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 24) / 255.f;
    }
    auto eng = bench::bench_engine(*engine, pixels.data(), a->batch, a->warmup, a->iters);
    nlohmann::json out = {{"bundle", a->bundle}, {"backend", a->backend}, {"precision", eo.precision},
                          {"batch", a->batch}, {"warmup", a->warmup}, {"iters", a->iters}};
    out["engine"] = bench::to_json(eng);
    out["engine_load_s"] = load_s;
    out["engine_ms"] = bench::to_json(eng.engine);
    out["images_per_s"] = eng.images_per_s;
    out["engine_ms_p50"] = eng.engine.p50;
    out["engine_ms_p95"] = eng.engine.p95;
    if (a->profile) {
      auto prof = bench::cuda_profile_forward(*engine, a->batch);
      out["profile"] = bench::to_json(prof);
      if (prof.available) out["kernels_per_forward"] = prof.kernels_per_forward;
      if (prof.available) {
        std::printf("profile: %.0f kernels per forward, %.3f ms GPU time\n", prof.kernels_per_forward,
                    prof.gpu_ms_per_forward);
        for (auto& [g, ms] : prof.group_ms)
          std::printf("  %-20s %8.3f ms  %5.0f kernels\n", g.c_str(), ms, prof.group_count[g]);
      } else {
        std::printf("profile: unavailable (%s)\n", prof.why.c_str());
      }
    }
    if (a->profile_ops) {
      auto prof = bench::cuda_profile_ops(*engine, a->batch);
      out["op_profile"] = bench::to_json(prof);
      if (prof.available) {
        auto ops = prof.ops;
        double sum = 0;
        for (auto& o : ops) sum += o.ms;
        std::sort(ops.begin(), ops.end(), [](auto& x, auto& y) { return x.ms > y.ms; });
        std::printf("op profile (eager, one stream): %.3f ms kernel time in %zu ops; largest:\n", sum, ops.size());
        for (size_t k = 0; k < ops.size() && k < 25; ++k)
          std::printf("  %4d %-14s %7.1f us %3.0f kernels  %s\n", ops[k].index, ops[k].kind.c_str(), ops[k].ms * 1e3,
                      ops[k].kernels, ops[k].name.c_str());
      } else {
        std::printf("op profile: unavailable (%s)\n", prof.why.c_str());
      }
    }
    if (eng.graph_streams > 0)
      std::printf("graph: %d nodes, ops on %d streams with %d cross-stream waits; graph check: %s\n",
                  eng.graph_nodes, eng.graph_streams, eng.graph_waits, eng.graph_check.c_str());
    engine.reset();
    out["stability_rule"] = "medians of the first and second half of the timed runs differ by <= 5%";
    out["env"] = bench::capture_environment();
    print_stats("engine", eng.engine);
    std::printf("images/s (engine) %.1f\n", eng.images_per_s);
    if (a->skip_e2e) {
      if (!a->json_out.empty()) write_file_atomically(a->json_out, out.dump(2) + "\n");
      return;
    }

    DetectorOptions dopt;
    dopt.backend = a->backend;
    dopt.max_batch = a->batch;
    dopt.threads = a->threads;
    dopt.precision = a->precision;
    auto det = Detector::load(a->bundle, dopt);
    std::vector<ImageU8> images(a->batch, bench_image(640, 480));
    auto e2e = bench::summarize(bench::time_host([&] { det->detect_batch(images, 0.5f); }, a->warmup, a->iters));
    out["e2e_ms"] = bench::to_json(e2e);
    out["e2e_ms_p50"] = e2e.p50;
    print_stats("e2e", e2e);
    if (a->profile_e2e && a->backend == "cuda") {
      auto prof = bench::cuda_profile_calls([&] { det->detect_batch(images, 0.5f); });
      out["e2e_profile"] = bench::to_json(prof);
      if (prof.available)
        std::printf("e2e profile: the device busy %.3f ms over a %.3f ms span of the call's %.3f ms (p50); copies "
                    "%.3f ms, %.0f kernels\n",
                    prof.busy_us * 1e-3, prof.span_us * 1e-3, e2e.p50, prof.group_ms["copies"], prof.kernels_per_forward);
      else
        std::printf("e2e profile: unavailable (%s)\n", prof.why.c_str());
    } else if (a->profile_e2e) {
      std::printf("e2e profile: unavailable (the %s backend has no device timeline)\n", a->backend.c_str());
    }
    if (a->batch == 1) {
      // The same image through run_raw(): upload, device preprocessing, engine and the download of
      // every output (all logits and boxes), no post-processing. With the device-side top-k (CUDA,
      // DETFORGE_CUDA_GPU_SELECT=1, the default) detect() downloads only the selected entries, so it
      // can be below this; with it off, e2e minus this is detect()'s host post-processing.
      auto raw = bench::summarize(bench::time_host([&] { det->run_raw(images[0]); }, a->warmup, a->iters));
      out["e2e_raw_ms"] = bench::to_json(raw);
      out["e2e_raw_ms_p50"] = raw.p50;
      print_stats("e2e raw (all outputs downloaded, no post-processing)", raw);
    }
    if (!a->json_out.empty()) write_file_atomically(a->json_out, out.dump(2) + "\n");
  });
}

}  // namespace detforge::cli
