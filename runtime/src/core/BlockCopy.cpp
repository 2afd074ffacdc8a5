//===- BlockCopy.cpp - boxes of row-major tensors as strided copies -------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/BlockCopy.h"

#include <cstddef>
#include <cstring>

using namespace partita::runtime;

std::vector<Copy2D> partita::runtime::planBlockCopy(
    const std::vector<int64_t> &srcShape, const std::vector<int64_t> &srcStart,
    const std::vector<int64_t> &dstShape, const std::vector<int64_t> &dstStart,
    const std::vector<int64_t> &block, uint64_t elementSize) {
  std::vector<Copy2D> copies;
  size_t rank = block.size();
  for (int64_t dim : block)
    if (dim <= 0)
      return copies;
  if (rank == 0) {
    copies.push_back({0, 0, elementSize, 1, elementSize, elementSize});
    return copies;
  }
  std::vector<uint64_t> srcStrides(rank, 1), dstStrides(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    srcStrides[d - 1] = srcStrides[d] * uint64_t(srcShape[d]);
    dstStrides[d - 1] = dstStrides[d] * uint64_t(dstShape[d]);
  }
  // The row: dimension `row` and every one inside it, which are whole in
  // both tensors and so contiguous in both.
  size_t row = rank - 1;
  while (row > 0 && block[row] == srcShape[row] && block[row] == dstShape[row])
    --row;
  uint64_t rowElements = 1;
  for (size_t d = row; d < rank; ++d)
    rowElements *= uint64_t(block[d]);
  // The height: the dimension just outside the row, if any.
  size_t outer = row; // Dimensions [0, outer) are enumerated.
  Copy2D shape;
  shape.widthBytes = rowElements * elementSize;
  shape.srcPitch = shape.widthBytes;
  shape.dstPitch = shape.widthBytes;
  if (row > 0) {
    outer = row - 1;
    shape.height = uint64_t(block[outer]);
    shape.srcPitch = srcStrides[outer] * elementSize;
    shape.dstPitch = dstStrides[outer] * elementSize;
  }
  std::vector<int64_t> index(outer, 0);
  while (true) {
    Copy2D copy = shape;
    for (size_t d = 0; d < rank; ++d) {
      int64_t at = d < outer ? index[d] : 0;
      copy.srcOffset += uint64_t(srcStart[d] + at) * srcStrides[d];
      copy.dstOffset += uint64_t(dstStart[d] + at) * dstStrides[d];
    }
    copy.srcOffset *= elementSize;
    copy.dstOffset *= elementSize;
    copies.push_back(copy);
    // Advance the odometer over the enumerated dimensions.
    size_t d = outer;
    while (d > 0) {
      --d;
      if (++index[d] < block[d])
        break;
      index[d] = 0;
      if (d == 0)
        return copies;
    }
    if (outer == 0)
      return copies;
  }
}

void partita::runtime::copyBlock(
    const void *src, const std::vector<int64_t> &srcShape,
    const std::vector<int64_t> &srcStart, void *dst,
    const std::vector<int64_t> &dstShape, const std::vector<int64_t> &dstStart,
    const std::vector<int64_t> &block, uint64_t elementSize) {
  const uint8_t *from = static_cast<const uint8_t *>(src);
  uint8_t *to = static_cast<uint8_t *>(dst);
  for (const Copy2D &copy : planBlockCopy(srcShape, srcStart, dstShape,
                                          dstStart, block, elementSize))
    for (uint64_t row = 0; row < copy.height; ++row)
      std::memcpy(to + copy.dstOffset + row * copy.dstPitch,
                  from + copy.srcOffset + row * copy.srcPitch, copy.widthBytes);
}
