// Load-time choices kept across processes: a JSON file of entries (each a map of strings) under
// a fingerprint of what the choices depend on (the GPU, the library versions, the settings that
// made them). The CUDA engine keeps its timed kernel choices here (cuda_tune_cache.cpp), so the
// ~15-45 s of timing at a first load is not paid again on the same machine.
//
// A cache never fails its user: a missing, unreadable, corrupt or foreign file (another
// fingerprint) reads as empty, and a file that cannot be written leaves the choices in memory
// only. `problem()` says what went wrong, for one line of warning.
#pragma once
#include <filesystem>
#include <map>
#include <string>

namespace detforge {

class ChoiceCache {
 public:
  using Entry = std::map<std::string, std::string>;

  ChoiceCache() = default;  // disabled: finds nothing, saves nothing
  // The file for `fingerprint` in `dir` (its name carries the fingerprint's hash, so caches of
  // other GPUs or settings sit beside it), read if present. `dir` is created on save.
  ChoiceCache(const std::filesystem::path& dir, const std::string& kind, const Entry& fingerprint);

  bool enabled() const { return !file_.empty(); }
  const std::filesystem::path& file() const { return file_; }
  const Entry* find(const std::string& key) const;
  void put(const std::string& key, Entry value);
  bool dirty() const { return dirty_; }
  // Writes the entries (merged over the file's current ones, so two processes lose nothing but
  // a same-key race) atomically. Returns false, with problem() set, when the file cannot be written.
  bool save();
  size_t size() const { return entries_.size(); }
  const std::string& problem() const { return problem_; }

 private:
  bool read(std::map<std::string, Entry>* into);

  std::filesystem::path file_;
  std::string kind_;
  Entry fingerprint_;
  std::map<std::string, Entry> entries_;
  bool dirty_ = false;
  std::string problem_;
};

// The folder for detforge's caches: $XDG_CACHE_HOME/detforge, else $HOME/.cache/detforge, else
// empty (no cache).
std::filesystem::path default_cache_dir();

}  // namespace detforge
