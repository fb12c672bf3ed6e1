// Bundle container v1: round trip, atomic writes, and one test per validation error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/checksum.h"
#include "detforge/types.h"
#include "io/bundle_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace detforge {
namespace {

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("detforge_bundle_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A hand-made bundle: preamble, header text, zero padding, then `data_bytes` zero bytes.
std::vector<uint8_t> raw_bundle(uint32_t version, const std::string& header, size_t total_size) {
  std::vector<uint8_t> b(24, 0);
  std::memcpy(b.data(), "DETFORGE", 8);
  for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<uint8_t>(version >> (8 * i));
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[16 + i] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  if (b.size() < total_size) b.resize(total_size, 0);
  return b;
}

std::string zeros_checksum(size_t n) {
  std::vector<uint8_t> z(n, 0);
  return hex64(fnv1a64(z.data(), z.size()));
}

// A header text whose sections table is `sections`; the data starts at 256 or 320 (512 at most).
std::string header_with(const json& sections, uint32_t fv = 1) {
  json h = {{"family", "rt_detr_v2"}, {"format_version", fv}, {"sections", sections}};
  std::string t = h.dump();
  EXPECT_LT(t.size() + 24, 512u);
  return t;
}

std::string error_of(const std::vector<uint8_t>& bytes, bool verify = true) {
  try {
    BundleFile::from_bytes(bytes, "m.bundle", verify);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(BundleFile, RoundTrip) {
  fs::path p = temp_dir() / "rt.bundle";
  std::vector<uint8_t> weights(1000);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<uint8_t>(i * 7);
  std::string graph = R"({"ops":[]})";
  json header = {{"family", "rt_detr_v2"}, {"precision", "fp16"}, {"input_size", {640, 640}},
                 {"labels", {"circle", "square"}}};
  write_bundle_atomically(p, header, {{"graph", graph}, {"weights", weights}, {"empty", std::string_view()}});
  BundleFile b = BundleFile::open(p);
  EXPECT_EQ(b.format_version(), 2u);
  EXPECT_EQ(b.header()["family"], "rt_detr_v2");
  EXPECT_EQ(b.header()["labels"][1], "square");
  EXPECT_EQ(b.header()["format_version"], 2);
  EXPECT_EQ(b.section_names(), (std::vector<std::string>{"graph", "weights", "empty"}));
  auto w = b.section("weights");
  ASSERT_EQ(w.size(), weights.size());
  EXPECT_EQ(std::memcmp(w.data(), weights.data(), w.size()), 0);
  auto g = b.section("graph");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(g.data()), g.size()), graph);
  EXPECT_EQ(b.section("empty").size(), 0u);
  for (const json& s : b.header()["sections"]) {
    EXPECT_EQ(s["offset"].get<uint64_t>() % 64, 0u) << s.dump();
    EXPECT_EQ(s["checksum"].get<std::string>().size(), 16u);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % 64, 0u) << "mapped sections are 64-byte aligned";
  EXPECT_TRUE(b.has_section("graph"));
  EXPECT_FALSE(b.has_section("scales"));
  try {
    b.section("scales");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), ("bundle " + p.string() + ": no section 'scales' (sections: graph, weights, empty)").c_str());
  }
  // from_bytes reads the same file identically
  BundleFile c = BundleFile::from_bytes(read_all(p));
  EXPECT_EQ(c.header(), b.header());
  fs::remove(p);
}

