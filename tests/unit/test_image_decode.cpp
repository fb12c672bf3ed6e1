// Decoding against PIL (fixtures and checksums from tests/reference/make_resize_checksums.py):
// EXIF orientations 1-8 (little- and big-endian TIFF, garbled block), PNG colour types, gray
// and CMYK JPEG; plus error handling for unreadable, garbled and truncated files, and save_png.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "detforge/image.h"
#include "io/exif.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using detforge::ImageU8;

namespace {

fs::path fixtures() { return detforge::test::source_dir() / "tests/golden/resize/fixtures"; }

std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const detforge::Error& e) {
    return e.what();
  }
  return "";
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("detforge_test_image_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(ImageDecode, FixturesMatchPil) {
  std::ifstream f(detforge::test::source_dir() / "tests/golden/resize/coco_val80_640.json");
  ASSERT_TRUE(f.good());
  const auto g = nlohmann::json::parse(f);
  const auto& fx = g["fixtures"];
  ASSERT_GE(fx.size(), 20u);
  for (const auto& [name, ref] : fx.items()) {
    const ImageU8 img = detforge::load_image((fixtures() / name).string());
    EXPECT_EQ(img.width, ref["width"].get<int>()) << name;
    EXPECT_EQ(img.height, ref["height"].get<int>()) << name;
    EXPECT_EQ(detforge::hex64(detforge::fnv1a64(img.rgb.data(), img.rgb.size())), ref["decode_fnv"].get<std::string>())
        << name;
  }
}

TEST(ImageDecode, ExifOrientationParsing) {
  for (int o = 1; o <= 8; ++o) {
    const auto bytes = read_bytes(fixtures() / ("exif_le_" + std::to_string(o) + ".jpg"));
    EXPECT_EQ(detforge::exif::jpeg_orientation(bytes.data(), bytes.size()), o);
  }
  const auto be = read_bytes(fixtures() / "exif_be_6.jpg");
  EXPECT_EQ(detforge::exif::jpeg_orientation(be.data(), be.size()), 6);
  const auto bad = read_bytes(fixtures() / "exif_garbled.jpg");
  EXPECT_EQ(detforge::exif::jpeg_orientation(bad.data(), bad.size()), 1);
  // Every truncation of a valid header is bounds-checked and answers 1 or the real value.
  for (size_t n = 0; n < be.size(); n += 3) {
    const int o = detforge::exif::jpeg_orientation(be.data(), n);
    EXPECT_TRUE(o == 1 || o == 6) << n;
  }
  const uint8_t tiff_out_of_range[] = {'I', 'I', '*', 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 9, 0, 0, 0};
  EXPECT_EQ(detforge::exif::orientation_from_tiff(tiff_out_of_range, sizeof tiff_out_of_range), 1);
}

TEST(ImageDecode, OrientationTransformsAreConsistent) {
  ImageU8 img{3, 2, {}};
  for (int i = 0; i < 18; ++i) img.rgb.push_back(uint8_t(i));
  // 6 (rotate clockwise) then 8 (counter-clockwise) restores; 3 twice restores.
  EXPECT_EQ(detforge::exif::apply_orientation(detforge::exif::apply_orientation(img, 6), 8).rgb, img.rgb);
  EXPECT_EQ(detforge::exif::apply_orientation(detforge::exif::apply_orientation(img, 3), 3).rgb, img.rgb);
  const ImageU8 r = detforge::exif::apply_orientation(img, 6);
  EXPECT_EQ(r.width, 2);
  EXPECT_EQ(r.height, 3);
  EXPECT_EQ(r.rgb[0], img.rgb[3 * 3]);  // top-left of a clockwise turn is the old bottom-left
}

TEST(ImageDecode, ErrorsAreOneLineAndNameThePath) {
  const fs::path dir = temp_dir("errors");
  const std::string missing = (dir / "missing.jpg").string();
  std::string e = error_of([&] { detforge::load_image(missing); });
  EXPECT_EQ(e.rfind("cannot read image " + missing + ": ", 0), 0u) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);

  e = error_of([&] { detforge::load_image(dir.string()); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;

  std::ofstream(dir / "text.jpg") << "hello, not an image";
  e = error_of([&] { detforge::load_image((dir / "text.jpg").string()); });
  EXPECT_NE(e.find("not a JPEG or PNG"), std::string::npos) << e;

  std::ofstream(dir / "empty.png").close();
  e = error_of([&] { detforge::load_image((dir / "empty.png").string()); });
  EXPECT_NE(e.find("empty"), std::string::npos) << e;

  // Truncated and garbled JPEG / PNG.
  for (const char* name : {"sub420.jpg", "rgba.png"}) {
    auto bytes = read_bytes(fixtures() / name);
    std::vector<unsigned char> cut(bytes.begin(), bytes.begin() + bytes.size() / 2);
    e = error_of([&] { detforge::decode_image(cut.data(), cut.size(), name); });
    EXPECT_EQ(e.rfind(std::string("cannot read image ") + name + ": ", 0), 0u) << name << ": " << e;
    auto garbled = bytes;
    for (size_t i = 40; i < garbled.size(); i += 7) garbled[i] ^= 0x5A;
    e = error_of([&] { detforge::decode_image(garbled.data(), garbled.size(), name); });
    EXPECT_EQ(e.rfind(std::string("cannot read image ") + name + ": ", 0), 0u) << name << ": " << e;
  }
  fs::remove_all(dir);
}

TEST(ImageDecode, SavePngRoundTripsAndFailsCleanly) {
  const fs::path dir = temp_dir("save");
  ImageU8 img{13, 5, {}};
  for (int i = 0; i < 13 * 5 * 3; ++i) img.rgb.push_back(uint8_t(i * 11));
  const fs::path out = dir / "a.png";
  detforge::save_png(img, out.string());
  const ImageU8 back = detforge::load_image(out.string());
  EXPECT_EQ(back.width, 13);
  EXPECT_EQ(back.height, 5);
  EXPECT_EQ(back.rgb, img.rgb);

  // A directory as target, and a missing folder: an error naming the path, and no file left.
  std::string e = error_of([&] { detforge::save_png(img, dir.string()); });
  EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
  const fs::path missing = dir / "no_such_folder" / "b.png";
  e = error_of([&] { detforge::save_png(img, missing.string()); });
  EXPECT_NE(e.find(missing.string()), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(missing));
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u);  // only a.png: no temporary left behind
  fs::remove_all(dir);
}

}  // namespace
