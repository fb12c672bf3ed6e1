// Opening a bundle as a runnable graph: header checks plus the deserialized Graph.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "graph/ir.h"

namespace detforge {

struct LoadedBundle {
  nlohmann::json header;
  graph::Graph graph;
};

// Throws detforge::Error for a missing/corrupt/newer bundle or a family this build cannot run.
LoadedBundle load_bundle_graph(const std::string& path);

}  // namespace detforge
