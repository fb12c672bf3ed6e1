// Image I/O for users of detforge: decode JPEG/PNG files into RGB (EXIF orientation applied as
// PIL's ImageOps.exif_transpose does), and write annotated PNGs.
#pragma once
#include <string>
#include <vector>

#include "detforge/types.h"

namespace detforge {

// Decodes a JPEG or PNG file (by content, not by extension) to 8-bit RGB. Throws
// detforge::Error ("cannot read image <path>: <why>") on a missing, unreadable or garbled file.
ImageU8 load_image(const std::string& path);
ImageU8 decode_image(const unsigned char* data, size_t size, const std::string& what);

// Writes `img` as PNG, atomically. Throws detforge::Error naming the path on failure.
void save_png(const ImageU8& img, const std::string& path);

// Draws each detection's box and "label score" text onto a copy of `img`.
ImageU8 draw_detections(const ImageU8& img, const Detections& dets);

}  // namespace detforge
