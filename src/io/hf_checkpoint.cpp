#include "io/hf_checkpoint.h"

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "detforge/types.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace detforge {
namespace {

bool is_commit_hash(const std::string& s) {
  static const std::regex re("^[0-9a-f]{40}$");
  return std::regex_match(s, re);
}

bool looks_like_hub_id(const std::string& s) {
  // huggingface_hub's repo id rule: [org/]name of [A-Za-z0-9_.-], no "--" or ".." and no
  // leading/trailing "-" or ".".
  static const std::regex re("^([A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*$");
  return std::regex_match(s, re) && s.find("--") == std::string::npos && s.find("..") == std::string::npos;
}

std::string cache_source() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return "HF_HUB_CACHE";
  if (const char* h = std::getenv("HF_HOME"); h && *h) return "HF_HOME/hub";
  return "~/.cache/huggingface/hub";
}

std::string read_ref(const fs::path& file) {
  std::ifstream in(file);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// Fills dir/config/preprocessor/weights, checking the three files.
void load_folder(HfCheckpoint& c) {
  const std::string where = "checkpoint " + c.dir.string();
  for (const char* name : {"config.json", "preprocessor_config.json", "model.safetensors"}) {
    fs::path p = c.dir / name;
    std::error_code ec;
    if (!fs::exists(p, ec)) {
      if (std::string(name) == "model.safetensors" && fs::exists(c.dir / "model.safetensors.index.json", ec))
        throw Error(where + ": sharded weights (model.safetensors.index.json) are not supported; "
                    "need a single model.safetensors");
      if (fs::is_symlink(fs::symlink_status(p, ec)))
        throw Error(where + ": " + name + " is a broken link (incomplete download?)");
      throw Error(where + ": missing " + name);
    }
  }
  c.config = read_checkpoint_json(c.dir / "config.json");
  if (!c.config.is_object()) throw Error((c.dir / "config.json").string() + ": not a JSON object");
  c.preprocessor = read_checkpoint_json(c.dir / "preprocessor_config.json");
  if (!c.preprocessor.is_object())
    throw Error((c.dir / "preprocessor_config.json").string() + ": not a JSON object");
  c.weights = c.dir / "model.safetensors";
}

}  // namespace

json read_checkpoint_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what());
  }
}

fs::path hf_hub_cache_dir() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return fs::path(h) / "hub";
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : ".") / ".cache" / "huggingface" / "hub";
}

HfCheckpoint resolve_hf_checkpoint(const std::string& checkpoint, const std::string& revision) {
  if (checkpoint.empty()) throw Error("checkpoint argument is empty");
  HfCheckpoint c;
  std::error_code ec;
  fs::path as_path(checkpoint);
  if (fs::exists(as_path, ec)) {
    if (!fs::is_directory(as_path, ec))
      throw Error("checkpoint " + checkpoint + " is a file; expected a folder with config.json, "
                  "preprocessor_config.json and model.safetensors, or a hub id");
    if (!revision.empty())
      throw Error("checkpoint " + checkpoint + " is a local folder; --revision applies only to hub ids");
    c.dir = as_path;
    c.id = checkpoint;
    // A folder inside the hub cache (models--org--name/snapshots/<hash>) still knows its id.
    fs::path abs = fs::weakly_canonical(as_path, ec);
    if (!ec && abs.filename().empty()) abs = abs.parent_path();
    std::string repo = abs.parent_path().parent_path().filename().string();
    if (!ec && abs.parent_path().filename() == "snapshots" && repo.rfind("models--", 0) == 0) {
      std::string id = repo.substr(8);
      if (auto pos = id.find("--"); pos != std::string::npos) id.replace(pos, 2, "/");
      c.id = id;
      c.revision = abs.filename().string();
    }
    load_folder(c);
    return c;
  }
  if (!looks_like_hub_id(checkpoint))
    throw Error("checkpoint " + checkpoint + ": no such folder, and not a hub id (org/name)");

  const fs::path cache = hf_hub_cache_dir();
  std::string folder = "models--" + checkpoint;
  if (auto pos = folder.find('/'); pos != std::string::npos) folder.replace(pos, 1, "--");
  const fs::path repo = cache / folder;
  if (!fs::is_directory(repo, ec))
    throw Error("checkpoint " + checkpoint + " not found: no folder " + repo.string() + " (hub cache from " +
                cache_source() + "; no download is attempted: fetch it with `huggingface-cli download " +
                checkpoint + "` or pass a folder)");
  const std::string rev = revision.empty() ? "main" : revision;
  if (rev.find("..") != std::string::npos || rev.front() == '/')
    throw Error("checkpoint " + checkpoint + ": invalid revision '" + rev + "'");
  std::string commit;
  if (is_commit_hash(rev) && fs::is_directory(repo / "snapshots" / rev, ec)) {
    commit = rev;
  } else {
    fs::path ref = repo / "refs" / rev;
    if (!fs::is_regular_file(ref, ec)) {
      std::string have;
      for (const auto& e : fs::directory_iterator(repo / "snapshots", ec))
        have += (have.empty() ? "" : ", ") + e.path().filename().string();
      throw Error("checkpoint " + checkpoint + ": revision '" + rev + "' not in the cache (no " + ref.string() +
                  (is_commit_hash(rev) ? " and no snapshot of that hash" : "") + "; snapshots: " +
                  (have.empty() ? "none" : have) + ")");
    }
    commit = read_ref(ref);
    if (!is_commit_hash(commit))
      throw Error(ref.string() + ": does not hold a commit hash");
  }
  c.dir = repo / "snapshots" / commit;
  if (!fs::is_directory(c.dir, ec))
    throw Error("checkpoint " + checkpoint + ": revision '" + rev + "' points to snapshot " + commit +
                " which is not in the cache (" + c.dir.string() + ")");
  c.id = checkpoint;
  c.revision = commit;
  load_folder(c);
  return c;
}

}  // namespace detforge
