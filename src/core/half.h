// Scalar and bulk conversions between fp32 and the 16/8-bit float formats that checkpoints and
// bundles store: IEEE fp16, bfloat16, and FP8 e4m3fn (the OCP format torch calls
// float8_e4m3fn: bias 7, no infinities, 0x7F/0xFF are NaN, largest finite 448).
// Every fp32 -> narrow conversion rounds to nearest, ties to even, as numpy and torch do.
#pragma once
#include <cstddef>
#include <cstdint>

namespace detforge {

// fp16: overflow goes to +-inf, tiny values to subnormals or signed zero, NaN stays NaN (quiet).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);

// bfloat16: the top 16 bits of fp32, rounded to nearest even; NaN stays NaN (quiet).
uint16_t fp32_to_bf16(float f);
inline float bf16_to_fp32(uint16_t b) {
  union {
    uint32_t u;
    float f;
  } v{static_cast<uint32_t>(b) << 16};
  return v.f;
}

// FP8 e4m3fn, saturating: finite values beyond +-448 and +-inf clamp to +-448; NaN -> 0x7F.
// This is what a quantizer wants (torch users write x.clamp(-448, 448).to(float8_e4m3fn)).
uint8_t fp32_to_fp8_e4m3fn(float f);
// FP8 e4m3fn exactly as torch's plain cast x.to(torch.float8_e4m3fn) (torch 2.11, measured):
// NOT saturating: |x| > 464 and +-inf become NaN (0x7F / 0xFF); 464 ties down to 448.
uint8_t fp32_to_fp8_e4m3fn_nonsaturating(float f);
float fp8_e4m3fn_to_fp32(uint8_t v);

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp16Max = 65504.0f;

// Bulk converters (n elements; src and dst must not overlap).
void fp16_to_fp32(const uint16_t* src, float* dst, size_t n);
void fp32_to_fp16(const float* src, uint16_t* dst, size_t n);
void bf16_to_fp32(const uint16_t* src, float* dst, size_t n);
void fp32_to_bf16(const float* src, uint16_t* dst, size_t n);
void fp8_e4m3fn_to_fp32(const uint8_t* src, float* dst, size_t n);
void fp32_to_fp8_e4m3fn(const float* src, uint8_t* dst, size_t n);  // saturating

}  // namespace detforge
