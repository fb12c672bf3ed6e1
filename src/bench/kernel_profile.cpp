#include "bench/kernel_profile.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>

#include "backends/engine.h"
#include "detforge/types.h"

#ifdef DETFORGE_HAVE_CUDA
#include "backends/cuda/cuda_engine.h"
#endif
#if defined(DETFORGE_HAVE_CUDA) && defined(DETFORGE_HAVE_CUPTI)
#include <cupti.h>
#endif

namespace detforge::bench {

std::string kernel_group(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  // Our own kernels first (names from backends/cuda/kernels/*.cu).
  if (has("row_mlp")) return "gemm";  // linear chains (+ their LayerNorm / box epilogue)
  if (has("small_linear")) return "gemm";  // linears with K <= 8 or N <= 8
  if (has("tile_linear")) return "gemm";   // latency-bound linears of a few hundred rows
  if (has("layer_norm")) return "normalization";
  if (has("ms_deform_attn")) return "deformable_sampling";
  if (has("attention") || has("fmha") || has("flash")) return "attention";
  if (has("quant") || has("fp8") || has("e4m3")) return "quantize";
  if (has("bias_act") || has("add_act") || has("mul_rows") || has("box_refine") || has("upsample") ||
      has("pool_k") || has("pool_vec") || has("concat") || has("gather_rows") || has("topk_rows") || has("_f32_k") ||
      has("from_f32") || has("nonfinite") || has("elementwise"))
    return "elementwise";
  // cuDNN convolutions (Hopper: sm90_xmma_fprop_*, implicit_convolve_*, *winograd*, *conv*).
  if (has("fprop") || has("conv") || has("winograd") || has("cudnn") || has("nhwc") || has("dgrad"))
    return "convolution";
  // cuBLASLt GEMMs (nvjet_*, sm90_xmma_gemm_*, cutlass *gemm*).
  if (has("gemm") || has("nvjet") || has("cutlass") || has("cublas") || has("Kernel2")) return "gemm";
  if (has("[memcpy") || has("[memset]")) return "copies";
  return "other";
}

nlohmann::json to_json(const KernelProfile& p) {
  nlohmann::json j = {{"available", p.available}};
  if (!p.available) {
    j["why"] = p.why;
    return j;
  }
  j["forwards"] = p.forwards;
  j["kernels_per_forward"] = p.kernels_per_forward;
  j["gpu_ms_per_forward"] = p.gpu_ms_per_forward;
  j["group_ms"] = p.group_ms;
  j["group_count"] = p.group_count;
  nlohmann::json top = nlohmann::json::array();
  for (auto& [n, ms] : p.top_kernels) top.push_back({{"name", n}, {"ms", ms}});
  j["top_kernels"] = top;
  if (!p.ops.empty()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& o : p.ops)
      ops.push_back({{"index", o.index}, {"op", o.name}, {"kind", o.kind}, {"ms", o.ms}, {"kernels", o.kernels},
                     {"kernel", o.kernel}});
    j["ops"] = ops;
  }
  if (!p.timeline.empty()) {
    nlohmann::json t = nlohmann::json::array();
    for (const auto& k : p.timeline)
      t.push_back({{"name", k.name}, {"start_us", k.start_us}, {"dur_us", k.dur_us}, {"stream", k.stream}});
    j["timeline"] = {{"span_us", p.span_us}, {"busy_us", p.busy_us}, {"idle_us", p.span_us - p.busy_us},
                     {"kernels", t}};
  }
  return j;
}

#if defined(DETFORGE_HAVE_CUDA) && defined(DETFORGE_HAVE_CUPTI)
namespace {

struct Record {
  std::string name;
  double ms;
  uint32_t correlation = 0;
  uint64_t start = 0, end = 0;  // ns, GPU timestamps
  uint32_t stream = 0;
};
std::mutex g_mu;
std::vector<Record>* g_records = nullptr;
std::map<uint32_t, uint64_t>* g_external = nullptr;  // correlation id -> external id (op + 2)

void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buf = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (!g_records) continue;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        g_records->push_back(
            {k->name ? k->name : "?", (k->end - k->start) * 1e-6, k->correlationId, k->start, k->end, k->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        // The direction names the copy in timelines: the e2e profile's uploads and downloads.
        const char* name = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "[memcpy HtoD]"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "[memcpy DtoH]"
                                                                            : "[memcpy]";
        g_records->push_back({name, (m->end - m->start) * 1e-6, m->correlationId, m->start, m->end, m->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        g_records->push_back({"[memset]", (m->end - m->start) * 1e-6, m->correlationId, m->start, m->end, m->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* x = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(rec);
        if (g_external) (*g_external)[x->correlationId] = x->externalId;
        break;
      }
      default: break;
    }
  }
  std::free(buf);
}

}  // namespace
#endif

#if defined(DETFORGE_HAVE_CUDA) && defined(DETFORGE_HAVE_CUPTI)
namespace {

void check(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) {
    const char* s = nullptr;
    cuptiGetResultString(r, &s);
    throw Error(std::string("CUPTI ") + what + ": " + (s ? s : "?"));
  }
}

// Runs `body` with CUPTI activity collection on; returns the records (and the external
// correlation map when `external` is given).
std::vector<Record> collect(const std::function<void()>& body, std::map<uint32_t, uint64_t>* external) {
  cudaDeviceSynchronize();
  std::vector<Record> recs;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records = &recs;
    g_external = external;
  }
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
  if (external) {
    // External correlation records come with API records: both API kinds (cuDNN and cuBLASLt
    // launch through the driver API, our kernels through the runtime) are on while tagging.
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), "enable correlation");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime API records");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "enable driver API records");
  }
  body();
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(1);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
  if (external) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records = nullptr;
    g_external = nullptr;
  }
  return recs;
}

