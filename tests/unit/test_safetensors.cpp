// SafetensorsFile: round trips through write_safetensors, a real file written by torch/safetensors,
// and one test per header defect, each checking that the one-line error names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>

#include "core/half.h"
#include "detforge/types.h"
#include "io/safetensors.h"
#include "test_paths.h"

namespace fs = std::filesystem;

namespace detforge {
namespace {

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("detforge_st_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// Builds a safetensors byte string from a header text and a data region.
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes, uint64_t len_override = ~0ull) {
  uint64_t n = len_override == ~0ull ? header.size() : len_override;
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.resize(b.size() + data_bytes, 0);
  return b;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::from_bytes(bytes, "model.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Safetensors, RoundTripAllWriteDtypes) {
  fs::path p = temp_dir() / "rt.safetensors";
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i) - 1.0f;
  std::vector<uint8_t> i64(8);
  int64_t cnt = 2470;
  std::memcpy(i64.data(), &cnt, 8);
  write_safetensors(p,
                    {{"a.f32", "F32", {2, 3, 4}, v, {}},
                     {"b.f16", "F16", {24}, v, {}},
                     {"c.bf16", "BF16", {4, 6}, v, {}},
                     {"d.count", "I64", {}, {}, i64}},
                    {{"format", "pt"}});
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.f32", "b.f16", "c.bf16", "d.count"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.info("a.f32").shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(f.info("d.count").shape.size(), 0u);
  EXPECT_EQ(f.read_f32("a.f32"), v);
  auto h = f.read_f32("b.f16");
  auto b = f.read_f32("c.bf16");
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(h[i], fp16_to_fp32(fp32_to_fp16(v[i])));
    EXPECT_EQ(b[i], bf16_to_fp32(fp32_to_bf16(v[i])));
  }
  auto raw = f.bytes("d.count");
  ASSERT_EQ(raw.size(), 8u);
  int64_t back;
  std::memcpy(&back, raw.data(), 8);
  EXPECT_EQ(back, 2470);
  try {
    f.read_f32("d.count");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'd.count' has dtype I64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.info("nope"), Error);
  // Data region is 8-byte aligned, as the reference writer does.
  std::ifstream in(p, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  fs::remove(p);
}

TEST(Safetensors, WriteRejectsWrongSizeAndLeavesNoFile) {
  fs::path p = temp_dir() / "bad.safetensors";
  fs::remove(p);
  EXPECT_THROW(write_safetensors(p, {{"x", "F32", {2, 2}, {1, 2, 3}, {}}}), Error);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_THROW(write_safetensors(p, {{"x", "I64", {2}, {}, std::vector<uint8_t>(15)}}), Error);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_THROW(write_safetensors(temp_dir() / "no_such_dir" / "x.safetensors", {}), Error);
}

struct BadCase {
  const char* what;
  std::vector<uint8_t> bytes;
  const char* expect;  // substring of the error
};

TEST(Safetensors, HeaderDefectsGiveOneLineErrors) {
  const std::string ok_entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<BadCase> cases = {
      {"short", {1, 2, 3}, "too short"},
      {"truncated", make_file("{}", 0, 1234), "truncated: header says 1234 bytes but file has 2"},
      {"huge header", make_file("{}", 0, 1ull << 40), "exceeds the 100 MB limit"},
      {"invalid json", make_file("{\"x\":", 0), "header is not valid JSON"},
      {"not object", make_file("[1,2]", 0), "header is not a JSON object"},
      {"deep", make_file(std::string(100, '[') + std::string(100, ']'), 0), "nests deeper"},
      {"metadata", make_file(R"({"__metadata__":{"a":1}})", 0), "__metadata__ entry 'a' is not a string"},
      {"entry", make_file(R"({"x":3})", 0), "tensor 'x' entry is not a JSON object"},
      {"no dtype", make_file(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4), "tensor 'x' has no dtype"},
      {"bad dtype", make_file(R"({"x":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype 'F17'"},
      {"no shape", make_file(R"({"x":{"dtype":"F32","data_offsets":[0,4]}})", 4), "has no shape"},
      {"neg shape", make_file(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "not a non-negative integer"},
      {"float shape", make_file(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "not a non-negative integer"},
      {"huge shape", make_file(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4), "too large"},
      {"offsets form", make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "data_offsets is not a pair"},
      {"outside", make_file("{" + ok_entry + "}", 4), "tensor 'x' data_offsets [0,8] outside the data region of 4 bytes"},
      {"reversed", make_file(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4), "outside the data region"},
      {"size", make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "hold 8 bytes but F32 [3] needs 12"},
      {"overlap",
       make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "tensor 'y' data overlaps tensor 'x'"},
  };
  for (const BadCase& c : cases) {
    std::string e = error_of(c.bytes);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": got '" << e << "'";
    EXPECT_EQ(e.rfind("model.safetensors: ", 0), 0u) << c.what << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << c.what;
  }
}

TEST(Safetensors, AcceptsEmptyAndZeroSizedTensors) {
  auto f = SafetensorsFile::from_bytes(make_file("{}", 0));
  EXPECT_TRUE(f.names().empty());
  auto g = SafetensorsFile::from_bytes(
      make_file(R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4));
  EXPECT_TRUE(g.read_f32("e").empty());
  EXPECT_EQ(g.read_f32("x"), (std::vector<float>{0.f, 0.f}));
}

TEST(Safetensors, OpenMissingFileNamesIt) {
  try {
    SafetensorsFile::open("/nonexistent/model.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.safetensors"), std::string::npos);
  }
}

// Values printed by tests/reference/safetensors_reference.py (the official safetensors package).
TEST(SafetensorsShared, MatchesPythonSafetensors) {
  DETFORGE_REQUIRE_SHARED();
  auto f = SafetensorsFile::open(test::shared_dir() / "models/rtdetr_v2_tiny_shapes/model.safetensors");
  EXPECT_EQ(f.names().size(), 454u);
  auto sum = [](const std::vector<float>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  auto nps = f.read_f32("model.decoder.layers.0.encoder_attn.n_points_scale");
  EXPECT_EQ(nps.size(), 12u);
  EXPECT_DOUBLE_EQ(sum(nps), 3.0);
  auto bias = f.read_f32("model.enc_score_head.bias");
  EXPECT_NEAR(sum(bias), -16.62695312, 1e-7);
  EXPECT_EQ(bias[0], -2.076171875f);
  EXPECT_EQ(bias[2], -2.080078125f);
  auto w = f.read_f32("model.backbone.model.embedder.embedder.0.convolution.weight");
  EXPECT_EQ(f.info("model.backbone.model.embedder.embedder.0.convolution.weight").shape,
            (std::vector<int64_t>{16, 3, 3, 3}));
  EXPECT_NEAR(sum(w), -0.9096511602, 1e-8);
  EXPECT_EQ(w[0], 0.09283447265625f);
  EXPECT_EQ(w[1], 0.01117706298828125f);
  auto raw = f.bytes("model.decoder_input_proj.0.1.num_batches_tracked");
  int64_t n;
  ASSERT_EQ(raw.size(), 8u);
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n, 2470);
}

}  // namespace
}  // namespace detforge

namespace detforge {
namespace {

// Written by the official safetensors package (tests/fuzz/make_corpus.py).
TEST(Safetensors, ReadsPythonWrittenDtypes) {
  fs::path dir = fs::path(DETFORGE_SOURCE_DIR) / "tests/fuzz/corpus/safetensors";
  auto a = SafetensorsFile::open(dir / "u8_bool_f64.safetensors");
  EXPECT_EQ(a.info("mask").dtype, "BOOL");
  EXPECT_EQ(a.read_f32("d"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(a.info("empty").shape, (std::vector<int64_t>{0, 3}));
  auto b = SafetensorsFile::open(dir / "bf16.safetensors");
  EXPECT_EQ(b.read_f32("b"), (std::vector<float>{1.0f, -2.0f}));
  auto c = SafetensorsFile::open(dir / "f32_f16_i64.safetensors");
  EXPECT_EQ(c.metadata().at("format"), "pt");
  EXPECT_EQ(c.info("conv.weight").shape, (std::vector<int64_t>{2, 3, 1, 1}));
  EXPECT_EQ(c.info("bn.num_batches_tracked").dtype, "I64");
}

}  // namespace
}  // namespace detforge
