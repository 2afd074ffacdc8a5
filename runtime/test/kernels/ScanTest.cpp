//===- ScanTest.cpp - cumsum ----------------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// cumsum against a sequential reference for every axis, every (exclusive,
// reverse) combination and every element type: integers exactly (beyond
// float's exact range, and wrapping), floats bit for bit against an fp32
// sequential sum (the kernel's documented order); epilogues fused after the
// scan, and the errors a malformed kernel gets.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

namespace partita::runtime::test {
namespace {

struct Scan {
  int64_t axis;
  bool exclusive, reverse;
};

/// The reference: a sequential walk along the axis, accumulating in fp32
/// (floats) or in wrapping int64 (integers), stored as the element type.
Buffer referenceScan(const Buffer &x, Scan scan) {
  Buffer out(x.dtype, x.shape);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t outer = 1, n = x.shape[scan.axis], inner = 1;
  for (int64_t d = 0; d < scan.axis; ++d)
    outer *= x.shape[d];
  for (int64_t d = scan.axis + 1; d < rank; ++d)
    inner *= x.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      float facc = 0;
      uint64_t iacc = 0;
      for (int64_t s = 0; s < n; ++s) {
        int64_t k = scan.reverse ? n - 1 - s : s;
        int64_t at = (o * n + k) * inner + c;
        if (isFloat(x.dtype)) {
          float v = static_cast<float>(x.get(at));
          if (!scan.exclusive)
            facc += v;
          out.set(at, facc);
          if (scan.exclusive)
            facc += v;
        } else {
          uint64_t v = static_cast<uint64_t>(x.getInt(at));
          if (!scan.exclusive)
            iacc += v;
          out.setInt(at, static_cast<int64_t>(iacc));
          if (scan.exclusive)
            iacc += v;
        }
      }
    }
  return out;
}

Status runScan(Buffer &x, Buffer &out, Scan scan) {
  return KernelBuilder("cumsum")
      .operand(x)
      .result(out)
      .attr("axis", scan.axis)
      .attr("exclusive", scan.exclusive)
      .attr("reverse", scan.reverse)
      .run(testPool());
}

void expectSameBits(const Buffer &a, const Buffer &b) {
  ASSERT_EQ(a.dtype, b.dtype);
  ASSERT_EQ(a.shape, b.shape);
  size_t bytes = a.numElements() * dtypeSize(a.dtype);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), bytes), 0);
}

TEST(ScanTest, EveryAxisCombinationAndType) {
  std::mt19937 rng(40);
  // Inner blocks below, at and above the kernel's 256 columns.
  const std::vector<std::vector<int64_t>> shapes = {
      {37}, {3, 5, 7}, {2, 300, 3}, {4, 2, 513}};
  for (DType dtype :
       {program::F32, program::F16, program::BF16, program::I64, program::I32})
    for (const auto &shape : shapes)
      for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis)
        for (bool exclusive : {false, true})
          for (bool reverse : {false, true}) {
            SCOPED_TRACE(typeName(dtype) + " " + shapeString(shape) + " axis " +
                         std::to_string(axis) +
                         (exclusive ? " exclusive" : "") +
                         (reverse ? " reverse" : ""));
            Buffer x = randomBuffer(rng, dtype, shape, -3, 3);
            Buffer out(dtype, shape);
            Scan scan{axis, exclusive, reverse};
            Status s = runScan(x, out, scan);
            ASSERT_TRUE(s.isOk()) << s.message();
            expectSameBits(out, referenceScan(x, scan));
          }
}

TEST(ScanTest, IntegersAreExactAndWrap) {
  // Sums past 2^53 (where a float or double accumulator would round) and
  // past the storage width.
  Buffer x(program::I64, {5});
  for (int64_t i = 0; i < 5; ++i)
    x.setInt(i, (int64_t(1) << 60) + 1);
  Buffer out(program::I64, {5});
  ASSERT_TRUE(runScan(x, out, {0, false, false}).isOk());
  for (int64_t i = 0; i < 5; ++i) {
    uint64_t want = static_cast<uint64_t>(i + 1) * ((uint64_t(1) << 60) + 1);
    EXPECT_EQ(out.getInt(i), static_cast<int64_t>(want)) << i;
  }
  Buffer small(program::I32, {3});
  small.setValues({2147483647, 1, 1});
  Buffer wrapped(program::I32, {3});
  ASSERT_TRUE(runScan(small, wrapped, {0, false, false}).isOk());
  EXPECT_EQ(wrapped.getInt(0), 2147483647);
  EXPECT_EQ(wrapped.getInt(1), INT32_MIN);
  EXPECT_EQ(wrapped.getInt(2), INT32_MIN + 1);
}

TEST(ScanTest, PositionIdsOfAPaddedBatch) {
  // transformers: position_ids = attention_mask.cumsum(-1) - 1, the
  // subtraction fused after the scan.
  Buffer mask(program::I64, {2, 6});
  mask.setValues({1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1});
  Buffer one(program::I64, {});
  one.setInt(0, 1);
  Buffer positions(program::I64, {2, 6});
  Status s = KernelBuilder("cumsum")
                 .operand(mask)
                 .result(positions)
                 .attr("axis", int64_t(1))
                 .step("sub", &one)
                 .run(testPool());
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<double> want = {0, 1, 2, 3, 4, 5, -1, -1, 0, 1, 2, 3};
  EXPECT_EQ(positions.values(), want);
}

TEST(ScanTest, LongAxisSplitAcrossThreads) {
  // Many lines of one long axis: parallel over lines, each exact.
  Buffer x(program::I64, {64, 4096});
  for (int64_t i = 0; i < x.numElements(); ++i)
    x.setInt(i, (i * 7919) % 13 - 6);
  Buffer out(program::I64, x.shape);
  ASSERT_TRUE(runScan(x, out, {1, true, false}).isOk());
  expectSameBits(out, referenceScan(x, {1, true, false}));
}

TEST(ScanTest, ErrorsNameTheOp) {
  Buffer x(program::F32, {2, 3});
  Buffer out(program::F32, {2, 3});
  Status s = runScan(x, out, {2, false, false});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("cumsum: axis 2 is out of range for rank 2"),
            std::string::npos)
      << s.message();

  Buffer other(program::F32, {3, 2});
  s = runScan(x, other, {0, false, false});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("cumsum:"), std::string::npos) << s.message();

  Buffer wrongType(program::I64, {2, 3});
  s = runScan(x, wrongType, {0, false, false});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("cumsum:"), std::string::npos) << s.message();

  Buffer flags(program::BOOL, {4});
  Buffer flagsOut(program::BOOL, {4});
  s = runScan(flags, flagsOut, {0, false, false});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("bool"), std::string::npos) << s.message();

  s = KernelBuilder("cumsum").operand(x).result(out).run(testPool());
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("axis"), std::string::npos) << s.message();
}

} // namespace
} // namespace partita::runtime::test
