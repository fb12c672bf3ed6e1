#include "bench/latency.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "detforge/types.h"

namespace detforge::bench {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) throw Error("percentile of no samples");
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

LatencyStats summarize(const std::vector<double>& ms, double tolerance) {
  LatencyStats s;
  s.samples = static_cast<int>(ms.size());
  if (ms.empty()) return s;
  s.p50 = percentile(ms, 0.5);
  s.p95 = percentile(ms, 0.95);
  s.min = *std::min_element(ms.begin(), ms.end());
  s.max = *std::max_element(ms.begin(), ms.end());
  double sum = 0;
  for (double x : ms) sum += x;
  s.mean = sum / ms.size();
  const size_t h = ms.size() / 2;
  if (h >= 1) {
    s.first_half_p50 = percentile(std::vector<double>(ms.begin(), ms.begin() + h), 0.5);
    s.second_half_p50 = percentile(std::vector<double>(ms.begin() + h, ms.end()), 0.5);
    s.half_change = s.first_half_p50 > 0 ? std::fabs(s.second_half_p50 - s.first_half_p50) / s.first_half_p50 : 0;
    s.stable = s.half_change <= tolerance;
  }
  return s;
}

nlohmann::json to_json(const LatencyStats& s) {
  return {{"samples", s.samples}, {"p50_ms", s.p50}, {"p95_ms", s.p95}, {"min_ms", s.min}, {"max_ms", s.max},
          {"mean_ms", s.mean}, {"first_half_p50_ms", s.first_half_p50}, {"second_half_p50_ms", s.second_half_p50},
          {"half_change", s.half_change}, {"stable", s.stable}};
}

std::vector<double> time_host(const std::function<void()>& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  ms.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

}  // namespace detforge::bench
