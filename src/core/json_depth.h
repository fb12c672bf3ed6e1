// A pre-scan of untrusted JSON text (safetensors and bundle headers): hostile nesting must not
// exhaust the stack in the parser or in the destructor of the parsed value.
#pragma once
#include <string_view>

namespace detforge {

inline bool json_nesting_ok(std::string_view s, int max_depth) {
  int depth = 0;
  bool in_str = false, esc = false;
  for (char c : s) {
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

}  // namespace detforge