void summarize(KernelProfile& p, const std::vector<Record>& recs, int forwards) {
  p.available = true;
  p.forwards = forwards;
  std::map<std::string, double> by_name;
  int kernels = 0;
  double total = 0;
  for (auto& r : recs) {
    const std::string g = kernel_group(r.name);
    p.group_ms[g] += r.ms / forwards;
    p.group_count[g] += 1.0 / forwards;
    by_name[r.name] += r.ms / forwards;
    total += r.ms;
    if (r.name[0] != '[') ++kernels;
  }
  p.kernels_per_forward = static_cast<double>(kernels) / forwards;
  p.gpu_ms_per_forward = total / forwards;
  p.top_kernels.assign(by_name.begin(), by_name.end());
  std::sort(p.top_kernels.begin(), p.top_kernels.end(), [](auto& a, auto& b) { return a.second > b.second; });
  if (p.top_kernels.size() > 15) p.top_kernels.resize(15);
}

// The last `per_forward` records in start order as p.timeline, with the span and busy time.
void timeline(KernelProfile& p, std::vector<Record> recs, size_t per_forward) {
  std::sort(recs.begin(), recs.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
  if (per_forward == 0 || recs.size() < per_forward) return;
  const size_t first = recs.size() - per_forward;
  const uint64_t t0 = recs[first].start;
  uint64_t end = t0, busy = 0, last = t0;
  for (size_t i = first; i < recs.size(); ++i) {
    const Record& r = recs[i];
    p.timeline.push_back({r.name, (r.start - t0) * 1e-3, (r.end - r.start) * 1e-3, r.stream});
    if (r.end > last) busy += r.end - std::max(r.start, last), last = r.end;
    end = std::max(end, r.end);
  }
  p.span_us = (end - t0) * 1e-3;
  p.busy_us = busy * 1e-3;
}

// The CUDA engine to profile at `batch` (plans and graph ready), or null with p.why set.
cuda::CudaEngine* profiled_engine(Engine& engine, int batch, KernelProfile& p) {
  auto* e = dynamic_cast<cuda::CudaEngine*>(&engine);
  if (!e) {
    p.why = "engine is not the CUDA backend";
    return nullptr;
  }
  e->prepare(batch);
  return e;
}

}  // namespace
#elif !defined(DETFORGE_HAVE_CUDA)
#define DETFORGE_PROFILE_UNAVAILABLE "built without CUDA"
#else
#define DETFORGE_PROFILE_UNAVAILABLE "built without CUPTI"
#endif

KernelProfile cuda_profile_forward(Engine& engine, int batch, int forwards) {
  KernelProfile p;
#ifndef DETFORGE_PROFILE_UNAVAILABLE
  auto* e = profiled_engine(engine, batch, p);
  if (!e) return p;
  auto recs = collect([&] {
    for (int i = 0; i < forwards; ++i) e->launch(batch);
  }, nullptr);
  summarize(p, recs, forwards);
  if (forwards > 0 && recs.size() % forwards == 0) timeline(p, recs, recs.size() / forwards);
#else
  (void)engine, (void)batch, (void)forwards;
  p.why = DETFORGE_PROFILE_UNAVAILABLE;
#endif
  return p;
}

KernelProfile cuda_profile_calls(const std::function<void()>& body, int calls) {
  KernelProfile p;
#ifndef DETFORGE_PROFILE_UNAVAILABLE
  auto recs = collect([&] {
    for (int i = 0; i < calls; ++i) body();
  }, nullptr);
  summarize(p, recs, calls);
  if (calls > 0 && recs.size() % calls == 0) timeline(p, recs, recs.size() / calls);
#else
  (void)body, (void)calls;
  p.why = DETFORGE_PROFILE_UNAVAILABLE;
#endif
  return p;
}

KernelProfile cuda_profile_ops(Engine& engine, int batch, int forwards) {
  KernelProfile p;
#ifndef DETFORGE_PROFILE_UNAVAILABLE
  auto* e = profiled_engine(engine, batch, p);
  if (!e) return p;
  std::map<uint32_t, uint64_t> external;
  auto hook = [](int op, bool before) {
    if (before) {
      check(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, uint64_t(op + 2)),
            "push correlation id");
    } else {
      uint64_t last = 0;
      check(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
            "pop correlation id");
    }
  };
  auto recs = collect([&] {
    for (int i = 0; i < forwards; ++i) e->run_eager_hooked(batch, hook);
  }, &external);
  summarize(p, recs, forwards);
  const auto& g = e->graph();
  p.ops.resize(g.ops.size() + 1);
  p.ops[0].index = -1;
  p.ops[0].name = "input conversion";
  p.ops[0].kind = "convert";
  for (size_t i = 0; i < g.ops.size(); ++i) {
    p.ops[i + 1].index = static_cast<int>(i);
    p.ops[i + 1].name = g.ops[i].name;
    p.ops[i + 1].kind = graph::op_kind_name(g.ops[i].kind);
  }
  std::vector<double> longest(p.ops.size(), 0);
  for (const auto& r : recs) {
    auto it = external.find(r.correlation);
    if (it == external.end() || it->second < 1 || it->second - 1 >= p.ops.size()) continue;
    const size_t k = it->second - 1;
    p.ops[k].ms += r.ms / forwards;
    if (r.name[0] != '[') p.ops[k].kernels += 1.0 / forwards;
    if (r.ms > longest[k]) longest[k] = r.ms, p.ops[k].kernel = r.name;
  }
#else
  (void)engine, (void)batch, (void)forwards;
  p.why = DETFORGE_PROFILE_UNAVAILABLE;
#endif
  return p;
}

}  // namespace detforge::bench
