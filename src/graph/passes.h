// Graph rewrites, run in this order by optimize(): fold BatchNorm into the preceding conv, fuse
// residual adds and activations into conv/linear epilogues and adds into LayerNorm, drop dead ops
// (the intermediate class heads), then compact the tensor table.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"

namespace detforge::graph {

struct PassStats {
  int folded_batch_norms = 0;
  int fused_residuals = 0;
  int fused_activations = 0;
  int fused_layer_norm_adds = 0;
  int removed_ops = 0;
};

// conv2d → batch_norm (the conv's only consumer): w' = w*s, b' = (b - mean)*s + beta,
// s = gamma / sqrt(var + eps), computed in double and rounded once to fp32.
int fold_batch_norm(Graph& g);
// conv2d/linear without activation or residual, consumed only by add(act): becomes
// conv2d/linear(residual = the other operand, act). Then a lone activation after a conv2d,
// linear or add without activation is folded into it.
int fuse_residual_adds(Graph& g);
int fuse_activations(Graph& g);
// add (no activation) consumed only by layer_norm: layer_norm(x = a, residual = b).
int fuse_layer_norm_adds(Graph& g);
// Removes ops whose outputs reach no graph output, and unreferenced tensors.
int eliminate_dead_code(Graph& g);

PassStats optimize(Graph& g);

}  // namespace detforge::graph
