#include "io/bundle_graph.h"

#include "detforge/types.h"
#include "graph/serialize.h"
#include "io/bundle_file.h"

namespace detforge {

LoadedBundle load_bundle_graph(const std::string& path) {
  BundleFile bundle = BundleFile::open(path);
  LoadedBundle out;
  out.header = bundle.header();
  std::string family = out.header.value("family", "");
  if (family != "rt_detr_v2") throw Error("bundle " + path + " holds family '" + family + "', which this detforge cannot run");
  auto gs = bundle.section("graph");
  nlohmann::json structure = nlohmann::json::parse(gs.begin(), gs.end(), nullptr, false);
  if (structure.is_discarded()) throw Error("bundle " + path + " graph section is not valid JSON");
  out.graph = graph::deserialize_graph(structure, bundle.section("weights"));
  return out;
}

}  // namespace detforge
