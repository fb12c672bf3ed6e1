// detforge inspect model.bundle: header, section table and op counts.
#include <map>

#include "io/bundle_file.h"
#include "tools/detforge/cli_util.h"
#include "tools/detforge/commands.h"

namespace detforge::cli {

void register_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json_only = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("inspect", "Print a bundle's header, sections and op counts");
  cmd->add_option("bundle", *path, "bundle file")->required();
  cmd->add_flag("--json", *json_only, "print the header as JSON only");
  cmd->callback([path, json_only]() {
    BundleFile b = BundleFile::open(*path);
    const auto& h = b.header();
    if (*json_only) {
      std::printf("%s\n", h.dump(2).c_str());
      return;
    }
    std::printf("bundle      %s (format v%u)\n", path->c_str(), b.format_version());
    for (const char* k : {"family", "task", "precision", "producer"})
      if (h.contains(k)) std::printf("%-11s %s\n", k, h.at(k).get<std::string>().c_str());
    if (h.contains("checkpoint"))
      std::printf("checkpoint  %s @ %s\n", h["checkpoint"].value("id", "").c_str(),
                  h["checkpoint"].value("revision", "").empty() ? "(folder)" : h["checkpoint"].value("revision", "").c_str());
    if (h.contains("input")) std::printf("input       %s\n", h.at("input").dump().c_str());
    if (h.contains("labels")) std::printf("labels      %zu: %s\n", h.at("labels").size(), h.at("labels").dump().c_str());
    if (h.contains("graph")) std::printf("graph       %s\n", h.at("graph").dump().c_str());
    std::printf("sections\n");
    for (const auto& s : h.at("sections"))
      std::printf("  %-10s offset %12llu  size %12llu  fnv1a64 %s\n", s.at("name").get<std::string>().c_str(),
                  static_cast<unsigned long long>(s.at("offset").get<uint64_t>()),
                  static_cast<unsigned long long>(s.at("size").get<uint64_t>()), s.value("checksum", "").c_str());
    auto gs = b.section("graph");
    auto g = nlohmann::json::parse(gs.begin(), gs.end());
    std::map<std::string, int> kinds;
    for (const auto& op : g.at("ops")) kinds[op.at("kind").get<std::string>()]++;
    std::printf("ops by kind\n");
    for (auto& [k, n] : kinds) std::printf("  %-20s %4d\n", k.c_str(), n);
  });
}

}  // namespace detforge::cli
