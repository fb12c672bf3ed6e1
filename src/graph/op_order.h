// Op orders other than the builder's. The order of `Graph::ops` decides which op a backend
// issues first, and with it what the CUDA stream schedule can overlap: an op issued late waits
// for everything before it on its stream even when its inputs were ready long before.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "graph/memory_plan.h"

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

// The op order with each group's ops moved right after its anchor op, in the group's order:
// groups[k] = (anchor, ops). An op in two groups, or that is some group's anchor and moved, is an
// error (detforge::Error). The result is a permutation for reorder_ops, which checks that it
// is topological. For backend launches that cover several ops (the CUDA box steps, a layer norm
// with its add) and for ops held back behind another (DETFORGE_CUDA_LATE_VALUE).
std::vector<int> moved_after(size_t n_ops, const std::vector<std::pair<int, std::vector<int>>>& groups);

// Ops on or near the longest path of the data DAG under path_costs' model (one unit per op plus
// its GFLOP per image): 1 where the longest path through the op is within `slack` units of the
// longest path of the graph. For the CUDA engine's node priorities (DETFORGE_CUDA_PRIORITY).
std::vector<char> critical_ops(const Graph& g, double slack);

// Data-dependency ancestors: bit i of result[j] (64 ops per word) is set when an output of op i
// reaches op j through op inputs, plus `extra_reads[j]` (tensors op j reads beyond its inputs;
// may be empty).
using OpBits = std::vector<uint64_t>;
std::vector<OpBits> data_ancestors(const Graph& g, const std::vector<std::vector<TensorId>>& extra_reads = {});
inline bool has_bit(const OpBits& b, int i) { return i >= 0 && ((b[i >> 6] >> (i & 63)) & 1u); }

// The may_share rule of plan_memory for DAG-aware reuse: requests a and b (lifetimes disjoint)
// may share bytes when the later one's writer has every op that touched the earlier one among
// its data ancestors, so reuse orders nothing the data do not. users[i]: the op indices that
// touch request i (-1: written before the first op; it precedes every op). The returned rule
// refers to its arguments: they must outlive it.
std::function<bool(size_t, size_t)> dag_share_rule(const std::vector<BufferRequest>& reqs,
                                                   const std::vector<std::vector<int>>& users,
                                                   const std::vector<OpBits>& anc);

}  // namespace detforge::graph
