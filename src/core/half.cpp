#include "core/half.h"

#include <cstring>

namespace detforge {
namespace {

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// fp8 e4m3fn -> fp32 for all 256 codes, built once (the decode is a table lookup in bulk paths).
struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) {
      uint32_t sign = (i & 0x80) ? 0x80000000u : 0u;
      uint32_t exp = (i >> 3) & 0xF, man = i & 0x7;
      float f;
      if (exp == 0xF && man == 0x7) {
        f = from_bits(sign | 0x7FC00000u);
      } else if (exp == 0) {
        f = from_bits(sign | bits(static_cast<float>(man) * (1.0f / 512.0f)));  // man * 2^-9
      } else {
        f = from_bits(sign | ((exp - 7 + 127) << 23) | (man << 20));
      }
      v[i] = f;
    }
  }
};
const Fp8Table& fp8_table() {
  static const Fp8Table t;
  return t;
}

// Rounds |f| (finite, < 480) to e4m3fn bits without the sign, ties to even. 0x7F may result
// (for |f| > 464): callers decide whether that means NaN or saturate.
inline uint8_t fp8_round_abs(uint32_t ax) {
  if (ax < (121u << 23)) {  // below 2^-6: subnormal range, step 2^-9
    // 2^14 has ulp 2^-9 = the e4m3 subnormal step, so the float add rounds to nearest even.
    float t = from_bits(ax) + 16384.0f;
    return static_cast<uint8_t>(bits(t) - bits(16384.0f));
  }
  uint32_t mant_odd = (ax >> 20) & 1u;
  ax += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu + mant_odd;
  return static_cast<uint8_t>(ax >> 20);
}

}  // namespace

uint16_t fp32_to_fp16(float f) {
  uint32_t x = bits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((ax >> 13) & 0x3FFu);
  if (ax >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (incl. inf) rounds to inf
  if (ax < 0x38800000u) {                        // below 2^-14: subnormal or zero
    // 0.5f has ulp 2^-24 = the fp16 subnormal step, so the float add rounds to nearest even.
    float t = from_bits(ax) + 0.5f;
    return sign | static_cast<uint16_t>(bits(t) - bits(0.5f));
  }
  uint32_t mant_odd = (ax >> 13) & 1u;
  ax += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFu + mant_odd;
  return sign | static_cast<uint16_t>(ax >> 13);
}

float fp16_to_fp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return from_bits(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    // subnormal or zero: man * 2^-24, exact in fp32
    return from_bits(sign | bits(static_cast<float>(man) * 5.9604644775390625e-8f));
  }
  return from_bits(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t fp32_to_bf16(float f) {
  uint32_t x = bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

uint8_t fp32_to_fp8_e4m3fn(float f) {
  uint32_t x = bits(f);
  uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return 0x7F;
  if (ax >= bits(448.0f)) return sign | 0x7E;  // saturate (incl. inf)
  return sign | fp8_round_abs(ax);              // < 448 never rounds past 448
}

uint8_t fp32_to_fp8_e4m3fn_nonsaturating(float f) {
  uint32_t x = bits(f);
  uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return 0x7F;
  if (ax > bits(464.0f)) return sign | 0x7F;  // rounds to the NaN code, as torch does
  return sign | fp8_round_abs(ax);
}

float fp8_e4m3fn_to_fp32(uint8_t v) { return fp8_table().v[v]; }

void fp16_to_fp32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}
void fp32_to_fp16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
void bf16_to_fp32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}
void fp32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}
void fp8_e4m3fn_to_fp32(const uint8_t* src, float* dst, size_t n) {
  const float* t = fp8_table().v;
  for (size_t i = 0; i < n; ++i) dst[i] = t[src[i]];
}
void fp32_to_fp8_e4m3fn(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_fp8_e4m3fn(src[i]);
}

}  // namespace detforge
