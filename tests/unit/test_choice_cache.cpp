// ChoiceCache: entries survive a round trip through the file; another fingerprint gets another
// file; a corrupt or foreign file reads as empty and is replaced; two writers merge; an
// unwritable folder leaves the choices in memory and says why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/choice_cache.h"

namespace detforge {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("detforge-choice-cache-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
};

const ChoiceCache::Entry kGpuA = {{"gpu", "H100"}, {"cudnn", "91900"}, {"settings", "tune 1"}};
const ChoiceCache::Entry kGpuB = {{"gpu", "H200"}, {"cudnn", "91900"}, {"settings", "tune 1"}};

// A cache of `fp` in `dir` holding k = {v: value}, saved; returns its file.
fs::path saved_with_k(const fs::path& dir, const ChoiceCache::Entry& fp, const std::string& value) {
  ChoiceCache c(dir, "cuda-tune", fp);
  c.put("k", {{"v", value}});
  EXPECT_TRUE(c.save()) << c.problem();
  return c.file();
}

TEST(ChoiceCache, EntriesSurviveARoundTripThroughTheFile) {
  TempDir d;
  {
    ChoiceCache c(d.path / "sub", "cuda-tune", kGpuA);
    ASSERT_TRUE(c.enabled());
    EXPECT_EQ(c.find("conv|1,20,20"), nullptr);
    c.put("conv|1,20,20", {{"engine", "41"}, {"knobs", "1:3,2:0"}});
    c.put("own|linear,300", {{"variant", "library"}});
    EXPECT_TRUE(c.dirty());
    ASSERT_TRUE(c.save()) << c.problem();  // creates the missing folder
    EXPECT_FALSE(c.dirty());
    EXPECT_TRUE(fs::exists(c.file()));
  }
  ChoiceCache again(d.path / "sub", "cuda-tune", kGpuA);
  ASSERT_EQ(again.size(), 2u);
  const auto* e = again.find("conv|1,20,20");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->at("engine"), "41");
  EXPECT_EQ(e->at("knobs"), "1:3,2:0");
  EXPECT_EQ(again.find("own|linear,300")->at("variant"), "library");
  EXPECT_TRUE(again.problem().empty()) << again.problem();
}

TEST(ChoiceCache, AnotherFingerprintIsAnotherFile) {
  TempDir d;
  const fs::path a = saved_with_k(d.path, kGpuA, "a");
  ChoiceCache b(d.path, "cuda-tune", kGpuB);
  EXPECT_NE(a, b.file());
  EXPECT_EQ(b.find("k"), nullptr);
  ChoiceCache other_kind(d.path, "other", kGpuA);
  EXPECT_NE(other_kind.file(), a);
}

TEST(ChoiceCache, ACorruptFileReadsAsEmptyAndIsReplaced) {
  TempDir d;
  fs::path file;
  {
    ChoiceCache a(d.path, "cuda-tune", kGpuA);
    file = a.file();
  }
  for (const std::string bad : {"{not json", "{\"format\": 1}", "[]", ""}) {
    fs::create_directories(d.path);
    std::ofstream(file) << bad;
    ChoiceCache c(d.path, "cuda-tune", kGpuA);
    EXPECT_EQ(c.size(), 0u) << bad;
    if (!bad.empty()) EXPECT_NE(c.problem().find("not a valid cache"), std::string::npos) << bad << ": " << c.problem();
    c.put("k", {{"v", "1"}});
    ASSERT_TRUE(c.save()) << c.problem();
    ChoiceCache r(d.path, "cuda-tune", kGpuA);
    ASSERT_NE(r.find("k"), nullptr) << bad;
    EXPECT_EQ(r.find("k")->at("v"), "1");
  }
}

TEST(ChoiceCache, AForeignFingerprintInTheFileIsIgnored) {
  TempDir d;
  const fs::path a = saved_with_k(d.path, kGpuA, "a");
  // The same file name holding B's fingerprint (a hand copy, or a hash collision).
  fs::copy_file(saved_with_k(d.path, kGpuB, "b"), a, fs::copy_options::overwrite_existing);
  ChoiceCache r(d.path, "cuda-tune", kGpuA);
  EXPECT_EQ(r.find("k"), nullptr);
  EXPECT_NE(r.problem().find("another fingerprint"), std::string::npos) << r.problem();
}

TEST(ChoiceCache, TwoWritersMergeTheirEntries) {
  TempDir d;
  ChoiceCache a(d.path, "cuda-tune", kGpuA);
  ChoiceCache b(d.path, "cuda-tune", kGpuA);  // both read an absent file
  a.put("from_a", {{"v", "1"}});
  b.put("from_b", {{"v", "2"}});
  b.put("both", {{"v", "b"}});
  a.put("both", {{"v", "a"}});
  ASSERT_TRUE(a.save());
  ASSERT_TRUE(b.save());  // merges a's entries under its own
  ChoiceCache r(d.path, "cuda-tune", kGpuA);
  ASSERT_NE(r.find("from_a"), nullptr);
  ASSERT_NE(r.find("from_b"), nullptr);
  EXPECT_EQ(r.find("both")->at("v"), "b");  // the last writer's own entry wins
}

// A folder that cannot be made (a file stands in its place; permissions would not stop root).
TEST(ChoiceCache, AnUnwritableFolderKeepsTheChoicesInMemory) {
  TempDir d;
  fs::create_directories(d.path);
  std::ofstream(d.path / "blocker") << "x";
  ChoiceCache c(d.path / "blocker", "cuda-tune", kGpuA);
  c.put("k", {{"v", "1"}});
  EXPECT_FALSE(c.save());
  EXPECT_NE(c.problem().find("blocker"), std::string::npos) << c.problem();
  ASSERT_NE(c.find("k"), nullptr);
  EXPECT_TRUE(c.dirty());
}

TEST(ChoiceCache, DisabledFindsNothingAndSavesNothing) {
  ChoiceCache c;
  EXPECT_FALSE(c.enabled());
  c.put("k", {{"v", "1"}});
  EXPECT_EQ(c.find("k"), nullptr);
  EXPECT_TRUE(c.save());
  ChoiceCache empty_dir(fs::path(), "cuda-tune", kGpuA);
  EXPECT_FALSE(empty_dir.enabled());
}

TEST(ChoiceCache, DefaultFolderFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string xdg0 = xdg ? xdg : "", home0 = home ? home : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(default_cache_dir(), fs::path("/tmp/xdg/detforge"));
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(default_cache_dir(), fs::path("/home/u/.cache/detforge"));
  unsetenv("HOME");
  EXPECT_TRUE(default_cache_dir().empty());
  if (xdg) setenv("XDG_CACHE_HOME", xdg0.c_str(), 1);
  if (home) setenv("HOME", home0.c_str(), 1);
}

}  // namespace
}  // namespace detforge
