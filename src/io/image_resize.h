// PIL-exact resampling of 8-bit RGB images: the same bytes as Pillow's
// Image.resize((w, h), Image.BILINEAR, reducing_gap=None) on an "RGB" image.
#pragma once
#include "detforge/types.h"

namespace detforge {

// Pillow's two-pass convolution resampler with the triangle (bilinear) filter. Downscaling
// widens the filter by in/out (antialiasing), so this is not a 2-tap bilinear. Any sizes, up or
// down; out_w, out_h >= 1. Rows run in parallel (OpenMP) with no effect on the result.
ImageU8 resize_bilinear_pil(const ImageU8& img, int out_w, int out_h);

}  // namespace detforge
