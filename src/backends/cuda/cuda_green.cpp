#include "backends/cuda/cuda_green.h"

#include <cuda.h>

#include <type_traits>

#include "backends/cuda/cuda_check.h"

namespace detforge::cuda {

namespace {

// The driver functions used here, looked up once (nullptr when the driver lacks one).
struct Driver {
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetDevResource) get_resource = nullptr;
  decltype(&cuDevSmResourceSplitByCount) split = nullptr;
  decltype(&cuDevResourceGenerateDesc) make_desc = nullptr;
  decltype(&cuGreenCtxCreate) create = nullptr;
  decltype(&cuGreenCtxDestroy) destroy = nullptr;
  decltype(&cuGreenCtxStreamCreate) stream_create = nullptr;
  decltype(&cuCtxFromGreenCtx) as_ctx = nullptr;
  decltype(&cuCtxPushCurrent) push = nullptr;
  decltype(&cuCtxPopCurrent) pop = nullptr;
  decltype(&cuEventCreate) event_create = nullptr;
  decltype(&cuStreamDestroy) stream_destroy = nullptr;
  std::string missing;  // the first function not found
};

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    auto look = [&r](const char* name, auto* fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion(name, &p, CUDA_VERSION, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess || !p) {
        cudaGetLastError();
        if (r.missing.empty()) r.missing = name;
        return;
      }
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
    };
    look("cuDeviceGet", &r.device_get);
    look("cuDeviceGetDevResource", &r.get_resource);
    look("cuDevSmResourceSplitByCount", &r.split);
    look("cuDevResourceGenerateDesc", &r.make_desc);
    look("cuGreenCtxCreate", &r.create);
    look("cuGreenCtxDestroy", &r.destroy);
    look("cuGreenCtxStreamCreate", &r.stream_create);
    look("cuCtxFromGreenCtx", &r.as_ctx);
    look("cuCtxPushCurrent", &r.push);
    look("cuCtxPopCurrent", &r.pop);
    look("cuEventCreate", &r.event_create);
    look("cuStreamDestroy", &r.stream_destroy);
    return r;
  }();
  return d;
}

std::string failed(const char* step, CUresult r) {
  return std::string(step) + " failed (CUresult " + std::to_string(static_cast<int>(r)) + ")";
}

}  // namespace

GreenStream::GreenStream(int device, int min_sms) {
  const Driver& d = driver();
  if (!d.missing.empty()) {
    problem_ = "the CUDA driver has no " + d.missing + " (green contexts need CUDA 12.4 or later)";
    return;
  }
  if (min_sms <= 0) {
    problem_ = "no SMs asked for";
    return;
  }
  DF_CUDA(cudaFree(nullptr));  // the primary context exists before a green one retains it
  CUdevice dev = 0;
  CUdevResource all{}, part{};
  CUdevResourceDesc desc = nullptr;
  unsigned groups = 1;
  CUgreenCtx g = nullptr;
  CUstream st = nullptr;
  CUresult r = d.device_get(&dev, device);
  if (r != CUDA_SUCCESS) {
    problem_ = failed("cuDeviceGet", r);
    return;
  }
  r = d.get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
  if (r != CUDA_SUCCESS) {
    problem_ = failed("cuDeviceGetDevResource", r);
    return;
  }
  if (static_cast<unsigned>(min_sms) >= all.sm.smCount) {
    problem_ = std::to_string(min_sms) + " SMs asked for, the GPU has " + std::to_string(all.sm.smCount);
    return;
  }
  r = d.split(&part, &groups, &all, nullptr, 0, static_cast<unsigned>(min_sms));
  if (r != CUDA_SUCCESS || groups < 1) {
    problem_ = r != CUDA_SUCCESS ? failed("cuDevSmResourceSplitByCount", r) : "the SMs could not be split";
    return;
  }
  if ((r = d.make_desc(&desc, &part, 1)) != CUDA_SUCCESS) {
    problem_ = failed("cuDevResourceGenerateDesc", r);
    return;
  }
  if ((r = d.create(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS) {
    problem_ = failed("cuGreenCtxCreate", r);
    return;
  }
  if ((r = d.stream_create(&st, g, CU_STREAM_NON_BLOCKING, 0)) != CUDA_SUCCESS) {
    problem_ = failed("cuGreenCtxStreamCreate", r);
    d.destroy(g);
    return;
  }
  ctx_ = g;
  stream_ = st;
  sms_ = static_cast<int>(part.sm.smCount);
}

GreenStream::~GreenStream() {
  const Driver& d = driver();
  if (stream_) d.stream_destroy(stream_);
  if (ctx_) d.destroy(static_cast<CUgreenCtx>(ctx_));
}

cudaEvent_t GreenStream::make_event() const {
  if (!ctx_) throw Error("cuda backend: no green context to make an event in: " + problem_);
  const Driver& d = driver();
  CUcontext c = nullptr;
  CUresult r = d.as_ctx(&c, static_cast<CUgreenCtx>(ctx_));
  if (r != CUDA_SUCCESS) throw Error("cuda backend: " + failed("cuCtxFromGreenCtx", r));
  if ((r = d.push(c)) != CUDA_SUCCESS) throw Error("cuda backend: " + failed("cuCtxPushCurrent", r));
  CUevent ev = nullptr;
  r = d.event_create(&ev, CU_EVENT_DISABLE_TIMING);
  CUcontext popped = nullptr;
  d.pop(&popped);
  if (r != CUDA_SUCCESS) throw Error("cuda backend: " + failed("cuEventCreate in the green context", r));
  return ev;
}

}  // namespace detforge::cuda
