// The bundle container, format v2: one self-describing file per built model.
//
//   offset 0   "DETFORGE"             8-byte magic
//          8   u32 format version     little-endian, 2 (1 is read too)
//         12   u32 reserved           0
//         16   u64 header length N    little-endian
//         24   header JSON, N bytes   the caller's fields + "format_version" + "sections"
//              zero padding to a multiple of 64
//              sections, each starting on a 64-byte boundary, zero padding between them
//
// "sections" is [{"name", "offset" (absolute, in bytes), "size", "checksum" (FNV-1a 64 of the
// section bytes, 16 lower-case hex digits; core/checksum.h)}]. 64-byte alignment lets a reader
// use weights straight from the memory map with aligned vector loads.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"

namespace detforge {

// 2 (2026-12-03): a conv2d op may carry res_after_act (graph/ir.h), which a version-1 reader
// would ignore, adding the residual before the activation; the container is unchanged.
inline constexpr uint32_t kBundleFormatVersion = 2;
inline constexpr size_t kBundleAlignment = 64;

// A named section to write; it refers to the caller's bytes, which must outlive the write.
struct BundleSection {
  std::string name;
  std::span<const uint8_t> bytes;
  BundleSection(std::string n, std::span<const uint8_t> b) : name(std::move(n)), bytes(b) {}
  BundleSection(std::string n, const std::vector<uint8_t>& b) : name(std::move(n)), bytes(b.data(), b.size()) {}
  BundleSection(std::string n, std::string_view s)
      : name(std::move(n)), bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()) {}
};

// Writes the bundle to a temporary file beside `path` and renames it into place, so a failure
// never leaves a partial bundle. `header` must be a JSON object; its "format_version" and
// "sections" fields are set here. Section names must be unique and non-empty.
void write_bundle_atomically(const std::filesystem::path& path, nlohmann::json header,
                             const std::vector<BundleSection>& sections);

class BundleFile {
 public:
  // Maps and validates a bundle; with verify_checksums, every section's checksum is checked
  // (one pass over the file). Throws detforge::Error "bundle <path>: <problem>".
  static BundleFile open(const std::filesystem::path& path, bool verify_checksums = true);
  // The same over an in-memory copy of `bytes` (tests, fuzzing); `label` names it in errors.
  static BundleFile from_bytes(std::span<const uint8_t> bytes, const std::string& label = "<memory>",
                               bool verify_checksums = true);

  const std::string& label() const { return label_; }
  const nlohmann::json& header() const { return header_; }
  uint32_t format_version() const { return version_; }
  std::vector<std::string> section_names() const;  // in file order
  bool has_section(const std::string& name) const;
  // Throws "bundle <path>: no section 'name' (sections: a, b, c)" when absent.
  std::span<const uint8_t> section(const std::string& name) const;

 private:
  struct Entry {
    std::string name;
    uint64_t offset = 0, size = 0;
  };
  void parse(bool verify_checksums);
  std::string label_;
  MappedFile map_;
  std::vector<uint8_t> owned_;
  std::span<const uint8_t> file_;
  nlohmann::json header_;
  uint32_t version_ = 0;
  std::vector<Entry> sections_;
};

}  // namespace detforge
