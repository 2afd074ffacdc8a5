//===- EpilogueTest.cpp - fused elementwise chains ------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A fused chain must compute exactly what the separate kernels compute:
// most cases run both and compare bit for bit. That is sound because both
// sides make the same calls in the same order: a matmul with and without
// an epilogue cuts the same blocks on the same pool (parallelGemm) and so
// makes the same cblas_sgemm calls, and fused steps run the very loops
// (unaryFloatLoop, binaryLoop) the separate kernels run.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

namespace partita::runtime::test {
namespace {

void expectOk(const Status &s) { EXPECT_TRUE(s.isOk()) << s.message(); }

void expectSameBits(const Buffer &a, const Buffer &b) {
  ASSERT_EQ(a.dtype, b.dtype);
  ASSERT_EQ(a.shape, b.shape);
  size_t bytes = a.numElements() * dtypeSize(a.dtype);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), bytes), 0);
}

Buffer unary(const char *op, Buffer &x, const char *approximation = nullptr) {
  Buffer out(x.dtype, x.shape);
  KernelBuilder k(op);
  k.operand(x).result(out);
  if (approximation)
    k.attr("approximation", approximation);
  expectOk(k.run(testPool()));
  return out;
}

Buffer binary(const char *op, Buffer &a, Buffer &b, std::vector<int64_t> shape,
              DType dtype) {
  Buffer out(dtype, shape);
  expectOk(KernelBuilder(op).operand(a).operand(b).result(out).run(testPool()));
  return out;
}

TEST(EpilogueTest, MatmulGeluAddMatchesReference) {
  std::mt19937 rng(20);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(typeName(dtype));
    Buffer x = randomBuffer(rng, dtype, {2, 5, 8});
    Buffer w = randomBuffer(rng, dtype, {8, 12});
    Buffer bias = randomBuffer(rng, dtype, {12});
    Buffer residual = randomBuffer(rng, dtype, {2, 5, 12});
    Buffer out(dtype, {2, 5, 12});
    expectOk(KernelBuilder("matmul")
                 .operand(x)
                 .operand(w)
                 .operand(bias)
                 .result(out)
                 .attr("has_bias", true)
                 .step("gelu")
                 .step("add", &residual)
                 .run(testPool()));
    std::vector<double> expected(out.numElements());
    for (int64_t r = 0; r < 10; ++r)
      for (int64_t j = 0; j < 12; ++j) {
        double acc = bias.get(j);
        for (int64_t t = 0; t < 8; ++t)
          acc += x.get(r * 8 + t) * w.get(t * 12 + j);
        acc = roundTo(dtype, acc);
        double g = roundTo(dtype, 0.5 * acc * std::erfc(-acc / std::sqrt(2.0)));
        expected[r * 12 + j] = roundTo(dtype, g + residual.get(r * 12 + j));
      }
    EXPECT_TRUE(allClose(out.values(), expected, toleranceFor(dtype, 1e-4)));
  }
}

TEST(EpilogueTest, FusedChainEqualsSeparateKernels) {
  std::mt19937 rng(21);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(typeName(dtype));
    Buffer x = randomBuffer(rng, dtype, {3, 7, 16});
    Buffer w = randomBuffer(rng, dtype, {16, 33});
    Buffer residual = randomBuffer(rng, dtype, {3, 7, 33});
    Buffer scale = randomBuffer(rng, dtype, {33});
    Buffer shift = randomBuffer(rng, dtype, {7, 1});
    Buffer fused(dtype, {3, 7, 33});
    expectOk(KernelBuilder("matmul")
                 .operand(x)
                 .operand(w)
                 .result(fused)
                 .step("gelu", nullptr, false, {{"approximation", "tanh"}})
                 .step("add", &residual)
                 .step("mul", &scale, true)
                 .step("sub", &shift, true)
                 .step("tanh")
                 .run(testPool()));
    Buffer mm(dtype, {3, 7, 33});
    expectOk(KernelBuilder("matmul").operand(x).operand(w).result(mm).run(
        testPool()));
    Buffer g = unary("gelu", mm, "tanh");
    Buffer a = binary("add", g, residual, g.shape, dtype);
    Buffer m = binary("mul", scale, a, a.shape, dtype);
    Buffer s = binary("sub", shift, m, m.shape, dtype);
    Buffer t = unary("tanh", s);
    // Same shape, same pool: the same cblas_sgemm calls on both sides.
    expectSameBits(fused, t);
  }
}

