// The host-side argument checks shared by our fp16 convolution kernels (conv_igemm, conv_direct),
// done before anything touches the device.
#pragma once
#include <string>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/kernels/common.cuh"
#include "detforge/types.h"
#include "graph/ir.h"

namespace detforge::cuda {

// Throws detforge::Error("<who>: ...") when the variant does not support s, act is not none,
// relu or silu, x, w or y is null, a pointer is not 16-byte aligned, or y aliases x. Returns the
// epilogue's activation code (0 none, 1 relu, 2 silu).
inline int check_own_conv_args(const char* who, const char* variant, bool supported, const ConvShape& s,
                               graph::Act act, const void* x, const void* w, const void* bias, const void* res,
                               const void* y) {
  const std::string me = who;
  if (!supported)
    throw Error(me + ": unsupported shape " + std::to_string(s.H) + "x" + std::to_string(s.W) + "x" +
                std::to_string(s.Ci) + "->" + std::to_string(s.Co) + " k" + std::to_string(s.kh) + "x" +
                std::to_string(s.kw) + " s" + std::to_string(s.stride) + " p" + std::to_string(s.pad) + " for " +
                variant);
  if (act != graph::Act::none && act != graph::Act::relu && act != graph::Act::silu)
    throw Error(me + ": unsupported activation " + graph::act_name(act));
  if (!x || !w || !y) throw Error(me + ": null x, w or y");
  if (!aligned16(x) || !aligned16(w) || !aligned16(y) || (bias && !aligned16(bias)) || (res && !aligned16(res)))
    throw Error(me + ": x, w, bias, res and y must be 16-byte aligned");
  if (x == y) throw Error(me + ": y may not alias x");
  return act == graph::Act::relu ? 1 : act == graph::Act::silu ? 2 : 0;
}

}  // namespace detforge::cuda
