// Maps an RT-DETR v2 checkpoint onto the Graph IR, op by op as in the family spec
// (shared/specs/rt_detr_v2_r18vd.md, generalised to the config's depths and widths).
// The graph it emits is unoptimised: BatchNorm and activations are separate ops and the
// intermediate class heads are present; the passes in src/graph/passes fold and prune.
#pragma once
#include <string>
#include <vector>

#include "families/rt_detr_v2/config.h"
#include "graph/ir.h"

namespace detforge::rt_detr_v2 {

// Where the builder reads checkpoint tensors from (a safetensors file in practice).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  virtual std::vector<float> read_f32(const std::string& name) const = 0;  // F32/F16/BF16 → fp32
  virtual std::string where() const = 0;  // file name for messages
};

// Builds the inference graph for an input of height x width pixels (multiples of the largest
// feature stride). Throws detforge::Error naming a missing tensor or a wrong shape.
graph::Graph build_graph(const Config& cfg, const WeightSource& weights, int height, int width);

// Anchors of generate_anchors() in fp32 (invalid rows hold float max) and the validity mask,
// for the given level shapes. Exposed for tests.
void make_anchors(const std::vector<std::pair<int, int>>& level_hw, std::vector<float>& anchors_logit,
                  std::vector<float>& valid);
// The AIFI 2-D sine-cosine position embedding [h*w, dim] as transformers builds it.
std::vector<float> make_sincos_position_embedding(int h, int w, int dim, float temperature);

}  // namespace detforge::rt_detr_v2
