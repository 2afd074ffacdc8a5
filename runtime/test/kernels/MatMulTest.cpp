//===- MatMulTest.cpp - batched matmul with broadcasting and bias ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <thread>

namespace partita::runtime::test {
namespace {

std::vector<int64_t> broadcastBatch(std::vector<int64_t> a,
                                    std::vector<int64_t> b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    size_t fromEnd = out.size() - i;
    int64_t x = fromEnd <= a.size() ? a[a.size() - fromEnd] : 1;
    int64_t y = fromEnd <= b.size() ? b[b.size() - fromEnd] : 1;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

std::vector<double> refMatmul(const Buffer &lhs, const Buffer &rhs,
                              const Buffer *bias,
                              const std::vector<int64_t> &outShape) {
  size_t lr = lhs.shape.size(), rr = rhs.shape.size(), orank = outShape.size();
  int64_t m = lhs.shape[lr - 2], k = lhs.shape[lr - 1], n = rhs.shape[rr - 1];
  std::vector<int64_t> batch(outShape.begin(), outShape.end() - 2);
  std::vector<int64_t> lb(lhs.shape.begin(), lhs.shape.end() - 2);
  std::vector<int64_t> rb(rhs.shape.begin(), rhs.shape.end() - 2);
  int64_t batches = 1;
  for (int64_t d : batch)
    batches *= d;
  std::vector<double> out(batches * m * n);
  for (int64_t b = 0; b < batches; ++b) {
    int64_t li = batch.empty() ? 0 : broadcastIndex(b, batch, lb);
    int64_t ri = batch.empty() ? 0 : broadcastIndex(b, batch, rb);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = bias ? bias->get(j) : 0.0;
        for (int64_t t = 0; t < k; ++t)
          acc += lhs.get((li * m + i) * k + t) * rhs.get((ri * k + t) * n + j);
        out[(b * m + i) * n + j] = acc;
      }
  }
  (void)orank;
  return out;
}

/// fp32 products of k terms in [-2, 2]: a result can be far smaller than
/// its terms (cancellation), so the absolute slack grows with k (about k
/// roundings of terms up to 4; measured errors stay below a tenth of it).
Tolerance contractionTolerance(int64_t k) {
  Tolerance tol = toleranceFor(program::F32, 1e-4);
  tol.atol = std::max(tol.atol, 1e-6 * double(k));
  return tol;
}

TEST(MatMulTest, ShapesBatchesAndBias) {
  std::mt19937 rng(40);
  struct Case {
    std::vector<int64_t> lhs, rhs;
  };
  std::vector<Case> cases = {
      {{5, 7}, {7, 3}},
      {{1, 1}, {1, 1}},
      {{2, 9, 16}, {16, 33}},
      {{3, 4, 5}, {3, 5, 6}},
      {{4, 5}, {2, 3, 5, 7}},
      {{2, 1, 6, 8}, {1, 3, 8, 5}},
      {{1, 17, 31}, {31, 19}},
      {{64, 65}, {65, 67}},
      {{2, 3, 1, 4}, {4, 2}},
      {{3, 0, 4}, {4, 5}},
      // A few rows (a decode step's batch) and one (sgemv).
      {{8, 40}, {40, 37}},
      {{3, 64}, {64, 48}},
      {{2, 1, 100}, {100, 200}},
      {{7, 5}, {5, 16}},
      {{1, 1, 33}, {33, 70}},
      // Two to eight rows span several 512-column tiles of smallRowsGemm
      // (the last one partial), blocks of 8 rows of B with the next block
      // prefetched, and a remainder of k.
      {{5, 24}, {24, 1100}},
      {{2, 8, 19}, {19, 530}},
  };
  for (DType dtype : kFloatTypes)
    for (const Case &c : cases)
      for (bool hasBias : {false, true}) {
        SCOPED_TRACE(typeName(dtype) + " " + shapeString(c.lhs) + " x " +
                     shapeString(c.rhs) + (hasBias ? " + bias" : ""));
        Buffer lhs = randomBuffer(rng, dtype, c.lhs);
        Buffer rhs = randomBuffer(rng, dtype, c.rhs);
        Buffer bias = randomBuffer(rng, dtype, {c.rhs.back()});
        std::vector<int64_t> shape = broadcastBatch(
            {c.lhs.begin(), c.lhs.end() - 2}, {c.rhs.begin(), c.rhs.end() - 2});
        shape.push_back(c.lhs[c.lhs.size() - 2]);
        shape.push_back(c.rhs.back());
        Buffer out(dtype, shape);
        KernelBuilder k("matmul");
        k.operand(lhs).operand(rhs);
        if (hasBias)
          k.operand(bias);
        Status s = k.result(out).attr("has_bias", hasBias).run(testPool());
        ASSERT_TRUE(s.isOk()) << s.message();
        std::vector<double> expected =
            refMatmul(lhs, rhs, hasBias ? &bias : nullptr, shape);
        for (double &e : expected)
          e = roundTo(dtype, e);
        Tolerance tol = toleranceFor(dtype, 1e-4);
        tol.atol = std::max(tol.atol, 1e-5);
        EXPECT_TRUE(allClose(out.values(), expected, tol));
      }
}

TEST(MatMulTest, ConcurrentKernelsOnSeparatePools) {
  // partita-run runs each rank on its own thread and pool: OpenBLAS is
  // entered from several threads at once. The reference is computed on a
  // pool of the same size as the ranks' pools, and the blocks of a product
  // depend only on its shape and the pool size (parallelGemm), so every
  // rank makes the same cblas_sgemm calls as the reference and must match
  // it bit for bit. A pool of another size cuts other column blocks, which
  // OpenBLAS's Zen kernels round differently (issue 14, class 1).
  constexpr unsigned kRankThreads = 2;
  std::mt19937 rng(41);
  Buffer lhs = randomBuffer(rng, program::F32, {96, 200});
  Buffer rhs = randomBuffer(rng, program::F32, {200, 160});
  Buffer expected(program::F32, {96, 160});
  {
    ThreadPool referencePool(kRankThreads);
    ASSERT_TRUE(
        KernelBuilder("matmul").operand(lhs).operand(rhs).result(expected).run(
            referencePool));
  }
  // The reference itself is right (to rounding), so that a wrong product
  // made the same way on every thread cannot pass.
  Tolerance tol = contractionTolerance(200);
  ASSERT_TRUE(allClose(expected.values(),
                       refMatmul(lhs, rhs, nullptr, {96, 160}), tol));
  std::vector<std::thread> ranks;
  std::vector<int> mismatches(4, 0);
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      ThreadPool pool(kRankThreads);
      for (int rep = 0; rep < 20; ++rep) {
        Buffer out(program::F32, {96, 160});
        Status s =
            KernelBuilder("matmul").operand(lhs).operand(rhs).result(out).run(
                pool);
        // Bitwise: same blocks, same calls, same order as the reference.
        if (!s.isOk() || std::memcmp(out.data(), expected.data(),
                                     96 * 160 * sizeof(float)) != 0)
          ++mismatches[r];
      }
    });
  for (std::thread &t : ranks)
    t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(MatMulTest, PoolSizesAgreeWithinRounding) {
  // Pools of other sizes cut other blocks (along n here, along m for the
  // transposed shape), so the cblas_sgemm calls differ and so may the
  // rounding (OpenBLAS's Zen kernels round column blocks of different
  // widths differently): the products agree within fp32 rounding, never
  // bit for bit by contract.
  std::mt19937 rng(42);
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{96, 200, 160}, {160, 200, 96}}) {
    Buffer lhs = randomBuffer(rng, program::F32, {shape[0], shape[1]});
    Buffer rhs = randomBuffer(rng, program::F32, {shape[1], shape[2]});
    std::vector<double> exact =
        refMatmul(lhs, rhs, nullptr, {shape[0], shape[2]});
    Tolerance tol = contractionTolerance(shape[1]);
    for (unsigned threads : {1u, 2u, 3u, 4u}) {
      SCOPED_TRACE(shapeString(shape) + " on " + std::to_string(threads) +
                   " threads");
      ThreadPool pool(threads);
      Buffer out(program::F32, {shape[0], shape[2]});
      ASSERT_TRUE(
          KernelBuilder("matmul").operand(lhs).operand(rhs).result(out).run(
              pool));
      EXPECT_TRUE(allClose(out.values(), exact, tol));
    }
  }
}

