// detforge build <checkpoint> -o model.bundle [--precision fp32|fp16] [--revision REV]
#include <memory>

#include "families/rt_detr_v2/bundle_builder.h"
#include "tools/detforge/cli_util.h"
#include "tools/detforge/commands.h"

namespace detforge::cli {

void register_build_command(CLI::App& app) {
  auto opt = std::make_shared<rt_detr_v2::BuildOptions>();
  auto* cmd = app.add_subcommand("build", "Build a Hugging Face checkpoint (folder or cached hub id) into a bundle");
  cmd->add_option("checkpoint", opt->checkpoint, "checkpoint folder, or hub id such as PekingU/rtdetr_v2_r18vd")->required();
  cmd->add_option("-o,--output", opt->output, "bundle file to write")->required();
  cmd->add_option("--precision", opt->precision, "fp32 | fp16 (default precision of the engine)")->capture_default_str();
  cmd->add_option("--revision", opt->revision, "hub revision: commit hash or ref (default main)");
  cmd->callback([opt]() {
    auto rep = rt_detr_v2::build_bundle(*opt, [](const std::string& s) { progress("build: " + s); });
    std::printf("built %s: %d ops (from %d; %d BatchNorms folded, %d average pools folded into convs, %d residual "
                "adds and %d activations fused, %d adds fused into LayerNorm, %d parallel convs folded, %d q/k and "
                "%d deformable offset/weight projections merged, %d post-activation adds fused, %d adds distributed into linears, %d ops moved after a row gather, "
                "%d value projections merged, %d concats split into their 1x1 convs, %d dead ops removed), "
                "%.1f MiB in %.1f s\n",
                opt->output.c_str(), rep.ops_after, rep.ops_before, rep.passes.folded_batch_norms,
                rep.passes.folded_avg_pools, rep.passes.fused_residuals, rep.passes.fused_activations,
                rep.passes.fused_layer_norm_adds, rep.passes.folded_parallel_convs, rep.passes.merged_qk_projections,
                rep.passes.merged_deform_projections, rep.passes.fused_post_activation_adds, rep.passes.distributed_adds,
                rep.passes.gathered_early, rep.passes.merged_value_projections, rep.passes.split_concat_convs, rep.passes.removed_ops,
                rep.bundle_bytes / 1048576.0, rep.seconds);
  });
}

}  // namespace detforge::cli
