#include "eval/progress.h"

#include <unistd.h>

#include <cmath>

namespace detforge::eval {

Progress::Progress(std::string label, int64_t total, std::FILE* out, int tty)
    : label_(std::move(label)), total_(total < 0 ? 0 : total), out_(out), start_(std::chrono::steady_clock::now()) {
  tty_ = out_ && (tty < 0 ? ::isatty(::fileno(out_)) != 0 : tty != 0);
  next_log_ = total_ >= 10 ? total_ / 10 : 1;
}

Progress::~Progress() { finish(); }

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

std::string Progress::format_line(const std::string& label, int64_t done, int64_t total, double elapsed,
                                  int bar_width) {
  std::string line = label;
  double frac = total > 0 ? static_cast<double>(done) / total : 1.0;
  if (frac > 1) frac = 1;
  if (bar_width > 0) {
    int fill = static_cast<int>(frac * bar_width);
    line += " [" + std::string(fill, '#') + std::string(bar_width - fill, '.') + "]";
  }
  char buf[160];
  double rate = elapsed > 0 ? done / elapsed : 0;
  std::snprintf(buf, sizeof buf, " %lld/%lld %3d%% %.1f/s", static_cast<long long>(done),
                static_cast<long long>(total), static_cast<int>(frac * 100), rate);
  line += buf;
  if (done >= total) line += " in " + format_duration(elapsed);
  else line += " ETA " + (rate > 0 ? format_duration((total - done) / rate) : std::string("?"));
  return line;
}

void Progress::tick(int64_t n) {
  done_ += n;
  if (!out_ || finished_) return;
  if (tty_) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ >= std::chrono::milliseconds(100) || done_ >= total_) {
      last_draw_ = now;
      draw(false);
    }
  } else if (done_ >= next_log_ && done_ < total_) {
    draw(false);
    while (next_log_ <= done_) next_log_ += total_ >= 10 ? total_ / 10 : 1;
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (out_) draw(true);
}

void Progress::draw(bool final_line) {
  std::string line = format_line(label_, done_, total_, elapsed_s(), tty_ ? 30 : 0);
  if (tty_) std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final_line ? "\n" : "");
  else std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace detforge::eval
