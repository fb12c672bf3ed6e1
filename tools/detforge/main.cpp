// detforge: build Hugging Face detection checkpoints into bundles and run them.
#include <cstdio>

#include "detforge/types.h"
#include "tools/detforge/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"detforge " DETFORGE_VERSION ": build detection checkpoints into optimized bundles and run them"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("detforge ") + DETFORGE_VERSION);
  detforge::cli::register_build_command(app);
  detforge::cli::register_detect_command(app);
  detforge::cli::register_inspect_command(app);
  detforge::cli::register_demo_command(app);
  detforge::cli::register_bench_command(app);
  register_synth_command(app);
  register_eval_command(app);
  register_compare_command(app);
  register_scan_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const detforge::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
