// Writing a file so that a crash or an error never leaves a half-written one: write to a
// temporary file beside the target, flush, then rename into place.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace detforge {

// Checks that `path` can be written: its folder exists and it is not a directory. Throws
// detforge::Error with a one-line message naming the path otherwise. Call before long work.
void check_output_path(const std::filesystem::path& path);

// Calls write(fp) on a temporary file in the target folder and renames it to `path`. On any
// failure (write returns false, throws, or I/O error) the temporary file is removed and a
// detforge::Error naming `path` is thrown.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::FILE*)>& write);
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace detforge
