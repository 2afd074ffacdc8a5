//===- Normalization.cpp - softmax, layer and RMS norm --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Row kernels: each row is read into fp32 (in place for f32), reduced with
// sixteen partial sums (two 8-lane vectors) so the loops use full-width
// vector instructions without reassociating a single accumulator, and
// written once. Layer norm takes two passes over the row (mean, then the
// centered sum of squares), which stays accurate when the mean is large
// against the spread; the second pass reads the row from L1. Softmax
// subtracts the row maximum.
//
// The per-row helpers are inlined into one target_clones function per
// kernel that runs a block of rows: the AVX2 clone is chosen once per block
// rather than per helper call, and the constants are set up once.
//
//===----------------------------------------------------------------------===//

// GCC warns that passing the vector types below by value differs between
// the AVX, AVX-512 and baseline ABIs (here and in the MathApprox.h template
// instantiated on them); these helpers are internal and inlined, never
// called across that boundary. Before the includes, as GCC attributes the
// warning to where the template is defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include "KernelSupport.h"
#include "MathApprox.h"

#include <limits>
#include <type_traits>

namespace partita::runtime::kernels {

namespace {

/// The row helpers must be inlined into the target_clones functions that
/// call them: one left out of line is compiled for the baseline target.
#define PARTITA_INLINE [[gnu::always_inline]] inline

/// Eight fp32 lanes as one value (a GCC and Clang vector extension). Without
/// -ffast-math the compiler may not split a scalar float reduction into
/// lanes itself, so the reductions spell the lanes out; the AVX2 clone keeps
/// one in a ymm register, the baseline in two xmm.
typedef float F32x8 __attribute__((vector_size(32)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));
typedef float F32x16 __attribute__((vector_size(64)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));
constexpr int64_t kLanes = 8;

PARTITA_INLINE F32x8 load8(const float *p) {
  F32x8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

PARTITA_INLINE F32x8 splat8(float s) { return F32x8{} + s; }

/// Lane-wise a > b ? a : b; a NaN in `a` is skipped, as in the scalar form.
PARTITA_INLINE F32x8 max8(F32x8 a, F32x8 b) { return a > b ? a : b; }

// The lanes combine as a tree rather than a chain: a row's reduction is on
// the critical path to its output pass, and for short rows its latency is a
// good part of the row's time.
PARTITA_INLINE float sumLanes(F32x8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

PARTITA_INLINE float maxOf(float a, float b) { return a > b ? a : b; }

PARTITA_INLINE float maxLanes(F32x8 v) {
  return maxOf(maxOf(maxOf(v[0], v[4]), maxOf(v[2], v[6])),
               maxOf(maxOf(v[1], v[5]), maxOf(v[3], v[7])));
}

PARTITA_INLINE float rowMax(const float *x, int64_t n) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  F32x8 a = splat8(kNegInf), b = a;
  int64_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    a = max8(load8(x + j), a);
    b = max8(load8(x + j + kLanes), b);
  }
  if (j + kLanes <= n) {
    a = max8(load8(x + j), a);
    j += kLanes;
  }
  float m = maxLanes(max8(b, a));
  for (; j < n; ++j)
    m = maxOf(x[j], m);
  return m;
}

PARTITA_INLINE float rowSum(const float *x, int64_t n) {
  F32x8 a = {}, b = {};
  int64_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    a += load8(x + j);
    b += load8(x + j + kLanes);
  }
  if (j + kLanes <= n) {
    a += load8(x + j);
    j += kLanes;
  }
  float s = sumLanes(a + b);
  for (; j < n; ++j)
    s += x[j];
  return s;
}

/// Sum of (x - c)^2, or of x^2 with c = 0.
PARTITA_INLINE float rowSquaredDeviation(const float *x, int64_t n, float c) {
  F32x8 a = {}, b = {}, cv = splat8(c);
  int64_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    F32x8 d0 = load8(x + j) - cv, d1 = load8(x + j + kLanes) - cv;
    a += d0 * d0;
    b += d1 * d1;
  }
  if (j + kLanes <= n) {
    F32x8 d = load8(x + j) - cv;
    a += d * d;
    j += kLanes;
  }
  float s = sumLanes(a + b);
  for (; j < n; ++j)
    s += (x[j] - c) * (x[j] - c);
  return s;
}

