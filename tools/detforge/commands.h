// Each CLI command lives in its own cmd_<name>.cpp and registers itself on the app.
// Callbacks throw detforge::Error on failure; main() prints "error: <message>" and exits 1.
#pragma once
#include <CLI/CLI.hpp>

namespace detforge::cli {

void register_build_command(CLI::App& app);    // cmd_build.cpp
void register_detect_command(CLI::App& app);   // cmd_detect.cpp
void register_inspect_command(CLI::App& app);  // cmd_inspect.cpp
void register_demo_command(CLI::App& app);     // cmd_demo.cpp
void register_bench_command(CLI::App& app);    // cmd_bench.cpp

}  // namespace detforge::cli

// Registered from files owned by other parts of the tree (kept in the global namespace).
void register_synth_command(CLI::App& app);    // cmd_synth.cpp
void register_eval_command(CLI::App& app);     // cmd_eval.cpp
void register_compare_command(CLI::App& app);  // cmd_compare.cpp
void register_scan_command(CLI::App& app);     // cmd_scan.cpp
