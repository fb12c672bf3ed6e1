#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/half.h"
#include "core/json_depth.h"
#include "detforge/types.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace detforge {
namespace {

// The safetensors reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// A valid header nests 3 deep (object > entry > array); a deeper one is garbage, and a
// pathologically deep one could exhaust the stack while it is freed.
constexpr int kMaxJsonDepth = 16;


uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

int64_t SafetensorsTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t safetensors_dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile f;
  f.label_ = path.string();
  f.map_ = MappedFile(path);
  f.file_ = f.map_.bytes();
  f.parse();
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::span<const uint8_t> bytes, const std::string& label) {
  SafetensorsFile f;
  f.label_ = label;
  f.owned_.assign(bytes.begin(), bytes.end());
  f.file_ = {f.owned_.data(), f.owned_.size()};
  f.parse();
  return f;
}

void SafetensorsFile::parse() {
  const std::string& L = label_;
  if (file_.size() < 8)
    throw Error(L + ": truncated: " + std::to_string(file_.size()) +
                " bytes, too short for the 8-byte header length");
  uint64_t n = read_u64_le(file_.data());
  if (n > kMaxHeaderBytes)
    throw Error(L + ": header length " + std::to_string(n) +
                " exceeds the 100 MB limit (not a safetensors file?)");
  if (n > file_.size() - 8)
    throw Error(L + ": truncated: header says " + std::to_string(n) + " bytes but file has " +
                std::to_string(file_.size() - 8) + " after the length");
  std::string_view text(reinterpret_cast<const char*>(file_.data() + 8), n);
  data_ = file_.subspan(8 + n);
  if (!json_nesting_ok(text, kMaxJsonDepth))
    throw Error(L + ": header JSON nests deeper than " + std::to_string(kMaxJsonDepth));
  json h;
  try {
    h = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(L + ": header is not valid JSON: " + e.what());
  }
  if (!h.is_object()) throw Error(L + ": header is not a JSON object");

  std::vector<std::pair<uint64_t, std::string>> order;  // (begin, name) for the overlap check
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(L + ": __metadata__ is not a JSON object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw Error(L + ": __metadata__ entry '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string T = L + ": tensor '" + name + "'";
    if (!v.is_object()) throw Error(T + " entry is not a JSON object");
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) throw Error(T + " has no dtype string");
    SafetensorsTensorInfo info;
    info.dtype = dt->get<std::string>();
    size_t esize = safetensors_dtype_size(info.dtype);
    if (esize == 0) throw Error(T + " has unknown dtype '" + info.dtype + "'");
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) throw Error(T + " has no shape array");
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) throw Error(T + " shape has an entry that is not a non-negative integer");
      uint64_t dim = d.get<uint64_t>();
      if (dim > (1ull << 62) || __builtin_mul_overflow(numel, dim, &numel))
        throw Error(T + " shape is too large");
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      throw Error(T + " data_offsets is not a pair of non-negative integers");
    info.begin = (*off)[0].get<uint64_t>();
    info.end = (*off)[1].get<uint64_t>();
    const std::string range = "[" + std::to_string(info.begin) + "," + std::to_string(info.end) + "]";
    if (info.begin > info.end || info.end > data_.size())
      throw Error(T + " data_offsets " + range + " outside the data region of " +
                  std::to_string(data_.size()) + " bytes");
    uint64_t want;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(esize), &want) ||
        want != info.end - info.begin)
      throw Error(T + " data_offsets " + range + " hold " + std::to_string(info.end - info.begin) +
                  " bytes but " + info.dtype + " " + shape_str(info.shape) + " needs " +
                  std::to_string(numel * esize));
    order.emplace_back(info.begin, name);
    tensors_.emplace(name, std::move(info));
  }
  std::sort(order.begin(), order.end());
  uint64_t prev_end = 0;
  std::string prev;
  for (const auto& [begin, name] : order) {
    const SafetensorsTensorInfo& t = tensors_.at(name);
    if (t.begin == t.end) continue;  // empty tensors occupy nothing
    if (begin < prev_end)
      throw Error(L + ": tensor '" + name + "' data overlaps tensor '" + prev + "'");
    prev_end = t.end;
    prev = name;
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> r;
  r.reserve(tensors_.size());
  for (const auto& kv : tensors_) r.push_back(kv.first);
  return r;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(label_ + ": no tensor '" + name + "'");
  return it->second;
}