TEST(EpilogueTest, MatmulFinishesEveryBlockShape) {
  // The epilogue runs per block of the product: split along m, along n,
  // per batch in parallel, per batch in sequence, and with k = 0.
  std::mt19937 rng(26);
  struct Case {
    std::vector<int64_t> lhs, rhs;
  };
  for (DType dtype : {program::F32, program::BF16})
    for (Case c : {Case{{64, 256}, {256, 512}}, Case{{2, 256, 256}, {256, 64}},
                   Case{{6, 5, 8}, {6, 8, 7}}, Case{{2, 5, 8}, {2, 8, 7}},
                   Case{{3, 0}, {0, 4}}, Case{{2, 3, 5, 8}, {8, 6}}}) {
      SCOPED_TRACE(typeName(dtype) + " " + shapeString(c.lhs) + " x " +
                   shapeString(c.rhs));
      Buffer lhs = randomBuffer(rng, dtype, c.lhs);
      Buffer rhs = randomBuffer(rng, dtype, c.rhs);
      int64_t n = c.rhs.back();
      Buffer bias = randomBuffer(rng, dtype, {n});
      Buffer scale = randomBuffer(rng, dtype, {n});
      std::vector<int64_t> shape =
          c.lhs.size() >= c.rhs.size() ? c.lhs : std::vector<int64_t>(c.rhs);
      shape[shape.size() - 2] = c.lhs[c.lhs.size() - 2];
      shape.back() = n;
      Buffer residual = randomBuffer(rng, dtype, shape);
      Buffer fused(dtype, shape);
      expectOk(KernelBuilder("matmul")
                   .operand(lhs)
                   .operand(rhs)
                   .operand(bias)
                   .result(fused)
                   .attr("has_bias", true)
                   .step("relu")
                   .step("mul", &scale, true)
                   .step("add", &residual)
                   .run(testPool()));
      Buffer mm(dtype, shape);
      expectOk(KernelBuilder("matmul")
                   .operand(lhs)
                   .operand(rhs)
                   .operand(bias)
                   .result(mm)
                   .attr("has_bias", true)
                   .run(testPool()));
      Buffer r = unary("relu", mm);
      Buffer s = binary("mul", scale, r, shape, dtype);
      // Same shape, same pool: the same cblas_sgemm calls on both sides.
      expectSameBits(fused, binary("add", s, residual, shape, dtype));
    }
}

TEST(EpilogueTest, ElementwiseKernelWithChain) {
  std::mt19937 rng(22);
  for (DType dtype : {program::F32, program::BF16, program::I32, program::I8}) {
    SCOPED_TRACE(typeName(dtype));
    Buffer a = randomBuffer(rng, dtype, {4, 300}, -100, 100);
    Buffer b = randomBuffer(rng, dtype, {300}, -100, 100);
    Buffer c = randomBuffer(rng, dtype, {4, 1}, -3, 3);
    Buffer fused(dtype, {4, 300});
    expectOk(KernelBuilder("add")
                 .operand(a)
                 .operand(b)
                 .result(fused)
                 .step("relu")
                 .step("mul", &c)
                 .step("neg")
                 .run(testPool()));
    Buffer s1 = binary("add", a, b, a.shape, dtype);
    Buffer s2 = unary("relu", s1);
    Buffer s3 = binary("mul", s2, c, a.shape, dtype);
    expectSameBits(fused, unary("neg", s3));
  }
}

TEST(EpilogueTest, CompareChangesTheResultType) {
  // layer_norm computes f32; the compare makes the buffer bool.
  std::mt19937 rng(23);
  Buffer x = randomBuffer(rng, program::F32, {5, 9});
  Buffer zero(program::F32, {});
  Buffer fused(program::BOOL, {5, 9});
  expectOk(KernelBuilder("layer_norm")
               .operand(x)
               .result(fused)
               .attr("axis", 1)
               .attr("epsilon", 1e-5)
               .step("compare", &zero, false, {{"direction", "gt"}})
               .step("not")
               .run(testPool()));
  Buffer norm(program::F32, {5, 9});
  expectOk(KernelBuilder("layer_norm")
               .operand(x)
               .result(norm)
               .attr("axis", 1)
               .attr("epsilon", 1e-5)
               .run(testPool()));
  for (int64_t i = 0; i < 45; ++i)
    // Same layer_norm code on the same pool on both sides.
    EXPECT_EQ(fused.getInt(i), !(norm.get(i) > 0));
}

