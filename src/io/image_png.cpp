// PNG decode and encode through libspng 0.7. Decoding asks spng for the file's own sample format
// (SPNG_FMT_PNG, host-endian) and converts to RGB here, to follow PIL's rules rather than
// spng's: low-bit gray scaled (x255, x85, x17), 16-bit RGB/RGBA/LA keep the high byte, 16-bit
// gray ("I;16") is clipped to 255, alpha and tRNS are dropped, palettes are expanded.
#include <spng.h>

#include <cstdlib>
#include <cstring>

#include "io/exif.h"
#include "io/image_codecs.h"

namespace detforge::codec {
namespace {

struct SpngCtx {
  spng_ctx* ctx;
  explicit SpngCtx(int flags) : ctx(spng_ctx_new(flags)) {}
  ~SpngCtx() {
    if (ctx) spng_ctx_free(ctx);
  }
};

// Sample `i` of a row of packed `depth`-bit samples (depth 1, 2, 4, 8) or 16-bit host-endian.
inline uint32_t sample(const uint8_t* row, size_t i, int depth) {
  switch (depth) {
    case 8: return row[i];
    case 16: {
      uint16_t v;
      std::memcpy(&v, row + 2 * i, 2);
      return v;
    }
    default: {
      const size_t bit = i * depth;
      const int shift = 8 - depth - int(bit % 8);
      return (row[bit / 8] >> shift) & ((1u << depth) - 1);
    }
  }
}

}  // namespace

bool is_png(const uint8_t* d, size_t n) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return n >= 8 && std::memcmp(d, sig, 8) == 0;
}

ImageU8 decode_png(const uint8_t* data, size_t size, const std::string& what, int& orientation) {
  SpngCtx s(0);
  if (!s.ctx) fail(what, "cannot initialise the PNG decoder");
  auto check = [&](int err, const char* step) {
    if (err) fail(what, std::string("corrupt or truncated PNG (") + step + ": " + spng_strerror(err) + ")");
  };
  check(spng_set_png_buffer(s.ctx, data, size), "buffer");
  // Ancillary chunks up to 64 MiB each, 256 MiB in all: a garbled length fails instead of allocating.
  spng_set_chunk_limits(s.ctx, size_t(64) << 20, size_t(256) << 20);
  spng_ihdr ihdr{};
  check(spng_get_ihdr(s.ctx, &ihdr), "header");
  const uint64_t w = ihdr.width, h = ihdr.height;
  if (w == 0 || h == 0) fail(what, "PNG has no pixels");
  if (w * h > kMaxPixels)
    fail(what, "image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels exceeds PIL's limit");
  size_t len = 0;
  check(spng_decoded_image_size(s.ctx, SPNG_FMT_PNG, &len), "size");
  std::vector<uint8_t> raw(len);
  check(spng_decode_image(s.ctx, raw.data(), len, SPNG_FMT_PNG, 0), "pixels");

  spng_plte plte{};
  if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED) check(spng_get_plte(s.ctx, &plte), "palette");

  const int depth = ihdr.bit_depth;
  const size_t row_bytes = len / h;
  ImageU8 img;
  img.width = int(w);
  img.height = int(h);
  img.rgb.resize(size_t(w * h * 3));
  const int hi = depth == 16 ? 8 : 0;  // 16-bit colour keeps the high byte, as PIL's ";16B" unpackers
  for (uint64_t y = 0; y < h; ++y) {
    const uint8_t* row = raw.data() + y * row_bytes;
    uint8_t* out = img.rgb.data() + y * w * 3;
    for (uint64_t x = 0; x < w; ++x) {
      uint8_t r = 0, g = 0, b = 0;
      switch (ihdr.color_type) {
        case SPNG_COLOR_TYPE_GRAYSCALE: {
          const uint32_t v = sample(row, x, depth);
          uint32_t l = v;
          if (depth == 1) l = v * 255;
          else if (depth == 2) l = v * 85;
          else if (depth == 4) l = v * 17;
          else if (depth == 16) l = v > 255 ? 255 : v;  // PIL: "I;16" -> RGB clips
          r = g = b = uint8_t(l);
          break;
        }
        case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
          r = g = b = uint8_t(sample(row, 2 * x, depth) >> hi);
          break;
        case SPNG_COLOR_TYPE_TRUECOLOR:
          r = uint8_t(sample(row, 3 * x, depth) >> hi);
          g = uint8_t(sample(row, 3 * x + 1, depth) >> hi);
          b = uint8_t(sample(row, 3 * x + 2, depth) >> hi);
          break;
        case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:
          r = uint8_t(sample(row, 4 * x, depth) >> hi);
          g = uint8_t(sample(row, 4 * x + 1, depth) >> hi);
          b = uint8_t(sample(row, 4 * x + 2, depth) >> hi);
          break;
        case SPNG_COLOR_TYPE_INDEXED: {
          const uint32_t i = sample(row, x, depth);
          if (i < plte.n_entries) {  // out-of-range indices: black, PIL's zero-filled palette
            r = plte.entries[i].red;
            g = plte.entries[i].green;
            b = plte.entries[i].blue;
          }
          break;
        }
        default:
          fail(what, "unsupported PNG colour type " + std::to_string(ihdr.color_type));
      }
      out[3 * x] = r;
      out[3 * x + 1] = g;
      out[3 * x + 2] = b;
    }
  }
  orientation = 1;
  spng_exif exif{};
  if (spng_get_exif(s.ctx, &exif) == 0 && exif.data)
    orientation = exif::orientation_from_tiff(reinterpret_cast<const uint8_t*>(exif.data), exif.length);
  return img;
}

std::vector<uint8_t> encode_png(const ImageU8& img) {
  SpngCtx s(SPNG_CTX_ENCODER);
  if (!s.ctx) throw Error("cannot initialise the PNG encoder");
  spng_set_option(s.ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = uint32_t(img.width);
  ihdr.height = uint32_t(img.height);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  int err = spng_set_ihdr(s.ctx, &ihdr);
  if (!err)
    err = spng_encode_image(s.ctx, img.rgb.data(), img.rgb.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  if (err) throw Error(std::string("cannot encode PNG: ") + spng_strerror(err));
  size_t len = 0;
  void* buf = spng_get_png_buffer(s.ctx, &len, &err);
  if (!buf || err) throw Error(std::string("cannot encode PNG: ") + spng_strerror(err));
  std::vector<uint8_t> bytes(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + len);
  std::free(buf);
  return bytes;
}

}  // namespace detforge::codec
