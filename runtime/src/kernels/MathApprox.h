//===- MathApprox.h - vectorizable exp, tanh, erf ---------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// libm's expf, tanhf and erff are scalar calls (4, 17 and 17 ns each here),
// which would dominate softmax, attention and GELU. These are branch-free
// polynomial forms the compiler vectorizes. Worst relative errors against
// double precision, over 2M points each: exp 1.4 ulp, tanh 2.7 ulp, sigmoid
// 2.4 ulp, erf 5.5 ulp; erfc 1.2e-7 * (1 + x^2) (x^2 is rounded to fp32
// before the exponential), so GELU is within 3e-6 for x >= -5 and, below
// that, within 1.5e-5 of outputs smaller than 1e-5.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_KERNELS_MATHAPPROX_H
#define PARTITA_RUNTIME_KERNELS_MATHAPPROX_H

#include "KernelSupport.h"

#include <limits>

namespace partita::runtime::kernels {

/// e^x: Cody-Waite reduction to r = x - n ln2, |r| <= ln2 / 2, Cephes'
/// degree-6 polynomial, and 2^n applied in two halves so that the scale
/// never overflows before the product does.
inline float expApprox(float x) {
  const float kMagic = 12582912.0f; // 1.5 * 2^23: adding it rounds to int.
  float xc = std::min(std::max(x, -88.0f), 88.8f);
  float t = xc * 1.44269504088896341f + kMagic;
  float n = t - kMagic;
  int32_t ni = static_cast<int32_t>(floatBits(t) - floatBits(kMagic));
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r) + r + 1.0f;
  int32_t half = ni >> 1;
  float scale1 = floatFromBits(static_cast<uint32_t>(half + 127) << 23);
  float scale2 = floatFromBits(static_cast<uint32_t>(ni - half + 127) << 23);
  y = y * scale1 * scale2;
  // Below -87.3 the result is subnormal or zero; flushing it to zero keeps
  // exp(-inf) = 0, which masked softmax rows rely on.
  y = x < -87.33654f ? 0.0f : y;
  y = x > 88.72283f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}

/// e^x for x <= 0 (or NaN), as softmax's x - max is: expApprox's reduction
/// with a shorter polynomial and less around them. There is no overflow to
/// guard, 2^n is applied in one step (a normal float for the x >= -87.34
/// that keep their value), and no input clamp is needed: below that,
/// whatever the arithmetic gives (NaN for -inf) is replaced by the final
/// zero, and a NaN input propagates through the arithmetic. About half
/// expApprox's instructions, which softmax is bound by.
///
/// F is a GCC/Clang vector of floats and U the unsigned vector of the same
/// shape: softmax calls it on whole vectors, since the compiler vectorizes
/// a loop over a scalar form but not with a sum alongside.
/// Always inlined: out of line it would be compiled for the baseline target,
/// not the clone of its caller.
template <typename F, typename U>
[[gnu::always_inline]] inline F expNonPositiveApprox(F x) {
  static_assert(sizeof(F) == sizeof(U), "F and U must have the same shape");
  auto toBits = [](F f) {
    U u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
  };
  auto fromBits = [](U u) {
    F f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  };
  const float kMagic = 12582912.0f; // 1.5 * 2^23: adding it rounds to int.
  F t = x * 1.44269504088896341f + kMagic;
  F n = t - kMagic;
  // The biased exponent n + 127, in unsigned arithmetic so that the
  // meaningless values of flushed inputs cannot overflow.
  U biased = toBits(t) - floatBits(kMagic) + 127u;
  F r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  // A degree-6 fit of e^r on [-ln2/2, ln2/2] (relative error 4e-9 with
  // these float coefficients): one term fewer than Cephes' and as accurate
  // in fp32, 1.01 ulp at worst against double over [-87.3, 0]. Estrin's
  // scheme, for a shorter dependency chain than Horner's.
  F r2 = r * r;
  F p01 = r * 1.666652e-1f + 4.9999994e-1f;
  F p23 = r * 8.368914e-3f + 4.1668408e-2f;
  F p = (r2 * 1.3814188e-3f + p23) * r2 + p01;
  F y = p * r2 + r + 1.0f;
  y = y * fromBits(biased << 23);
  // Results below 2^-126 flush to zero, as in expApprox (exp(-inf) = 0).
  // A NaN compares false, so it keeps its value. (GCC compiles this to
  // scalar code where F is wider than the target's vectors: use F of the
  // target's width.)
  return x < -87.33654f ? F{} : y;
}

/// tanh: the Taylor series near 0 (where 1 - 2 / (e^2x + 1) would cancel),
/// the exponential form elsewhere.
inline float tanhApprox(float x) {
  float ax = std::fabs(x);
  float x2 = x * x;
  float p = 21844.0f / 6081075.0f;
  p = p * x2 - 1382.0f / 155925.0f;
  p = p * x2 + 62.0f / 2835.0f;
  p = p * x2 - 17.0f / 315.0f;
  p = p * x2 + 2.0f / 15.0f;
  p = p * x2 - 1.0f / 3.0f;
  float small = x + x * x2 * p;
  float large = 1.0f - 2.0f / (expApprox(2.0f * ax) + 1.0f);
  large = x < 0.0f ? -large : large;
  return ax < 0.4f ? small : large;
}

/// erfc with relative error below 1.2e-7 for all x >= 0 (the Chebyshev
/// fit of Numerical Recipes' erfcc), reflected for x < 0.
inline float erfcApprox(float x) {
  float z = std::fabs(x);
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  float y = t * expApprox(-z * z - 1.26551223f + t * p);
  return x < 0.0f ? 2.0f - y : y;
}

/// erf: the Taylor series below 0.5 (where 1 - erfc would cancel), 1 - erfc
/// above.
inline float erfApprox(float x) {
  float x2 = x * x;
  float p = 1.0f / 9360.0f;
  p = p * x2 - 1.0f / 1320.0f;
  p = p * x2 + 1.0f / 216.0f;
  p = p * x2 - 1.0f / 42.0f;
  p = p * x2 + 1.0f / 10.0f;
  p = p * x2 - 1.0f / 3.0f;
  p = p * x2 + 1.0f;
  float small = 1.12837916709551257f * x * p;
  float large = 1.0f - erfcApprox(std::fabs(x));
  large = x < 0.0f ? -large : large;
  return std::fabs(x) < 0.5f ? small : large;
}

inline float sigmoidApprox(float x) { return 1.0f / (1.0f + expApprox(-x)); }

/// x * Phi(x) with Phi through erfc, which keeps its relative accuracy in
/// the negative tail where 1 + erf(x / sqrt 2) would cancel.
inline float geluErfApprox(float x) {
  return 0.5f * x * erfcApprox(x * -0.70710678118654752f);
}

/// The tanh form, rewritten as x * sigmoid(2u) since
/// 0.5 (1 + tanh u) = sigmoid(2u), again without cancellation.
inline float geluTanhApprox(float x) {
  float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expApprox(-2.0f * u));
}

} // namespace partita::runtime::kernels

#endif // PARTITA_RUNTIME_KERNELS_MATHAPPROX_H
