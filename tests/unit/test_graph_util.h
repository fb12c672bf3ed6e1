// Hand-built graphs for the graph-pass tests: one op with a fresh activation output.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace detforge::test {

inline graph::TensorId add_op(graph::Graph& g, graph::OpKind k, const std::string& name,
                              std::vector<graph::TensorId> in, std::vector<int64_t> shape,
                              nlohmann::json attrs = nlohmann::json::object()) {
  graph::TensorId out = g.add_activation(name + ":out", std::move(shape));
  graph::Op op;
  op.kind = k;
  op.name = name;
  op.inputs = std::move(in);
  op.outputs = {out};
  op.attrs = std::move(attrs);
  g.add_op(std::move(op));
  return out;
}

// n values uniform in [lo, hi) from a fixed seed.
inline std::vector<float> rnd(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace detforge::test
