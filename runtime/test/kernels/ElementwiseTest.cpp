//===- ElementwiseTest.cpp - binary, compare, where, unary and cast -------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <limits>

namespace partita::runtime::test {
namespace {

std::vector<int64_t> broadcastShape(const std::vector<int64_t> &a,
                                    const std::vector<int64_t> &b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    size_t fromEnd = out.size() - i;
    int64_t x = fromEnd <= a.size() ? a[a.size() - fromEnd] : 1;
    int64_t y = fromEnd <= b.size() ? b[b.size() - fromEnd] : 1;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
    kShapePairs = {
        {{3, 5}, {3, 5}}, {{2, 3, 17}, {17}},     {{2, 1, 5}, {3, 1}},
        {{1}, {4, 7}},    {{6, 1, 1}, {1, 4, 3}}, {{}, {2, 3}},
        {{1000}, {1000}}, {{3, 700}, {3, 1}},     {{2, 3, 4, 5}, {3, 1, 5}},
};

double refFloatBinary(const std::string &op, double a, double b) {
  if (op == "add")
    return a + b;
  if (op == "sub")
    return a - b;
  if (op == "mul")
    return a * b;
  if (op == "div")
    return a / b;
  if (op == "pow")
    return std::pow(a, b);
  if (op == "max")
    return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
}

int64_t wrap(DType dtype, int64_t v) {
  switch (dtype) {
  case program::I32:
    return static_cast<int32_t>(v);
  case program::I8:
    return static_cast<int8_t>(v);
  case program::BOOL:
    return v != 0;
  default:
    return v;
  }
}

int64_t refIntBinary(const std::string &op, int64_t a, int64_t b) {
  auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  if (op == "add")
    return static_cast<int64_t>(u(a) + u(b));
  if (op == "sub")
    return static_cast<int64_t>(u(a) - u(b));
  if (op == "mul")
    return static_cast<int64_t>(u(a) * u(b));
  if (op == "div")
    return b == 0 ? 0 : b == -1 ? static_cast<int64_t>(0 - u(a)) : a / b;
  if (op == "pow") {
    if (b < 0)
      return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
    uint64_t r = 1;
    for (int64_t i = 0; i < b; ++i)
      r *= u(a);
    return static_cast<int64_t>(r);
  }
  if (op == "max")
    return std::max(a, b);
  if (op == "min")
    return std::min(a, b);
  if (op == "and")
    return a & b;
  if (op == "or")
    return a | b;
  return a ^ b;
}

/// Runs `op` on a and b into a fresh result of the broadcast shape.
Buffer runBinary(const std::string &op, Buffer &a, Buffer &b, DType resultType,
                 const char *direction = nullptr) {
  Buffer out(resultType, broadcastShape(a.shape, b.shape));
  KernelBuilder k(op);
  k.operand(a).operand(b).result(out);
  if (direction)
    k.attr("direction", direction);
  Status s = k.run(testPool());
  EXPECT_TRUE(s.isOk()) << s.message();
  return out;
}

TEST(ElementwiseTest, FloatBinaryOpsBroadcast) {
  std::mt19937 rng(1);
  for (DType dtype : kFloatTypes) {
    for (const char *op : {"add", "sub", "mul", "div", "pow", "max", "min"}) {
      for (auto &[sa, sb] : kShapePairs) {
        SCOPED_TRACE(std::string(op) + " " + typeName(dtype) + " " +
                     shapeString(sa) + " " + shapeString(sb));
        std::string name = op;
        double lo = name == "pow" ? 0.1 : -3.0;
        Buffer a = randomBuffer(rng, dtype, sa, lo, 3.0);
        Buffer b = randomBuffer(rng, dtype, sb, name == "pow" ? -2.0 : 0.5,
                                name == "pow" ? 2.0 : 3.0);
        if (name != "pow") // Signed divisors, away from zero.
          for (int64_t i = 0; i < b.numElements(); i += 2)
            b.set(i, -b.get(i));
        Buffer out = runBinary(op, a, b, dtype);
        std::vector<double> expected(out.numElements());
        for (int64_t i = 0; i < out.numElements(); ++i)
          expected[i] = roundTo(
              dtype,
              refFloatBinary(name, a.get(broadcastIndex(i, out.shape, sa)),
                             b.get(broadcastIndex(i, out.shape, sb))));
        EXPECT_TRUE(allClose(out.values(), expected, toleranceFor(dtype)));
      }
    }
  }
}

TEST(ElementwiseTest, IntegerBinaryOpsWrap) {
  std::mt19937 rng(2);
  for (DType dtype : kIntTypes) {
    for (const char *op : {"add", "sub", "mul", "div", "pow", "max", "min",
                           "and", "or", "xor"}) {
      for (auto &[sa, sb] : kShapePairs) {
        SCOPED_TRACE(std::string(op) + " " + typeName(dtype) + " " +
                     shapeString(sa) + " " + shapeString(sb));
        std::string name = op;
        Buffer a = randomBuffer(rng, dtype, sa, -100, 100);
        Buffer b = name == "pow" ? randomBuffer(rng, dtype, sb, -1, 5)
                                 : randomBuffer(rng, dtype, sb, -100, 100);
        Buffer out = runBinary(op, a, b, dtype);
        for (int64_t i = 0; i < out.numElements(); ++i) {
          int64_t x = a.getInt(broadcastIndex(i, out.shape, sa));
          int64_t y = b.getInt(broadcastIndex(i, out.shape, sb));
          ASSERT_EQ(out.getInt(i), wrap(dtype, refIntBinary(name, x, y)))
              << x << " " << op << " " << y << " at " << i;
        }
      }
    }
  }
}

TEST(ElementwiseTest, IntegerEdgeCases) {
  auto run1 = [](const char *op, DType dtype, int64_t x, int64_t y) {
    Buffer a(dtype, {1}), b(dtype, {1});
    a.setInt(0, x);
    b.setInt(0, y);
    return runBinary(op, a, b, dtype).getInt(0);
  };
  EXPECT_EQ(run1("div", program::I64, -7, 2), -3);
  EXPECT_EQ(run1("div", program::I64, 7, -2), -3);
  EXPECT_EQ(run1("div", program::I32, 5, 0), 0);
  EXPECT_EQ(run1("div", program::I64, INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(run1("add", program::I64, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(run1("add", program::I32, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(run1("mul", program::I8, 16, 16), 0);
  EXPECT_EQ(run1("sub", program::I8, -128, 1), 127);
  EXPECT_EQ(run1("pow", program::I64, 3, 4), 81);
  EXPECT_EQ(run1("pow", program::I64, -1, -3), -1);
  EXPECT_EQ(run1("pow", program::I64, 2, -1), 0);
}

TEST(ElementwiseTest, BoolLogicOps) {
  std::mt19937 rng(3);
  for (const char *op : {"and", "or", "xor", "max", "min"}) {
    Buffer a = randomBuffer(rng, program::BOOL, {4, 9});
    Buffer b = randomBuffer(rng, program::BOOL, {9});
    Buffer out = runBinary(op, a, b, program::BOOL);
    for (int64_t i = 0; i < out.numElements(); ++i)
      ASSERT_EQ(out.getInt(i), refIntBinary(op, a.getInt(i), b.getInt(i % 9)))
          << op;
  }
}

TEST(ElementwiseTest, PowWithScalarExponents) {
  // Exponents 2 and 3 take the product path; others call pow.
  std::mt19937 rng(4);
  for (DType dtype : kFloatTypes)
    for (double e : {2.0, 3.0, 0.5, 1.0, -1.5}) {
      Buffer x = randomBuffer(rng, dtype, {5, 33}, 0.1, 4.0);
      for (int64_t i = 0; i < x.numElements(); i += 3)
        if (e == 2.0 || e == 3.0)
          x.set(i, -x.get(i));
      Buffer exponent(dtype, {});
      exponent.set(0, e);
      Buffer out = runBinary("pow", x, exponent, dtype);
      std::vector<double> expected;
      for (double v : x.values())
        expected.push_back(roundTo(dtype, std::pow(v, e)));
      EXPECT_TRUE(allClose(out.values(), expected, toleranceFor(dtype)))
          << typeName(dtype) << " ^ " << e;
    }
}

TEST(ElementwiseTest, MaxMinPropagateNaN) {
  Buffer a(program::F32, {3}), b(program::F32, {3});
  a.setValues({NAN, 1.0, 2.0});
  b.setValues({1.0, NAN, 3.0});
  for (const char *op : {"max", "min"}) {
    std::vector<double> got = runBinary(op, a, b, program::F32).values();
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1])) << op;
    EXPECT_EQ(got[2], std::string(op) == "max" ? 3.0 : 2.0);
  }
}

TEST(ElementwiseTest, CompareAllDirections) {
  std::mt19937 rng(5);
  std::vector<DType> types = {program::F32, program::F16, program::BF16,
                              program::I64, program::I32, program::I8,
                              program::BOOL};
  for (DType dtype : types)
    for (const char *dir : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      SCOPED_TRACE(std::string(dir) + " " + typeName(dtype));
      // Few distinct values, so that equality happens.
      Buffer a = randomBuffer(rng, dtype, {4, 1, 6}, -2, 2);
      Buffer b = randomBuffer(rng, dtype, {3, 6}, -2, 2);
      if (isFloat(dtype))
        for (Buffer *buf : {&a, &b})
          for (int64_t i = 0; i < buf->numElements(); ++i)
            buf->set(i, std::round(buf->get(i)));
      Buffer out = runBinary("compare", a, b, program::BOOL, dir);
      std::string d = dir;
      for (int64_t i = 0; i < out.numElements(); ++i) {
        double x = a.get(broadcastIndex(i, out.shape, a.shape));
        double y = b.get(broadcastIndex(i, out.shape, b.shape));
        bool expected = d == "eq"   ? x == y
                        : d == "ne" ? x != y
                        : d == "lt" ? x < y
                        : d == "le" ? x <= y
                        : d == "gt" ? x > y
                                    : x >= y;
        ASSERT_EQ(out.getInt(i), expected) << x << " " << d << " " << y;
      }
    }
}

TEST(ElementwiseTest, CompareNaN) {
  Buffer a(program::F32, {2}), b(program::F32, {2});
  a.setValues({NAN, 1.0});
  b.setValues({NAN, NAN});
  EXPECT_EQ(runBinary("compare", a, b, program::BOOL, "eq").values(),
            (std::vector<double>{0, 0}));
  EXPECT_EQ(runBinary("compare", a, b, program::BOOL, "ne").values(),
            (std::vector<double>{1, 1}));
}

TEST(ElementwiseTest, WhereBroadcastsAllThree) {
  std::mt19937 rng(6);
  for (DType dtype : {program::F32, program::F16, program::BF16, program::I64,
                      program::I32, program::I8, program::BOOL}) {
    Buffer cond = randomBuffer(rng, program::BOOL, {1, 5});
    Buffer onTrue = randomBuffer(rng, dtype, {3, 5}, -50, 50);
    Buffer onFalse = randomBuffer(rng, dtype, {}, -50, 50);
    Buffer out(dtype, {3, 5});
    Status s = KernelBuilder("where")
                   .operand(cond)
                   .operand(onTrue)
                   .operand(onFalse)
                   .result(out)
                   .run(testPool());
    ASSERT_TRUE(s.isOk()) << s.message();
    for (int64_t i = 0; i < 15; ++i)
      EXPECT_EQ(out.get(i), cond.getInt(i % 5) ? onTrue.get(i) : onFalse.get(0))
          << typeName(dtype);
  }
}

double refUnary(const std::string &op, double x) {
  if (op == "neg")
    return -x;
  if (op == "abs")
    return std::fabs(x);
  if (op == "exp")
    return std::exp(x);
  if (op == "log")
    return std::log(x);
  if (op == "sqrt")
    return std::sqrt(x);
  if (op == "rsqrt")
    return 1 / std::sqrt(x);
  if (op == "reciprocal")
    return 1 / x;
  if (op == "tanh")
    return std::tanh(x);
  if (op == "erf")
    return std::erf(x);
  if (op == "sin")
    return std::sin(x);
  if (op == "cos")
    return std::cos(x);
  if (op == "sigmoid")
    return 1 / (1 + std::exp(-x));
  if (op == "relu")
    return x < 0 ? 0 : x;
  if (op == "silu")
    return x / (1 + std::exp(-x));
  if (op == "gelu")
    return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
  // gelu tanh
  double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1 + std::tanh(u));
}

struct UnaryCase {
  const char *op;
  double lo, hi;
};

// sin and cos up to 4096: rotary angles, positions in the thousands times
// frequencies near 1.
const UnaryCase kUnaryCases[] = {
    {"neg", -5, 5},       {"abs", -5, 5},          {"exp", -20, 20},
    {"exp", -0.01, 0.01}, {"log", 0.001, 1000},    {"sqrt", 0, 100},
    {"rsqrt", 0.01, 100}, {"reciprocal", 0.1, 10}, {"tanh", -12, 12},
    {"tanh", -0.6, 0.6},  {"erf", -6, 6},          {"erf", -0.7, 0.7},
    {"sigmoid", -30, 30}, {"relu", -5, 5},         {"silu", -30, 30},
    {"gelu", -12, 12},    {"gelu_tanh", -12, 12},  {"gelu", -0.01, 0.01},
    {"sin", -4096, 4096}, {"cos", -4096, 4096},    {"sin", -0.01, 0.01},
    {"cos", -3.2, 3.2},
};

Buffer runUnary(const std::string &op, Buffer &x) {
  Buffer out(x.dtype, x.shape);
  KernelBuilder k(op == "gelu_tanh" ? "gelu" : op);
  k.operand(x).result(out);
  if (op == "gelu_tanh")
    k.attr("approximation", "tanh");
  Status s = k.run(testPool());
  EXPECT_TRUE(s.isOk()) << s.message();
  return out;
}

TEST(ElementwiseTest, FloatUnaryOpsMatchDouble) {
  std::mt19937 rng(8);
  for (DType dtype : kFloatTypes)
    for (const UnaryCase &c : kUnaryCases) {
      SCOPED_TRACE(std::string(c.op) + " " + typeName(dtype) + " on [" +
                   std::to_string(c.lo) + ", " + std::to_string(c.hi) + "]");
      // Many values, so that the f32 sweep probes the approximations.
      int64_t n = dtype == program::F32 ? 20011 : 2003;
      Buffer x = randomBuffer(rng, dtype, {n}, c.lo, c.hi);
      Buffer out = runUnary(c.op, x);
      std::vector<double> expected;
      for (double v : x.values())
        expected.push_back(roundTo(dtype, refUnary(c.op, v)));
      // Absolute slack of 1e-7: the f32 rounding of x^2 inside erfc.
      Tolerance tol = toleranceFor(dtype, 1e-5);
      if (dtype == program::F32)
        tol.atol = 1e-7;
      EXPECT_TRUE(allClose(out.values(), expected, tol));
    }
}

TEST(ElementwiseTest, FloatUnarySpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  Buffer x(program::F32, {6});
  x.setValues({inf, -inf, NAN, 0.0, 100.0, -100.0});
  auto got = [&](const char *op) { return runUnary(op, x).values(); };
  std::vector<double> e = got("exp");
  EXPECT_EQ(e[0], inf);
  EXPECT_EQ(e[1], 0.0);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 1.0);
  EXPECT_EQ(e[4], inf);
  EXPECT_EQ(e[5], 0.0);
  std::vector<double> t = got("tanh");
  EXPECT_EQ(t[0], 1.0);
  EXPECT_EQ(t[1], -1.0);
  EXPECT_TRUE(std::isnan(t[2]));
  std::vector<double> s = got("sigmoid");
  EXPECT_EQ(s[0], 1.0);
  EXPECT_EQ(s[1], 0.0);
  std::vector<double> g = got("gelu");
  EXPECT_EQ(g[4], 100.0);
  EXPECT_EQ(g[5], 0.0);
  std::vector<double> f = got("erf");
  EXPECT_EQ(f[0], 1.0);
  EXPECT_EQ(f[1], -1.0);
  std::vector<double> sine = got("sin"), cosine = got("cos");
  EXPECT_TRUE(std::isnan(sine[0]) && std::isnan(sine[1]) &&
              std::isnan(sine[2]));
  EXPECT_TRUE(std::isnan(cosine[0]) && std::isnan(cosine[1]) &&
              std::isnan(cosine[2]));
  EXPECT_EQ(sine[3], 0.0);
  EXPECT_EQ(cosine[3], 1.0);
  EXPECT_EQ(sine[4], static_cast<double>(std::sin(100.0f)));
}

TEST(ElementwiseTest, IntegerUnaryOps) {
  std::mt19937 rng(9);
  for (DType dtype : kIntTypes) {
    Buffer x = randomBuffer(rng, dtype, {2, 50}, -100, 100);
    x.setInt(0, dtype == program::I8    ? -128
                : dtype == program::I32 ? INT32_MIN
                                        : INT64_MIN);
    for (const char *op : {"neg", "abs", "relu", "not"}) {
      Buffer out = runUnary(op, x);
      std::string o = op;
      for (int64_t i = 0; i < x.numElements(); ++i) {
        int64_t v = x.getInt(i);
        uint64_t negated = 0 - static_cast<uint64_t>(v);
        int64_t expected = o == "neg" ? static_cast<int64_t>(negated)
                           : o == "abs"
                               ? (v < 0 ? static_cast<int64_t>(negated) : v)
                           : o == "relu" ? std::max<int64_t>(v, 0)
                                         : ~v;
        ASSERT_EQ(out.getInt(i), wrap(dtype, expected))
            << op << " " << v << " " << typeName(dtype);
      }
    }
  }
  std::mt19937 boolRng(10);
  Buffer b = randomBuffer(boolRng, program::BOOL, {37});
  Buffer notB = runUnary("not", b);
  for (int64_t i = 0; i < 37; ++i)
    EXPECT_EQ(notB.getInt(i), !b.getInt(i));
}

TEST(ElementwiseTest, CastBetweenEveryPairOfTypes) {
  std::vector<DType> types = {program::F32, program::F16, program::BF16,
                              program::I64, program::I32, program::I8,
                              program::BOOL};
  std::vector<double> sample = {0.0,  -0.0,  1.0,   -1.0,  2.75,   -2.75,
                                0.4,  -0.6,  100.5, 200.9, -129.7, 300.2,
                                65.0, -77.0, 127.0, 128.0};
  for (DType from : types)
    for (DType to : types) {
      SCOPED_TRACE(typeName(from) + " -> " + typeName(to));
      Buffer x(from, {static_cast<int64_t>(sample.size())});
      for (size_t i = 0; i < sample.size(); ++i)
        x.set(i, isFloat(from) ? sample[i] : std::trunc(sample[i]));
      Buffer out(to, x.shape);
      Status s = KernelBuilder("cast").operand(x).result(out).run(testPool());
      ASSERT_TRUE(s.isOk()) << s.message();
      for (int64_t i = 0; i < x.numElements(); ++i) {
        double v = x.get(i);
        double expected;
        if (to == program::BOOL)
          expected = v != 0;
        else if (isFloat(to))
          expected = roundTo(to, v);
        else
          expected = static_cast<double>(
              wrap(to, static_cast<int64_t>(std::trunc(v))));
        ASSERT_EQ(out.get(i), expected) << "value " << v;
      }
    }
}

TEST(ElementwiseTest, CastSaturatesOutOfRangeFloats) {
  Buffer x(program::F32, {4});
  x.setValues({NAN, 1e30, -1e30, 0.25});
  Buffer out(program::I64, {4});
  ASSERT_TRUE(KernelBuilder("cast").operand(x).result(out).run(testPool()));
  EXPECT_EQ(out.getInt(0), 0);
  EXPECT_EQ(out.getInt(1), INT64_MAX);
  EXPECT_EQ(out.getInt(2), INT64_MIN);
  EXPECT_EQ(out.getInt(3), 0);
  Buffer b(program::BOOL, {4});
  ASSERT_TRUE(KernelBuilder("cast").operand(x).result(b).run(testPool()));
  EXPECT_EQ(b.values(), (std::vector<double>{1, 1, 1, 1}));
}

/// Float to a narrower float: an infinity beyond the range, as ONNX's Cast
/// does, or with `saturate` (partita-convert-float's entry casts) the
/// largest finite value of its sign; infinities and NaN stay.
TEST(ElementwiseTest, SaturatingFloatCasts) {
  Buffer x(program::F32, {6});
  x.setValues({1e20, -7e4, 65519.0, INFINITY, NAN, -3.4e38});
  for (bool saturate : {false, true}) {
    Buffer h(program::F16, {6}), b(program::BF16, {6});
    ASSERT_TRUE(KernelBuilder("cast")
                    .operand(x)
                    .result(h)
                    .attr("saturate", saturate)
                    .run(testPool()));
    ASSERT_TRUE(KernelBuilder("cast")
                    .operand(x)
                    .result(b)
                    .attr("saturate", saturate)
                    .run(testPool()));
    double big = saturate ? 65504.0 : INFINITY;
    EXPECT_EQ(h.get(0), big);
    EXPECT_EQ(h.get(1), -big);
    EXPECT_EQ(h.get(2), 65504.0); // Rounds down: below the halfway point.
    EXPECT_EQ(h.get(3), INFINITY);
    EXPECT_TRUE(std::isnan(h.get(4)));
    EXPECT_EQ(h.get(5), -big);
    // bf16 holds 1e20; f32's lowest rounds past bf16's lowest.
    EXPECT_EQ(b.get(5), saturate ? -3.3895313892515355e38 : -INFINITY);
    EXPECT_EQ(b.get(3), INFINITY);
  }
  Buffer i(program::I64, {6}), h(program::F16, {6});
  Status refused = KernelBuilder("cast")
                       .operand(i)
                       .result(h)
                       .attr("saturate", true)
                       .run(testPool());
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.message().find("converts a float to a float"),
            std::string::npos)
      << refused.message();
}

TEST(ElementwiseTest, LargeTensorsSplitAcrossThreads) {
  std::mt19937 rng(12);
  Buffer a = randomBuffer(rng, program::F32, {3, 100003});
  Buffer b = randomBuffer(rng, program::F32, {100003});
  Buffer out = runBinary("mul", a, b, program::F32);
  for (int64_t i = 0; i < out.numElements(); i += 997)
    // One f32 multiplication: correctly rounded on every CPU.
    ASSERT_EQ(out.get(i), static_cast<double>(static_cast<float>(
                              a.get(i) * b.get(i % 100003))));
}

TEST(ElementwiseTest, TypeErrorsNameTheOp) {
  Buffer f(program::F32, {2}), i(program::I32, {2}), out(program::F32, {2}),
      outI(program::I32, {2});
  Status s =
      KernelBuilder("and").operand(f).operand(f).result(out).run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("and"), std::string::npos) << s.message();
  s = KernelBuilder("exp").operand(i).result(outI).run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("exp"), std::string::npos) << s.message();
  s = KernelBuilder("add").operand(f).operand(i).result(out).run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("add"), std::string::npos) << s.message();
  Buffer wide(program::F32, {3});
  s = KernelBuilder("add").operand(f).operand(wide).result(out).run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("broadcast"), std::string::npos) << s.message();
  s = KernelBuilder("compare").operand(f).operand(f).result(out).run(
      testPool());
  EXPECT_FALSE(s.isOk()) << "missing direction";
  EXPECT_NE(s.message().find("direction"), std::string::npos) << s.message();
}

} // namespace
} // namespace partita::runtime::test
