// Chains of linears that one kernel can run a block of rows at a time, keeping the hidden
// activations on chip (the CUDA backend's row_mlp kernel): the decoder's query_pos_head
// (4 -> 512 -> 256) and bbox heads (256 -> 256 -> 256 -> 4, then box_refine), the encoder's
// bbox head (+ anchors), and a linear followed by its LayerNorm (out_proj / output_proj / fc2 /
// enc_output). At batch 1 each of these ops is a ~3-5 us launch-bound kernel on the H200
// (bench/results/h200/ab-2026-12-02-fold/lib_b1.json); one launch replaces two to four.
//
// A chain is matched on the graph alone (no backend state), so the CPU unit tests can check
// what the CUDA engine will fuse. Its ops are consecutive in op order: nothing runs between
// them, so the arena bytes of the chain's input stay live until the chain's last op.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace detforge::graph {

enum class RowEpilogue : uint8_t {
  none,        // the last linear's output is written
  layer_norm,  // LN(last (+ LN residual)) over the last linear's N columns
  box_refine,  // sigmoid(last + inverse_sigmoid(ref)), N == 4
  add_const,   // last + a constant [L, N] broadcast over the batch (the encoder's anchors)
};

struct RowChain {
  std::vector<int> linears;  // op indices, consecutive; each output's only reader is the next op
  RowEpilogue epilogue = RowEpilogue::none;
  int epilogue_op = -1;      // the absorbed layer_norm / box_refine / add, -1 for none
  int last_op() const { return epilogue_op >= 0 ? epilogue_op : linears.back(); }
  int first_op() const { return linears.front(); }
};

struct RowChainLimits {
  int max_layers = 3;
  int max_width = 512;              // every N, and the K of every layer but the first
  int max_first_k = 1024;           // the first layer's K (the FFN's fc2)
  int64_t max_weight_elems = 1 << 18;  // all weights of the chain together (512 KiB in fp16)
};

// Chains of at least two linears, or one linear with an epilogue. Linears: activation none or
// relu, a residual only on the last one, N of every layer but the last a multiple of 32 (it
// becomes the next layer's K), any N <= max_width for the last.
std::vector<RowChain> find_row_chains(const Graph& g, const RowChainLimits& lim = {});

}  // namespace detforge::graph
