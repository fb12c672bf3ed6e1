// libFuzzer target: BundleFile must either parse or throw detforge::Error, never crash, read
// out of bounds or throw anything else. After a successful parse every section is touched.
#include <cstddef>
#include <cstdint>

#include "detforge/types.h"
#include "io/bundle_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Checksums on for half the inputs (decided by the size's low bit), so the fuzzer also reaches
  // the code after a checksum mismatch would have stopped it.
  const bool verify = (size & 1) != 0;
  try {
    auto b = detforge::BundleFile::from_bytes({data, size}, "fuzz.bundle", verify);
    volatile uint64_t sink = 0;
    for (const std::string& name : b.section_names()) {
      auto s = b.section(name);
      if (!s.empty()) sink = sink + s.front() + s.back();
    }
    (void)b.header().dump();
  } catch (const detforge::Error&) {
  }
  return 0;
}
