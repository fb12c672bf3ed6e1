// Reading and writing Hugging Face safetensors files
// (https://huggingface.co/docs/safetensors: u64 little-endian header length, JSON header,
// raw little-endian tensor data). Reading is zero-copy over a memory map; the header is
// validated strictly so that a corrupt or hostile file fails with one clear line.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace detforge {

struct SafetensorsTensorInfo {
  std::string dtype;           // "F32", "F16", "BF16", "I64", ... as in the file
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t begin = 0, end = 0; // byte offsets inside the data region
  int64_t numel() const;
};

// Bytes per element of a safetensors dtype name, 0 when the name is unknown.
size_t safetensors_dtype_size(const std::string& dtype);

class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws detforge::Error "<path>: <problem>" on any defect.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Parses an in-memory copy of `bytes` (tests, fuzzing); `label` names it in errors.
  static SafetensorsFile from_bytes(std::span<const uint8_t> bytes,
                                    const std::string& label = "<memory>");

  const std::string& label() const { return label_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws "<file>: no tensor 'name'" when absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's raw little-endian bytes (may be unaligned).
  std::span<const uint8_t> bytes(const std::string& name) const;
  // The tensor converted to fp32 from F32, F16, BF16, F64 or F8_E4M3; other dtypes throw an
  // error naming the tensor and its dtype.
  std::vector<float> read_f32(const std::string& name) const;

 private:
  void parse();
  std::string label_;
  MappedFile map_;
  std::vector<uint8_t> owned_;
  std::span<const uint8_t> file_;  // the whole file
  std::span<const uint8_t> data_;  // the data region after the header
  std::map<std::string, SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. For F32/F16/BF16, `values` holds the fp32 values (converted with
// round-to-nearest-even); for any other dtype (I64 counters, ...), `raw` holds the exact
// little-endian bytes, numel * dtype size of them.
struct SafetensorsTensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<uint8_t> raw;
};

// Writes a safetensors file atomically (temporary file + rename). Throws detforge::Error naming
// the tensor when its data size disagrees with its shape, or naming the path on I/O failure.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace detforge