TEST(MatMulTest, ZeroContractionGivesBias) {
  Buffer lhs(program::F32, {3, 0}), rhs(program::F32, {0, 2}),
      bias(program::F32, {2}), out(program::F32, {3, 2});
  bias.setValues({1.5, -2.0});
  out.setValues({9, 9, 9, 9, 9, 9});
  ASSERT_TRUE(KernelBuilder("matmul")
                  .operand(lhs)
                  .operand(rhs)
                  .operand(bias)
                  .result(out)
                  .attr("has_bias", true)
                  .run(testPool()));
  // Exact: with k = 0 no cblas call is made; the result is the bias itself.
  EXPECT_EQ(out.values(), (std::vector<double>{1.5, -2, 1.5, -2, 1.5, -2}));
}

TEST(MatMulTest, ShapeErrorsNameTheOp) {
  Buffer a(program::F32, {2, 3}), b(program::F32, {4, 5}),
      out(program::F32, {2, 5});
  Status s =
      KernelBuilder("matmul").operand(a).operand(b).result(out).run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("matmul"), std::string::npos);
  Buffer ints(program::I32, {3, 5});
  Buffer intOut(program::I32, {2, 5});
  Buffer ia(program::I32, {2, 3});
  s = KernelBuilder("matmul").operand(ia).operand(ints).result(intOut).run(
      testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("i32"), std::string::npos) << s.message();
  Buffer c(program::F32, {3, 5}), bias(program::F32, {5});
  s = KernelBuilder("matmul")
          .operand(a)
          .operand(c)
          .operand(bias)
          .result(out)
          .run(testPool());
  EXPECT_FALSE(s.isOk()) << "bias without has_bias";
}

