// Resolving a `<checkpoint>` argument to the three files a Hugging Face model needs:
// config.json, preprocessor_config.json and model.safetensors. The argument is either a folder
// or a hub id ("org/name") looked up in the local Hugging Face cache (no network access):
// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, laid out as
// models--org--name/{refs/<ref>, snapshots/<commit>/...}.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace detforge {

struct HfCheckpoint {
  std::filesystem::path dir;  // the folder holding the files
  std::string id;             // hub id ("org/name"), or the folder as given
  std::string revision;       // snapshot commit hash; empty for a plain folder
  nlohmann::json config;        // config.json
  nlohmann::json preprocessor;  // preprocessor_config.json
  std::filesystem::path weights;  // model.safetensors
};

// The hub cache folder from the environment (see above); does not check that it exists.
std::filesystem::path hf_hub_cache_dir();

// `revision`: empty means "main" for hub ids; a 40-hex commit hash picks that snapshot; any
// other value is a ref name read from refs/<revision>. A revision with a plain folder is an
// error. Throws detforge::Error with one line naming what is missing and where it looked.
HfCheckpoint resolve_hf_checkpoint(const std::string& checkpoint, const std::string& revision = "");

// Reads and parses a JSON file; errors name the file ("<path>: invalid JSON: ...").
nlohmann::json read_checkpoint_json(const std::filesystem::path& path);

}  // namespace detforge
