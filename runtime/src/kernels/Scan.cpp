//===- Scan.cpp - cumulative sums along one axis --------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The input is viewed as [outer, n, inner] with the scanned axis in the
// middle. Each task owns a block of up to 256 adjacent columns of one outer
// index and walks the axis once, in order, keeping the running sums of its
// columns in registers or L1: sequential along the axis (so floats add in
// axis order and integers are exact), parallel over everything else, and
// unit-stride across the columns so the loop vectorizes when inner > 1.
//
// Floats accumulate in fp32 and are rounded only when stored (f16, bf16);
// integers accumulate in int64 with wrap-around and are stored wrapped to
// their width, as the other integer kernels do.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"

namespace partita::runtime::kernels {

namespace {

template <typename C> inline C addWrapping(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return a + b;
  else
    return static_cast<int64_t>(static_cast<uint64_t>(a) +
                                static_cast<uint64_t>(b));
}

template <bool Exclusive, typename T, typename C = typename Storage<T>::Compute>
PARTITA_HOT void scanStep(const T *__restrict x, T *__restrict y,
                          C *__restrict acc, int64_t width) {
  for (int64_t c = 0; c < width; ++c) {
    C v = Storage<T>::load(x[c]);
    if constexpr (Exclusive) {
      y[c] = Storage<T>::store(acc[c]);
      acc[c] = addWrapping(acc[c], v);
    } else {
      acc[c] = addWrapping(acc[c], v);
      y[c] = Storage<T>::store(acc[c]);
    }
  }
}

template <bool Exclusive, typename T>
void scanTyped(ThreadPool &pool, const T *in, T *out, int64_t outer, int64_t n,
               int64_t inner, bool reverse) {
  using C = typename Storage<T>::Compute;
  constexpr int64_t kWidth = 256;
  int64_t blocks = (inner + kWidth - 1) / kWidth;
  int64_t width = std::min(inner, kWidth);
  pool.parallelFor(outer * blocks, grainFor(n * width),
                   [&](int64_t t0, int64_t t1) {
                     C acc[kWidth];
                     for (int64_t t = t0; t < t1; ++t) {
                       int64_t o = t / blocks, c0 = (t % blocks) * kWidth;
                       int64_t w = std::min(kWidth, inner - c0);
                       for (int64_t c = 0; c < w; ++c)
                         acc[c] = C(0);
                       int64_t base = o * n * inner + c0;
                       for (int64_t step = 0; step < n; ++step) {
                         int64_t k = reverse ? n - 1 - step : step;
                         scanStep<Exclusive>(in + base + k * inner,
                                             out + base + k * inner, acc, w);
                       }
                     }
                   });
}

} // namespace

Status runCumsum(KernelContext &ctx) {
  const Tensor &input = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  int64_t axis;
  bool exclusive, reverse;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("axis", axis));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("exclusive", exclusive, false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("reverse", reverse, false));
  int64_t rank = static_cast<int64_t>(input.shape.size());
  PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, input.shape, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, input.dtype, "the result"));
  if (input.dtype == program::BOOL)
    return ctx.error("unsupported element type bool (expected a float or "
                     "integer type)");

  int64_t outer = 1, n = input.shape[size_t(axis)], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= input.shape[size_t(d)];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= input.shape[size_t(d)];
  if (outer * n * inner == 0)
    return Status::ok();

  return visitAny(ctx, input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = input.as<T>();
    T *out = result.as<T>();
    if (exclusive)
      scanTyped<true>(ctx.pool, in, out, outer, n, inner, reverse);
    else
      scanTyped<false>(ctx.pool, in, out, outer, n, inner, reverse);
    return Status::ok();
  });
}

} // namespace partita::runtime::kernels
