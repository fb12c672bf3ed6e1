// Bad input through the CLI, one case each: exactly one "error: ..." line naming the problem,
// a non-zero exit, and no partial output file left behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/bundle_file.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using detforge::test::CliResult;
using detforge::test::run_cli;
using detforge::test::scratch_dir;

namespace {

const fs::path kTiny = fs::path(DETFORGE_SHARED_DIR) / "models/rtdetr_v2_tiny_shapes";

// A copy of the tiny checkpoint whose files a test may then damage.
fs::path copy_tiny(const fs::path& dir) {
  fs::path ck = dir / "ckpt";
  fs::create_directories(ck);
  for (const char* f : {"config.json", "preprocessor_config.json", "model.safetensors"}) {
    fs::copy_file(kTiny / f, ck / f);
    fs::permissions(ck / f, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  }
  return ck;
}

void expect_one_error_line(const CliResult& r, const std::string& must_contain) {
  EXPECT_NE(r.exit_code, 0);
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(must_contain), std::string::npos) << lines[0];
}

void expect_only(const fs::path& dir, std::vector<std::string> names) {
  std::vector<std::string> have;
  for (auto& e : fs::directory_iterator(dir)) have.push_back(e.path().filename().string());
  std::sort(have.begin(), have.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(have, names) << "unexpected files left in " << dir;
}

CliResult build(const fs::path& ck, const fs::path& out) {
  return run_cli({"build", ck.string(), "-o", out.string()});
}

}  // namespace

TEST(CliErrors, TruncatedSafetensors) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("trunc");
  auto ck = copy_tiny(dir);
  fs::resize_file(ck / "model.safetensors", 1000);
  expect_one_error_line(build(ck, dir / "m.bundle"), "model.safetensors");
  expect_only(dir, {"ckpt"});
}

TEST(CliErrors, GarbledSafetensorsHeader) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("garbled");
  auto ck = copy_tiny(dir);
  {
    std::fstream f(ck / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("}}}}garbage{{{{", 15);
  }
  expect_one_error_line(build(ck, dir / "m.bundle"), "model.safetensors");
  expect_only(dir, {"ckpt"});
}

TEST(CliErrors, MissingTensor) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("missing");
  auto ck = copy_tiny(dir);
  // Rename one tensor in the header (same length keeps the file valid).
  std::string bytes = detforge::test::slurp(ck / "model.safetensors");
  const std::string name = "model.decoder.layers.1.fc2.weight";
  auto pos = bytes.find(name);
  ASSERT_NE(pos, std::string::npos);
  bytes.replace(pos, name.size(), "model.decoder.layers.1.fc2.weighX");
  std::ofstream(ck / "model.safetensors", std::ios::binary) << bytes;
  expect_one_error_line(build(ck, dir / "m.bundle"), "missing tensor 'model.decoder.layers.1.fc2.weight'");
  expect_only(dir, {"ckpt"});
}

TEST(CliErrors, WrongShape) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("shape");
  auto ck = copy_tiny(dir);
  // The config claims a wider FFN than the weights have.
  auto cfg = nlohmann::json::parse(std::ifstream(ck / "config.json"));
  cfg["decoder_ffn_dim"] = 640;
  std::ofstream(ck / "config.json") << cfg.dump(2);
  expect_one_error_line(build(ck, dir / "m.bundle"), "has shape");
  expect_only(dir, {"ckpt"});
}

TEST(CliErrors, UnsupportedConfigValue) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("cfg");
  auto ck = copy_tiny(dir);
  auto cfg = nlohmann::json::parse(std::ifstream(ck / "config.json"));
  cfg["decoder_method"] = "discrete";
  std::ofstream(ck / "config.json") << cfg.dump(2);
  expect_one_error_line(build(ck, dir / "m.bundle"), "decoder_method 'discrete'");
  expect_only(dir, {"ckpt"});
}

TEST(CliErrors, UnreadableImage) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("img");
  ASSERT_EQ(build(kTiny, dir / "m.bundle").exit_code, 0);
  std::ofstream(dir / "bad.jpg") << "\xff\xd8\xff\xe0 this is not really a jpeg";
  auto r = run_cli({"detect", (dir / "m.bundle").string(), "--image", (dir / "bad.jpg").string(), "--json",
                    (dir / "out.json").string()});
  expect_one_error_line(r, "bad.jpg");
  expect_only(dir, {"m.bundle", "bad.jpg"});
}

TEST(CliErrors, OutputPathIsADirectory) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("outdir");
  fs::create_directories(dir / "taken");
  expect_one_error_line(build(kTiny, dir / "taken"), "is a directory");
  expect_only(dir, {"taken"});
  EXPECT_TRUE(fs::is_empty(dir / "taken"));
}

TEST(CliErrors, OutputInMissingFolder) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("nofolder");
  expect_one_error_line(build(kTiny, dir / "nope" / "m.bundle"), "does not exist");
  expect_only(dir, {});
}

TEST(CliErrors, NewerBundleVersionRefused) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("version");
  ASSERT_EQ(build(kTiny, dir / "m.bundle").exit_code, 0);
  {
    std::fstream f(dir / "m.bundle", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    const char newer[4] = {static_cast<char>(detforge::kBundleFormatVersion + 1), 0, 0, 0};
    f.write(newer, 4);
  }
  expect_one_error_line(run_cli({"inspect", (dir / "m.bundle").string()}), "upgrade detforge");
}

TEST(CliErrors, BuildDetectInspectHappyPath) {
  DETFORGE_REQUIRE_SHARED();
  auto dir = scratch_dir("happy");
  ASSERT_EQ(build(kTiny, dir / "m.bundle").exit_code, 0);
  auto ins = run_cli({"inspect", (dir / "m.bundle").string()});
  EXPECT_EQ(ins.exit_code, 0);
  EXPECT_NE(ins.out.find("rt_detr_v2"), std::string::npos);
  EXPECT_NE(ins.out.find("ms_deform_attn"), std::string::npos);
  fs::path img = fs::path(DETFORGE_SHARED_DIR) / "data/shapes_val256/images/val_00000.jpg";
  auto r = run_cli({"detect", (dir / "m.bundle").string(), "--image", img.string(), "--threshold", "0.05", "--json",
                    (dir / "out.json").string(), "--draw", (dir / "drawn").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["width"], 640);
  EXPECT_TRUE(fs::exists(dir / "drawn" / "val_00000.png"));
  // Detections are sorted by score, descending, and above the threshold.
  float prev = 2.f;
  for (auto& d : j[0]["detections"]) {
    float s = d["score"];
    EXPECT_LE(s, prev);
    EXPECT_GT(s, 0.05f);
    prev = s;
  }
}
