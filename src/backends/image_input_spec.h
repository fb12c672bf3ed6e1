// How a backend turns decoded 8-bit RGB images into the graph's NHWC fp32 pixels, without any
// model-family knowledge: PIL BILINEAR resize (Pillow 13 bytes, io/image_resize.h) to
// width x height, then per byte v: x = do_rescale ? float(double(v) * rescale_factor) : float(v),
// then when do_normalize x = (x - float(mean[c])) / float(std[c]) in float32. These are the
// numerics of rt_detr_v2::preprocess_image (transformers' slow RTDetrImageProcessor).
#pragma once

namespace detforge {

struct ImageInputSpec {
  int height = 640, width = 640;  // the graph input's H and W
  double rescale_factor = 1.0 / 255.0;
  bool do_rescale = true, do_normalize = false;
  double mean[3] = {0.485, 0.456, 0.406};
  double std[3] = {0.229, 0.224, 0.225};
  // false: images must already be width x height (a preprocessor with do_resize = false);
  // another size is an error instead of a resize.
  bool do_resize = true;
};

}  // namespace detforge