/// Sum of the lanes of a vector of 8 or 16.
template <typename F> PARTITA_INLINE float sumVector(F v) {
  if constexpr (sizeof(F) == sizeof(F32x8)) {
    return sumLanes(v);
  } else {
    F32x8 low, high;
    std::memcpy(&low, &v, sizeof(low));
    std::memcpy(&high, reinterpret_cast<const char *>(&v) + sizeof(low),
                sizeof(high));
    return sumLanes(low + high);
  }
}

/// y = exp(x - m) for one row, returning the sum: a vector F (with U its
/// unsigned counterpart) at a time, summed as they are made.
template <typename F, typename U>
PARTITA_INLINE float rowExpSum(const float *__restrict x, int64_t n, float m,
                               float *__restrict y) {
  constexpr int64_t kWidth = sizeof(F) / sizeof(float);
  F lanes = {};
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    F e;
    std::memcpy(&e, x + j, sizeof(e));
    e = expNonPositiveApprox<F, U>(e - m);
    std::memcpy(y + j, &e, sizeof(e));
    lanes += e;
  }
  float sum = sumVector(lanes);
  if (j < n) {
    // The last n % kWidth through a padded vector: -inf gives 0.
    F e = F{} - std::numeric_limits<float>::infinity();
    std::memcpy(&e, x + j, (n - j) * sizeof(float));
    e = expNonPositiveApprox<F, U>(e - m);
    for (int64_t l = 0; l < n - j; ++l) {
      y[j + l] = e[l];
      sum += e[l];
    }
  }
  return sum;
}

/// softmax or log_softmax of a block of rows: per row the maximum, the
/// exponentials (into y) and their sum, then one pass that scales or
/// shifts. The last pass runs a few rows behind the others, so that one
/// row's sum, division or log is not waited on before the next row starts:
/// with short rows those latencies are much of a row's time. The rows
/// in between stay in L1.
template <typename F, typename U>
PARTITA_INLINE void softmaxBlock(const float *__restrict x, float *__restrict y,
                                 int64_t rows, int64_t n, bool isLog) {
  constexpr int64_t kGroup = 8;
  for (int64_t r0 = 0; r0 < rows; r0 += kGroup) {
    int64_t count = std::min(kGroup, rows - r0);
    float maxima[kGroup], sums[kGroup];
    for (int64_t i = 0; i < count; ++i) {
      const float *xr = x + (r0 + i) * n;
      maxima[i] = rowMax(xr, n);
      sums[i] = rowExpSum<F, U>(xr, n, maxima[i], y + (r0 + i) * n);
    }
    for (int64_t i = 0; i < count; ++i) {
      const float *xr = x + (r0 + i) * n;
      float *yr = y + (r0 + i) * n;
      float m = maxima[i];
      if (isLog) {
        // (x - m) - log(sum), not x - (m + log(sum)): m + c would round to
        // the ulp of m (2^-10 near 10^4) for large inputs.
        float c = std::log(sums[i]);
        for (int64_t j = 0; j < n; ++j)
          yr[j] = (xr[j] - m) - c;
      } else {
        float s = 1.0f / sums[i];
        for (int64_t j = 0; j < n; ++j)
          yr[j] *= s;
      }
    }
  }
}

PARTITA_HOT void softmaxRows8(const float *x, float *y, int64_t rows, int64_t n,
                              bool isLog) {
  softmaxBlock<F32x8, U32x8>(x, y, rows, n, isLog);
}

#ifdef PARTITA_HAVE_AVX512_PATH
// The exponential is bound by how many instructions the core can track at
// once rather than by its arithmetic units, so 16 lanes per instruction run
// it about 1.5x faster than 8 where the core has AVX-512. A separate
// function rather than a third clone: 16-lane vectors in the AVX2 clone
// compile to scalar compares.
__attribute__((target("arch=x86-64-v4"))) void
softmaxRows16(const float *x, float *y, int64_t rows, int64_t n, bool isLog) {
  softmaxBlock<F32x16, U32x16>(x, y, rows, n, isLog);
}
#endif

void softmaxRows(const float *x, float *y, int64_t rows, int64_t n,
                 bool isLog) {
#ifdef PARTITA_HAVE_AVX512_PATH
  static const bool hasAvx512 = __builtin_cpu_supports("x86-64-v4");
  if (hasAvx512)
    return softmaxRows16(x, y, rows, n, isLog);
#endif
  softmaxRows8(x, y, rows, n, isLog);
}

