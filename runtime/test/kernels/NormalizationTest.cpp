//===- NormalizationTest.cpp - softmax, norms and reductions --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <limits>

namespace partita::runtime::test {
namespace {

/// Splits `shape` at `axis` into [outer, n, inner].
void split3(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer,
            int64_t &n, int64_t &inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  n = shape[axis];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
}

std::vector<double> refSoftmax(const Buffer &x, int64_t axis, bool log) {
  int64_t outer, n, inner;
  split3(x.shape, axis, outer, n, inner);
  std::vector<double> out(x.numElements());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + c; };
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j)
        m = std::max(m, x.get(at(j)));
      for (int64_t j = 0; j < n; ++j)
        sum += std::exp(x.get(at(j)) - m);
      for (int64_t j = 0; j < n; ++j)
        out[at(j)] = log ? x.get(at(j)) - m - std::log(sum)
                         : std::exp(x.get(at(j)) - m) / sum;
    }
  return out;
}

TEST(NormalizationTest, SoftmaxAndLogSoftmax) {
  std::mt19937 rng(30);
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dtype : kFloatTypes)
    for (const char *op : {"softmax", "log_softmax"})
      for (Case c :
           {Case{{4, 7}, 1}, Case{{3, 5, 129}, 2}, Case{{3, 5, 6}, 1},
            Case{{6, 2, 3}, 0}, Case{{2, 3, 1000}, -1}, Case{{1, 1}, 1}}) {
        SCOPED_TRACE(std::string(op) + " " + typeName(dtype) + " " +
                     shapeString(c.shape) + " axis " + std::to_string(c.axis));
        Buffer x = randomBuffer(rng, dtype, c.shape, -8, 8);
        Buffer out(dtype, c.shape);
        Status s = KernelBuilder(op)
                       .operand(x)
                       .result(out)
                       .attr("axis", c.axis)
                       .run(testPool());
        ASSERT_TRUE(s.isOk()) << s.message();
        int64_t axis = c.axis < 0 ? c.axis + int64_t(c.shape.size()) : c.axis;
        std::vector<double> expected =
            refSoftmax(x, axis, std::string(op) == "log_softmax");
        Tolerance tol = toleranceFor(dtype);
        tol.atol = std::max(tol.atol, 1e-6);
        EXPECT_TRUE(allClose(out.values(), expected, tol));
      }
}

TEST(NormalizationTest, SoftmaxIsStableForLargeInputs) {
  Buffer x(program::F32, {1, 4});
  x.setValues({1000.0, 1000.0, -1000.0, 999.0});
  Buffer out(program::F32, {1, 4});
  ASSERT_TRUE(
      KernelBuilder("softmax").operand(x).result(out).attr("axis", 1).run(
          testPool()));
  double e = std::exp(-1.0);
  EXPECT_TRUE(allClose(out.values(),
                       {1 / (2 + e), 1 / (2 + e), 0.0, e / (2 + e)},
                       toleranceFor(program::F32)));
}

std::vector<double> refLayerNorm(const Buffer &x, int64_t rows, int64_t n,
                                 const Buffer *scale, const Buffer *bias,
                                 double eps, bool rms) {
  std::vector<double> out(x.numElements());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j)
      mean += x.get(r * n + j);
    mean = rms ? 0 : mean / n;
    for (int64_t j = 0; j < n; ++j)
      var += (x.get(r * n + j) - mean) * (x.get(r * n + j) - mean);
    double rstd = 1 / std::sqrt(var / n + eps);
    for (int64_t j = 0; j < n; ++j) {
      double v = (x.get(r * n + j) - mean) * rstd;
      if (scale)
        v *= scale->get(j);
      if (bias)
        v += bias->get(j);
      out[r * n + j] = v;
    }
  }
  return out;
}

