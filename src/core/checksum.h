// FNV-1a 64-bit: the checksum of bundle sections and of the golden fixtures (the Python
// reference scripts compute the same function). Not cryptographic; it catches corruption.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace detforge {

inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace detforge
