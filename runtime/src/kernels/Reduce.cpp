//===- Reduce.cpp - sum, mean, max and min over axes ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Adjacent dimensions that are both kept or both reduced merge, which turns
// almost every reduction into one of two shapes: rows ([kept, reduced],
// contiguous) or columns ([kept, reduced, kept], reduced with a stride and
// vectorized across the trailing kept block). Anything else is first
// transposed into the row shape.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"

#include <limits>

namespace partita::runtime::kernels {

namespace {

enum class ReduceKind { Sum, Mean, Max, Min };

template <ReduceKind K, typename C> struct Reducer {
  static C init() {
    if constexpr (K == ReduceKind::Max)
      return std::is_same_v<C, float> ? -std::numeric_limits<C>::infinity()
                                      : std::numeric_limits<C>::lowest();
    else if constexpr (K == ReduceKind::Min)
      return std::is_same_v<C, float> ? std::numeric_limits<C>::infinity()
                                      : std::numeric_limits<C>::max();
    else
      return C(0);
  }
  static C combine(C acc, C v) {
    if constexpr (K == ReduceKind::Max)
      return (v > acc || v != v) ? v : acc; // NaN wins.
    else if constexpr (K == ReduceKind::Min)
      return (v < acc || v != v) ? v : acc;
    else if constexpr (std::is_same_v<C, float>)
      return acc + v;
    else // Integer sums wrap.
      return static_cast<int64_t>(static_cast<uint64_t>(acc) +
                                  static_cast<uint64_t>(v));
  }
  static C finalize(C acc, int64_t count) {
    if constexpr (K != ReduceKind::Mean)
      return acc;
    else if constexpr (std::is_same_v<C, float>)
      return acc / static_cast<float>(count);
    else
      return count ? acc / count : 0;
  }
};

template <ReduceKind K, typename T, typename C = typename Storage<T>::Compute>
PARTITA_HOT C reduceRow(const T *x, int64_t n) {
  using R = Reducer<K, C>;
  constexpr int kLanes = 8;
  C lanes[kLanes];
  for (int l = 0; l < kLanes; ++l)
    lanes[l] = R::init();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] = R::combine(lanes[l], Storage<T>::load(x[j + l]));
  C acc = R::init();
  for (; j < n; ++j)
    acc = R::combine(acc, Storage<T>::load(x[j]));
  for (int l = 0; l < kLanes; ++l)
    acc = R::combine(acc, lanes[l]);
  return acc;
}

template <ReduceKind K, typename T, typename C = typename Storage<T>::Compute>
PARTITA_HOT void reduceColumns(const T *x, int64_t n, int64_t stride,
                               int64_t width, C *__restrict acc) {
  using R = Reducer<K, C>;
  for (int64_t c = 0; c < width; ++c)
    acc[c] = R::init();
  for (int64_t r = 0; r < n; ++r) {
    const T *row = x + r * stride;
    for (int64_t c = 0; c < width; ++c)
      acc[c] = R::combine(acc[c], Storage<T>::load(row[c]));
  }
}

template <ReduceKind K, typename T>
void reduceTyped(ThreadPool &pool, const T *in, T *out, int64_t outer,
                 int64_t n, int64_t inner) {
  using C = typename Storage<T>::Compute;
  using R = Reducer<K, C>;
  if (inner == 1) {
    pool.parallelFor(outer, grainFor(n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        out[r] = Storage<T>::store(R::finalize(reduceRow<K>(in + r * n, n), n));
    });
    return;
  }
  constexpr int64_t kWidth = 256;
  int64_t blocks = (inner + kWidth - 1) / kWidth;
  pool.parallelFor(
      outer * blocks, grainFor(n * kWidth), [&](int64_t t0, int64_t t1) {
        C acc[kWidth];
        for (int64_t t = t0; t < t1; ++t) {
          int64_t o = t / blocks, c0 = (t % blocks) * kWidth;
          int64_t width = std::min(kWidth, inner - c0);
          reduceColumns<K>(in + o * n * inner + c0, n, inner, width, acc);
          T *dst = out + o * inner + c0;
          for (int64_t c = 0; c < width; ++c)
            dst[c] = Storage<T>::store(R::finalize(acc[c], n));
        }
      });
}

} // namespace

