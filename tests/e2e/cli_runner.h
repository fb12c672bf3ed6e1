// Runs the detforge CLI binary as a user would and captures exit code, stdout and stderr.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace detforge::test {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream s(err);
    for (std::string l; std::getline(s, l);)
      if (!l.empty()) lines.push_back(l);
    return lines;
  }
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh scratch folder per call site.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("detforge_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline CliResult run_cli(const std::vector<std::string>& args) {
  static int n = 0;
  auto dir = std::filesystem::temp_directory_path();
  auto out = dir / ("detforge_cli_" + std::to_string(::getpid()) + "_" + std::to_string(n) + ".out");
  auto err = dir / ("detforge_cli_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".err");
  std::string cmd = shell_quote(DETFORGE_CLI_PATH);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string()) + " </dev/null";
  int st = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

}  // namespace detforge::test