std::span<const uint8_t> SafetensorsFile::bytes(const std::string& name) const {
  const SafetensorsTensorInfo& t = info(name);
  return data_.subspan(t.begin, t.end - t.begin);
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsTensorInfo& t = info(name);
  std::span<const uint8_t> b = bytes(name);
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    if (n) std::memcpy(out.data(), b.data(), n * 4);  // data may be unaligned in the map
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    std::vector<uint16_t> tmp(n);
    if (n) std::memcpy(tmp.data(), b.data(), n * 2);
    if (t.dtype == "F16") fp16_to_fp32(tmp.data(), out.data(), n);
    else bf16_to_fp32(tmp.data(), out.data(), n);
  } else if (t.dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, b.data() + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else if (t.dtype == "F8_E4M3") {
    fp8_e4m3fn_to_fp32(b.data(), out.data(), n);
  } else {
    throw Error(label_ + ": tensor '" + name + "' has dtype " + t.dtype +
                "; expected a float type (F32, F16, BF16, F64, F8_E4M3)");
  }
  return out;
}

void write_safetensors(const fs::path& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<std::vector<uint8_t>> blobs;
  blobs.reserve(tensors.size());
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const std::string T = "cannot write " + path.string() + ": tensor '" + t.name + "'";
    if (t.name.empty() || t.name == "__metadata__") throw Error(T + " has an invalid name");
    if (h.contains(t.name)) throw Error(T + " appears twice");
    size_t esize = safetensors_dtype_size(t.dtype);
    if (esize == 0) throw Error(T + " has unknown dtype '" + t.dtype + "'");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error(T + " has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    std::vector<uint8_t> blob;
    const bool from_values = t.raw.empty() && (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16");
    if (from_values) {
      if (t.values.size() != numel)
        throw Error(T + " has " + std::to_string(t.values.size()) + " values but shape " +
                    shape_str(t.shape) + " needs " + std::to_string(numel));
      blob.resize(numel * esize);
      if (t.dtype == "F32") {
        if (numel) std::memcpy(blob.data(), t.values.data(), numel * 4);
      } else {
        std::vector<uint16_t> tmp(numel);
        if (t.dtype == "F16") fp32_to_fp16(t.values.data(), tmp.data(), numel);
        else fp32_to_bf16(t.values.data(), tmp.data(), numel);
        if (numel) std::memcpy(blob.data(), tmp.data(), numel * 2);
      }
    } else {
      if (t.raw.size() != numel * esize)
        throw Error(T + " has " + std::to_string(t.raw.size()) + " raw bytes but " + t.dtype + " " +
                    shape_str(t.shape) + " needs " + std::to_string(numel * esize));
      blob = t.raw;
    }
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + blob.size()}}};
    offset += blob.size();
    blobs.push_back(std::move(blob));
  }
  std::string text = h.dump();
  // Pad with spaces so the data region starts 8-byte aligned, as the reference writer does.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  write_file_atomically(path, [&](std::FILE* fp) {
    uint8_t len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    bool ok = std::fwrite(len, 1, 8, fp) == 8 && std::fwrite(text.data(), 1, text.size(), fp) == text.size();
    for (const auto& b : blobs) ok = ok && (b.empty() || std::fwrite(b.data(), 1, b.size(), fp) == b.size());
    if (!ok) throw Error("cannot write " + path.string() + ": short write (disk full?)");
  });
}

}  // namespace detforge
