// Hand-built graphs for the graph-pass tests: one op with a fresh activation output.
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/engine.h"
#include "graph/ir.h"
#include "graph/passes.h"

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

// A linear `name` reading `in` [rows, K]: weight [N, K] and bias [N] uniform in [-1, 1) from
// seeds `seed` and `seed` + 1, activation `act`; returns its output [rows, N].
inline graph::TensorId random_linear(graph::Graph& g, const std::string& name, graph::TensorId in, int N,
                                     uint32_t seed, const char* act = "none") {
  const int64_t rows = g.tensor(in).shape[0], K = g.tensor(in).shape[1];
  return add_op(g, graph::OpKind::linear, name,
                {in, g.add_const(name + ".w", {N, K}, rnd(N * K, seed)), g.add_const(name + ".b", {N}, rnd(N, seed + 1))},
                {rows, N}, {{"act", act}});
}

// The CPU engine runs both graphs on the same two images `xin` (batch 2); every output agrees
// within `tol`.
inline void expect_same_cpu_outputs(const graph::Graph& want_g, const graph::Graph& got_g,
                                    const std::vector<float>& xin, double tol) {
  EngineOptions two;
  two.max_batch = 2;
  auto want = make_engine("cpu", want_g, two)->run(xin.data(), 2);
  auto got = make_engine("cpu", got_g, two)->run(xin.data(), 2);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    ASSERT_EQ(got[o].data.size(), want[o].data.size());
    for (size_t i = 0; i < want[o].data.size(); ++i) EXPECT_NEAR(got[o].data[i], want[o].data[i], tol) << o << ":" << i;
  }
}

// Sets an environment variable for one scope, restoring what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// graph::optimize with DETFORGE_EXTRA_PASSES set to `passes` (comma-separated; "" for none).
inline graph::PassStats optimize_with_extra(graph::Graph& g, const char* passes) {
  ScopedEnv extra("DETFORGE_EXTRA_PASSES", passes);
  return graph::optimize(g);
}

inline int count_kind(const graph::Graph& g, graph::OpKind k) {
  int n = 0;
  for (const graph::Op& op : g.ops) n += op.kind == k;
  return n;
}

// The first op named `name`, or nullptr.
inline const graph::Op* find_op(const graph::Graph& g, const std::string& name) {
  for (const graph::Op& op : g.ops)
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace detforge::test
