// The row-local tail of an RT-DETR decoder layer, matched on the graph alone (the CUDA backend's
// dec_tail kernel runs it as one launch; kernels/dec_tail.h says why): from each box_refine back
// through the bbox head (3 linears: relu, relu, N 4), the final LayerNorm, fc2 (with its residual,
// fc1's input) and fc1 (relu), the encoder_attn LayerNorm and output_proj (with its residual);
// forward, where the refined boxes feed the next layer, through query_pos_head (K 4 -> P relu;
// P -> 256) and the self_attn.pos add of the final LayerNorm's output and that position (all
// three, or none). Shapes the kernel takes: 256 wide, every K and N a multiple of 64 up to 1024.
#pragma once
#include <vector>

#include "graph/ir.h"

namespace detforge::graph {

struct DecoderTail {
  int out_proj = -1, ln1 = -1, fc1 = -1, fc2 = -1, ln2 = -1, bb0 = -1, bb1 = -1, bb2 = -1, refine = -1;
  int qp0 = -1, qp1 = -1, pos_add = -1;  // -1: the last layer (its boxes are a graph output)
  std::vector<int> ops() const;          // in the order they run, the absent ones left out
};

// In op order of their box_refine.
std::vector<DecoderTail> find_decoder_tails(const Graph& g);

}  // namespace detforge::graph
