//===- Float16Test.cpp - f16 and bf16 conversions -------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Float16.h"

#include "TestUtil.h"

#include <cmath>
#include <random>

using namespace partita::runtime;

namespace {

/// Floats of every exponent, including specials, from random bit patterns.
std::vector<float> sampleFloats() {
  std::mt19937 random(42);
  std::vector<float> values = {0.0f,      -0.0f,    1.0f,        65504.0f,
                               65519.0f,  65520.0f, 6.1035e-05f, 5.96e-08f,
                               2.98e-08f, INFINITY, -INFINITY};
  for (int i = 0; i < 200000; ++i)
    values.push_back(floatFromBits(uint32_t(random())));
  return values;
}

TEST(Float16, EveryF16SurvivesTheRoundTrip) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float value = f16ToFloat(uint16_t(bits));
    if (std::isnan(value))
      EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(value)))) << bits;
    else
      EXPECT_EQ(floatToF16(value), bits) << bits;
  }
}

#if defined(__FLT16_MAX__) && !defined(__clang__)
// The compiler's own conversion rounds to nearest even: the reference.
TEST(Float16, RoundsLikeTheCompiler) {
  for (float value : sampleFloats()) {
    if (std::isnan(value))
      continue;
    _Float16 expected = static_cast<_Float16>(value);
    uint16_t expectedBits;
    std::memcpy(&expectedBits, &expected, 2);
    ASSERT_EQ(floatToF16(value), expectedBits) << value;
    ASSERT_EQ(f16ToFloat(expectedBits), static_cast<float>(expected));
  }
}
#endif

TEST(BFloat16, RoundsToNearestEven) {
  for (float value : sampleFloats()) {
    uint16_t bits = floatToBf16(value);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(bf16ToFloat(bits)));
      continue;
    }
    if (std::isinf(value)) {
      EXPECT_EQ(bf16ToFloat(bits), value);
      continue;
    }
    // The two bf16 neighbours of `value` (toward zero and away from it);
    // the result is the nearer one, the even one on a tie. Past the largest
    // finite bf16 the neighbour away from zero is infinity, which counts as
    // 2^128 for the distance.
    uint16_t low = uint16_t(floatBits(value) >> 16);
    uint16_t high = uint16_t(low + 1);
    double highValue = std::isinf(bf16ToFloat(high))
                           ? std::copysign(std::ldexp(1.0, 128), value)
                           : double(bf16ToFloat(high));
    double toLow = std::fabs(double(value) - double(bf16ToFloat(low)));
    double toHigh = std::fabs(double(value) - highValue);
    uint16_t expected =
        toLow < toHigh || (toLow == toHigh && low % 2 == 0) ? low : high;
    ASSERT_EQ(bits, expected) << value;
  }
}

} // namespace
