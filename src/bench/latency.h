// Latency statistics of repeated timings, with the stability rule the bench reports use: the
// median of the first half of the samples and of the second half may differ by at most
// `tolerance` (5 %) of the first; otherwise the run drifted (clocks, thermals, other load).
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <vector>

namespace detforge::bench {

struct LatencyStats {
  int samples = 0;
  double p50 = 0, p95 = 0, min = 0, max = 0, mean = 0;  // milliseconds
  double first_half_p50 = 0, second_half_p50 = 0;
  double half_change = 0;  // |second - first| / first
  bool stable = false;
};

// Percentiles by linear interpolation between order statistics (numpy's default).
double percentile(std::vector<double> v, double q);
LatencyStats summarize(const std::vector<double>& ms, double tolerance = 0.05);
nlohmann::json to_json(const LatencyStats& s);

// Calls fn() `warmup` times, then `iters` times, each timed by the host steady clock (ms).
std::vector<double> time_host(const std::function<void()>& fn, int warmup, int iters);

}  // namespace detforge::bench
