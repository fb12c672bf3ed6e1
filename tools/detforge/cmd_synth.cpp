// detforge synth-checkpoint: writes a synthetic Hugging Face RT-DETR v2 checkpoint folder
// (real tensor names and shapes, seeded random weights) for tests and demos without downloads.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "families/rt_detr_v2/synth.h"
#include "tools/detforge/commands.h"

void register_synth_command(CLI::App& app) {
  auto opts = std::make_shared<detforge::rt_detr_v2::SynthOptions>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "synth-checkpoint", "Write a synthetic RT-DETR v2 checkpoint (HF layout, random weights)");
  cmd->add_option("--preset", opts->preset, "Architecture: r18vd (PekingU/rtdetr_v2_r18vd) or tiny")
      ->check(CLI::IsMember({"r18vd", "tiny"}))
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Random seed")->capture_default_str();
  cmd->add_option("--num-labels", opts->num_labels, "Number of classes (80 = COCO names)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "Weight storage type")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  cmd->add_flag("--force", opts->force, "Replace the output folder if it exists");
  cmd->add_option("-o,--output", *out, "Output folder")->required();
  cmd->callback([opts, out] {
    detforge::rt_detr_v2::write_synth_checkpoint(*out, *opts);
    std::printf("wrote %s (preset %s, seed %llu, %d labels, %s)\n", out->c_str(), opts->preset.c_str(),
                static_cast<unsigned long long>(opts->seed), opts->num_labels, opts->dtype.c_str());
  });
}
