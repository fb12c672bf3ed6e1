// A CUDA engine built with DETFORGE_* settings in the environment for its construction only
// (the engine reads them when it is created), for GPU tests that compare settings.
#pragma once
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
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
  // Each variable's earlier value comes back afterwards (the suite's DETFORGE_CUDA_TUNE=0 pin,
  // untuned_suite.cpp, included); "VAR=" sets it empty, which reads as unset (the engine's default).
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  for (const auto& line : settings) {
    std::istringstream words(line);
    for (std::string s; words >> s;) {
      const std::string var = s.substr(0, s.find('='));
      const char* old = std::getenv(var.c_str());
      saved.emplace_back(var, old ? std::optional<std::string>(old) : std::nullopt);
      setenv(var.c_str(), s.substr(s.find('=') + 1).c_str(), 1);
    }
  }
  auto restore = [&] {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it)
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
  };
  std::unique_ptr<Engine> eng;
  try {
    eng = make_cuda_engine(g, eo);
  } catch (...) {
    restore();
    throw;
  }
  restore();
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
