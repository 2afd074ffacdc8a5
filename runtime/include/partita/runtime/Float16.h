//===- Float16.h - f16 and bf16 storage conversions -------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// f16 and bf16 are storage types: the runtime computes in fp32 and converts
// on load and store, rounding to nearest even, so every rank that stores the
// same fp32 value stores the same bits.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_FLOAT16_H
#define PARTITA_RUNTIME_FLOAT16_H

#include <cstdint>
#include <cstring>

namespace partita::runtime {

inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline float bf16ToFloat(uint16_t bits) {
  return floatFromBits(uint32_t(bits) << 16);
}

inline uint16_t floatToBf16(float value) {
  uint32_t bits = floatBits(value);
  // Keep NaNs quiet NaNs; rounding could carry them into infinity.
  if ((bits & 0x7fffffff) > 0x7f800000)
    return uint16_t((bits >> 16) | 0x40);
  uint32_t roundingBias = 0x7fff + ((bits >> 16) & 1);
  return uint16_t((bits + roundingBias) >> 16);
}

inline float f16ToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0x1f) // Infinity or NaN.
    return floatFromBits(sign | 0x7f800000 | (mantissa << 13));
  if (exponent != 0)
    return floatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in fp32.
  float magnitude = float(mantissa) * (1.0f / 16777216.0f);
  return sign ? -magnitude : magnitude;
}

inline uint16_t floatToF16(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) // NaN stays a quiet NaN.
    return uint16_t(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));
  if (magnitude >= 0x477ff000) // Rounds to infinity (>= 65520).
    return uint16_t(sign | 0x7c00);
  if (magnitude < 0x38800000) { // Below the smallest normal f16: subnormal.
    // Adding 0.5 (2^-1) aligns the mantissa so that fp32 rounding (to
    // nearest even) leaves the f16 subnormal in the low bits.
    float shifted = floatFromBits(magnitude) + 0.5f;
    return uint16_t(sign | (floatBits(shifted) - floatBits(0.5f)));
  }
  uint32_t roundingBias = 0xfff + ((magnitude >> 13) & 1);
  return uint16_t(sign | ((magnitude - 0x38000000 + roundingBias) >> 13));
}

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_FLOAT16_H
