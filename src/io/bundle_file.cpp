#include "io/bundle_file.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/atomic_file.h"
#include "core/checksum.h"
#include "core/json_depth.h"
#include "detforge/types.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace detforge {
namespace {

constexpr char kMagic[8] = {'D', 'E', 'T', 'F', 'O', 'R', 'G', 'E'};
constexpr size_t kPreamble = 24;
constexpr uint64_t kMaxHeaderBytes = 64ull << 20;  // labels and graph metadata fit in far less
constexpr int kMaxJsonDepth = 64;

uint64_t align_up(uint64_t v) { return (v + kBundleAlignment - 1) / kBundleAlignment * kBundleAlignment; }

template <typename T>
T read_le(const uint8_t* p) {
  T v = 0;
  for (int i = sizeof(T) - 1; i >= 0; --i) v = static_cast<T>((v << 8) | p[i]);
  return v;
}
template <typename T>
void put_le(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}


}  // namespace

void write_bundle_atomically(const fs::path& path, json header, const std::vector<BundleSection>& sections) {
  const std::string W = "cannot write bundle " + path.string();
  if (!header.is_object()) throw Error(W + ": header is not a JSON object");
  std::set<std::string> seen;
  for (const auto& s : sections) {
    if (s.name.empty()) throw Error(W + ": a section has an empty name");
    if (!seen.insert(s.name).second) throw Error(W + ": section '" + s.name + "' appears twice");
  }
  check_output_path(path);
  header["format_version"] = kBundleFormatVersion;
  json table = json::array();
  for (const auto& s : sections)
    table.push_back({{"name", s.name}, {"offset", 0}, {"size", s.bytes.size()},
                     {"checksum", hex64(fnv1a64(s.bytes.data(), s.bytes.size()))}});
  // Offsets are absolute, so they depend on the header length, which depends on the offsets'
  // digits: iterate until the length is stable (two or three rounds at most).
  std::string text;
  std::vector<uint64_t> offsets(sections.size());
  for (int round = 0;; ++round) {
    header["sections"] = table;
    text = header.dump();
    uint64_t pos = align_up(kPreamble + text.size());
    bool changed = false;
    for (size_t i = 0; i < sections.size(); ++i) {
      if (table[i]["offset"].get<uint64_t>() != pos) changed = true;
      table[i]["offset"] = pos;
      offsets[i] = pos;
      pos = align_up(pos + sections[i].bytes.size());
    }
    if (!changed) break;
    if (round > 16) throw Error(W + ": section offsets do not converge");  // cannot happen
  }
  write_file_atomically(path, [&](std::FILE* fp) {
    uint8_t pre[kPreamble];
    std::memcpy(pre, kMagic, 8);
    put_le<uint32_t>(pre + 8, kBundleFormatVersion);
    put_le<uint32_t>(pre + 12, 0);
    put_le<uint64_t>(pre + 16, text.size());
    static const uint8_t zeros[kBundleAlignment] = {};
    uint64_t pos = 0;
    auto put = [&](const void* p, size_t n) {
      if (n && std::fwrite(p, 1, n, fp) != n) throw Error(W + ": short write (disk full?)");
      pos += n;
    };
    put(pre, kPreamble);
    put(text.data(), text.size());
    for (size_t i = 0; i < sections.size(); ++i) {
      put(zeros, offsets[i] - pos);
      put(sections[i].bytes.data(), sections[i].bytes.size());
    }
  });
}

BundleFile BundleFile::open(const fs::path& path, bool verify_checksums) {
  BundleFile b;
  b.label_ = path.string();
  try {
    b.map_ = MappedFile(path);
  } catch (const Error& e) {
    throw Error("bundle " + std::string(e.what()));
  }
  b.file_ = b.map_.bytes();
  b.parse(verify_checksums);
  return b;
}

BundleFile BundleFile::from_bytes(std::span<const uint8_t> bytes, const std::string& label, bool verify_checksums) {
  BundleFile b;
  b.label_ = label;
  b.owned_.assign(bytes.begin(), bytes.end());
  b.file_ = {b.owned_.data(), b.owned_.size()};
  b.parse(verify_checksums);
  return b;
}

