//===- FloatConversionTest.cpp - fp32 to bf16/fp16 against APFloat --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The weight conversion of --dtype bf16|fp16 (partita/runtime/Float16.h)
// must give exactly the bits llvm::APFloat's round-to-nearest-even
// conversion gives, for every class of fp32 bit pattern: zeros,
// subnormals, normals at and around every rounding boundary, the largest
// values that still round to a finite result, infinities and NaNs.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Float16.h"

#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace {

using namespace partita::runtime;

uint16_t reference(uint32_t bits, const llvm::fltSemantics &semantics) {
  llvm::APFloat value(llvm::APFloat::IEEEsingle(), llvm::APInt(32, bits));
  bool losesInfo = false;
  value.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return static_cast<uint16_t>(value.bitcastToAPInt().getZExtValue());
}

/// Every pattern class: each exponent with mantissas at the ends, around
/// the bf16 and fp16 rounding points (ties, one below, one above), with
/// both signs; and a random sweep.
std::vector<uint32_t> patterns() {
  std::vector<uint32_t> bits;
  const uint32_t mantissas[] = {
      0,        1,        0x0FFF,   0x1000,   0x1001,   0x2000,
      0x3000,   0x7FFF,   0x8000,   0x8001,   0x10000,  0x18000,
      0x7FFFFF, 0x7FFFFE, 0x400000, 0x400001, 0x7FE000, 0x7FF000};
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t exponent = 0; exponent < 256; ++exponent)
      for (uint32_t mantissa : mantissas)
        bits.push_back(sign | (exponent << 23) | mantissa);
  std::mt19937 random(20261202);
  for (int i = 0; i < (1 << 22); ++i)
    bits.push_back(static_cast<uint32_t>(random()));
  return bits;
}

void expectSame(void (*convert)(const void *, uint16_t *, size_t),
                const llvm::fltSemantics &semantics) {
  std::vector<uint32_t> in = patterns();
  std::vector<uint16_t> out(in.size());
  convert(in.data(), out.data(), in.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (out[i] != reference(in[i], semantics) && ++mismatches <= 10)
      ADD_FAILURE() << std::hex << "fp32 0x" << in[i] << ": got 0x" << out[i]
                    << ", APFloat gives 0x" << reference(in[i], semantics);
  EXPECT_EQ(mismatches, 0u);
}

TEST(FloatConversion, Bf16MatchesAPFloat) {
  expectSame(convertFloatsToBf16, llvm::APFloat::BFloat());
}

TEST(FloatConversion, F16MatchesAPFloat) {
  expectSame(convertFloatsToF16, llvm::APFloat::IEEEhalf());
}

TEST(FloatConversion, UnalignedInput) {
  // Weights come from a mapped file at any offset.
  std::vector<unsigned char> bytes(4 * 3 + 1);
  float values[] = {1.0f, -2.5f, 65504.0f};
  std::memcpy(bytes.data() + 1, values, sizeof(values));
  uint16_t out[3];
  convertFloatsToBf16(bytes.data() + 1, out, 3);
  EXPECT_EQ(out[0], 0x3F80);
  EXPECT_EQ(out[1], 0xC020);
  convertFloatsToF16(bytes.data() + 1, out, 3);
  EXPECT_EQ(out[0], 0x3C00);
  EXPECT_EQ(out[1], 0xC100);
  EXPECT_EQ(out[2], 0x7BFF);
}

} // namespace