TEST(EpilogueTest, CastsTakeTheirTargetFromWhatFollows) {
  std::mt19937 rng(24);
  // f32 matmul, cast to the f16 result buffer.
  Buffer x = randomBuffer(rng, program::F32, {4, 6});
  Buffer w = randomBuffer(rng, program::F32, {6, 5});
  Buffer half(program::F16, {4, 5});
  expectOk(KernelBuilder("matmul")
               .operand(x)
               .operand(w)
               .result(half)
               .step("cast")
               .run(testPool()));
  Buffer full(program::F32, {4, 5});
  expectOk(KernelBuilder("matmul").operand(x).operand(w).result(full).run(
      testPool()));
  for (int64_t i = 0; i < 20; ++i)
    // Same shape, same pool: the same cblas_sgemm calls on both sides.
    EXPECT_EQ(half.get(i), roundTo(program::F16, full.get(i)));

  // f32 reduce, cast to i32 (the add's operand type), add, into i32.
  Buffer y = randomBuffer(rng, program::F32, {3, 8}, -10, 10);
  Buffer offset = randomBuffer(rng, program::I32, {3}, -5, 5);
  Buffer ints(program::I32, {3});
  expectOk(KernelBuilder("reduce")
               .operand(y)
               .result(ints)
               .attr("kind", "sum")
               .attr("axes", std::vector<int64_t>{1})
               .step("cast")
               .step("add", &offset)
               .run(testPool()));
  Buffer sums(program::F32, {3});
  expectOk(KernelBuilder("reduce")
               .operand(y)
               .result(sums)
               .attr("kind", "sum")
               .attr("axes", std::vector<int64_t>{1})
               .run(testPool()));
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(ints.getInt(i),
              static_cast<int64_t>(std::trunc(sums.get(i))) + offset.getInt(i));
}

TEST(EpilogueTest, DataMovementKernelsTakeEpilogues) {
  std::mt19937 rng(25);
  Buffer x = randomBuffer(rng, program::F32, {4, 6});
  Buffer bias = randomBuffer(rng, program::F32, {4});
  Buffer out(program::F32, {6, 4});
  expectOk(KernelBuilder("transpose")
               .operand(x)
               .result(out)
               .attr("permutation", std::vector<int64_t>{1, 0})
               .step("add", &bias)
               .run(testPool()));
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 4; ++j)
      // One f32 addition: correctly rounded on every CPU.
      EXPECT_EQ(out.get(i * 4 + j), static_cast<double>(static_cast<float>(
                                        x.get(j * 6 + i) + bias.get(j))));

  // split: the epilogue applies to the first result only.
  Buffer first(program::F32, {4, 2}), second(program::F32, {4, 4});
  expectOk(KernelBuilder("split")
               .operand(x)
               .result(first)
               .result(second)
               .attr("axis", 1)
               .step("neg")
               .run(testPool()));
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 2; ++c)
      EXPECT_EQ(first.get(r * 2 + c), -x.get(r * 6 + c));
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(second.get(r * 4 + c), x.get(r * 6 + 2 + c));
  }
}

TEST(EpilogueTest, BadStepsAreErrors) {
  Buffer x(program::F32, {2, 3}), out(program::F32, {2, 3}),
      wrong(program::F32, {4});
  auto message = [&](KernelBuilder &k) {
    Status s = k.run(testPool());
    EXPECT_FALSE(s.isOk());
    return s.message();
  };
  KernelBuilder unknown("relu");
  unknown.operand(x).result(out).step("frobnicate");
  EXPECT_NE(message(unknown).find("frobnicate"), std::string::npos);
  KernelBuilder noOperand("relu");
  noOperand.operand(x).result(out).step("add");
  EXPECT_NE(message(noOperand).find("operand"), std::string::npos);
  KernelBuilder where("relu");
  where.operand(x).result(out).step("where", &x);
  EXPECT_NE(message(where).find("where"), std::string::npos);
  KernelBuilder shape("copy");
  shape.operand(x).result(out).step("mul", &wrong);
  std::string m = message(shape);
  EXPECT_NE(m.find("copy"), std::string::npos);
  EXPECT_NE(m.find("broadcast"), std::string::npos);
}

} // namespace
} // namespace partita::runtime::test
