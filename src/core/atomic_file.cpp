#include "core/atomic_file.h"

#include <unistd.h>

#include <cstdio>
#include <random>

#include "detforge/types.h"

namespace fs = std::filesystem;

namespace detforge {

void check_output_path(const fs::path& path) {
  if (path.empty()) throw Error("output path is empty");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error("output path " + path.string() + " is a directory");
  fs::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw Error("cannot write " + path.string() + ": folder " + dir.string() + " does not exist");
}

void write_file_atomically(const fs::path& path, const std::function<void(std::FILE*)>& write) {
  check_output_path(path);
  std::random_device rd;
  fs::path tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) throw Error("cannot write " + path.string() + ": cannot create a temporary file beside it");
  try {
    write(fp);
    if (std::fflush(fp) != 0 || std::ferror(fp) || ::fsync(::fileno(fp)) != 0)
      throw Error("cannot write " + path.string() + ": I/O error (disk full?)");
  } catch (...) {
    std::fclose(fp);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(fp) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path.string() + ": I/O error on close");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path.string() + ": " + ec.message());
  }
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  write_file_atomically(path, [&](std::FILE* fp) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), fp) != bytes.size())
      throw Error("cannot write " + path.string() + ": short write (disk full?)");
  });
}

}  // namespace detforge
