//===- AttentionGradTest.cpp - attention's backward against the s×s form --===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// attention_grad against a naive reference in double that builds each
// row's whole probability vector: P = softmax(q k^T * scale + mask),
// D = rowsum(dout * out), dS = P (dP - D); dq = scale dS k,
// dk = scale dS^T q and dv = P^T dout summed over each kv group's query
// heads. Rows that see no key have P = 0, as the forward gives them zeros.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

namespace partita::runtime::test {
namespace {

struct GradCase {
  int64_t b, hq, hkv, sq, skv, d, dv;
  bool causal;
  DType maskType = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> maskShape = {};
  DType dtype = program::F32;
};

struct Grads {
  std::vector<double> out, dq, dk, dv;
};

/// The probabilities of row (b, h, i), zeros where the row sees no key.
std::vector<double> refProbabilities(const GradCase &c, const Buffer &q,
                                     const Buffer &k, const Buffer *mask,
                                     double scale, int64_t b, int64_t h,
                                     int64_t i) {
  int64_t hk = h / (c.hq / c.hkv);
  std::vector<int64_t> full = {c.b, c.hq, c.sq, c.skv};
  std::vector<double> s(c.skv);
  double m = -INFINITY;
  for (int64_t j = 0; j < c.skv; ++j) {
    double dot = 0;
    for (int64_t t = 0; t < c.d; ++t)
      dot += q.get(((b * c.hq + h) * c.sq + i) * c.d + t) *
             k.get(((b * c.hkv + hk) * c.skv + j) * c.d + t);
    s[j] = dot * scale;
    if (c.causal && j > i + c.skv - c.sq)
      s[j] = -INFINITY;
    if (mask) {
      int64_t flat = ((b * c.hq + h) * c.sq + i) * c.skv + j;
      double mv = mask->get(broadcastIndex(flat, full, mask->shape));
      if (mask->dtype == program::BOOL)
        s[j] = mv != 0 ? s[j] : -INFINITY;
      else
        s[j] += mv;
    }
    m = std::max(m, s[j]);
  }
  if (m == -INFINITY)
    return std::vector<double>(c.skv, 0.0);
  double sum = 0;
  for (double &x : s)
    sum += x = std::exp(x - m);
  for (double &x : s)
    x /= sum;
  return s;
}

/// The forward's output (for the kernel's `out`, rounded as stored) and
/// the reference cotangents, from `out` as stored.
Grads refGrads(const GradCase &c, const Buffer &q, const Buffer &k,
               const Buffer &v, const Buffer *mask, Buffer &out,
               const Buffer &dout, double scale) {
  Grads r;
  r.dq.assign(c.b * c.hq * c.sq * c.d, 0.0);
  r.dk.assign(c.b * c.hkv * c.skv * c.d, 0.0);
  r.dv.assign(c.b * c.hkv * c.skv * c.dv, 0.0);
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.hq; ++h) {
      int64_t hk = h / (c.hq / c.hkv);
      // The whole [sq, skv] matrix of the head, as the kernel never has it.
      std::vector<std::vector<double>> p(c.sq);
      for (int64_t i = 0; i < c.sq; ++i) {
        p[i] = refProbabilities(c, q, k, mask, scale, b, h, i);
        for (int64_t e = 0; e < c.dv; ++e) {
          double o = 0;
          for (int64_t j = 0; j < c.skv; ++j)
            o += p[i][j] * v.get(((b * c.hkv + hk) * c.skv + j) * c.dv + e);
          out.set(((b * c.hq + h) * c.sq + i) * c.dv + e, o);
        }
      }
      for (int64_t i = 0; i < c.sq; ++i) {
        int64_t row = (b * c.hq + h) * c.sq + i;
        double dsum = 0;
        for (int64_t e = 0; e < c.dv; ++e)
          dsum += dout.get(row * c.dv + e) * out.get(row * c.dv + e);
        for (int64_t j = 0; j < c.skv; ++j) {
          int64_t key = (b * c.hkv + hk) * c.skv + j;
          double dp = 0;
          for (int64_t e = 0; e < c.dv; ++e)
            dp += dout.get(row * c.dv + e) * v.get(key * c.dv + e);
          double ds = p[i][j] * (dp - dsum) * scale;
          for (int64_t t = 0; t < c.d; ++t) {
            r.dq[row * c.d + t] += ds * k.get(key * c.d + t);
            r.dk[key * c.d + t] += ds * q.get(row * c.d + t);
          }
          for (int64_t e = 0; e < c.dv; ++e)
            r.dv[key * c.dv + e] += p[i][j] * dout.get(row * c.dv + e);
        }
      }
    }
  return r;
}

void checkGrad(const GradCase &c, uint32_t seed, bool maskRowsFully = false) {
  std::mt19937 rng(seed);
  Buffer q = randomBuffer(rng, c.dtype, {c.b, c.hq, c.sq, c.d});
  Buffer k = randomBuffer(rng, c.dtype, {c.b, c.hkv, c.skv, c.d});
  Buffer v = randomBuffer(rng, c.dtype, {c.b, c.hkv, c.skv, c.dv});
  Buffer dout = randomBuffer(rng, c.dtype, {c.b, c.hq, c.sq, c.dv});
  Buffer mask;
  bool hasMask = c.maskType != program::DTYPE_UNSPECIFIED;
  if (hasMask) {
    mask = randomBuffer(rng, c.maskType, c.maskShape, -3, 3);
    if (c.maskType == program::BOOL && maskRowsFully) {
      int64_t cols = c.maskShape.back();
      for (int64_t i = 0; i < mask.numElements(); ++i)
        if ((i / cols) % 3 == 1)
          mask.setInt(i, 0);
    }
    if (c.maskType != program::BOOL)
      for (int64_t i = 0; i < mask.numElements(); i += 7)
        mask.set(i, -INFINITY);
  }
  double scale = 1 / std::sqrt(static_cast<double>(c.d)) * 1.3;
  Buffer out(c.dtype, {c.b, c.hq, c.sq, c.dv});
  Grads want =
      refGrads(c, q, k, v, hasMask ? &mask : nullptr, out, dout, scale);
  Buffer dq(c.dtype, q.shape), dk(c.dtype, k.shape), dv(c.dtype, v.shape);
  KernelBuilder kb("attention_grad");
  kb.operand(q).operand(k).operand(v);
  if (hasMask)
    kb.operand(mask);
  kb.operand(out)
      .operand(dout)
      .result(dq)
      .result(dk)
      .result(dv)
      .attr("causal", c.causal)
      .attr("scale", scale)
      .attr("has_mask", hasMask);
  Status s = kb.run(testPool());
  ASSERT_TRUE(s.isOk()) << s.message();
  Tolerance tol = toleranceFor(c.dtype, 1e-4);
  tol.atol = std::max(tol.atol, 1e-5);
  for (auto [name, got, expected] :
       {std::tuple<const char *, Buffer *, std::vector<double> *>{"dq", &dq,
                                                                  &want.dq},
        {"dk", &dk, &want.dk},
        {"dv", &dv, &want.dv}}) {
    SCOPED_TRACE(name);
    for (double &e : *expected)
      e = roundTo(c.dtype, e);
    std::vector<double> values = got->values();
    for (double g : values)
      ASSERT_FALSE(std::isnan(g));
    EXPECT_TRUE(allClose(values, *expected, tol));
  }
}

TEST(AttentionGradTest, MultiHead) {
  checkGrad({2, 4, 4, 10, 10, 8, 8, false}, 70);
}

TEST(AttentionGradTest, CausalAcrossQueryAndKeyBlocks) {
  checkGrad({1, 2, 2, 70, 70, 16, 12, true}, 71);
}

TEST(AttentionGradTest, GroupedQueryHeadsSumIntoTheirKvHead) {
  checkGrad({2, 4, 2, 5, 70, 8, 8, true}, 72);
}

TEST(AttentionGradTest, DecodeRow) {
  checkGrad({1, 4, 1, 1, 130, 32, 16, true}, 73);
}

TEST(AttentionGradTest, BoolMaskWithFullyMaskedRows) {
  checkGrad({2, 2, 1, 9, 140, 8, 4, false, program::BOOL, {2, 1, 9, 140}}, 74,
            /*maskRowsFully=*/true);
}

TEST(AttentionGradTest, AdditiveMaskPerHead) {
  checkGrad({1, 3, 3, 7, 9, 8, 8, false, program::F32, {1, 3, 7, 9}}, 75);
}

TEST(AttentionGradTest, RankTwoMaskBroadcasts) {
  checkGrad({2, 2, 2, 6, 6, 8, 8, true, program::F32, {6, 6}}, 76);
}

TEST(AttentionGradTest, MoreQueriesThanKeysLeavesEarlyRowsZero) {
  // Row i sees keys j <= i - 3: the first three rows see none, and their
  // dq rows are zero.
  checkGrad({1, 2, 2, 8, 5, 8, 8, true}, 77);
}

TEST(AttentionGradTest, HalfAndBfloatStorage) {
  for (DType dtype : {program::F16, program::BF16}) {
    SCOPED_TRACE(typeName(dtype));
    GradCase c{1, 4, 2, 33, 70, 16, 16, true, dtype, {1, 1, 33, 70}};
    c.dtype = dtype;
    checkGrad(c, 78);
  }
}

TEST(AttentionGradTest, ManyBlocksAndThreads) {
  checkGrad({2, 4, 4, 100, 150, 32, 24, false}, 79);
}

TEST(AttentionGradTest, OperandAndResultErrorsNameTheOp) {
  Buffer q(program::F32, {1, 2, 4, 8}), out(program::F32, {1, 2, 4, 8}),
      dq(program::F32, {1, 2, 4, 8});
  Status s = KernelBuilder("attention_grad")
                 .operand(q)
                 .operand(q)
                 .operand(q)
                 .operand(out)
                 .operand(out)
                 .result(dq)
                 .result(dq)
                 .result(dq)
                 .attr("has_mask", true)
                 .run(testPool());
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("attention_grad: expected 6 operands"),
            std::string::npos)
      << s.message();
  Buffer shortDout(program::F32, {1, 2, 3, 8});
  s = KernelBuilder("attention_grad")
          .operand(q)
          .operand(q)
          .operand(q)
          .operand(out)
          .operand(shortDout)
          .result(dq)
          .result(dq)
          .result(dq)
          .run(testPool());
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("dout"), std::string::npos) << s.message();
  Buffer wideDk(program::F32, {1, 2, 4, 16});
  s = KernelBuilder("attention_grad")
          .operand(q)
          .operand(q)
          .operand(q)
          .operand(out)
          .operand(out)
          .result(dq)
          .result(wideDk)
          .result(dq)
          .run(testPool());
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("dk"), std::string::npos) << s.message();
}

} // namespace
} // namespace partita::runtime::test
