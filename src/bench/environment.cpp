#include "bench/environment.h"

#include <dlfcn.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#ifdef DETFORGE_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#endif

namespace detforge::bench {

namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "";
}

#ifdef DETFORGE_HAVE_CUDA
// NVML through dlopen: clocks now and at most, GPU temperature; null when libnvidia-ml is absent.
nlohmann::json nvml_clocks(int device) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return nullptr;
  using Init = int (*)();
  using Handle = int (*)(unsigned, void**);
  using Clock = int (*)(void*, int, unsigned*);
  using Temp = int (*)(void*, int, unsigned*);
  auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
  auto handle = reinterpret_cast<Handle>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto clock = reinterpret_cast<Clock>(dlsym(lib, "nvmlDeviceGetClockInfo"));
  auto maxclock = reinterpret_cast<Clock>(dlsym(lib, "nvmlDeviceGetMaxClockInfo"));
  auto temp = reinterpret_cast<Temp>(dlsym(lib, "nvmlDeviceGetTemperature"));
  nlohmann::json j = nullptr;
  void* h = nullptr;
  if (init && handle && clock && init() == 0 && handle(static_cast<unsigned>(device), &h) == 0) {
    unsigned sm = 0, mem = 0, smmax = 0, t = 0;
    j = nlohmann::json::object();
    if (clock(h, 1 /*SM*/, &sm) == 0) j["sm_clock_mhz"] = sm;
    if (clock(h, 2 /*MEM*/, &mem) == 0) j["mem_clock_mhz"] = mem;
    if (maxclock && maxclock(h, 1, &smmax) == 0) j["sm_clock_max_mhz"] = smmax;
    if (temp && temp(h, 0 /*GPU*/, &t) == 0) j["gpu_temp_c"] = t;
  }
  dlclose(lib);
  return j;
}
#endif

}  // namespace

nlohmann::json capture_environment([[maybe_unused]] int device) {
  nlohmann::json env;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  env["host"] = host;
  env["cpu"] = cpu_model();
  env["cpu_threads"] = std::thread::hardware_concurrency();
#ifdef DETFORGE_HAVE_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) == cudaSuccess) {
    env["gpu"] = p.name;
    env["gpu_sm_count"] = p.multiProcessorCount;
    env["gpu_memory_gib"] = static_cast<double>(p.totalGlobalMem) / (1ull << 30);
    env["compute_capability"] = std::to_string(p.major) + "." + std::to_string(p.minor);
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) == cudaSuccess) env["sm_clock_peak_mhz"] = khz / 1000;
  } else {
    cudaGetLastError();
    env["gpu"] = nullptr;
  }
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  env["cuda_driver_api"] = std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10);
  env["cuda_runtime"] = std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
  const size_t dn = cudnnGetVersion();
  env["cudnn"] = std::to_string(dn / 10000) + "." + std::to_string(dn % 10000 / 100) + "." + std::to_string(dn % 100);
  env["cublaslt"] = cublasLtGetVersion();
  auto nv = nvml_clocks(device);
  if (!nv.is_null()) env["nvml"] = nv;
  {
    std::ifstream f("/proc/driver/nvidia/version");
    std::string line;
    if (std::getline(f, line)) env["driver"] = line;
  }
#endif
  return env;
}

}  // namespace detforge::bench
