//===- KvCache.cpp - writes into a resident KV cache ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// kv_cache_write stores a sequence's new keys or values into the cache at
// the slot the program computes (cache_position), or each row of the batch
// at its own (onnxruntime's GroupQueryAttention, rows of unequal lengths). The
// runtime binds a serving artifact's cache as both the input and the output of
// the same memory, so the kernel then writes the update's slice only: a decode
// step moves one token's bytes, not the cache. Anywhere else (another result
// buffer) it copies the cache first, which gives the same values. Element
// types only matter through their size.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"

namespace partita::runtime::kernels {

Status runKvCacheWrite(KernelContext &ctx) {
  const Tensor &cache = ctx.operands[0];
  const Tensor &update = ctx.operands[1];
  const Tensor &position = ctx.operands[2];
  const Tensor &out = ctx.results[0];
  if (ctx.kernel.epilogue_size() != 0)
    return ctx.error("takes no epilogue (it writes one slice of its result)");
  int64_t axis;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("axis", axis));
  int64_t rank = static_cast<int64_t>(cache.shape.size());
  PARTITA_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(out, cache.dtype, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(out, cache.shape, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(update, cache.dtype, "the update"));
  bool fits = update.shape.size() == cache.shape.size();
  for (size_t d = 0; fits && d < cache.shape.size(); ++d)
    fits = int64_t(d) == axis ? update.shape[d] <= cache.shape[d]
                              : update.shape[d] == cache.shape[d];
  if (!fits)
    return ctx.error("the update " + shapeString(update.shape) +
                     " does not fit the cache " + shapeString(cache.shape) +
                     " along axis " + std::to_string(axis));
  // One slot for every row, or (axis past the batch) one per row.
  bool perRow = axis != 0 && position.numElements() == cache.shape[0];
  if (position.dtype != program::I64 ||
      (position.numElements() != 1 && !perRow))
    return ctx.error("the position is " + dtypeName(position.dtype) + " " +
                     shapeString(position.shape) +
                     ", expected i64 with one element or one per row of the "
                     "batch");

  int64_t slots = cache.shape[size_t(axis)];
  int64_t tokens = update.shape[size_t(axis)];
  const int64_t *slotOf = position.as<int64_t>();
  for (int64_t r = 0, n = position.numElements(); r < n; ++r)
    if (slotOf[r] < 0 || slotOf[r] > slots - tokens)
      return ctx.error("writing " + std::to_string(tokens) +
                       " tokens at slot " + std::to_string(slotOf[r]) +
                       (perRow && n > 1 ? " (row " + std::to_string(r) + ")"
                                        : std::string()) +
                       " overflows the cache of " + std::to_string(slots) +
                       " slots");

  size_t elementSize = dtypeSize(cache.dtype);
  char *dst = mutableBytesOf(out);
  if (dst != bytesOf(cache)) {
    size_t bytes = cache.byteSize();
    const char *src = bytesOf(cache);
    constexpr int64_t kBlock = 1 << 18;
    int64_t blocks = (static_cast<int64_t>(bytes) + kBlock - 1) / kBlock;
    ctx.pool.parallelFor(blocks, 4, [&](int64_t b0, int64_t b1) {
      size_t begin = static_cast<size_t>(b0 * kBlock);
      size_t end = std::min(bytes, static_cast<size_t>(b1 * kBlock));
      std::memcpy(dst + begin, src + begin, end - begin);
    });
  }
  std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  std::vector<int64_t> updateStrides = contiguousStrides(update.shape);
  auto write = [&](int64_t slot, const std::vector<int64_t> &shape,
                   int64_t row) {
    int64_t element = static_cast<int64_t>(elementSize);
    stridedCopy(ctx.pool, elementSize, shape,
                dst + (row * outStrides[0] + slot * outStrides[size_t(axis)]) *
                          element,
                outStrides, bytesOf(update) + row * updateStrides[0] * element,
                updateStrides);
  };
  if (!perRow) {
    write(slotOf[0], update.shape, 0);
  } else {
    std::vector<int64_t> rowShape = update.shape;
    rowShape[0] = 1;
    for (int64_t r = 0; r < cache.shape[0]; ++r)
      write(slotOf[r], rowShape, r);
  }
  return Status::ok();
}

} // namespace partita::runtime::kernels
