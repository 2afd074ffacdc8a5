//===- DataMovement.cpp - copies, gathers and layout changes --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Every layout kernel (transpose, slice, broadcast_to, concat, split, copy)
// is one strided copy: a shape, and destination and source element strides.
// The copy merges dimensions that stay contiguous on both sides, then moves
// whole rows with memcpy when the innermost dimension is contiguous in both,
// and 32x32 tiles when a transpose makes it strided in the source. Element
// types only matter through their size, so no kernel here converts values.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"

namespace partita::runtime::kernels {

namespace {

template <typename E>
void copyRun(char *dst, int64_t dstStride, const char *src, int64_t srcStride,
             int64_t n) {
  E *d = reinterpret_cast<E *>(dst);
  const E *s = reinterpret_cast<const E *>(src);
  if (dstStride == 1 && srcStride == 0) {
    E v = s[0];
    for (int64_t i = 0; i < n; ++i)
      d[i] = v;
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    d[i * dstStride] = s[i * srcStride];
}

/// Copies n elements with the given element strides.
void copyElements(size_t elementSize, char *dst, int64_t dstStride,
                  const char *src, int64_t srcStride, int64_t n) {
  if (dstStride == 1 && srcStride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * elementSize);
    return;
  }
  switch (elementSize) {
  case 1:
    return copyRun<uint8_t>(dst, dstStride, src, srcStride, n);
  case 2:
    return copyRun<uint16_t>(dst, dstStride, src, srcStride, n);
  case 4:
    return copyRun<uint32_t>(dst, dstStride, src, srcStride, n);
  default:
    return copyRun<uint64_t>(dst, dstStride, src, srcStride, n);
  }
}

/// Walks the multi-index of the leading dims of `dims` (all but the
/// innermost), tracking the two offsets.
struct Odometer {
  const std::vector<int64_t> &dims, &dstStrides, &srcStrides;
  int64_t index[kMaxRank] = {};
  int64_t dstOffset = 0, srcOffset = 0;

  /// Positions at row `row` of the leading dims, skipping dim `skip`.
  void seek(int64_t row, size_t last, size_t skip) {
    dstOffset = srcOffset = 0;
    for (size_t d = last; d-- > 0;) {
      if (d == skip)
        continue;
      index[d] = row % dims[d];
      row /= dims[d];
      dstOffset += index[d] * dstStrides[d];
      srcOffset += index[d] * srcStrides[d];
    }
  }
  void next(size_t last, size_t skip) {
    for (size_t d = last; d-- > 0;) {
      if (d == skip)
        continue;
      dstOffset += dstStrides[d];
      srcOffset += srcStrides[d];
      if (++index[d] < dims[d])
        return;
      dstOffset -= dstStrides[d] * dims[d];
      srcOffset -= srcStrides[d] * dims[d];
      index[d] = 0;
    }
  }
};

} // namespace

void stridedCopy(ThreadPool &pool, size_t elementSize,
                 const std::vector<int64_t> &shape, char *dst,
                 const std::vector<int64_t> &dstStrides, const char *src,
                 const std::vector<int64_t> &srcStrides) {
  int64_t total = 1;
  for (int64_t d : shape)
    total *= d;
  if (total == 0)
    return;
  // Merge dims that walk both sides as one.
  std::vector<int64_t> dims, ds, ss;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (!dims.empty() && ds.back() == dstStrides[d] * shape[d] &&
        ss.back() == srcStrides[d] * shape[d]) {
      dims.back() *= shape[d];
      ds.back() = dstStrides[d];
      ss.back() = srcStrides[d];
      continue;
    }
    dims.push_back(shape[d]);
    ds.push_back(dstStrides[d]);
    ss.push_back(srcStrides[d]);
  }
  if (dims.empty()) {
    std::memcpy(dst, src, elementSize);
    return;
  }
  size_t last = dims.size() - 1;
  int64_t inner = dims[last];
  int64_t es = static_cast<int64_t>(elementSize);