TEST(NormalizationTest, LayerNormAndRmsNorm) {
  std::mt19937 rng(31);
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dtype : kFloatTypes)
    for (Case c : {Case{{4, 768}, 1}, Case{{2, 3, 5, 7}, 2}, Case{{3, 13}, -1},
                   Case{{5, 1}, 1}})
      for (int variant = 0; variant < 4; ++variant) {
        bool hasScale = variant & 1, hasBias = variant & 2;
        int64_t axis = c.axis < 0 ? c.axis + int64_t(c.shape.size()) : c.axis;
        std::vector<int64_t> normalized(c.shape.begin() + axis, c.shape.end());
        int64_t rows = 1, n = 1;
        for (int64_t d = 0; d < axis; ++d)
          rows *= c.shape[d];
        for (int64_t d : normalized)
          n *= d;
        // An offset mean, which a one-pass variance would lose.
        Buffer x = randomBuffer(rng, dtype, c.shape, 50, 54);
        Buffer scale = randomBuffer(rng, dtype, normalized, 0.5, 1.5);
        Buffer bias = randomBuffer(rng, dtype, normalized);
        for (bool rms : {false, true}) {
          if (rms && hasBias)
            continue;
          SCOPED_TRACE(std::string(rms ? "rms_norm " : "layer_norm ") +
                       typeName(dtype) + " " + shapeString(c.shape) +
                       " scale " + std::to_string(hasScale) + " bias " +
                       std::to_string(hasBias));
          Buffer out(dtype, c.shape);
          KernelBuilder k(rms ? "rms_norm" : "layer_norm");
          k.operand(x);
          if (hasScale)
            k.operand(scale);
          if (hasBias)
            k.operand(bias);
          k.result(out)
              .attr("axis", c.axis)
              .attr("epsilon", 1e-5)
              .attr("has_scale", hasScale);
          if (!rms)
            k.attr("has_bias", hasBias);
          Status s = k.run(testPool());
          ASSERT_TRUE(s.isOk()) << s.message();
          std::vector<double> expected =
              refLayerNorm(x, rows, n, hasScale ? &scale : nullptr,
                           hasBias ? &bias : nullptr, 1e-5, rms);
          Tolerance tol = toleranceFor(dtype, 1e-4);
          // Centering 52 +- 2 in fp32 leaves about 4e-6 relative error of
          // the spread, times the output's magnitude.
          tol.atol = std::max(tol.atol, 2e-5);
          EXPECT_TRUE(allClose(out.values(), expected, tol));
        }
      }
}

TEST(NormalizationTest, NormOperandCountFollowsFlags) {
  Buffer x(program::F32, {2, 4}), scale(program::F32, {4}),
      out(program::F32, {2, 4});
  Status s = KernelBuilder("layer_norm")
                 .operand(x)
                 .operand(scale)
                 .result(out)
                 .attr("axis", 1)
                 .attr("epsilon", 1e-5)
                 .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("layer_norm"), std::string::npos);
  Buffer badScale(program::F32, {3});
  s = KernelBuilder("rms_norm")
          .operand(x)
          .operand(badScale)
          .result(out)
          .attr("axis", 1)
          .attr("epsilon", 1e-5)
          .attr("has_scale", true)
          .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("rms_norm"), std::string::npos);
}

