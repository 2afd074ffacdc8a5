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

#include <cmath>
#include <cstddef>
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

/// Round to nearest even; NaNs stay NaNs (quieted) instead of rounding up
/// into infinity. Branch-free, like the others here, so that loops over
/// them vectorize (the host kernels convert whole rows with them).
inline uint16_t floatToBf16(float value) {
  uint32_t u = floatBits(value);
  uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  uint32_t quietNaN = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quietNaN
                                                               : rounded);
}

/// Exact for every half value, subnormals included (after Maratyszcza's
/// FP16 library).
inline float f16ToFloat(uint16_t h) {
  uint32_t w = static_cast<uint32_t>(h) << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t twoW = w + w;
  float normalized = floatFromBits((twoW >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  float denormalized = floatFromBits((twoW >> 17) | (126u << 23)) - 0.5f;
  uint32_t magnitude =
      twoW < (1u << 27) ? floatBits(denormalized) : floatBits(normalized);
  return floatFromBits(sign | magnitude);
}

/// Round to nearest even, through the FPU's own rounding: scaling moves the
/// bits to drop below the half mantissa, and one float add rounds them.
inline uint16_t floatToF16(float value) {
  float base = (std::fabs(value) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t w = floatBits(value);
  uint32_t shl1W = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1W & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = floatFromBits((bias >> 1) + 0x07800000u) + base;
  uint32_t bits = floatBits(base);
  uint32_t expBits = (bits >> 13) & 0x00007C00u;
  uint32_t mantissaBits = bits & 0x00000FFFu;
  uint32_t nonsign = expBits + mantissaBits;
  return static_cast<uint16_t>((sign >> 16) |
                               (shl1W > 0xFF000000u ? 0x7E00u : nonsign));
}

/// A NaN as fp16: its sign, quiet, with the top 9 bits of its payload (what
/// llvm::APFloat's conversion gives; floatToF16 gives the canonical NaN).
inline uint16_t nanToF16(uint32_t bits) {
  return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7E00u |
                               ((bits >> 13) & 0x01FFu));
}

/// `n` fp32 values at `in` (any alignment) to bf16 at `out`: round to
/// nearest even, infinities kept, NaNs quieted with their sign and payload's
/// high bits, bit for bit what llvm::APFloat::convert gives
/// (unittests/Support/FloatConversionTest.cpp). Branch-free, so the loop
/// vectorizes.
inline void convertFloatsToBf16(const void *in, uint16_t *out, size_t n) {
  const unsigned char *bytes = static_cast<const unsigned char *>(in);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, bytes + i * sizeof(u), sizeof(u));
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t quietNaN = (u >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quietNaN
                                                                   : rounded);
  }
}

/// The same to fp16 (subnormals rounded to nearest even, overflow to
/// infinity).
inline void convertFloatsToF16(const void *in, uint16_t *out, size_t n) {
  const unsigned char *bytes = static_cast<const unsigned char *>(in);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, bytes + i * sizeof(u), sizeof(u));
    uint16_t value = floatToF16(floatFromBits(u));
    out[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? nanToF16(u) : value;
  }
}

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_FLOAT16_H
