#include "core/choice_cache.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/checksum.h"
#include "detforge/types.h"

namespace fs = std::filesystem;

namespace detforge {

namespace {

constexpr int kFormat = 1;

std::string fingerprint_text(const std::string& kind, const ChoiceCache::Entry& fp) {
  std::string s = kind + "\n" + std::to_string(kFormat) + "\n";
  for (const auto& [k, v] : fp) s += k + "=" + v + "\n";
  return s;
}

}  // namespace

ChoiceCache::ChoiceCache(const fs::path& dir, const std::string& kind, const Entry& fingerprint)
    : kind_(kind), fingerprint_(fingerprint) {
  if (dir.empty()) return;
  const std::string text = fingerprint_text(kind, fingerprint);
  file_ = dir / (kind + "-" + hex64(fnv1a64(text.data(), text.size())) + ".json");
  read(&entries_);
}

bool ChoiceCache::read(std::map<std::string, Entry>* into) {
  std::error_code ec;
  if (!fs::exists(file_, ec)) return true;
  std::ifstream in(file_, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) {
    problem_ = "cannot read " + file_.string();
    return false;
  }
  try {
    const auto j = nlohmann::json::parse(ss.str());
    if (j.at("format").get<int>() != kFormat || j.at("kind").get<std::string>() != kind_ ||
        j.at("fingerprint").get<Entry>() != fingerprint_) {
      problem_ = file_.string() + " belongs to another fingerprint; ignored";
      return false;
    }
    auto e = j.at("entries").get<std::map<std::string, Entry>>();
    for (auto& [k, v] : e) into->emplace(k, std::move(v));  // ours first: emplace keeps them
    return true;
  } catch (const std::exception& e) {
    problem_ = file_.string() + " is not a valid cache (" + e.what() + "); ignored";
    return false;
  }
}

const ChoiceCache::Entry* ChoiceCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void ChoiceCache::put(const std::string& key, Entry value) {
  if (!enabled()) return;
  entries_[key] = std::move(value);
  dirty_ = true;
}

bool ChoiceCache::save() {
  if (!enabled() || !dirty_) return true;
  const std::string before = problem_;
  if (!read(&entries_)) problem_ = before;  // a file we cannot use is replaced, not a problem now
  nlohmann::json j;
  j["format"] = kFormat;
  j["kind"] = kind_;
  j["fingerprint"] = fingerprint_;
  j["entries"] = entries_;
  try {
    std::error_code ec;
    fs::create_directories(file_.parent_path(), ec);
    write_file_atomically(file_, j.dump(1) + "\n");
  } catch (const Error& e) {
    problem_ = e.what();
    return false;
  }
  dirty_ = false;
  return true;
}

fs::path default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "detforge";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "detforge";
  return {};
}

}  // namespace detforge
