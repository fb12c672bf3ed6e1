// libFuzzer target: SafetensorsFile must either parse or throw detforge::Error, never crash,
// read out of bounds or throw anything else. After a successful parse every tensor is read.
#include <cstddef>
#include <cstdint>

#include "detforge/types.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = detforge::SafetensorsFile::from_bytes({data, size}, "fuzz.safetensors");
    volatile uint64_t sink = 0;
    for (const std::string& name : f.names()) {
      auto b = f.bytes(name);
      if (!b.empty()) sink = sink + b.front() + b.back();
      try {
        auto v = f.read_f32(name);
        if (!v.empty()) sink = sink + static_cast<uint64_t>(v.size());
      } catch (const detforge::Error&) {
      }
    }
  } catch (const detforge::Error&) {
  }
  return 0;
}