  // A transpose: the destination's inner dim is strided in the source, and
  // some other dim is the source's contiguous one. Copy 32x32 tiles of that
  // pair so that both sides stay in cache.
  size_t tileDim = dims.size();
  if (ds[last] == 1 && ss[last] != 1)
    for (size_t d = 0; d < last; ++d)
      if (ss[d] == 1)
        tileDim = d;
  if (tileDim < dims.size() && inner >= 8 && dims[tileDim] >= 8) {
    constexpr int64_t kTile = 32;
    int64_t rows = total / inner / dims[tileDim];
    int64_t tilesA = (dims[tileDim] + kTile - 1) / kTile;
    int64_t tilesB = (inner + kTile - 1) / kTile;
    int64_t tasks = rows * tilesA * tilesB;
    int64_t aDst = ds[tileDim], aSrc = ss[tileDim], bSrc = ss[last];
    pool.parallelFor(
        tasks, grainFor(kTile * kTile), [&](int64_t t0, int64_t t1) {
          Odometer odo{dims, ds, ss};
          for (int64_t t = t0; t < t1; ++t) {
            int64_t tb = t % tilesB, ta = (t / tilesB) % tilesA;
            odo.seek(t / tilesB / tilesA, last, tileDim);
            int64_t a0 = ta * kTile, a1 = std::min(dims[tileDim], a0 + kTile);
            int64_t b0 = tb * kTile, b1 = std::min(inner, b0 + kTile);
            for (int64_t a = a0; a < a1; ++a)
              copyElements(elementSize,
                           dst + (odo.dstOffset + a * aDst + b0) * es, 1,
                           src + (odo.srcOffset + a * aSrc + b0 * bSrc) * es,
                           bSrc, b1 - b0);
          }
        });
    return;
  }

  int64_t rows = total / inner;
  pool.parallelFor(
      rows, grainFor(inner * es, 1 << 17), [&](int64_t r0, int64_t r1) {
        Odometer odo{dims, ds, ss};
        odo.seek(r0, last, dims.size());
        for (int64_t r = r0; r < r1; ++r) {
          copyElements(elementSize, dst + odo.dstOffset * es, ds[last],
                       src + odo.srcOffset * es, ss[last], inner);
          odo.next(last, dims.size());
        }
      });
}

namespace {

/// Checks and normalizes gather indices (negative ones count from the end).
Status readIndices(const KernelContext &ctx, const Tensor &indices,
                   int64_t axisSize, std::vector<int64_t> &out) {
  int64_t n = indices.numElements();
  out.resize(n);
  if (indices.dtype == program::I64) {
    const int64_t *p = indices.as<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      out[i] = p[i];
  } else if (indices.dtype == program::I32) {
    const int32_t *p = indices.as<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      out[i] = p[i];
  } else {
    return ctx.error("indices have element type " + dtypeName(indices.dtype) +
                     ", expected i64 or i32");
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = out[i];
    if (v < -axisSize || v >= axisSize)
      return ctx.error("index " + std::to_string(v) + " at position " +
                       std::to_string(i) + " is out of range for size " +
                       std::to_string(axisSize));
    out[i] = v < 0 ? v + axisSize : v;
  }
  return Status::ok();
}

/// result[o, i, :] = data[o, index[i], :] over [outer, axisSize, inner].
void gatherRows(ThreadPool &pool, const Tensor &data, const Tensor &result,
                const std::vector<int64_t> &index, int64_t outer,
                int64_t axisSize, int64_t inner) {
  size_t es = dtypeSize(data.dtype);
  int64_t n = static_cast<int64_t>(index.size());
  const char *src = bytesOf(data);
  char *dst = mutableBytesOf(result);
  size_t rowBytes = static_cast<size_t>(inner) * es;
  pool.parallelFor(
      outer * n, grainFor(inner * es, 1 << 17), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          int64_t o = r / n, i = r % n;
          std::memcpy(dst + r * rowBytes,
                      src + (o * axisSize + index[i]) * rowBytes, rowBytes);
        }
      });
}

} // namespace

Status runGather(KernelContext &ctx) {
  const Tensor &data = ctx.operands[0], &indices = ctx.operands[1];
  const Tensor &result = ctx.results[0];
  int64_t axis;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("axis", axis));
  int64_t rank = static_cast<int64_t>(data.shape.size());
  PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank));
  std::vector<int64_t> expected(data.shape.begin(), data.shape.begin() + axis);
  expected.insert(expected.end(), indices.shape.begin(), indices.shape.end());
  expected.insert(expected.end(), data.shape.begin() + axis + 1,
                  data.shape.end());
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, expected, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, data.dtype, "the result"));
  std::vector<int64_t> index;
  PARTITA_RETURN_IF_ERROR(readIndices(ctx, indices, data.shape[axis], index));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= data.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= data.shape[d];
  gatherRows(ctx.pool, data, result, index, outer, data.shape[axis], inner);
  return Status::ok();
}

