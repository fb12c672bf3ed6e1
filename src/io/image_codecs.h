// Internal codec entry points behind include/detforge/image.h. Each decoder returns the image
// exactly as PIL's Image.open(...).convert("RGB") would (before EXIF orientation) and throws
// detforge::Error("cannot read image <what>: <reason>").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "detforge/types.h"

namespace detforge::codec {

// Pillow's decompression-bomb limit (2 * Image.MAX_IMAGE_PIXELS): PIL refuses larger images.
constexpr uint64_t kMaxPixels = 178956970ull;

[[noreturn]] void fail(const std::string& what, const std::string& reason);

bool is_jpeg(const uint8_t* data, size_t size);
bool is_png(const uint8_t* data, size_t size);

// `orientation` receives the EXIF orientation (1 when none).
ImageU8 decode_jpeg(const uint8_t* data, size_t size, const std::string& what, int& orientation);
ImageU8 decode_png(const uint8_t* data, size_t size, const std::string& what, int& orientation);

// PNG bytes of an RGB image (8-bit truecolor, no interlace).
std::vector<uint8_t> encode_png(const ImageU8& img);

}  // namespace detforge::codec
