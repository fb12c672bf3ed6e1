#include "graph/serialize.h"

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "detforge/types.h"

namespace detforge::graph {

namespace {
constexpr size_t kAlign = 64;

bool fits_f16(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x) || std::fabs(x) > 65504.f) return false;
  return true;
}
}  // namespace

SerializedGraph serialize_graph(const Graph& g, WeightStorage storage) {
  SerializedGraph out;
  out.structure = g.to_json();
  nlohmann::json consts = nlohmann::json::array();
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const Tensor& t = g.tensors[i];
    if (!t.is_const) continue;
    size_t off = (out.weights.size() + kAlign - 1) / kAlign * kAlign;
    // Only matrices (conv and linear weights) are narrowed: biases, norms, anchors and the
    // position embedding are small, and the anchor sentinel (float max) has no fp16 value.
    bool half = storage == WeightStorage::f16 && t.shape.size() >= 2 && t.numel() >= 256 && fits_f16(t.data);
    size_t bytes = t.data.size() * (half ? 2 : 4);
    out.weights.resize(off + bytes);
    if (half) {
      auto* dst = reinterpret_cast<uint16_t*>(out.weights.data() + off);
      for (size_t k = 0; k < t.data.size(); ++k) dst[k] = fp32_to_fp16(t.data[k]);
    } else {
      std::memcpy(out.weights.data() + off, t.data.data(), bytes);
    }
    consts.push_back({{"tensor", i}, {"offset", off}, {"bytes", bytes}, {"dtype", half ? "f16" : "f32"}});
  }
  out.structure["constants"] = consts;
  return out;
}

Graph deserialize_graph(const nlohmann::json& structure, std::span<const uint8_t> weights) {
  Graph g = Graph::from_json(structure);
  if (!structure.contains("constants") || !structure.at("constants").is_array())
    throw Error("bundle graph section has no constants table");
  std::vector<char> seen(g.tensors.size(), 0);
  for (const auto& c : structure.at("constants")) {
    size_t id = 0, off = 0, bytes = 0;
    std::string dt;
    try {
      id = c.at("tensor").get<size_t>();
      off = c.at("offset").get<size_t>();
      bytes = c.at("bytes").get<size_t>();
      dt = c.at("dtype").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("bundle constants table is malformed: ") + e.what());
    }
    if (id >= g.tensors.size() || !g.tensors[id].is_const)
      throw Error("bundle constants table names tensor " + std::to_string(id) + ", which is not a constant");
    Tensor& t = g.tensors[id];
    size_t esize = dt == "f16" ? 2 : dt == "f32" ? 4 : 0;
    if (esize == 0) throw Error("bundle constant " + t.name + " has unsupported dtype '" + dt + "'");
    if (bytes != static_cast<size_t>(t.numel()) * esize || off > weights.size() || bytes > weights.size() - off)
      throw Error("bundle constant " + t.name + " lies outside the weights section or has the wrong size");
    t.data.resize(t.numel());
    if (esize == 2) {
      const uint8_t* src = weights.data() + off;
      for (size_t k = 0; k < t.data.size(); ++k) {
        uint16_t h;
        std::memcpy(&h, src + 2 * k, 2);
        t.data[k] = fp16_to_fp32(h);
      }
    } else {
      std::memcpy(t.data.data(), weights.data() + off, bytes);
    }
    seen[id] = 1;
  }
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (g.tensors[i].is_const && !seen[i]) throw Error("bundle has no data for constant " + g.tensors[i].name);
  g.validate();
  return g;
}

}  // namespace detforge::graph
