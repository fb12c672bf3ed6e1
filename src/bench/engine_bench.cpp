#include "bench/engine_bench.h"

#include "backends/engine.h"

#ifdef DETFORGE_HAVE_CUDA
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"
#endif

namespace detforge::bench {

BenchResult bench_engine(Engine& engine, const float* pixels, int batch, int warmup, int iters) {
  BenchResult r;
  r.backend = engine.backend_name();
  r.batch = batch;
  std::vector<double> ms;
#ifdef DETFORGE_HAVE_CUDA
  if (auto* e = dynamic_cast<cuda::CudaEngine*>(&engine)) {
    r.precision = e->precision();
    engine.run(pixels, batch);  // uploads the pixels, captures the graph for this batch
    r.graph_nodes = e->graph_nodes(batch);
    r.graph_streams = e->graph_streams(batch);
    r.graph_check = e->graph_check(batch);
    r.graph_waits = e->graph_waits(batch);
    r.graph_memsets_replaced = e->graph_memsets_replaced(batch);
    r.small_linears = e->small_linears(batch);
    r.box_steps = e->box_steps();
    r.ln_adds = e->ln_adds();
    r.upsample_concats = e->upsample_concats();
    const auto tune = e->tune_stats();
    r.tuned = tune.on;
    r.tune_cached = tune.cached;
    r.tune_timed = tune.timed;
    r.tune_cache = tune.file;
    const auto green = e->green_stats(batch);
    r.green_sms = green.sms;
    r.green_ops = green.ops;
    cudaEvent_t a, b;
    DF_CUDA(cudaEventCreate(&a));
    DF_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < warmup; ++i) e->launch(batch);
    DF_CUDA(cudaStreamSynchronize(e->stream()));
    ms.reserve(iters);
    for (int i = 0; i < iters; ++i) {
      DF_CUDA(cudaEventRecord(a, e->stream()));
      e->launch(batch);
      DF_CUDA(cudaEventRecord(b, e->stream()));
      DF_CUDA(cudaEventSynchronize(b));
      float t = 0;
      DF_CUDA(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
#endif
  if (ms.empty()) ms = time_host([&] { engine.run(pixels, batch); }, warmup, iters);
  r.engine = summarize(ms);
  r.images_per_s = r.engine.p50 > 0 ? batch * 1000.0 / r.engine.p50 : 0;
  return r;
}

nlohmann::json to_json(const BenchResult& r) {
  return {{"backend", r.backend}, {"precision", r.precision}, {"batch", r.batch}, {"engine", to_json(r.engine)},
          {"engine_ms_p50", r.engine.p50}, {"engine_ms_p95", r.engine.p95}, {"images_per_s", r.images_per_s},
          {"graph_nodes", r.graph_nodes}, {"graph_streams", r.graph_streams}, {"graph_waits", r.graph_waits},
          {"graph_memsets_replaced", r.graph_memsets_replaced}, {"small_linears", r.small_linears},
          {"graph_check", r.graph_check},
          {"tuning", {{"on", r.tuned}, {"cached", r.tune_cached}, {"timed", r.tune_timed}, {"cache", r.tune_cache}}},
          {"green", {{"sms", r.green_sms}, {"ops", r.green_ops}}},
          {"merged_launches", {{"box_steps", r.box_steps}, {"ln_adds", r.ln_adds}, {"upsample_concats", r.upsample_concats}}}};
}

}  // namespace detforge::bench