TEST(MatMulTest, DequantizeStackedWeights) {
  // Three stacked [32, 4] int4 weights (QMoE's experts): blocks of 16 rows,
  // zero points two blocks to a byte; each batch its own packed bytes,
  // scales and zero points, against the formula element by element.
  const int64_t batches = 3, n = 4, k = 32, block = 16, blocks = 2;
  Buffer packed(program::I8, {batches, n, blocks, block / 2});
  Buffer scales(program::F32, {batches, n, blocks});
  Buffer zeros(program::I8, {batches, n, 1});
  Buffer out(program::F32, {batches, k, n});
  std::vector<double> bytes, scaleValues, zeroBytes;
  for (int64_t i = 0; i < packed.numElements(); ++i)
    bytes.push_back(static_cast<int8_t>((i * 37 + 11) & 0xff));
  for (int64_t i = 0; i < scales.numElements(); ++i)
    scaleValues.push_back(0.01 * double(i + 1));
  for (int64_t i = 0; i < zeros.numElements(); ++i)
    zeroBytes.push_back(static_cast<int8_t>((i * 53 + 7) & 0xff));
  packed.setValues(bytes);
  scales.setValues(scaleValues);
  zeros.setValues(zeroBytes);
  ASSERT_TRUE(KernelBuilder("dequantize")
                  .operand(packed)
                  .operand(scales)
                  .operand(zeros)
                  .result(out)
                  .attr("bits", int64_t(4))
                  .attr("block_size", block)
                  .attr("has_zero_points", true)
                  .run(testPool()));
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t blk = i / block, within = i % block;
        auto byte = static_cast<uint8_t>(static_cast<int8_t>(packed.get(
            ((b * n + j) * blocks + blk) * (block / 2) + within / 2)));
        int q = within % 2 ? byte >> 4 : byte & 15;
        auto zb =
            static_cast<uint8_t>(static_cast<int8_t>(zeros.get(b * n + j)));
        int z = blk % 2 ? zb >> 4 : zb & 15;
        double want =
            (q - z) * double(float(scales.get((b * n + j) * blocks + blk)));
        ASSERT_NEAR(out.get((b * k + i) * n + j), want, 1e-6)
            << "batch " << b << " element (" << i << ", " << j << ")";
      }
  // Every operand leads with the result's batch dimensions.
  Buffer fewer(program::I8, {2, n, 1});
  Status s = KernelBuilder("dequantize")
                 .operand(packed)
                 .operand(scales)
                 .operand(fewer)
                 .result(out)
                 .attr("bits", int64_t(4))
                 .attr("block_size", block)
                 .attr("has_zero_points", true)
                 .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("lead with the result's batch dimensions [3]"),
            std::string::npos)
      << s.message();
}

} // namespace
} // namespace partita::runtime::test
