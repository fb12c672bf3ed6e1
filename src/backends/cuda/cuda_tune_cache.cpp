// The tuning cache (DETFORGE_CUDA_TUNE_CACHE): the choices of the load-time tunings (each fused
// conv's cuDNN plan timed in the graph, CONV_TUNE_GRAPH and CONV_KNOBS; each conv's and linear's
// own kernel against the library, OWN_CONV) kept in a file per GPU, library versions and
// settings (core/choice_cache.h). Why: together those tunings measured 2.8 % faster at batch 1
// (H100, session 27: 0.643 against 0.662 ms), but timing every candidate costs ~11-13 s of engine
// load at batch 1 and ~75 s at batch 32; from the cache a load costs what the untuned one does
// (one plan built per conv, no timing: H100, session 31, 1.8-2.2 s against 2.0-2.4 s), which is
// what made DETFORGE_CUDA_TUNE=1 the default up to kTuneMaxBatch images (cuda_settings.h).
//
// A cached cuDNN plan is rebuilt from its engine and knob choices; if it no longer builds (another
// cuDNN would have another fingerprint, so this means a changed frontend) the conv is timed
// again. A cached own kernel is run once against the library's output on random inputs, as the
// timing would have checked it, so a stale entry can cost speed but never correctness.
#include <cublasLt.h>
#include <cudnn.h>

#include <chrono>
#include <cstdio>

#include "backends/cuda/conv_select.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/conv_direct.h"
#include "backends/cuda/kernels/conv_igemm.h"

