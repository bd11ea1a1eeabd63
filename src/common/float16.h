// Inline fp16 / bf16 bit conversions (round to nearest even, independent of the FPU rounding
// mode), used by the public conversion functions and by the CPU executor's load/store loops.
#pragma once

#include <cstdint>
#include <cstring>

namespace spikejit::detail {

// The bits of `from` read as a `To` of the same size (std::bit_cast before C++20).
template <class To, class From>
inline To bit_copy(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "a bit copy keeps the size");
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

inline uint32_t float_bits(float f) { return bit_copy<uint32_t>(f); }
inline float bits_float(uint32_t x) { return bit_copy<float>(x); }

inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00u | ((ax >> 13) & 0x3FFu);  // NaN stays quiet NaN
  if (ax >= 0x477FF000u) return sign | 0x7C00u;                         // >= 65520 (and Inf) rounds to Inf
  if (ax >= 0x38800000u) {                                              // normal half: |f| >= 2^-14
    const uint32_t rounded = ax + 0xFFFu + ((ax >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
  }
  // Subnormal half: round(|f| * 2^24) with the implicit bit made explicit.
  const uint32_t exponent = ax >> 23;
  const uint32_t shift = 126u - exponent;  // >= 14
  if (exponent == 0 || shift > 24) return sign;
  const uint32_t mantissa = (ax & 0x7FFFFFu) | 0x800000u;
  uint32_t result = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // m * 2^-24
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline float bfloat16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

}  // namespace spikejit::detail