/// Layer norm (Centered) or RMS norm of a block of rows:
/// y = (x - mean) * rstd [* scale] [+ bias].
template <bool Centered, bool HasScale, bool HasBias>
PARTITA_HOT void normRows(const float *__restrict x, float *__restrict y,
                          int64_t rows, int64_t n, float eps,
                          const float *__restrict scale,
                          const float *__restrict bias) {
  for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
    float mean = Centered ? rowSum(x, n) / float(n) : 0.0f;
    float var = rowSquaredDeviation(x, n, mean) / float(n);
    float rstd = 1.0f / std::sqrt(var + eps);
    for (int64_t j = 0; j < n; ++j) {
      float v = (x[j] - mean) * rstd;
      if constexpr (HasScale)
        v *= scale[j];
      if constexpr (HasBias)
        v += bias[j];
      y[j] = v;
    }
  }
}

/// The normRows instance for the operands present.
template <bool Centered>
void normRowsFor(const float *x, float *y, int64_t rows, int64_t n, float eps,
                 const float *scale, const float *bias) {
  if (scale && bias)
    normRows<Centered, true, true>(x, y, rows, n, eps, scale, bias);
  else if (scale)
    normRows<Centered, true, false>(x, y, rows, n, eps, scale, bias);
  else if (bias)
    normRows<Centered, false, true>(x, y, rows, n, eps, scale, bias);
  else
    normRows<Centered, false, false>(x, y, rows, n, eps, scale, bias);
}

/// Relative cost of an element to grainFor: four "units" for a norm,
/// and a softmax is about that again per element for its exponential.
constexpr int64_t kNormCost = 4;
constexpr int64_t kSoftmaxCost = 8;

template <typename T>
void loadStrided(const T *src, int64_t n, int64_t stride, float *dst) {
  for (int64_t j = 0; j < n; ++j)
    dst[j] = loadFloat(src[j * stride]);
}

template <typename T>
void storeStrided(const float *src, int64_t n, int64_t stride, T *dst) {
  for (int64_t j = 0; j < n; ++j)
    dst[j * stride] = storeFloat<T>(src[j]);
}

/// A scale or bias operand as fp32 (converted once, not once per row).
template <typename T> struct FloatParam {
  std::vector<float> converted;
  const float *data = nullptr;

  explicit FloatParam(const Tensor *t) {
    if (!t)
      return;
    if constexpr (std::is_same_v<T, float>) {
      data = t->as<float>();
    } else {
      converted.resize(t->numElements());
      loadStrided(t->as<T>(), t->numElements(), 1, converted.data());
      data = converted.data();
    }
  }
};

/// Runs `blockFn(x, y, rows)` over every row of [outer, n, inner] along
/// the middle dimension: x and y are `rows` consecutive fp32 rows of n, in
/// place in the tensors when they are f32 and contiguous (a whole chunk of
/// rows at once), otherwise one row gathered into and scattered from
/// scratch. `costPerElement` weighs a row for the chunk size, so that small
/// problems stay on the calling thread rather than pay for a wake-up.
template <typename T, typename BlockFn>
void forEachRow(ThreadPool &pool, const Tensor &input, const Tensor &result,
                int64_t outer, int64_t n, int64_t inner, int64_t costPerElement,
                BlockFn blockFn) {
  const T *in = input.as<T>();
  T *out = result.as<T>();
  constexpr bool isF32 = std::is_same_v<T, float>;
  int64_t grain = grainFor(n * costPerElement);
  pool.parallelFor(outer * inner, grain, [&](int64_t r0, int64_t r1) {
    if (isF32 && inner == 1) {
      blockFn(reinterpret_cast<const float *>(in) + r0 * n,
              reinterpret_cast<float *>(out) + r0 * n, r1 - r0);
      return;
    }
    std::vector<float> xs(n), ys(n);
    for (int64_t r = r0; r < r1; ++r) {
      int64_t o = r / inner, c = r % inner;
      int64_t offset = o * n * inner + c;
      loadStrided(in + offset, n, inner, xs.data());
      blockFn(xs.data(), ys.data(), 1);
      storeStrided(ys.data(), n, inner, out + offset);
    }
  });
}

