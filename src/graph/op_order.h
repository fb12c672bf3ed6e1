// Op orders other than the builder's. The order of `Graph::ops` decides which op a backend
// issues first, and with it what the CUDA stream schedule can overlap: an op issued late waits
// for everything before it on its stream even when its inputs were ready long before.
#pragma once
#include <vector>

#include "graph/ir.h"

namespace detforge::graph {

// A topological order in which every op comes as soon as its inputs exist: Kahn's algorithm
// with a first-in-first-out queue, ops that become ready together kept in their old order.
// Returns the old op indices in the new order. Measured why: the decoder's three value_proj
// linears read only the encoder memory but sat on the decoder's critical path, ~5.5 us each
// (H200 CUPTI timeline, fp16 batch 1).
std::vector<int> asap_order(const Graph& g);
// g.ops permuted by `order` (a permutation of the op indices that keeps the graph topological;
// throws detforge::Error otherwise).
void reorder_ops(Graph& g, const std::vector<int>& order);

}  // namespace detforge::graph
