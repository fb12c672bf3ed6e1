// A CUDA engine built with DETFORGE_* settings in the environment for its construction only
// (the engine reads them when it is created), for GPU tests that compare settings.
#pragma once
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/engine.h"
#include "graph/ir.h"

namespace detforge::test {

// An engine of `g` in `precision` for up to `max_batch` images, built with the "VAR=value"
// settings given (empty ones ignored; one string may hold several, space-separated) in the
// environment for its construction only.
inline std::unique_ptr<Engine> engine_with(const graph::Graph& g, const std::string& precision, int max_batch,
                                           const std::vector<std::string>& settings) {
  EngineOptions eo;
  eo.max_batch = max_batch;
  eo.precision = precision;
  std::vector<std::string> vars;
  for (const auto& line : settings) {
    std::istringstream words(line);
    for (std::string s; words >> s;) {
      vars.push_back(s.substr(0, s.find('=')));
      setenv(vars.back().c_str(), s.substr(s.find('=') + 1).c_str(), 1);
    }
  }
  std::unique_ptr<Engine> eng;
  try {
    eng = make_cuda_engine(g, eo);
  } catch (...) {
    for (const auto& v : vars) unsetenv(v.c_str());
    throw;
  }
  for (const auto& v : vars) unsetenv(v.c_str());
  return eng;
}

// The values of one image of `g`'s input (H x W x C), for random_vec inputs.
inline size_t input_values_per_image(const graph::Graph& g) {
  const auto& in = g.tensor(g.inputs[0]).shape;
  return static_cast<size_t>(in[0] * in[1] * in[2]);
}

inline std::unique_ptr<Engine> fp16_engine(const graph::Graph& g, int max_batch, const std::vector<std::string>& settings) {
  return engine_with(g, "fp16", max_batch, settings);
}

}  // namespace detforge::test
