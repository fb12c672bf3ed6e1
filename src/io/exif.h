// EXIF orientation: a small bounds-checked reader for the TIFF block inside a JPEG APP1
// "Exif\0\0" segment (or a PNG eXIf chunk), and the pixel transform that
// PIL's ImageOps.exif_transpose applies for each orientation value.
#pragma once
#include <cstddef>
#include <cstdint>

#include "detforge/types.h"

namespace detforge::exif {

// Orientation tag (0x0112) of IFD0 in a TIFF block starting with "II*\0" or "MM\0*" (an
// optional leading "Exif\0\0" is skipped, as PIL does). Returns 1 when the tag is absent, the
// block is malformed or truncated, or the value is not a single integer in 1..8.
int orientation_from_tiff(const uint8_t* data, size_t size);

// Orientation of a JPEG file: the first APP1 segment that starts with "Exif\0\0" (PIL keeps the
// first). Scans markers up to the first SOS; returns 1 when there is none.
int jpeg_orientation(const uint8_t* data, size_t size);

// Returns `img` transposed as exif_transpose does: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise; 1 (or any other) unchanged.
ImageU8 apply_orientation(ImageU8 img, int orientation);

}  // namespace detforge::exif
