// Synthetic RT-DETR v2 checkpoints: names, shapes and config must match real HF files
// (../shared/models/*), the parameter count must match transformers' measured 20,174,608 for
// r18vd, and the written folder must be a loadable, deterministic checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>

#include "detforge/types.h"
#include "families/rt_detr_v2/synth.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace detforge::rt_detr_v2 {
namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void expect_same_tensors_as(const std::string& preset, const std::string& folder) {
  fs::path dir = test::shared_dir() / "models" / folder;
  SafetensorsFile real = SafetensorsFile::open(dir / "model.safetensors");
  json cfg = synth_config(preset, 8);
  std::map<std::string, SynthTensorSpec> mine;
  for (const auto& s : rt_detr_v2_tensor_specs(cfg)) EXPECT_TRUE(mine.emplace(s.name, s).second) << "duplicate " << s.name;
  for (const std::string& n : real.names()) {
    auto it = mine.find(n);
    if (it == mine.end()) {
      ADD_FAILURE() << preset << ": missing tensor " << n;
      continue;
    }
    EXPECT_EQ(it->second.shape, real.info(n).shape) << n;
    EXPECT_EQ(it->second.is_counter(), real.info(n).dtype == "I64") << n;
  }
  for (const auto& [n, s] : mine) EXPECT_TRUE(real.has(n)) << preset << ": extra tensor " << n;
  EXPECT_EQ(mine.size(), real.names().size());
}

TEST(Synth, TinyNamesAndShapesMatchRealCheckpoint) {
  DETFORGE_REQUIRE_SHARED();
  expect_same_tensors_as("tiny", "rtdetr_v2_tiny_shapes");
}

TEST(Synth, R18vdNamesAndShapesMatchRealCheckpoint) {
  DETFORGE_REQUIRE_SHARED();
  expect_same_tensors_as("r18vd", "rtdetr_v2_r18vd_shapes");
}

TEST(Synth, ConfigsMatchRealArchitectures) {
  DETFORGE_REQUIRE_SHARED();
  for (auto [preset, folder] : {std::pair{"tiny", "rtdetr_v2_tiny_shapes"}, {"r18vd", "rtdetr_v2_r18vd_shapes"}}) {
    json real = read_json(test::shared_dir() / "models" / folder / "config.json");
    json mine = synth_config(preset, 8, "float16");
    for (auto it = real.begin(); it != real.end(); ++it) {
      if (it.key() == "id2label" || it.key() == "label2id" || it.key() == "transformers_version") continue;
      ASSERT_TRUE(mine.contains(it.key())) << preset << ": missing " << it.key();
      EXPECT_EQ(mine[it.key()], it.value()) << preset << ": " << it.key();
    }
    EXPECT_EQ(mine["id2label"].size(), 8u);
    json pre = read_json(test::shared_dir() / "models" / folder / "preprocessor_config.json");
    EXPECT_EQ(synth_preprocessor_config(), pre);
  }
}

TEST(Synth, CocoLabelsMatchCocoCategories) {
  DETFORGE_REQUIRE_SHARED();
  json coco = read_json(test::shared_dir() / "data/coco_val80/instances.json");
  std::map<int, std::string> cats;
  for (const json& c : coco["categories"]) cats[c["id"].get<int>()] = c["name"].get<std::string>();
  ASSERT_EQ(cats.size(), 80u);
  json cfg = synth_config("r18vd");
  int i = 0;
  for (const auto& [id, name] : cats) {
    EXPECT_EQ(cfg["id2label"][std::to_string(i)], name) << "label " << i;
    EXPECT_EQ(cfg["label2id"][name], i);
    ++i;
  }
}

// transformers 5.17 reports 20,174,608 parameters for r18vd with 80 labels
// (../shared/specs/rt_detr_v2_r18vd.md section 0); buffers are not parameters.
TEST(Synth, R18vdParameterCountMatchesTransformers) {
  int64_t params = 0;
  for (const auto& s : rt_detr_v2_tensor_specs(synth_config("r18vd", 80))) {
    const std::string& n = s.name;
    bool frozen_bn = n.rfind("model.backbone.", 0) == 0 && n.find("normalization.") != std::string::npos;
    bool buffer = n.find("running_") != std::string::npos || s.is_counter() ||
                  n.find("n_points_scale") != std::string::npos;
    if (frozen_bn || buffer) continue;
    int64_t k = 1;
    for (int64_t d : s.shape) k *= d;
    params += k;
  }
  EXPECT_EQ(params, 20174608);
}

