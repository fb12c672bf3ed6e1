// What a benchmark ran on: host, GPU, driver, CUDA runtime, cuDNN, cuBLASLt and clocks. The SM
// clock comes from NVML (loaded at run time, so no build dependency) when it is there, else the
// device's peak clock attribute.
#pragma once
#include <nlohmann/json.hpp>

namespace detforge::bench {

nlohmann::json capture_environment(int device = 0);

}  // namespace detforge::bench
