// resolve_hf_checkpoint over a fake Hugging Face cache laid out as huggingface_hub writes it
// (snapshot files are symlinks into blobs/), plus every error path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "detforge/types.h"
#include "io/hf_checkpoint.h"
#include "test_paths.h"

namespace fs = std::filesystem;

namespace detforge {
namespace {

const std::string kHash1 = "5650961749fa93567c0d46fc7f43ea4f9e914107";
const std::string kHash2 = "0123456789abcdef0123456789abcdef01234567";

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

// Restores an environment variable when the test ends.
struct EnvGuard {
  std::string name;
  std::string old;
  bool had;
  EnvGuard(std::string n, const char* value) : name(std::move(n)) {
    const char* o = std::getenv(name.c_str());
    had = o != nullptr;
    if (had) old = o;
    if (value) setenv(name.c_str(), value, 1);
    else unsetenv(name.c_str());
  }
  ~EnvGuard() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

std::string error_of(const std::string& ckpt, const std::string& rev = "") {
  try {
    resolve_hf_checkpoint(ckpt, rev);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = fs::temp_directory_path() / ("detforge_hf_" + std::to_string(::getpid()));
    fs::remove_all(root);
    cache = root / "hub";
    fs::path repo = cache / "models--PekingU--rtdetr_v2_r18vd";
    write(repo / "refs" / "main", kHash1);
    write(repo / "refs" / "v1", kHash2 + "\n");
    for (const std::string& h : {kHash1, kHash2}) {
      fs::path snap = repo / "snapshots" / h;
      fs::create_directories(snap);
      // as huggingface_hub does: the snapshot holds relative links into blobs/
      write(repo / "blobs" / (h + "-config"), R"({"model_type":"rt_detr_v2","rev":")" + h + "\"}");
      write(repo / "blobs" / (h + "-pre"), R"({"size":{"height":640,"width":640}})");
      write(repo / "blobs" / (h + "-weights"), "not really safetensors");
      fs::create_symlink("../../blobs/" + h + "-config", snap / "config.json");
      fs::create_symlink("../../blobs/" + h + "-pre", snap / "preprocessor_config.json");
      fs::create_symlink("../../blobs/" + h + "-weights", snap / "model.safetensors");
    }
  }
  void TearDown() override { fs::remove_all(root); }
  fs::path root, cache;
};

TEST_F(HfCheckpointTest, ResolvesHubIdThroughMainRef) {
  EnvGuard g("HF_HUB_CACHE", cache.c_str());
  HfCheckpoint c = resolve_hf_checkpoint("PekingU/rtdetr_v2_r18vd");
  EXPECT_EQ(c.id, "PekingU/rtdetr_v2_r18vd");
  EXPECT_EQ(c.revision, kHash1);
  EXPECT_EQ(c.config["rev"], kHash1);
  EXPECT_EQ(c.preprocessor["size"]["height"], 640);
  EXPECT_EQ(c.weights, cache / "models--PekingU--rtdetr_v2_r18vd" / "snapshots" / kHash1 / "model.safetensors");
}

TEST_F(HfCheckpointTest, ResolvesRefNameAndCommitHash) {
  EnvGuard g("HF_HUB_CACHE", cache.c_str());
  EXPECT_EQ(resolve_hf_checkpoint("PekingU/rtdetr_v2_r18vd", "v1").revision, kHash2);
  EXPECT_EQ(resolve_hf_checkpoint("PekingU/rtdetr_v2_r18vd", kHash2).config["rev"], kHash2);
}

TEST_F(HfCheckpointTest, UsesHfHomeWhenHubCacheUnset) {
  EnvGuard g1("HF_HUB_CACHE", nullptr);
  EnvGuard g2("HF_HOME", root.c_str());
  EXPECT_EQ(hf_hub_cache_dir(), cache);
  EXPECT_EQ(resolve_hf_checkpoint("PekingU/rtdetr_v2_r18vd").revision, kHash1);
}

TEST_F(HfCheckpointTest, DefaultCacheIsUnderHome) {
  EnvGuard g1("HF_HUB_CACHE", nullptr);
  EnvGuard g2("HF_HOME", nullptr);
  EnvGuard g3("HOME", "/home/someone");
  EXPECT_EQ(hf_hub_cache_dir(), fs::path("/home/someone/.cache/huggingface/hub"));
}

TEST_F(HfCheckpointTest, SnapshotFolderKeepsItsIdAndRevision) {
  HfCheckpoint c = resolve_hf_checkpoint((cache / "models--PekingU--rtdetr_v2_r18vd" / "snapshots" / kHash2).string());
  EXPECT_EQ(c.id, "PekingU/rtdetr_v2_r18vd");
  EXPECT_EQ(c.revision, kHash2);
}

TEST_F(HfCheckpointTest, ErrorsSayWhatAndWhere) {
  EnvGuard g("HF_HUB_CACHE", cache.c_str());
  std::string e = error_of("PekingU/other_model");
  EXPECT_NE(e.find("not found"), std::string::npos) << e;
  EXPECT_NE(e.find((cache / "models--PekingU--other_model").string()), std::string::npos) << e;
  EXPECT_NE(e.find("HF_HUB_CACHE"), std::string::npos) << e;

  e = error_of("PekingU/rtdetr_v2_r18vd", "nosuchref");
  EXPECT_NE(e.find("revision 'nosuchref' not in the cache"), std::string::npos) << e;
  EXPECT_NE(e.find(kHash1), std::string::npos) << "lists the snapshots: " << e;

  e = error_of("PekingU/rtdetr_v2_r18vd", "../../etc");
  EXPECT_NE(e.find("invalid revision"), std::string::npos) << e;

  e = error_of("./no/such/folder");
  EXPECT_NE(e.find("no such folder"), std::string::npos) << e;

  e = error_of((root / "hub").string(), "main");
  EXPECT_NE(e.find("--revision applies only to hub ids"), std::string::npos) << e;

  fs::path snap = cache / "models--PekingU--rtdetr_v2_r18vd" / "snapshots" / kHash1;
  fs::remove(snap / "preprocessor_config.json");
  e = error_of("PekingU/rtdetr_v2_r18vd");
  EXPECT_NE(e.find("missing preprocessor_config.json"), std::string::npos) << e;

  fs::remove(cache / "models--PekingU--rtdetr_v2_r18vd" / "blobs" / (kHash2 + "-weights"));
  e = error_of("PekingU/rtdetr_v2_r18vd", "v1");
  EXPECT_NE(e.find("model.safetensors is a broken link"), std::string::npos) << e;
}

TEST_F(HfCheckpointTest, InvalidJsonNamesTheFile) {
  fs::path dir = root / "local";
  write(dir / "config.json", "{\"a\": ");
  write(dir / "preprocessor_config.json", "{}");
  write(dir / "model.safetensors", "");
  std::string e = error_of(dir.string());
  EXPECT_NE(e.find((dir / "config.json").string() + ": invalid JSON"), std::string::npos) << e;
  write(dir / "config.json", "[1]");
  e = error_of(dir.string());
  EXPECT_NE(e.find("config.json: not a JSON object"), std::string::npos) << e;
  write(dir / "config.json", "{}");
  fs::remove(dir / "model.safetensors");
  write(dir / "model.safetensors.index.json", "{}");
  e = error_of(dir.string());
  EXPECT_NE(e.find("sharded weights"), std::string::npos) << e;
}

TEST(HfCheckpointShared, ResolvesSharedFolder) {
  DETFORGE_REQUIRE_SHARED();
  HfCheckpoint c = resolve_hf_checkpoint((test::shared_dir() / "models/rtdetr_v2_tiny_shapes").string());
  EXPECT_EQ(c.config["model_type"], "rt_detr_v2");
  EXPECT_EQ(c.preprocessor["image_processor_type"], "RTDetrImageProcessor");
  EXPECT_TRUE(fs::exists(c.weights));
  EXPECT_TRUE(c.revision.empty());
}

}  // namespace
}  // namespace detforge
