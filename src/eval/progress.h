// A progress line on stderr for long loops (eval, compare, scan): on a terminal a bar redrawn in
// place at most 10 times a second, with rate and ETA; otherwise (CI logs, pipes) one compact
// line at every tenth of the work, so logs stay short but still show that work advances.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace detforge::eval {

class Progress {
 public:
  // `out` = nullptr disables output. `tty` < 0: ask isatty() of `out`.
  Progress(std::string label, int64_t total, std::FILE* out = stderr, int tty = -1);
  ~Progress();
  void tick(int64_t n = 1);
  void finish();  // prints the final line once (also called by the destructor)
  int64_t done() const { return done_; }
  double elapsed_s() const;

  // "1:05" under an hour, "1:02:03" above; "?" for a negative or non-finite value.
  static std::string format_duration(double seconds);
  // The whole line without the leading '\r': label, bar (bar_width 0 = none), done/total,
  // percent, rate, ETA (or the elapsed time once done == total).
  static std::string format_line(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                                 int bar_width);

 private:
  void draw(bool final_line);
  std::string label_;
  int64_t total_;
  int64_t done_ = 0;
  std::FILE* out_;
  bool tty_;
  bool finished_ = false;
  int64_t next_log_ = 0;  // non-tty: next count that prints a line
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace detforge::eval