void BundleFile::parse(bool verify_checksums) {
  const std::string B = "bundle " + label_;
  if (file_.size() < 8 || std::memcmp(file_.data(), kMagic, 8) != 0)
    throw Error(B + ": not a detforge bundle (no DETFORGE magic)");
  if (file_.size() < kPreamble) throw Error(B + ": truncated: " + std::to_string(file_.size()) + " bytes");
  version_ = read_le<uint32_t>(file_.data() + 8);
  if (version_ > kBundleFormatVersion)
    throw Error(B + " has format version " + std::to_string(version_) + "; this detforge reads up to version " +
                std::to_string(kBundleFormatVersion) + " — upgrade detforge");
  if (version_ == 0) throw Error(B + ": invalid format version 0");
  uint64_t n = read_le<uint64_t>(file_.data() + 16);
  if (n > kMaxHeaderBytes) throw Error(B + ": header length " + std::to_string(n) + " exceeds the 64 MB limit");
  if (n > file_.size() - kPreamble)
    throw Error(B + ": truncated: header says " + std::to_string(n) + " bytes but file has " +
                std::to_string(file_.size() - kPreamble) + " after the preamble");
  std::string_view text(reinterpret_cast<const char*>(file_.data() + kPreamble), n);
  if (!json_nesting_ok(text, kMaxJsonDepth))
    throw Error(B + ": header JSON nests deeper than " + std::to_string(kMaxJsonDepth));
  try {
    header_ = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(B + ": header is not valid JSON: " + e.what());
  }
  if (!header_.is_object()) throw Error(B + ": header is not a JSON object");
  auto fv = header_.find("format_version");
  if (fv == header_.end() || !fv->is_number_unsigned() || fv->get<uint64_t>() != version_)
    throw Error(B + ": header format_version does not match the file's version " + std::to_string(version_));
  auto st = header_.find("sections");
  if (st == header_.end() || !st->is_array()) throw Error(B + ": header has no sections array");

  const uint64_t data_start = align_up(kPreamble + n);
  std::set<std::string> names;
  for (const json& s : *st) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string())
      throw Error(B + ": a sections entry has no name");
    Entry e;
    e.name = s["name"].get<std::string>();
    const std::string S = B + ": section '" + e.name + "'";
    if (!names.insert(e.name).second) throw Error(S + " appears twice");
    if (!s.contains("offset") || !s["offset"].is_number_unsigned() || !s.contains("size") ||
        !s["size"].is_number_unsigned())
      throw Error(S + " has no unsigned offset and size");
    e.offset = s["offset"].get<uint64_t>();
    e.size = s["size"].get<uint64_t>();
    if (e.offset % kBundleAlignment != 0)
      throw Error(S + " offset " + std::to_string(e.offset) + " is not 64-byte aligned");
    if (e.offset < data_start)
      throw Error(S + " offset " + std::to_string(e.offset) + " lies inside the header (data starts at " +
                  std::to_string(data_start) + ")");
    if (e.offset > file_.size() || e.size > file_.size() - e.offset)
      throw Error(S + " [" + std::to_string(e.offset) + ", +" + std::to_string(e.size) +
                  ") runs past the end of the file (" + std::to_string(file_.size()) + " bytes): truncated?");
    if (!s.contains("checksum") || !s["checksum"].is_string())
      throw Error(S + " has no checksum");
    if (verify_checksums) {
      std::string want = s["checksum"].get<std::string>();
      std::string got = hex64(fnv1a64(file_.data() + e.offset, e.size));
      if (want != got)
        throw Error(S + " checksum mismatch (header " + want + ", data " + got + "): the file is corrupt");
    }
    sections_.push_back(std::move(e));
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : sections_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
  const Entry* prev = nullptr;  // the last non-empty section; empty ones occupy nothing
  for (const Entry* e : by_offset) {
    if (e->size == 0) continue;
    if (prev && e->offset < prev->offset + prev->size)
      throw Error(B + ": section '" + e->name + "' overlaps section '" + prev->name + "'");
    prev = e;
  }
}

std::vector<std::string> BundleFile::section_names() const {
  std::vector<std::string> r;
  for (const Entry& e : sections_) r.push_back(e.name);
  return r;
}

bool BundleFile::has_section(const std::string& name) const {
  return std::any_of(sections_.begin(), sections_.end(), [&](const Entry& e) { return e.name == name; });
}

std::span<const uint8_t> BundleFile::section(const std::string& name) const {
  for (const Entry& e : sections_)
    if (e.name == name) return file_.subspan(e.offset, e.size);
  std::string have;
  for (const Entry& e : sections_) have += (have.empty() ? "" : ", ") + e.name;
  throw Error("bundle " + label_ + ": no section '" + name + "' (sections: " + (have.empty() ? "none" : have) + ")");
}

}  // namespace detforge