TEST(Synth, RejectsUnsupportedConfigs) {
  json c = synth_config("tiny");
  c["backbone_config"]["layer_type"] = "bottleneck";
  EXPECT_THROW(rt_detr_v2_tensor_specs(c), Error);
  EXPECT_THROW(synth_config("r50"), Error);
  EXPECT_THROW(synth_config("tiny", 0), Error);
}

class SynthWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = fs::temp_directory_path() / ("detforge_synth_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void TearDown() override { fs::remove_all(root); }
  fs::path root;
};

TEST_F(SynthWriteTest, WritesLoadableDeterministicCheckpoint) {
  SynthOptions o;
  o.preset = "tiny";
  o.seed = 5;
  o.num_labels = 3;
  o.dtype = "f16";
  write_synth_checkpoint(root / "a", o);
  write_synth_checkpoint(root / "b", o);
  o.seed = 6;
  write_synth_checkpoint(root / "c", o);
  HfCheckpoint ck = resolve_hf_checkpoint((root / "a").string());
  EXPECT_EQ(ck.config["id2label"]["2"], "LABEL_2");
  EXPECT_EQ(ck.config["dtype"], "float16");
  auto a = SafetensorsFile::open(root / "a/model.safetensors");
  auto b = SafetensorsFile::open(root / "b/model.safetensors");
  auto c = SafetensorsFile::open(root / "c/model.safetensors");
  const std::string w = "model.encoder.encoder.0.layers.0.fc1.weight";
  EXPECT_EQ(a.info(w).dtype, "F16");
  EXPECT_EQ(a.read_f32(w), b.read_f32(w)) << "same seed, same weights";
  EXPECT_NE(a.read_f32(w), c.read_f32(w)) << "another seed, other weights";
  EXPECT_EQ(a.info("model.decoder_input_proj.0.1.num_batches_tracked").dtype, "I64");
  EXPECT_EQ(a.info("model.enc_score_head.weight").shape, (std::vector<int64_t>{3, 128}));
  // Scales: fc1 is [512,128] with std 1/sqrt(128); BN variances positive; points scale 1/4.
  auto v = a.read_f32(w);
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  EXPECT_NEAR(std::sqrt(ss / v.size()), 1.0 / std::sqrt(128.0), 0.005);
  for (float x : a.read_f32("model.encoder.lateral_convs.0.norm.running_var")) EXPECT_GT(x, 0.4f);
  for (float x : a.read_f32("model.decoder.layers.1.encoder_attn.n_points_scale")) EXPECT_EQ(x, 0.25f);
  auto off = a.read_f32("model.decoder.layers.0.encoder_attn.sampling_offsets.bias");
  EXPECT_EQ(off[0], 1.0f);  // head 0 points along +x, point 0 at distance 1
  EXPECT_EQ(off[1], 0.0f);
  EXPECT_EQ(off[6], 4.0f);  // point 3
  for (float x : a.read_f32("model.enc_output.0.bias")) EXPECT_EQ(x, 0.0f) << "keeps masked anchors out of top-k";
  // Only the three folders, no temporaries.
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 3);
}

TEST_F(SynthWriteTest, RefusesNonEmptyFolderUnlessForced) {
  SynthOptions o;
  o.preset = "tiny";
  fs::create_directories(root / "x");
  std::ofstream(root / "x" / "keep.txt") << "x";
  EXPECT_THROW(write_synth_checkpoint(root / "x", o), Error);
  EXPECT_TRUE(fs::exists(root / "x" / "keep.txt"));
  o.force = true;
  write_synth_checkpoint(root / "x", o);
  EXPECT_FALSE(fs::exists(root / "x" / "keep.txt"));
  EXPECT_TRUE(fs::exists(root / "x" / "model.safetensors"));
  EXPECT_THROW(write_synth_checkpoint(root / "missing" / "y", o), Error);
  o.dtype = "f8";
  EXPECT_THROW(write_synth_checkpoint(root / "z", o), Error);
  EXPECT_FALSE(fs::exists(root / "z"));
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace detforge::rt_detr_v2
