#include "families/rt_detr_v2/bundle_builder.h"

#include <chrono>
#include <filesystem>

#include "core/atomic_file.h"
#include "detforge/types.h"
#include "families/rt_detr_v2/config.h"
#include "families/rt_detr_v2/graph_builder.h"
#include "families/rt_detr_v2/preprocess.h"
#include "graph/serialize.h"
#include "io/bundle_file.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"

namespace detforge::rt_detr_v2 {

namespace {

class SafetensorsWeights : public WeightSource {
 public:
  explicit SafetensorsWeights(const SafetensorsFile& f) : f_(f) {}
  bool has(const std::string& name) const override { return f_.has(name); }
  std::vector<int64_t> shape(const std::string& name) const override { return f_.info(name).shape; }
  std::vector<float> read_f32(const std::string& name) const override { return f_.read_f32(name); }
  std::string where() const override { return f_.label(); }

 private:
  const SafetensorsFile& f_;
};

}  // namespace

BuildReport build_bundle(const BuildOptions& opt, const std::function<void(const std::string&)>& progress) {
  auto t0 = std::chrono::steady_clock::now();
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  if (opt.precision != "fp32" && opt.precision != "fp16")
    throw Error("--precision '" + opt.precision + "' is not supported (fp32 or fp16)");
  // Fail on a bad output path before the slow part.
  check_output_path(opt.output);

  say("resolving checkpoint " + opt.checkpoint);
  HfCheckpoint ck = resolve_hf_checkpoint(opt.checkpoint, opt.revision);
  Config cfg = Config::from_json(ck.config, (ck.dir / "config.json").string());
  PreprocessConfig pre = PreprocessConfig::from_json(ck.preprocessor);
  say("reading weights " + ck.weights.string());
  SafetensorsFile st = SafetensorsFile::open(ck.weights);
  SafetensorsWeights src(st);

  say("building graph for " + std::to_string(pre.height) + "x" + std::to_string(pre.width) + " input");
  graph::Graph g = build_graph(cfg, src, pre.height, pre.width);
  BuildReport rep;
  rep.checkpoint_id = ck.id;
  rep.revision = ck.revision;
  rep.ops_before = static_cast<int>(g.ops.size());
  say("optimizing graph (" + std::to_string(g.ops.size()) + " ops)");
  rep.passes = graph::optimize(g);
  rep.ops_after = static_cast<int>(g.ops.size());

  say("writing bundle " + opt.output);
  auto ser = graph::serialize_graph(g, opt.precision == "fp16" ? graph::WeightStorage::f16 : graph::WeightStorage::f32);
  std::string graph_text = ser.structure.dump();
  nlohmann::json header = {
      {"family", "rt_detr_v2"},
      {"task", "object-detection"},
      {"precision", opt.precision},
      {"input", {{"height", pre.height}, {"width", pre.width}, {"channels", 3}, {"layout", "NHWC"}, {"dtype", "f32"}}},
      {"preprocess", ck.preprocessor},
      {"postprocess", {{"top_k", cfg.num_queries}, {"use_focal_loss", true}, {"default_threshold", 0.5}}},
      {"labels", cfg.id2label},
      {"num_queries", cfg.num_queries},
      {"checkpoint", {{"id", ck.id}, {"revision", ck.revision}}},
      {"producer", std::string("detforge ") + DETFORGE_VERSION},
      {"graph", {{"ops", rep.ops_after}, {"tensors", g.tensors.size()},
                 {"passes", {{"folded_batch_norms", rep.passes.folded_batch_norms},
                             {"folded_avg_pools", rep.passes.folded_avg_pools},
                             {"fused_residuals", rep.passes.fused_residuals},
                             {"fused_activations", rep.passes.fused_activations},
                             {"fused_layer_norm_adds", rep.passes.fused_layer_norm_adds},
                             {"folded_parallel_convs", rep.passes.folded_parallel_convs},
                             {"merged_qk_projections", rep.passes.merged_qk_projections},
                             {"merged_deform_projections", rep.passes.merged_deform_projections},
                             {"distributed_adds", rep.passes.distributed_adds},
                             {"gathered_early", rep.passes.gathered_early},
                             {"merged_value_projections", rep.passes.merged_value_projections},
                             {"split_concat_convs", rep.passes.split_concat_convs},
                             {"removed_ops", rep.passes.removed_ops}}}}},
  };
  write_bundle_atomically(opt.output, header, {BundleSection("graph", graph_text), BundleSection("weights", ser.weights)});
  rep.bundle_bytes = std::filesystem::file_size(opt.output);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace detforge::rt_detr_v2
