// Paths the tests use: the source tree, ../shared (skip cleanly when absent) and the CLI binary.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace detforge::test {

inline std::filesystem::path source_dir() { return DETFORGE_SOURCE_DIR; }

inline bool shared_available() { return std::filesystem::exists(std::filesystem::path(DETFORGE_SHARED_DIR) / "README.md"); }

inline std::filesystem::path shared_dir() { return DETFORGE_SHARED_DIR; }

}  // namespace detforge::test

// Use at the top of a test that reads ../shared: skips with a message when it is absent.
#define DETFORGE_REQUIRE_SHARED()                                                              \
  do {                                                                                         \
    if (!::detforge::test::shared_available())                                                 \
      GTEST_SKIP() << "../shared is absent (" DETFORGE_SHARED_DIR "): test needs its data";    \
  } while (0)