Status runEmbedding(KernelContext &ctx) {
  const Tensor &table = ctx.operands[0], &indices = ctx.operands[1];
  const Tensor &result = ctx.results[0];
  if (table.shape.size() != 2)
    return ctx.error("the table needs rank 2, got " + shapeString(table.shape));
  std::vector<int64_t> expected = indices.shape;
  expected.push_back(table.shape[1]);
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, expected, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, table.dtype, "the result"));
  std::vector<int64_t> index;
  PARTITA_RETURN_IF_ERROR(readIndices(ctx, indices, table.shape[0], index));
  gatherRows(ctx.pool, table, result, index, 1, table.shape[0], table.shape[1]);
  return Status::ok();
}

Status runTranspose(KernelContext &ctx) {
  const Tensor &input = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  std::vector<int64_t> perm;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInts("permutation", perm));
  size_t rank = input.shape.size();
  std::vector<bool> seen(rank, false);
  if (perm.size() != rank)
    return ctx.error("the permutation has " + std::to_string(perm.size()) +
                     " entries for rank " + std::to_string(rank));
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p])
      return ctx.error("invalid permutation " + shapeString(perm));
    seen[p] = true;
  }
  std::vector<int64_t> expected(rank), srcStrides(rank);
  std::vector<int64_t> inStrides = contiguousStrides(input.shape);
  for (size_t i = 0; i < rank; ++i) {
    expected[i] = input.shape[perm[i]];
    srcStrides[i] = inStrides[perm[i]];
  }
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, expected, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, input.dtype, "the result"));
  stridedCopy(ctx.pool, dtypeSize(input.dtype), expected,
              mutableBytesOf(result), contiguousStrides(expected),
              bytesOf(input), srcStrides);
  return Status::ok();
}

Status runBroadcastTo(KernelContext &ctx) {
  const Tensor &input = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, input.dtype, "the result"));
  size_t rank = result.shape.size();
  if (input.shape.size() > rank)
    return ctx.error("cannot broadcast " + shapeString(input.shape) + " to " +
                     shapeString(result.shape));
  size_t lead = rank - input.shape.size();
  std::vector<int64_t> inStrides = contiguousStrides(input.shape);
  std::vector<int64_t> srcStrides(rank, 0);
  for (size_t d = lead; d < rank; ++d) {
    int64_t size = input.shape[d - lead];
    if (size != result.shape[d] && size != 1)
      return ctx.error("cannot broadcast " + shapeString(input.shape) + " to " +
                       shapeString(result.shape));
    srcStrides[d] = size == 1 ? 0 : inStrides[d - lead];
  }
  stridedCopy(ctx.pool, dtypeSize(input.dtype), result.shape,
              mutableBytesOf(result), contiguousStrides(result.shape),
              bytesOf(input), srcStrides);
  return Status::ok();
}

Status runSlice(KernelContext &ctx) {
  const Tensor &input = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  std::vector<int64_t> start, limit, stride;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInts("start", start));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInts("limit", limit));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInts("stride", stride));
  size_t rank = input.shape.size();
  if (start.size() != rank || limit.size() != rank || stride.size() != rank)
    return ctx.error("start, limit and stride need one entry per dimension");
  std::vector<int64_t> expected(rank), srcStrides(rank);
  std::vector<int64_t> inStrides = contiguousStrides(input.shape);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    if (start[d] < 0 || start[d] > limit[d] || limit[d] > input.shape[d] ||
        stride[d] < 1)
      return ctx.error("bad bounds in dimension " + std::to_string(d) +
                       ": start " + std::to_string(start[d]) + ", limit " +
                       std::to_string(limit[d]) + ", stride " +
                       std::to_string(stride[d]) + ", size " +
                       std::to_string(input.shape[d]));
    expected[d] = (limit[d] - start[d] + stride[d] - 1) / stride[d];
    srcStrides[d] = inStrides[d] * stride[d];
    base += start[d] * inStrides[d];
  }
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, expected, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, input.dtype, "the result"));
  size_t es = dtypeSize(input.dtype);
  stridedCopy(ctx.pool, es, expected, mutableBytesOf(result),
              contiguousStrides(expected),
              bytesOf(input) + base * static_cast<int64_t>(es), srcStrides);
  return Status::ok();
}

