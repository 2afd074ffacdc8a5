//===- BlockCopy.h - boxes of tensors as strided copies ---------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Collectives along an inner dimension move boxes of row-major tensors
// (one member's block of an all_gather, an all_to_all piece). Each box
// becomes a few 2D copies (cuMemcpy2DAsync on a GPU, a memcpy per row on the
// host) rather than one copy per innermost row: trailing dimensions that
// are whole in both tensors merge into one contiguous row, the next
// dimension out is the copy's height, and only the dimensions outside that
// are enumerated. The host and CUDA communicators share this one plan.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_BLOCKCOPY_H
#define PARTITA_RUNTIME_BLOCKCOPY_H

#include <cstdint>
#include <vector>

namespace partita::runtime {

/// `height` rows of `widthBytes`, the first at byte `srcOffset` of the source
/// and `dstOffset` of the destination, the next `srcPitch` and `dstPitch`
/// bytes further.
struct Copy2D {
  uint64_t srcOffset = 0, dstOffset = 0;
  uint64_t widthBytes = 0, height = 1;
  uint64_t srcPitch = 0, dstPitch = 0;
};

/// The copies that move the box `block` at `srcStart` of a `srcShape` tensor
/// to `dstStart` of a `dstShape` tensor (same rank; the box fits in both).
std::vector<Copy2D> planBlockCopy(const std::vector<int64_t> &srcShape,
                                  const std::vector<int64_t> &srcStart,
                                  const std::vector<int64_t> &dstShape,
                                  const std::vector<int64_t> &dstStart,
                                  const std::vector<int64_t> &block,
                                  uint64_t elementSize);

/// Copies the box `block` at `srcStart` of a row-major `srcShape` tensor to
/// `dstStart` of a `dstShape` tensor in host memory, by the plan above.
void copyBlock(const void *src, const std::vector<int64_t> &srcShape,
               const std::vector<int64_t> &srcStart, void *dst,
               const std::vector<int64_t> &dstShape,
               const std::vector<int64_t> &dstStart,
               const std::vector<int64_t> &block, uint64_t elementSize);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_BLOCKCOPY_H