TEST(BundleFile, FailedWritesLeaveNoFile) {
  fs::path dir = temp_dir() / "atomic";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path p = dir / "x.bundle";
  EXPECT_THROW(write_bundle_atomically(p, json::array(), {}), Error);
  EXPECT_THROW(write_bundle_atomically(p, json::object(), {{"a", "1"}, {"a", "2"}}), Error);
  EXPECT_THROW(write_bundle_atomically(p, json::object(), {{"", "1"}}), Error);
  EXPECT_THROW(write_bundle_atomically(dir / "missing" / "x.bundle", json::object(), {}), Error);
  EXPECT_THROW(write_bundle_atomically(dir, json::object(), {}), Error);
  EXPECT_TRUE(fs::is_empty(dir)) << "no bundle and no temporary file left behind";
  // An existing bundle survives a failed overwrite untouched.
  write_bundle_atomically(p, {{"v", 1}}, {{"a", "old"}});
  EXPECT_THROW(write_bundle_atomically(p, {{"v", 2}}, {{"a", "x"}, {"a", "y"}}), Error);
  EXPECT_EQ(BundleFile::open(p).header()["v"], 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(BundleFile, MissingFileNamesIt) {
  try {
    BundleFile::open("/nonexistent/m.bundle");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/m.bundle"), std::string::npos) << e.what();
  }
}

TEST(BundleFile, NewerFormatVersionAsksForUpgrade) {
  std::string e = error_of(raw_bundle(3, header_with(json::array(), 3), 256));
  EXPECT_EQ(e, "bundle m.bundle has format version 3; this detforge reads up to version 2 — upgrade detforge");
}

TEST(BundleFile, VersionOneIsStillRead) {
  EXPECT_EQ(error_of(raw_bundle(1, header_with(json::array(), 1), 256)), "(no error)");
}

TEST(BundleFile, ChecksumMismatchNamesSectionAndCanBeSkipped) {
  json secs = json::array({{{"name", "weights"}, {"offset", 256}, {"size", 64}, {"checksum", zeros_checksum(64)}}});
  auto bytes = raw_bundle(1, header_with(secs), 320);
  EXPECT_EQ(error_of(bytes), "(no error)");
  bytes[300] = 1;
  std::string e = error_of(bytes);
  EXPECT_NE(e.find("section 'weights' checksum mismatch"), std::string::npos) << e;
  EXPECT_EQ(error_of(bytes, /*verify=*/false), "(no error)");
}

TEST(BundleFile, StructuralDefects) {
  auto sec = [](const std::string& name, uint64_t off, uint64_t size) {
    return json{{"name", name}, {"offset", off}, {"size", size}, {"checksum", zeros_checksum(size)}};
  };
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* expect;
  };
  std::vector<uint8_t> bad_magic = raw_bundle(1, header_with(json::array()), 256);
  bad_magic[0] = 'X';
  std::vector<uint8_t> huge_len = raw_bundle(1, "{}", 256);
  huge_len[23] = 0x10;
  std::vector<uint8_t> long_len = raw_bundle(1, "{}", 100);
  long_len[16] = 200;
  std::vector<Case> cases = {
      {"empty", {}, "not a detforge bundle"},
      {"magic", bad_magic, "not a detforge bundle"},
      {"short", {'D', 'E', 'T', 'F', 'O', 'R', 'G', 'E', 1, 0}, "truncated"},
      {"version 0", raw_bundle(0, "{}", 64), "invalid format version 0"},
      {"huge header", huge_len, "exceeds the 64 MB limit"},
      {"header past end", long_len, "truncated: header says 200 bytes"},
      {"bad json", raw_bundle(1, "{\"a\":", 64), "header is not valid JSON"},
      {"deep json", raw_bundle(1, std::string(200, '[') + std::string(200, ']'), 512), "nests deeper"},
      {"not object", raw_bundle(1, "[]", 64), "header is not a JSON object"},
      {"no version", raw_bundle(1, R"({"sections":[]})", 64), "format_version does not match"},
      {"version mismatch", raw_bundle(1, header_with(json::array(), 3), 256), "format_version does not match"},
      {"no sections", raw_bundle(1, R"({"format_version":1})", 64), "no sections array"},
      {"nameless", raw_bundle(1, header_with(json::array({json{{"offset", 256}}})), 320), "has no name"},
      {"no size", raw_bundle(1, header_with(json::array({json{{"name", "w"}, {"offset", 256}}})), 320),
       "section 'w' has no unsigned offset and size"},
      {"unaligned", raw_bundle(1, header_with(json::array({sec("w", 260, 4)})), 320), "offset 260 is not 64-byte aligned"},
      {"in header", raw_bundle(1, header_with(json::array({sec("w", 64, 4)})), 320), "lies inside the header"},
      {"past end", raw_bundle(1, header_with(json::array({sec("w", 256, 100)})), 320), "runs past the end of the file"},
      {"past end 2", raw_bundle(1, header_with(json::array({json{{"name", "w"}, {"offset", 1ull << 62}, {"size", 1ull << 62}, {"checksum", "0"}}})), 320), "runs past the end"},
      {"duplicate", raw_bundle(1, header_with(json::array({sec("w", 256, 4), sec("w", 320, 4)})), 384), "section 'w' appears twice"},
      {"overlap", raw_bundle(1, header_with(json::array({sec("a", 512, 100), sec("e", 576, 0), sec("b", 576, 4)})), 640),
       "section 'b' overlaps section 'a'"},
      {"no checksum", raw_bundle(1, header_with(json::array({json{{"name", "w"}, {"offset", 256}, {"size", 4}}})), 320),
       "section 'w' has no checksum"},
  };
  for (const Case& c : cases) {
    std::string e = error_of(c.bytes);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": got '" << e << "'";
    EXPECT_EQ(e.rfind("bundle m.bundle", 0), 0u) << c.what << ": " << e;
  }
}

}  // namespace
}  // namespace detforge

namespace detforge {
namespace {

// The seed corpus is written by an independent Python implementation (tests/fuzz/make_corpus.py).
TEST(BundleFile, ReadsPythonWrittenBundle) {
  fs::path p = fs::path(DETFORGE_SOURCE_DIR) / "tests/fuzz/corpus/bundle/two_sections.bundle";
  BundleFile b = BundleFile::open(p);
  EXPECT_EQ(b.header()["family"], "rt_detr_v2");
  EXPECT_EQ(b.section_names(), (std::vector<std::string>{"graph", "weights"}));
  auto w = b.section("weights");
  ASSERT_EQ(w.size(), 200u);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], i);
}

}  // namespace
}  // namespace detforge
