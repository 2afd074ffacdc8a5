//===- Normalization.cpp - softmax, layer and RMS norm --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Row kernels: each row is read into fp32 (in place for f32), reduced with
// eight partial sums so the loop vectorizes without reassociating a single
// accumulator, and written once. Layer norm takes two passes over the row
// (mean, then the centered sum of squares), which stays accurate when the
// mean is large against the spread; softmax subtracts the row maximum.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"
#include "MathApprox.h"

#include <limits>
#include <type_traits>

namespace partita::runtime::kernels {

namespace {

constexpr int kLanes = 8;

PARTITA_HOT float rowMax(const float *x, int64_t n) {
  float lanes[kLanes];
  for (int l = 0; l < kLanes; ++l)
    lanes[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  float m = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < kLanes; ++l)
    m = lanes[l] > m ? lanes[l] : m;
  for (; j < n; ++j)
    m = x[j] > m ? x[j] : m;
  return m;
}

PARTITA_HOT float rowSum(const float *x, int64_t n) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] += x[j + l];
  float s = 0.0f;
  for (; j < n; ++j)
    s += x[j];
  for (int l = 0; l < kLanes; ++l)
    s += lanes[l];
  return s;
}

/// Sum of (x - c)^2, or of x^2 with c = 0.
PARTITA_HOT float rowSquaredDeviation(const float *x, int64_t n, float c) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      float d = x[j + l] - c;
      lanes[l] += d * d;
    }
  float s = 0.0f;
  for (; j < n; ++j)
    s += (x[j] - c) * (x[j] - c);
  for (int l = 0; l < kLanes; ++l)
    s += lanes[l];
  return s;
}

/// y = exp(x - m), returning the sum.
PARTITA_HOT float rowExpSum(const float *__restrict x, int64_t n, float m,
                            float *__restrict y) {
  // One pass: the exponentials and their eight partial sums together.
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      y[j + l] = expApprox(x[j + l] - m);
      lanes[l] += y[j + l];
    }
  float s = 0.0f;
  for (; j < n; ++j) {
    y[j] = expApprox(x[j] - m);
    s += y[j];
  }
  for (int l = 0; l < kLanes; ++l)
    s += lanes[l];
  return s;
}

PARTITA_HOT void rowScale(float *y, int64_t n, float s) {
  for (int64_t j = 0; j < n; ++j)
    y[j] *= s;
}

/// y = (x - m) - c. Subtracting the row maximum first keeps large inputs
/// exact: m + c would round to the ulp of m (2^-10 near 10^4).
PARTITA_HOT void rowShift(const float *__restrict x, int64_t n, float m,
                          float c, float *__restrict y) {
  for (int64_t j = 0; j < n; ++j)
    y[j] = (x[j] - m) - c;
}

/// y = (x - mean) * rstd [* scale] [+ bias].
template <bool HasScale, bool HasBias>
PARTITA_HOT void rowNormalize(const float *__restrict x, int64_t n, float mean,
                              float rstd, const float *__restrict scale,
                              const float *__restrict bias,
                              float *__restrict y) {
  for (int64_t j = 0; j < n; ++j) {
    float v = (x[j] - mean) * rstd;
    if constexpr (HasScale)
      v *= scale[j];
    if constexpr (HasBias)
      v += bias[j];
    y[j] = v;
  }
}

void normalizeRow(const float *x, int64_t n, float mean, float rstd,
                  const float *scale, const float *bias, float *y) {
  if (scale && bias)
    rowNormalize<true, true>(x, n, mean, rstd, scale, bias, y);
  else if (scale)
    rowNormalize<true, false>(x, n, mean, rstd, scale, bias, y);
  else if (bias)
    rowNormalize<false, true>(x, n, mean, rstd, scale, bias, y);
  else
    rowNormalize<false, false>(x, n, mean, rstd, scale, bias, y);
}

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

/// Runs `rowFn(x, y, n)` on every row of [outer, n, inner] along the middle
/// dimension: x and y are fp32 rows, in place in the tensors when they are
/// f32 and contiguous, otherwise gathered into and scattered from scratch.
template <typename T, typename RowFn>
void forEachRow(ThreadPool &pool, const Tensor &input, const Tensor &result,
                int64_t outer, int64_t n, int64_t inner, RowFn rowFn) {
  const T *in = input.as<T>();
  T *out = result.as<T>();
  pool.parallelFor(outer * inner, grainFor(n * 4), [&](int64_t r0, int64_t r1) {
    std::vector<float> xs, ys;
    constexpr bool direct = std::is_same_v<T, float>;
    if (!direct || inner != 1) {
      xs.resize(n);
      ys.resize(n);
    }
    for (int64_t r = r0; r < r1; ++r) {
      int64_t o = r / inner, c = r % inner;
      int64_t offset = o * n * inner + c;
      if (direct && inner == 1) {
        rowFn(reinterpret_cast<const float *>(in) + offset, n,
              reinterpret_cast<float *>(out) + offset);
        continue;
      }
      loadStrided(in + offset, n, inner, xs.data());
      rowFn(xs.data(), n, ys.data());
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
    forEachRow<T>(ctx.pool, input, result, outer, n, inner,
                  [isLog](const float *x, int64_t len, float *y) {
                    float m = rowMax(x, len);
                    float sum = rowExpSum(x, len, m, y);
                    if (isLog)
                      rowShift(x, len, m, std::log(sum), y);
                    else
                      rowScale(y, len, 1.0f / sum);
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
                  [&](const float *x, int64_t len, float *y) {
                    float mean = rowSum(x, len) / float(len);
                    float var = rowSquaredDeviation(x, len, mean) / float(len);
                    float rstd = 1.0f / std::sqrt(var + eps);
                    normalizeRow(x, len, mean, rstd, scale.data, bias.data, y);
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
                  [&](const float *x, int64_t len, float *y) {
                    float ms = rowSquaredDeviation(x, len, 0.0f) / float(len);
                    float rstd = 1.0f / std::sqrt(ms + eps);
                    normalizeRow(x, len, 0.0f, rstd, scale.data, nullptr, y);
                  });
    return Status::ok();
  });
}

} // namespace partita::runtime::kernels