namespace detforge::cuda {

namespace {

// Bump when an own kernel family changes speed enough that earlier choices should be timed again.
constexpr int kOwnKernelsRevision = 1;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// The own variant of this name that runs `s` here, -1 when none (renamed, removed, unsupported).
int own_variant_named(const std::string& name, const ConvShape& s, size_t ws_bytes) {
  int v = -1;
  for (int k = 0; k < conv_igemm_variants() && v < 0; ++k)
    if (name == conv_igemm_variant_name(k)) v = k;
  for (int k = 0; k < conv_direct_variants() && v < 0; ++k)
    if (name == conv_direct_variant_name(k)) v = kDirectVariantBase + k;
  return v >= 0 && own_conv_runs(s, v, ws_bytes) ? v : -1;
}

}  // namespace

bool CudaEngine::tunes() const {
  return half_ && (conv_tune_graph_ > 0 || conv_knobs_ > 0 || own_conv_ == OwnConvMode::fastest ||
                   own_conv_ == OwnConvMode::direct);
}

void CudaEngine::open_tune_cache() {
  if (!tunes() || tune_cache_dir_.empty()) return;
  cudaDeviceProp prop{};
  DF_CUDA(cudaGetDeviceProperties(&prop, device_));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ChoiceCache::Entry fp;
  fp["gpu"] = prop.name;
  fp["sm_count"] = std::to_string(prop.multiProcessorCount);
  fp["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  fp["cuda_driver"] = std::to_string(driver);
  fp["cuda_runtime"] = std::to_string(runtime);
  fp["cudnn"] = std::to_string(cudnnGetVersion());
  fp["cublaslt"] = std::to_string(cublasLtGetVersion());
  fp["own_kernels"] = std::to_string(kOwnKernelsRevision) + ":" + std::to_string(conv_igemm_variants()) + "+" +
                      std::to_string(conv_direct_variants());
  fp["settings"] = "conv_tune_graph=" + std::to_string(conv_tune_graph_) + " conv_knobs=" + std::to_string(conv_knobs_) +
                   " own_conv=" + std::to_string(static_cast<int>(own_conv_)) + " margin=" + num(own_conv_margin_) +
                   " ws0=" + std::to_string(conv_ws0_) + " workspace=" + std::to_string(workspace_bytes_) +
                   " deterministic=" + std::to_string(conv_plans_deterministic());
  tune_cache_ = ChoiceCache(tune_cache_dir_, "cuda-tune", fp);
  if (!tune_cache_.problem().empty())
    std::fprintf(stderr, "detforge: tuning cache: %s\n", tune_cache_.problem().c_str());
}

CudaEngine::TuneStats CudaEngine::tune_stats() const {
  TuneStats t;
  t.on = tunes();
  t.cached = tune_cached_;
  t.timed = tune_timed_;
  t.file = tune_cache_.file().string();
  t.problem = tune_cache_.problem();
  return t;
}

void CudaEngine::note_tuning(int batch) {
  if (tune_announced_ == batch) return;
  tune_announced_ = batch;
  std::fprintf(stderr,
               "detforge: timing kernel choices at batch %d (the first load with these settings on this GPU takes "
               "~12 s at batch 1 on an H100, ~75 s at batch 32; DETFORGE_CUDA_TUNE=0 skips it); %s\n",
               batch,
               tune_cache_.enabled() ? ("kept in " + tune_cache_.file().string()).c_str()
                                     : "not kept (DETFORGE_CUDA_TUNE_CACHE=0 or no cache folder)");
}

std::unique_ptr<FusedConv> CudaEngine::tuned_fused_conv(const std::string& key, const ConvShape& s, bool bias, bool res,
                                                        graph::Act act, bool res_after_act, size_t ws_limit,
                                                        ConvTune tune, std::string* why, int batch) {
  const std::string ckey = "conv|" + key + "|ws" + std::to_string(ws_limit);
  PlanPick pick, taken;
  tune.taken = &taken;
  const auto* e = tune_cache_.find(ckey);
  if (e && e->count("plan") && e->at("plan") == "heuristic") {  // none of the timed plans built last time
    ConvTune plain{0, tune.x, tune.w, tune.bias, tune.residual, tune.y, tune.ws, tune.stream};
    if (auto fc = make_fused_conv(cudnn_, s, bias, res, act, ws_limit, why, &plain, nullptr, res_after_act)) {
      ++tune_cached_;
      return fc;
    }
  } else if (e && e->count("plan") && PlanPick::parse(e->at("plan"), &pick)) {
    tune.pick = &pick;
    std::string cached_why;
    if (auto fc = make_fused_conv(cudnn_, s, bias, res, act, ws_limit, &cached_why, &tune, nullptr, res_after_act)) {
      ++tune_cached_;
      return fc;
    }
    std::fprintf(stderr, "detforge: tuning cache: %s (%s); timing it again\n", key.c_str(), cached_why.c_str());
    tune.pick = nullptr;
  }
  note_tuning(batch);
  auto fc = make_fused_conv(cudnn_, s, bias, res, act, ws_limit, why, &tune, nullptr, res_after_act);
  ++tune_timed_;
  if (fc) tune_cache_.put(ckey, {{"plan", taken.engine >= 0 ? taken.text() : "heuristic"}, {"name", fc->plan_name()}});
  return fc;
}

ConvChoice CudaEngine::own_choice(const std::string& key, const std::function<void()>& ref, const ConvShape& s,
                                  graph::Act act, const ConvBuffers& cb, OwnConvMode mode, int batch) {
  const bool cacheable = mode == OwnConvMode::fastest || mode == OwnConvMode::direct;
  const std::string okey = "own|" + key;
  if (const auto* e = cacheable ? tune_cache_.find(okey) : nullptr; e && e->count("variant")) {
    const std::string& name = e->at("variant");
    ConvChoice c;
    c.name = name;
    c.library_us = e->count("library_us") ? std::atof(e->at("library_us").c_str()) : 0;
    c.chosen_us = e->count("chosen_us") ? std::atof(e->at("chosen_us").c_str()) : 0;
    if (name == "library") {
      ++tune_cached_;
      return c;
    }
    c.variant = ref ? own_variant_named(name, s, cb.ws_bytes) : -1;
    if (c.variant >= 0) {  // the check the timing made: the same output as the library's
      const size_t ny = randomize_conv_inputs(s, cb.x, cb.res, cb.stream);
      ref();
      const auto want = download_half(cb.y, ny, cb.stream);
      run_own_conv(cb.x, cb.w, cb.bias, cb.res, cb.y, s, act, c.variant, cb.ws, cb.stream);
      if (halves_close(download_half(cb.y, ny, cb.stream), want)) {
        ++tune_cached_;
        return c;
      }
    }
    std::fprintf(stderr, "detforge: tuning cache: %s: own kernel %s %s; timing it again\n", key.c_str(), name.c_str(),
                 c.variant >= 0 ? "no longer matches the library" : "is not available here");
  }
  if (mode != OwnConvMode::off) note_tuning(batch);
  ConvChoice c = choose_conv(ref, s, act, cb, mode, own_conv_margin_);
  if (mode != OwnConvMode::off) ++tune_timed_;
  if (cacheable)
    tune_cache_.put(okey, {{"variant", c.variant >= 0 ? c.name : "library"},
                           {"library_us", num(c.library_us)},
                           {"chosen_us", num(c.chosen_us)}});
  return c;
}

void CudaEngine::save_tune_cache(int batch, double seconds) {
  if (tune_timed_ == tune_timed_reported_) return;
  std::fprintf(stderr, "detforge: timed %d kernel choices at batch %d in %.1f s\n", tune_timed_ - tune_timed_reported_,
               batch, seconds);
  tune_timed_reported_ = tune_timed_;
  if (!tune_cache_.save())
    std::fprintf(stderr, "detforge: tuning cache not saved: %s\n", tune_cache_.problem().c_str());
}

}  // namespace detforge::cuda