Status runReduce(KernelContext &ctx) {
  const Tensor &input = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  std::string kindName;
  std::vector<int64_t> axes;
  bool keepdims;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getString("kind", kindName));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInts("axes", axes));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("keepdims", keepdims, false));
  ReduceKind kind;
  if (kindName == "sum")
    kind = ReduceKind::Sum;
  else if (kindName == "mean")
    kind = ReduceKind::Mean;
  else if (kindName == "max")
    kind = ReduceKind::Max;
  else if (kindName == "min")
    kind = ReduceKind::Min;
  else
    return ctx.error("unknown reduction kind '" + kindName + "'");

  int64_t rank = static_cast<int64_t>(input.shape.size());
  if (axes.empty())
    return ctx.error("axes is empty");
  std::vector<bool> reduced(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axes[i], rank));
    if (i && axes[i] <= axes[i - 1])
      return ctx.error("axes must be strictly increasing");
    reduced[axes[i]] = true;
  }
  std::vector<int64_t> expected;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d] || keepdims)
      expected.push_back(reduced[d] ? 1 : input.shape[d]);
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, expected, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, input.dtype, "the result"));

  // Merge runs of kept or reduced dimensions; size-1 dims are neither.
  std::vector<std::pair<int64_t, bool>> groups; // (size, reduced)
  for (int64_t d = 0; d < rank; ++d) {
    if (input.shape[d] == 1)
      continue;
    if (!groups.empty() && groups.back().second == reduced[d])
      groups.back().first *= input.shape[d];
    else
      groups.push_back({input.shape[d], reduced[d]});
  }
  int64_t keptSize = 1, reducedSize = 1;
  for (auto [size, isReduced] : groups)
    (isReduced ? reducedSize : keptSize) *= size;

  // The row or column shape, transposing first when neither fits.
  const void *source = input.data;
  std::vector<char> transposed;
  int64_t outer, n = reducedSize, inner = 1;
  size_t firstReduced = groups.size();
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].second) {
      firstReduced = g;
      break;
    }
  bool rowShape =
      groups.size() <= 2 && (groups.empty() || groups.back().second);
  bool columnShape = !rowShape && firstReduced + 2 == groups.size() &&
                     (firstReduced == 0 || firstReduced == 1);
  if (rowShape) {
    outer = keptSize;
  } else if (columnShape) {
    outer = firstReduced == 1 ? groups[0].first : 1;
    inner = groups.back().first;
  } else {
    std::vector<int64_t> shape, srcStrides;
    std::vector<int64_t> inStrides = contiguousStrides(input.shape);
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t d = 0; d < rank; ++d)
        if (reduced[d] == (pass == 1)) {
          shape.push_back(input.shape[d]);
          srcStrides.push_back(inStrides[d]);
        }
    size_t elementSize = dtypeSize(input.dtype);
    transposed.resize(static_cast<size_t>(input.numElements()) * elementSize);
    stridedCopy(ctx.pool, elementSize, shape, transposed.data(),
                contiguousStrides(shape), bytesOf(input), srcStrides);
    source = transposed.data();
    outer = keptSize;
  }
  if (outer * inner == 0)
    return Status::ok();

  return visitAny(ctx, input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *in = static_cast<const T *>(source);
    T *out = result.as<T>();
    switch (kind) {
    case ReduceKind::Sum:
      reduceTyped<ReduceKind::Sum>(ctx.pool, in, out, outer, n, inner);
      break;
    case ReduceKind::Mean:
      reduceTyped<ReduceKind::Mean>(ctx.pool, in, out, outer, n, inner);
      break;
    case ReduceKind::Max:
      reduceTyped<ReduceKind::Max>(ctx.pool, in, out, outer, n, inner);
      break;
    case ReduceKind::Min:
      reduceTyped<ReduceKind::Min>(ctx.pool, in, out, outer, n, inner);
      break;
    }
    return Status::ok();
  });
}

} // namespace partita::runtime::kernels
