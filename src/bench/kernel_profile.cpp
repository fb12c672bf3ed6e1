#include "bench/kernel_profile.h"

#include <algorithm>
#include <cstdlib>
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
  if (has("[memcpy]") || has("[memset]")) return "copies";
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
  return j;
}

#if defined(DETFORGE_HAVE_CUDA) && defined(DETFORGE_HAVE_CUPTI)
namespace {

struct Record {
  std::string name;
  double ms;
};
std::mutex g_mu;
std::vector<Record>* g_records = nullptr;

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
        g_records->push_back({k->name ? k->name : "?", (k->end - k->start) * 1e-6});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        g_records->push_back({"[memcpy]", (m->end - m->start) * 1e-6});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        g_records->push_back({"[memset]", (m->end - m->start) * 1e-6});
        break;
      }
      default: break;
    }
  }
  std::free(buf);
}

}  // namespace
#endif

KernelProfile cuda_profile_forward(Engine& engine, int batch, int forwards) {
  KernelProfile p;
#if !defined(DETFORGE_HAVE_CUDA)
  (void)engine, (void)batch, (void)forwards;
  p.why = "built without CUDA";
#elif !defined(DETFORGE_HAVE_CUPTI)
  (void)engine, (void)batch, (void)forwards;
  p.why = "built without CUPTI";
#else
  auto* e = dynamic_cast<cuda::CudaEngine*>(&engine);
  if (!e) {
    p.why = "engine is not the CUDA backend";
    return p;
  }
  e->prepare(batch);
  cudaStreamSynchronize(e->stream());
  std::vector<Record> recs;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records = &recs;
  }
  auto check = [](CUptiResult r, const char* what) {
    if (r != CUPTI_SUCCESS) {
      const char* s = nullptr;
      cuptiGetResultString(r, &s);
      throw Error(std::string("CUPTI ") + what + ": " + (s ? s : "?"));
    }
  };
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
  for (int i = 0; i < forwards; ++i) e->launch(batch);
  cudaStreamSynchronize(e->stream());
  cuptiActivityFlushAll(1);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records = nullptr;
  }
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
#endif
  return p;
}

}  // namespace detforge::bench
