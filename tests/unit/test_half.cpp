// fp16 / bf16 / fp8-e4m3fn conversions: exhaustive over the narrow formats, and checked against
// numpy/torch bit patterns (tests/reference/make_half_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"

namespace detforge {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct RefRow {
  uint32_t x;
  uint16_t f16, bf16;
  uint8_t f8_plain, f8_sat;
};
const RefRow kRef[] = {
#include "test_half_reference.inc"
};

TEST(Half, Fp16AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_fp32(static_cast<uint16_t>(h));
    uint16_t back = fp32_to_fp16(f);
    if (std::isnan(f)) {
      EXPECT_EQ((h & 0x7C00u), 0x7C00u);
      EXPECT_NE(h & 0x3FFu, 0u);
      EXPECT_TRUE(std::isnan(fp16_to_fp32(back))) << h;
      continue;
    }
    EXPECT_EQ(back, h) << "fp16 pattern " << h << " value " << f;
  }
}

TEST(Half, Fp16DecodesKnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7C00)));
  EXPECT_TRUE(std::signbit(fp16_to_fp32(0x8000)));
}

// Independent reference: the nearest fp16 by brute search over neighbours, ties to even.
uint16_t nearest_fp16(float f) {
  if (std::isnan(f)) return 0x7E00;
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;
  uint16_t best = 0;
  double best_err = 1e300;
  // fp16 magnitudes are monotonic in their bit pattern; binary search then check neighbours.
  int lo = 0, hi = 0x7BFF;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (fp16_to_fp32(static_cast<uint16_t>(mid)) <= a) lo = mid; else hi = mid - 1;
  }
  for (int c = std::max(0, lo - 1); c <= std::min(0x7BFF, lo + 1); ++c) {
    double e = std::fabs(fp16_to_fp32(static_cast<uint16_t>(c)) - a);
    if (e < best_err || (e == best_err && (c & 1) == 0)) {
      best_err = e;
      best = static_cast<uint16_t>(c);
    }
  }
  return sign | best;
}

TEST(Half, Fp16RoundingMatchesBruteForceOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    // bias towards the fp16 range: exponents 100..150
    uint32_t u = any(rng);
    uint32_t e = 100 + (u >> 24) % 51;
    uint32_t x = (u & 0x80000000u) | (e << 23) | (any(rng) & 0x7FFFFFu);
    float f = from_bits(x);
    ASSERT_EQ(fp32_to_fp16(f), nearest_fp16(f)) << "x=" << std::hex << x;
    ++checked;
  }
  EXPECT_EQ(checked, 200000);
}

TEST(Half, MatchesNumpyAndTorchBitPatterns) {
  ASSERT_GT(sizeof(kRef) / sizeof(kRef[0]), 200u);
  for (const RefRow& r : kRef) {
    float x = from_bits(r.x);
    SCOPED_TRACE(testing::Message() << "x=" << x << " bits=" << std::hex << r.x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(x))));
      EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(x))));
      EXPECT_EQ(fp32_to_fp8_e4m3fn(x) & 0x7F, 0x7F);
      EXPECT_EQ(fp32_to_fp8_e4m3fn_nonsaturating(x) & 0x7F, 0x7F);
      continue;
    }
    EXPECT_EQ(fp32_to_fp16(x), r.f16);
    EXPECT_EQ(fp32_to_bf16(x), r.bf16);
    EXPECT_EQ(fp32_to_fp8_e4m3fn_nonsaturating(x), r.f8_plain);
    EXPECT_EQ(fp32_to_fp8_e4m3fn(x), r.f8_sat);
  }
}

TEST(Half, Bf16RoundTripsAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_fp32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(fp32_to_bf16(f), b);
  }
}

TEST(Half, Fp8AllCodesRoundTrip) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    float f = fp8_e4m3fn_to_fp32(static_cast<uint8_t>(c));
    if (std::isnan(f)) {
      ++nans;
      EXPECT_EQ(c & 0x7F, 0x7F);
      continue;
    }
    EXPECT_EQ(fp32_to_fp8_e4m3fn(f), c) << c;
    EXPECT_EQ(fp32_to_fp8_e4m3fn_nonsaturating(f), c) << c;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(fp8_e4m3fn_to_fp32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3fn_to_fp32(0x01), std::ldexp(1.0f, -9));
}

TEST(Half, Fp8SaturatesAndTorchCastDoesNot) {
  EXPECT_EQ(fp32_to_fp8_e4m3fn(1e6f), 0x7E);
  EXPECT_EQ(fp32_to_fp8_e4m3fn(-INFINITY), 0xFE);
  EXPECT_EQ(fp32_to_fp8_e4m3fn_nonsaturating(1e6f), 0x7F);
  EXPECT_EQ(fp32_to_fp8_e4m3fn_nonsaturating(464.0f), 0x7E);
  EXPECT_EQ(fp32_to_fp8_e4m3fn_nonsaturating(465.0f), 0x7F);
}

TEST(Half, BulkConvertersAgreeWithScalar) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 100.f);
  std::vector<float> x(1000);
  for (float& v : x) v = nd(rng);
  std::vector<uint16_t> h(x.size()), b(x.size());
  std::vector<uint8_t> q(x.size());
  std::vector<float> y(x.size());
  fp32_to_fp16(x.data(), h.data(), x.size());
  fp32_to_bf16(x.data(), b.data(), x.size());
  fp32_to_fp8_e4m3fn(x.data(), q.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], fp32_to_fp16(x[i]));
    EXPECT_EQ(b[i], fp32_to_bf16(x[i]));
    EXPECT_EQ(q[i], fp32_to_fp8_e4m3fn(x[i]));
  }
  fp16_to_fp32(h.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], std::fabs(x[i]) * 1e-3f + 1e-6f);
  bf16_to_fp32(b.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], std::fabs(x[i]) * 8e-3f + 1e-6f);
  fp8_e4m3fn_to_fp32(q.data(), y.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], std::clamp(x[i], -448.f, 448.f), std::fabs(x[i]) * 0.07f + 0.002f);
}

}  // namespace
}  // namespace detforge
