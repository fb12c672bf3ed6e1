// The r18vd graph as bundles hold it (optimised; synthetic weights of 1, same names and shapes),
// for graph-level tests that need the real op structure without a checkpoint.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "families/rt_detr_v2/config.h"
#include "families/rt_detr_v2/graph_builder.h"
#include "families/rt_detr_v2/synth.h"
#include "graph/passes.h"

namespace detforge::test {

class OnesWeights : public rt_detr_v2::WeightSource {
 public:
  explicit OnesWeights(const nlohmann::json& cfg) {
    for (const auto& s : rt_detr_v2::rt_detr_v2_tensor_specs(cfg)) shapes_[s.name] = s.shape;
  }
  bool has(const std::string& n) const override { return shapes_.count(n) > 0; }
  std::vector<int64_t> shape(const std::string& n) const override { return shapes_.at(n); }
  std::vector<float> read_f32(const std::string& n) const override {
    int64_t k = 1;
    for (auto d : shapes_.at(n)) k *= d;
    return std::vector<float>(k, 1.f);
  }
  std::string where() const override { return "synthetic weights"; }

 private:
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// As the builder makes it, before graph::optimize.
inline graph::Graph r18vd_unoptimized_graph() {
  const nlohmann::json cj = rt_detr_v2::synth_config("r18vd", 8);
  OnesWeights w(cj);
  return rt_detr_v2::build_graph(rt_detr_v2::Config::from_json(cj, "synth"), w, 640, 640);
}

inline graph::Graph r18vd_graph() {
  graph::Graph g = r18vd_unoptimized_graph();
  graph::optimize(g);
  return g;
}

}  // namespace detforge::test