/// Concat's operands and split's results: pieces of `whole` along `axis`,
/// of its type and of its shape elsewhere, whose sizes add up to its own.
Status checkPieces(KernelContext &ctx, const Tensor &whole,
                   const std::vector<Tensor> &pieces, int64_t axis,
                   const std::string &piece, const std::string &wholeName) {
  int64_t rank = static_cast<int64_t>(whole.shape.size());
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Tensor &t = pieces[i];
    std::string what = piece + " " + std::to_string(i);
    PARTITA_RETURN_IF_ERROR(ctx.expectDType(t, whole.dtype, what));
    std::vector<int64_t> expected = whole.shape;
    if (static_cast<int64_t>(t.shape.size()) == rank)
      expected[axis] = t.shape[axis];
    PARTITA_RETURN_IF_ERROR(ctx.expectShape(t, expected, what));
    total += t.shape[axis];
  }
  if (total != whole.shape[axis])
    return ctx.error("the " + piece + "s' sizes along the axis sum to " +
                     std::to_string(total) + ", the " + wholeName + " has " +
                     std::to_string(whole.shape[axis]));
  return Status::ok();
}

Status runConcat(KernelContext &ctx) {
  const Tensor &result = ctx.results[0];
  int64_t axis;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("axis", axis));
  int64_t rank = static_cast<int64_t>(result.shape.size());
  PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank));
  PARTITA_RETURN_IF_ERROR(
      checkPieces(ctx, result, ctx.operands, axis, "operand", "result"));
  size_t es = dtypeSize(result.dtype);
  std::vector<int64_t> outStrides = contiguousStrides(result.shape);
  int64_t offset = 0;
  for (const Tensor &in : ctx.operands) {
    stridedCopy(ctx.pool, es, in.shape,
                mutableBytesOf(result) +
                    offset * outStrides[axis] * static_cast<int64_t>(es),
                outStrides, bytesOf(in), contiguousStrides(in.shape));
    offset += in.shape[axis];
  }
  return Status::ok();
}

Status runSplit(KernelContext &ctx) {
  const Tensor &input = ctx.operands[0];
  int64_t axis;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("axis", axis));
  int64_t rank = static_cast<int64_t>(input.shape.size());
  PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank));
  PARTITA_RETURN_IF_ERROR(
      checkPieces(ctx, input, ctx.results, axis, "result", "input"));
  size_t es = dtypeSize(input.dtype);
  std::vector<int64_t> inStrides = contiguousStrides(input.shape);
  int64_t offset = 0;
  for (const Tensor &out : ctx.results) {
    stridedCopy(ctx.pool, es, out.shape, mutableBytesOf(out),
                contiguousStrides(out.shape),
                bytesOf(input) +
                    offset * inStrides[axis] * static_cast<int64_t>(es),
                inStrides);
    offset += out.shape[axis];
  }
  return Status::ok();
}

Status runCopy(KernelContext &ctx) {
  const Tensor &input = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, input.dtype, "the result"));
  if (result.numElements() != input.numElements())
    return ctx.error("the result " + shapeString(result.shape) +
                     " and the input " + shapeString(input.shape) +
                     " differ in size");
  size_t bytes = input.byteSize();
  const char *src = bytesOf(input);
  char *dst = mutableBytesOf(result);
  if (bytes == 0 || src == dst)
    return Status::ok();
  constexpr int64_t kBlock = 1 << 18;
  int64_t blocks = (static_cast<int64_t>(bytes) + kBlock - 1) / kBlock;
  ctx.pool.parallelFor(blocks, 4, [&](int64_t b0, int64_t b1) {
    size_t begin = static_cast<size_t>(b0 * kBlock);
    size_t end = std::min(bytes, static_cast<size_t>(b1 * kBlock));
    std::memcpy(dst + begin, src + begin, end - begin);
  });
  return Status::ok();
}

} // namespace partita::runtime::kernels