std::vector<double> refReduce(const Buffer &x, const std::vector<int64_t> &axes,
                              const std::string &kind,
                              std::vector<int64_t> &outShape, bool keepdims) {
  size_t rank = x.shape.size();
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes)
    reduced[a] = true;
  outShape.clear();
  std::vector<int64_t> keptShape;
  for (size_t d = 0; d < rank; ++d) {
    if (!reduced[d])
      keptShape.push_back(x.shape[d]);
    if (!reduced[d] || keepdims)
      outShape.push_back(reduced[d] ? 1 : x.shape[d]);
  }
  int64_t outN = 1;
  for (int64_t d : keptShape)
    outN *= d;
  bool isInt = !isFloat(x.dtype);
  std::vector<double> acc(outN, kind == "max"   ? -INFINITY
                                : kind == "min" ? INFINITY
                                                : 0.0);
  std::vector<int64_t> count(outN, 0);
  for (int64_t i = 0; i < x.numElements(); ++i) {
    int64_t rest = i, outIndex = 0, stride = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t idx = rest % x.shape[d];
      rest /= x.shape[d];
      if (!reduced[d]) {
        outIndex += idx * stride;
        stride *= x.shape[d];
      }
    }
    double v = x.get(i);
    if (kind == "max")
      acc[outIndex] = std::max(acc[outIndex], v);
    else if (kind == "min")
      acc[outIndex] = std::min(acc[outIndex], v);
    else
      acc[outIndex] += v;
    ++count[outIndex];
  }
  if (kind == "mean")
    for (int64_t i = 0; i < outN; ++i)
      acc[i] = isInt ? std::trunc(acc[i] / count[i]) : acc[i] / count[i];
  return acc;
}

TEST(NormalizationTest, ReduceOverAxesPatterns) {
  std::mt19937 rng(32);
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int64_t> axes;
  };
  std::vector<Case> cases = {
      {{4, 9}, {1}},
      {{4, 9}, {0}},
      {{3, 4, 5}, {1}},
      {{3, 4, 5}, {0, 2}},
      {{2, 3, 4, 5}, {1, 2}},
      {{2, 3, 4, 5}, {0, 1, 3}},
      {{6}, {0}},
      {{3, 1, 5}, {1}},
      {{2, 300, 3}, {1}},
      {{2, 3, 4}, {0, 1, 2}},
      {{5, 4}, {-1}},
  };
  std::vector<DType> types = {program::F32, program::F16, program::BF16,
                              program::I64, program::I32, program::I8};
  for (DType dtype : types)
    for (const char *kind : {"sum", "mean", "max", "min"})
      for (const Case &c : cases)
        for (bool keepdims : {false, true}) {
          SCOPED_TRACE(std::string(kind) + " " + typeName(dtype) + " " +
                       shapeString(c.shape) + " axes " + shapeString(c.axes) +
                       (keepdims ? " keepdims" : ""));
          Buffer x = isFloat(dtype) ? randomBuffer(rng, dtype, c.shape)
                                    : randomBuffer(rng, dtype, c.shape, -3, 3);
          std::vector<int64_t> axes = c.axes;
          for (int64_t &a : axes)
            if (a < 0)
              a += static_cast<int64_t>(c.shape.size());
          std::vector<int64_t> outShape;
          std::vector<double> expected =
              refReduce(x, axes, kind, outShape, keepdims);
          for (double &e : expected)
            e = roundTo(dtype, e);
          Buffer out(dtype, outShape);
          Status s = KernelBuilder("reduce")
                         .operand(x)
                         .result(out)
                         .attr("kind", kind)
                         .attr("axes", c.axes)
                         .attr("keepdims", keepdims)
                         .run(testPool());
          ASSERT_TRUE(s.isOk()) << s.message();
          Tolerance tol = toleranceFor(dtype);
          tol.atol = std::max(tol.atol, isFloat(dtype) ? 1e-5 : 0.0);
          EXPECT_TRUE(allClose(out.values(), expected, tol));
        }
}

TEST(NormalizationTest, ReduceChecksAxesAndShape) {
  Buffer x(program::F32, {2, 3}), out(program::F32, {2});
  Status s = KernelBuilder("reduce")
                 .operand(x)
                 .result(out)
                 .attr("kind", "sum")
                 .attr("axes", std::vector<int64_t>{0})
                 .run(testPool());
  EXPECT_FALSE(s.isOk()); // Reducing axis 0 leaves [3].
  EXPECT_NE(s.message().find("reduce"), std::string::npos);
  s = KernelBuilder("reduce")
          .operand(x)
          .result(out)
          .attr("kind", "product")
          .attr("axes", std::vector<int64_t>{1})
          .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("product"), std::string::npos);
}

} // namespace
} // namespace partita::runtime::test
