// load_image / decode_image / save_png: the public face of image I/O (include/detforge/image.h).
#include <cstdio>
#include <fstream>
#include <string_view>

#include "core/atomic_file.h"
#include "detforge/image.h"
#include "io/exif.h"
#include "io/image_codecs.h"

namespace detforge {

namespace codec {
void fail(const std::string& what, const std::string& reason) {
  throw Error("cannot read image " + what + ": " + reason);
}
}  // namespace codec

ImageU8 decode_image(const unsigned char* data, size_t size, const std::string& what) {
  if (!data || size == 0) codec::fail(what, "file is empty");
  int orientation = 1;
  ImageU8 img;
  if (codec::is_jpeg(data, size)) {
    img = codec::decode_jpeg(data, size, what, orientation);
  } else if (codec::is_png(data, size)) {
    img = codec::decode_png(data, size, what, orientation);
  } else {
    codec::fail(what, "not a JPEG or PNG file (unknown signature)");
  }
  return exif::apply_orientation(std::move(img), orientation);
}

ImageU8 load_image(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) codec::fail(path, "is a directory");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) codec::fail(path, std::filesystem::exists(path, ec) ? "permission denied" : "no such file");
  const std::streamoff size = f.tellg();
  if (size < 0) codec::fail(path, "cannot tell its size");
  std::vector<unsigned char> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), size)) codec::fail(path, "I/O error while reading");
  return decode_image(bytes.data(), bytes.size(), path);
}

void save_png(const ImageU8& img, const std::string& path) {
  if (img.empty() || img.rgb.size() != size_t(img.width) * img.height * 3)
    throw Error("cannot write " + path + ": image is empty or its pixel buffer has the wrong size");
  check_output_path(path);
  const std::vector<uint8_t> png = codec::encode_png(img);
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
}

}  // namespace detforge
