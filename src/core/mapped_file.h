// Read-only memory map of a whole file (RAII). Weights and bundles are read through this so that
// a 40 MB checkpoint costs no copy and pages are loaded on first touch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace detforge {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only. Throws detforge::Error naming the path when it is missing, is a
  // directory, or cannot be opened or mapped. An empty file maps to an empty span.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void reset() noexcept;
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // what munmap needs (null for an empty file)
};

}  // namespace detforge
