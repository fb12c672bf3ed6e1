// JPEG decode through TurboJPEG (libjpeg-turbo 2.1 API). PIL decodes with libjpeg defaults:
// the accurate integer IDCT (JDCT_ISLOW) and fancy upsampling; TurboJPEG's defaults are the same
// (no TJFLAG_FASTDCT / TJFLAG_FASTUPSAMPLE). Measured: identical RGB bytes to Pillow 13 (libjpeg-turbo
// 3.x) on all 80 coco_val80 images (tests/golden/resize/coco_val80_640.json, decode_fnv).
#include <turbojpeg.h>

#include <cstring>
#include <memory>

#include "io/exif.h"
#include "io/image_codecs.h"

namespace detforge::codec {
namespace {

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

// Pillow's CMYK -> RGB (Convert.c cmyk2rgb): r = clip(nk - nk*c/255) with its rounding MULDIV255.
inline uint8_t cmyk_channel(int c, int nk) {
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v));
}

}  // namespace

bool is_jpeg(const uint8_t* d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }

ImageU8 decode_jpeg(const uint8_t* data, size_t size, const std::string& what, int& orientation) {
  TjHandle tj;
  if (!tj.h) fail(what, "cannot initialise the JPEG decoder");
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  auto* buf = const_cast<unsigned char*>(data);
  if (tjDecompressHeader3(tj.h, buf, static_cast<unsigned long>(size), &w, &h, &subsamp, &colorspace) != 0)
    fail(what, std::string("bad JPEG header (") + tjGetErrorStr2(tj.h) + ")");
  if (w <= 0 || h <= 0) fail(what, "JPEG has no pixels");
  if (uint64_t(w) * uint64_t(h) > kMaxPixels)
    fail(what, "image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels exceeds PIL's limit");

  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const bool gray = colorspace == TJCS_GRAY;
  const int pf = cmyk ? TJPF_CMYK : (gray ? TJPF_GRAY : TJPF_RGB);
  const int ch = tjPixelSize[pf];
  std::vector<uint8_t> raw(size_t(w) * h * ch);
  // ACCURATEDCT states the default explicitly: ISLOW, as PIL.
  const int flags = TJFLAG_ACCURATEDCT;
  if (tjDecompress2(tj.h, buf, static_cast<unsigned long>(size), raw.data(), w, w * ch, h, pf, flags) != 0) {
    // libjpeg warnings (e.g. extraneous bytes before a marker) still give a full image, and PIL
    // accepts them too; a truncated file does not (PIL: "image file is truncated").
    const std::string msg = tjGetErrorStr2(tj.h);
    if (tjGetErrorCode(tj.h) != TJERR_WARNING || msg.find("Premature end") != std::string::npos)
      fail(what, "corrupt or truncated JPEG (" + msg + ")");
  }

  ImageU8 img;
  img.width = w;
  img.height = h;
  if (pf == TJPF_RGB) {
    img.rgb = std::move(raw);
  } else {
    img.rgb.resize(size_t(w) * h * 3);
    const size_t n = size_t(w) * h;
    if (gray) {
      for (size_t i = 0; i < n; ++i) img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = raw[i];
    } else {
      // PIL opens 4-component JPEGs as "CMYK;I" (Adobe convention: stored inverted).
      for (size_t i = 0; i < n; ++i) {
        const uint8_t* s = &raw[4 * i];
        const int nk = s[3];  // 255 - (255 - stored k)
        for (int c = 0; c < 3; ++c) img.rgb[3 * i + c] = cmyk_channel(255 - s[c], nk);
      }
    }
  }
  orientation = exif::jpeg_orientation(data, size);
  return img;
}

}  // namespace detforge::codec
