// Small helpers shared by the CLI commands.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "detforge/types.h"

namespace detforge::cli {

// One detection list as JSON: boxes (x0, y0, x1, y1) in original pixels, score, label, name.
inline nlohmann::json detections_json(const Detections& d) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& x : d.items)
    arr.push_back({{"box", {x.box.x0, x.box.y0, x.box.x1, x.box.y1}}, {"score", x.score}, {"label", x.label},
                   {"label_name", x.label_name}});
  return arr;
}

// Progress lines go to stderr so that stdout stays machine-readable.
inline void note(const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); }

// Stage messages of a long command, for a person watching a terminal only: when stderr is a
// file or a pipe, a failure stays exactly one "error: ..." line.
inline void progress(const std::string& s) {
  if (::isatty(2)) note(s);
}

}  // namespace detforge::cli
