// Helpers for the CPU backend tests: tiny hand-built graphs, random data, a runner that feeds
// every graph input, and an element-wise closeness check against double-precision references.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_engine.h"
#include "graph/ir.h"

namespace detforge::cputest {

using graph::Graph;
using graph::OpKind;
using graph::TensorId;

inline std::vector<float> rnd(size_t n, std::mt19937& r, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(r);
  return v;
}

inline int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

struct Net {
  Graph g;
  TensorId input(const std::string& name, std::vector<int64_t> shape, graph::DType dt = graph::DType::f32) {
    TensorId id = g.add_activation(name, std::move(shape), dt);
    g.inputs.push_back(id);
    return id;
  }
  TensorId act(const std::string& name, std::vector<int64_t> shape, graph::DType dt = graph::DType::f32) {
    return g.add_activation(name, std::move(shape), dt);
  }
  TensorId cst(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    return g.add_const(name, std::move(shape), std::move(data));
  }
  void op(OpKind k, const std::string& name, std::vector<TensorId> ins, std::vector<TensorId> outs,
          nlohmann::json attrs = nlohmann::json::object()) {
    graph::Op o;
    o.kind = k;
    o.name = name;
    o.inputs = std::move(ins);
    o.outputs = std::move(outs);
    o.attrs = std::move(attrs);
    g.add_op(std::move(o));
  }
  void output(TensorId id) { g.outputs.push_back(id); }
};

// feeds[k] holds `batch` images of graph input k back to back.
inline std::vector<HostTensor> run_graph(const Graph& g, const std::vector<std::vector<float>>& feeds, int batch = 1,
                                         EngineOptions opt = {}) {
  if (opt.max_batch < batch) opt.max_batch = batch;
  cpu::CpuEngine e(g, opt);
  std::vector<const float*> ptrs;
  for (const auto& f : feeds) ptrs.push_back(f.data());
  return e.run_inputs(ptrs, batch);
}

// |got - want| <= atol + rtol * |want| for every element; reports the first few failures.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      if (++bad <= 5) ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off (worst abs error " << worst << ")";
}

inline double act_ref(graph::Act a, double x) {
  switch (a) {
    case graph::Act::none: return x;
    case graph::Act::relu: return x > 0 ? x : 0;
    case graph::Act::silu: return x / (1 + std::exp(-x));
    case graph::Act::gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case graph::Act::sigmoid: return 1 / (1 + std::exp(-x));
  }
  return x;
}

}  // namespace detforge::cputest
