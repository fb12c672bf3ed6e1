// draw_detections: box outlines in a colour per label, and a filled tag with "label 0.93" in a
// 5x7 bitmap font (io/image_font.h), scaled with the image size.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "detforge/image.h"
#include "io/image_font.h"

namespace detforge {
namespace {

struct Rgb {
  uint8_t r, g, b;
};

// Twenty well-separated colours (the "tab20" order of matplotlib, dark shades first).
constexpr Rgb kPalette[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},   {214, 39, 40},  {148, 103, 189},
                            {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207},
                            {174, 199, 232}, {255, 187, 120}, {152, 223, 138}, {255, 152, 150}, {197, 176, 213},
                            {196, 156, 148}, {247, 182, 210}, {199, 199, 199}, {219, 219, 141}, {158, 218, 229}};

void fill_rect(ImageU8& img, int x0, int y0, int x1, int y1, Rgb c) {  // [x0, x1) x [y0, y1), clipped
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, img.width);
  y1 = std::min(y1, img.height);
  for (int y = y0; y < y1; ++y) {
    uint8_t* p = &img.rgb[(size_t(y) * img.width + x0) * 3];
    for (int x = x0; x < x1; ++x, p += 3) {
      p[0] = c.r;
      p[1] = c.g;
      p[2] = c.b;
    }
  }
}

int clamp_coord(float v, int hi) {
  if (!std::isfinite(v)) return v > 0 ? hi : 0;
  return int(std::lround(std::clamp(v, -1e6f, 1e6f)));
}

void draw_text(ImageU8& img, int x, int y, const std::string& text, int scale, Rgb c) {
  for (char ch : text) {
    const char* bits = font::glyph_bits(ch);
    for (int gy = 0; gy < font::kGlyphH; ++gy)
      for (int gx = 0; gx < font::kGlyphW; ++gx)
        if (bits[gy * font::kGlyphW + gx] == '1')
          fill_rect(img, x + gx * scale, y + gy * scale, x + (gx + 1) * scale, y + (gy + 1) * scale, c);
    x += (font::kGlyphW + 1) * scale;
  }
}

}  // namespace

ImageU8 draw_detections(const ImageU8& img, const Detections& dets) {
  ImageU8 out = img;
  if (out.empty()) return out;
  const int side = std::min(out.width, out.height);
  const int thick = std::max(2, side / 250);
  const int scale = std::max(1, side / 320);
  for (const Detection& d : dets.items) {
    const Rgb c = kPalette[((d.label % 20) + 20) % 20];
    const int x0 = clamp_coord(d.box.x0, out.width), y0 = clamp_coord(d.box.y0, out.height);
    const int x1 = clamp_coord(d.box.x1, out.width), y1 = clamp_coord(d.box.y1, out.height);
    fill_rect(out, x0, y0, x1, y0 + thick, c);
    fill_rect(out, x0, y1 - thick, x1, y1, c);
    fill_rect(out, x0, y0, x0 + thick, y1, c);
    fill_rect(out, x1 - thick, y0, x1, y1, c);

    char score[16];
    std::snprintf(score, sizeof score, "%.2f", double(d.score));
    const std::string text = (d.label_name.empty() ? "#" + std::to_string(d.label) : d.label_name) + " " + score;
    const int tw = int(text.size()) * (font::kGlyphW + 1) * scale + scale;
    const int th = (font::kGlyphH + 2) * scale;
    // The tag sits above the box, or inside its top edge when there is no room above.
    const int tx = std::clamp(x0, 0, std::max(0, out.width - tw));
    const int ty = y0 - th >= 0 ? y0 - th : std::max(0, y0);
    fill_rect(out, tx, ty, tx + tw, ty + th, c);
    const bool light = 299 * c.r + 587 * c.g + 114 * c.b > 150000;
    draw_text(out, tx + scale, ty + scale, text, scale, light ? Rgb{0, 0, 0} : Rgb{255, 255, 255});
  }
  return out;
}

}  // namespace detforge
