//===- BlockCopyTest.cpp - boxes of row-major tensors as 2D copies --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/BlockCopy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

using namespace partita::runtime;

namespace {

using Shape = std::vector<int64_t>;

int64_t count(const Shape &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

/// Runs the plan with memcpy, as cuMemcpy2D would.
void execute(const std::vector<Copy2D> &copies, const uint8_t *src,
             uint8_t *dst) {
  for (const Copy2D &copy : copies)
    for (uint64_t row = 0; row < copy.height; ++row)
      std::memcpy(dst + copy.dstOffset + row * copy.dstPitch,
                  src + copy.srcOffset + row * copy.srcPitch, copy.widthBytes);
}

/// The box copied one element at a time.
void reference(const Shape &srcShape, const Shape &srcStart,
               const Shape &dstShape, const Shape &dstStart, const Shape &block,
               const int32_t *src, int32_t *dst) {
  size_t rank = block.size();
  Shape index(rank, 0);
  for (int64_t i = 0; i < count(block); ++i) {
    int64_t rest = i;
    for (size_t d = rank; d-- > 0;) {
      index[d] = rest % block[d];
      rest /= block[d];
    }
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < rank; ++d) {
      s = s * srcShape[d] + srcStart[d] + index[d];
      t = t * dstShape[d] + dstStart[d] + index[d];
    }
    dst[t] = src[s];
  }
}

TEST(BlockCopyTest, AllGatherAlongAnInnerDimIsOne2DCopy) {
  // Member 1's [2, 3, 4] block of a [2, 6, 4] result along dim 1: rows of
  // 3 x 4 elements, 2 of them.
  std::vector<Copy2D> copies =
      planBlockCopy({2, 3, 4}, {0, 0, 0}, {2, 6, 4}, {0, 3, 0}, {2, 3, 4}, 4);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].widthBytes, 48u);
  EXPECT_EQ(copies[0].height, 2u);
  EXPECT_EQ(copies[0].srcPitch, 48u);
  EXPECT_EQ(copies[0].dstPitch, 96u);
  EXPECT_EQ(copies[0].dstOffset, 48u);
}

TEST(BlockCopyTest, WholeTensorsAreOneContiguousCopy) {
  std::vector<Copy2D> copies =
      planBlockCopy({4, 5}, {0, 0}, {4, 5}, {0, 0}, {4, 5}, 2);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].widthBytes * copies[0].height, 40u);
}

TEST(BlockCopyTest, EmptyBoxesCopyNothingAndScalarsOneElement) {
  EXPECT_TRUE(planBlockCopy({3, 0}, {0, 0}, {3, 0}, {0, 0}, {3, 0}, 4).empty());
  std::vector<Copy2D> scalar = planBlockCopy({}, {}, {}, {}, {}, 8);
  ASSERT_EQ(scalar.size(), 1u);
  EXPECT_EQ(scalar[0].widthBytes, 8u);
}

TEST(BlockCopyTest, MatchesElementwiseCopiesOnRandomBoxes) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 500; ++trial) {
    size_t rank = 1 + random() % 4;
    Shape srcShape(rank), dstShape(rank), block(rank), srcStart(rank),
        dstStart(rank);
    for (size_t d = 0; d < rank; ++d) {
      block[d] = 1 + random() % 3;
      srcStart[d] = random() % 2 ? 0 : random() % 3;
      dstStart[d] = random() % 2 ? 0 : random() % 3;
      srcShape[d] = srcStart[d] + block[d] + (random() % 2 ? 0 : random() % 3);
      dstShape[d] = dstStart[d] + block[d] + (random() % 2 ? 0 : random() % 3);
    }
    std::vector<int32_t> src(size_t(count(srcShape)));
    std::iota(src.begin(), src.end(), 1);
    std::vector<int32_t> expected(size_t(count(dstShape)), 0),
        actual = expected;
    reference(srcShape, srcStart, dstShape, dstStart, block, src.data(),
              expected.data());
    execute(planBlockCopy(srcShape, srcStart, dstShape, dstStart, block, 4),
            reinterpret_cast<const uint8_t *>(src.data()),
            reinterpret_cast<uint8_t *>(actual.data()));
    ASSERT_EQ(actual, expected) << "trial " << trial;
  }
}

} // namespace
