#include "io/exif.h"

#include <cstring>
#include <utility>

namespace detforge::exif {
namespace {

// Bounds-checked reads in the TIFF block's byte order.
struct Reader {
  const uint8_t* p;
  size_t n;
  bool big_endian;
  bool u16(size_t off, uint32_t& v) const {
    if (off > n || n - off < 2) return false;
    v = big_endian ? (uint32_t(p[off]) << 8 | p[off + 1]) : (uint32_t(p[off + 1]) << 8 | p[off]);
    return true;
  }
  bool u32(size_t off, uint32_t& v) const {
    if (off > n || n - off < 4) return false;
    const uint8_t* q = p + off;
    v = big_endian ? (uint32_t(q[0]) << 24 | uint32_t(q[1]) << 16 | uint32_t(q[2]) << 8 | q[3])
                   : (uint32_t(q[3]) << 24 | uint32_t(q[2]) << 16 | uint32_t(q[1]) << 8 | q[0]);
    return true;
  }
};

constexpr uint32_t kOrientationTag = 0x0112;

}  // namespace

int orientation_from_tiff(const uint8_t* data, size_t size) {
  if (!data) return 1;
  if (size >= 6 && std::memcmp(data, "Exif\0\0", 6) == 0) {
    data += 6;
    size -= 6;
  }
  if (size < 8) return 1;
  Reader r{data, size, false};
  if (std::memcmp(data, "II*\0", 4) == 0) {
    r.big_endian = false;
  } else if (std::memcmp(data, "MM\0*", 4) == 0) {
    r.big_endian = true;
  } else {
    return 1;
  }
  uint32_t ifd = 0, count = 0;
  if (!r.u32(4, ifd) || !r.u16(ifd, count)) return 1;
  int orientation = 1;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t entry = size_t(ifd) + 2 + size_t(i) * 12;
    uint32_t tag = 0, type = 0, n = 0, v = 0;
    if (!r.u16(entry, tag) || !r.u16(entry + 2, type) || !r.u32(entry + 4, n)) break;  // truncated
    if (tag != kOrientationTag) continue;
    // PIL yields a tuple for count != 1, which exif_transpose ignores; a later duplicate wins.
    if (n != 1) {
      orientation = 1;
      continue;
    }
    bool ok = false;
    if (type == 3 || type == 8) {  // SHORT, SSHORT: value in the first two bytes of the field
      ok = r.u16(entry + 8, v);
      if (type == 8 && v >= 0x8000) v = 0;
    } else if (type == 4 || type == 9) {  // LONG, SLONG
      ok = r.u32(entry + 8, v);
    } else if (type == 1) {  // BYTE
      ok = entry + 8 < size;
      if (ok) v = data[entry + 8];
    }
    orientation = (ok && v >= 1 && v <= 8) ? int(v) : 1;
  }
  return orientation;
}

int jpeg_orientation(const uint8_t* data, size_t size) {
  if (!data || size < 4 || data[0] != 0xFF || data[1] != 0xD8) return 1;
  size_t pos = 2;
  while (pos + 4 <= size) {
    if (data[pos] != 0xFF) return 1;  // not at a marker: malformed header
    const uint8_t marker = data[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xD9 || marker == 0xDA) return 1;  // EOI or start of scan: no EXIF before it
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // standalone markers
      pos += 2;
      continue;
    }
    const size_t len = size_t(data[pos + 2]) << 8 | data[pos + 3];
    if (len < 2 || pos + 2 + len > size) return 1;
    const uint8_t* seg = data + pos + 4;
    const size_t seg_len = len - 2;
    if (marker == 0xE1 && seg_len >= 6 && std::memcmp(seg, "Exif\0\0", 6) == 0)
      return orientation_from_tiff(seg, seg_len);
    pos += 2 + len;
  }
  return 1;
}

ImageU8 apply_orientation(ImageU8 img, int orientation) {
  if (orientation < 2 || orientation > 8 || img.empty()) return img;
  const int w = img.width, h = img.height;
  const bool swap = orientation >= 5;
  ImageU8 out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.rgb.resize(img.rgb.size());
  const int ow = out.width, oh = out.height;
  for (int y = 0; y < oh; ++y) {
    for (int x = 0; x < ow; ++x) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; sy = y; break;              // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;      // ROTATE_180
        case 4: sx = x; sy = h - 1 - y; break;              // FLIP_TOP_BOTTOM
        case 5: sx = y; sy = x; break;                      // TRANSPOSE
        case 6: sx = y; sy = h - 1 - x; break;              // ROTATE_270 (clockwise)
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;      // TRANSVERSE
        case 8: sx = w - 1 - y; sy = x; break;              // ROTATE_90 (counter-clockwise)
      }
      const uint8_t* s = &img.rgb[(size_t(sy) * w + sx) * 3];
      uint8_t* d = &out.rgb[(size_t(y) * ow + x) * 3];
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

}  // namespace detforge::exif