Status runSoftmaxLike(KernelContext &ctx, bool isLog) {
  const Tensor &input = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  int64_t axis;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("axis", axis));
  int64_t rank = static_cast<int64_t>(input.shape.size());
  PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, input.shape, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, input.dtype, "the result"));
  int64_t outer = 1, inner = 1, n = input.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= input.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= input.shape[d];
  if (n == 0 || outer * inner == 0)
    return Status::ok();
  return visitFloat(ctx, input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    forEachRow<T>(ctx.pool, input, result, outer, n, inner, kSoftmaxCost,
                  [&](const float *x, float *y, int64_t rows) {
                    softmaxRows(x, y, rows, n, isLog);
                  });
    return Status::ok();
  });
}

/// The row length of a norm over [axis, rank), with its scale and bias
/// checked to have the normalized shape.
Status normGeometry(KernelContext &ctx, int numParams, int64_t &rows,
                    int64_t &n, double &epsilon) {
  const Tensor &input = ctx.operands[0];
  int64_t axis;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("axis", axis));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getFloat("epsilon", epsilon));
  int64_t rank = static_cast<int64_t>(input.shape.size());
  PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank));
  PARTITA_RETURN_IF_ERROR(ctx.expectFloat(input, "the input"));
  PARTITA_RETURN_IF_ERROR(
      ctx.expectShape(ctx.results[0], input.shape, "the result"));
  PARTITA_RETURN_IF_ERROR(
      ctx.expectDType(ctx.results[0], input.dtype, "the result"));
  std::vector<int64_t> normalized(input.shape.begin() + axis,
                                  input.shape.end());
  rows = 1;
  n = 1;
  for (int64_t d = 0; d < axis; ++d)
    rows *= input.shape[d];
  for (int64_t d : normalized)
    n *= d;
  if (static_cast<int>(ctx.operands.size()) != 1 + numParams)
    return ctx.error("expected " + std::to_string(1 + numParams) +
                     " operands for the has_* attributes, got " +
                     std::to_string(ctx.operands.size()));
  for (int i = 1; i <= numParams; ++i) {
    const Tensor &param = ctx.operands[i];
    std::string what = "operand " + std::to_string(i);
    PARTITA_RETURN_IF_ERROR(ctx.expectDType(param, input.dtype, what));
    if (param.numElements() != n)
      return ctx.error(what + " has shape " + shapeString(param.shape) +
                       ", expected the normalized shape " +
                       shapeString(normalized));
  }
  return Status::ok();
}

} // namespace

Status runSoftmax(KernelContext &ctx) { return runSoftmaxLike(ctx, false); }
Status runLogSoftmax(KernelContext &ctx) { return runSoftmaxLike(ctx, true); }

Status runLayerNorm(KernelContext &ctx) {
  bool hasScale, hasBias;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_scale", hasScale, false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_bias", hasBias, false));
  int64_t rows, n;
  double epsilon;
  PARTITA_RETURN_IF_ERROR(
      normGeometry(ctx, int(hasScale) + int(hasBias), rows, n, epsilon));
  if (rows == 0 || n == 0)
    return Status::ok();
  const Tensor *scaleOperand = hasScale ? &ctx.operands[1] : nullptr;
  const Tensor *biasOperand = hasBias ? &ctx.operands[1 + hasScale] : nullptr;
  float eps = static_cast<float>(epsilon);
  return visitFloat(ctx, ctx.operands[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    FloatParam<T> scale(scaleOperand), bias(biasOperand);
    forEachRow<T>(ctx.pool, ctx.operands[0], ctx.results[0], rows, n, 1,
                  kNormCost, [&](const float *x, float *y, int64_t count) {
                    normRowsFor<true>(x, y, count, n, eps, scale.data,
                                      bias.data);
                  });
    return Status::ok();
  });
}

Status runRmsNorm(KernelContext &ctx) {
  bool hasScale;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_scale", hasScale, false));
  int64_t rows, n;
  double epsilon;
  PARTITA_RETURN_IF_ERROR(normGeometry(ctx, int(hasScale), rows, n, epsilon));
  if (rows == 0 || n == 0)
    return Status::ok();
  const Tensor *scaleOperand = hasScale ? &ctx.operands[1] : nullptr;
  float eps = static_cast<float>(epsilon);
  return visitFloat(ctx, ctx.operands[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    FloatParam<T> scale(scaleOperand);
    forEachRow<T>(ctx.pool, ctx.operands[0], ctx.results[0], rows, n, 1,
                  kNormCost, [&](const float *x, float *y, int64_t count) {
                    normRowsFor<false>(x, y, count, n, eps, scale.data,
                                       nullptr);
                  });
    return Status::ok();
  });
}

} // namespace partita::runtime::kernels
