// A Graph in a bundle: its structure as JSON (the "graph" section) and its constants packed
// into one blob (the "weights" section), each constant 64-byte aligned.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <vector>

#include "graph/ir.h"

namespace detforge::graph {

// Storage type of the constants in the blob. fp16 halves large weights (conv and linear
// matrices); small constants and those outside fp16 range (the anchor sentinel) stay fp32.
enum class WeightStorage { f32, f16 };

struct SerializedGraph {
  nlohmann::json structure;     // Graph::to_json() plus "constants": [{tensor, offset, bytes, dtype}]
  std::vector<uint8_t> weights;
};

SerializedGraph serialize_graph(const Graph& g, WeightStorage storage);
// Rebuilds the graph, reading constants from `weights` (bounds-checked). Throws detforge::Error.
Graph deserialize_graph(const nlohmann::json& structure, std::span<const uint8_t> weights);

}  // namespace detforge::graph
