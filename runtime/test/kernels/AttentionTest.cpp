//===- AttentionTest.cpp - attention against softmax(QK^T)V, and rope -----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

namespace partita::runtime::test {
namespace {

struct AttentionCase {
  int64_t b, hq, hkv, sq, skv, d, dv;
  bool causal;
  // Mask: none, bool or float, with its shape.
  DType maskType = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> maskShape = {};
  DType dtype = program::F32;
};

/// The naive reference: full scores, softmax, weighted sum; rows with no
/// visible key are zeros.
std::vector<double> refAttention(const AttentionCase &c, const Buffer &q,
                                 const Buffer &k, const Buffer &v,
                                 const Buffer *mask, double scale) {
  std::vector<double> out(c.b * c.hq * c.sq * c.dv, 0.0);
  std::vector<int64_t> full = {c.b, c.hq, c.sq, c.skv};
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        int64_t hk = h / (c.hq / c.hkv);
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
          continue;
        double sum = 0;
        for (double &x : s)
          sum += x = std::exp(x - m);
        for (int64_t j = 0; j < c.skv; ++j)
          for (int64_t e = 0; e < c.dv; ++e)
            out[((b * c.hq + h) * c.sq + i) * c.dv + e] +=
                s[j] / sum * v.get(((b * c.hkv + hk) * c.skv + j) * c.dv + e);
      }
  return out;
}

void checkAttention(const AttentionCase &c, uint32_t seed,
                    bool maskRowsFully = false) {
  std::mt19937 rng(seed);
  Buffer q = randomBuffer(rng, c.dtype, {c.b, c.hq, c.sq, c.d});
  Buffer k = randomBuffer(rng, c.dtype, {c.b, c.hkv, c.skv, c.d});
  Buffer v = randomBuffer(rng, c.dtype, {c.b, c.hkv, c.skv, c.dv});
  Buffer mask;
  bool hasMask = c.maskType != program::DTYPE_UNSPECIFIED;
  if (hasMask) {
    mask = randomBuffer(rng, c.maskType, c.maskShape, -3, 3);
    if (c.maskType == program::BOOL && maskRowsFully) {
      // Whole rows (and thus whole key blocks) masked out.
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
  KernelBuilder kb("attention");
  kb.operand(q).operand(k).operand(v);
  if (hasMask)
    kb.operand(mask);
  kb.result(out)
      .attr("causal", c.causal)
      .attr("scale", scale)
      .attr("has_mask", hasMask);
  Status s = kb.run(testPool());
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<double> expected =
      refAttention(c, q, k, v, hasMask ? &mask : nullptr, scale);
  for (double &e : expected)
    e = roundTo(c.dtype, e);
  Tolerance tol = toleranceFor(c.dtype, 1e-4);
  tol.atol = std::max(tol.atol, 1e-5);
  std::vector<double> got = out.values();
  for (double g : got)
    ASSERT_FALSE(std::isnan(g));
  EXPECT_TRUE(allClose(got, expected, tol));
}

TEST(AttentionTest, MultiHead) {
  checkAttention({2, 4, 4, 10, 10, 8, 8, false}, 50);
}

TEST(AttentionTest, CausalSquare) {
  checkAttention({1, 3, 3, 70, 70, 16, 12, true}, 51);
}

TEST(AttentionTest, GroupedQueryHeadsAcrossKeyBlocks) {
  checkAttention({2, 6, 2, 5, 70, 8, 8, true}, 52);
}

TEST(AttentionTest, DecodeStepWithCache) {
  checkAttention({1, 4, 1, 1, 130, 32, 32, true}, 53);
}

TEST(AttentionTest, BoolPaddingMask) {
  checkAttention({2, 2, 2, 3, 130, 8, 8, true, program::BOOL, {2, 1, 1, 130}},
                 54);
}

TEST(AttentionTest, BoolMaskWithFullyMaskedRows) {
  checkAttention({2, 2, 1, 9, 140, 8, 4, false, program::BOOL, {2, 1, 9, 140}},
                 55,
                 /*maskRowsFully=*/true);
}

TEST(AttentionTest, AdditiveMaskPerHead) {
  checkAttention({1, 3, 3, 7, 9, 8, 8, false, program::F32, {1, 3, 7, 9}}, 56);
}

TEST(AttentionTest, RankTwoMaskBroadcasts) {
  checkAttention({2, 2, 2, 6, 6, 8, 8, true, program::F32, {6, 6}}, 57);
}

TEST(AttentionTest, MoreQueriesThanKeysLeavesEarlyRowsEmpty) {
  // Row i sees keys j <= i - 3: the first three rows see none.
  checkAttention({1, 2, 2, 8, 5, 8, 8, true}, 58);
}

TEST(AttentionTest, HalfAndBfloatStorage) {
  for (DType dtype : {program::F16, program::BF16}) {
    SCOPED_TRACE(typeName(dtype));
    AttentionCase c{1, 4, 2, 33, 70, 16, 16, true, dtype, {1, 1, 33, 70}};
    c.dtype = dtype;
    checkAttention(c, 59);
  }
}

TEST(AttentionTest, ManyBlocksAndThreads) {
  checkAttention({1, 4, 4, 150, 200, 64, 64, true}, 60);
}

TEST(AttentionTest, ShapeErrorsNameTheOp) {
  Buffer q(program::F32, {1, 3, 4, 8}), k(program::F32, {1, 2, 4, 8}),
      v(program::F32, {1, 2, 4, 8}), out(program::F32, {1, 3, 4, 8});
  Status s = KernelBuilder("attention")
                 .operand(q)
                 .operand(k)
                 .operand(v)
                 .result(out)
                 .attr("scale", 0.3)
                 .run(testPool());
  EXPECT_FALSE(s.isOk()) << "3 query heads over 2 kv heads";
  EXPECT_NE(s.message().find("attention"), std::string::npos);
  Buffer k3(program::F32, {1, 3, 4, 8}), v3(program::F32, {1, 3, 4, 8}),
      mask(program::F32, {2, 4});
  s = KernelBuilder("attention")
          .operand(q)
          .operand(k3)
          .operand(v3)
          .operand(mask)
          .result(out)
          .attr("has_mask", true)
          .run(testPool());
  EXPECT_FALSE(s.isOk()) << "mask [2, 4] against [1, 3, 4, 4]";
  EXPECT_NE(s.message().find("mask"), std::string::npos);
}

std::vector<double> refRope(const Buffer &x, const Buffer &cosT,
                            const Buffer &sinT, bool interleaved) {
  int64_t b = x.shape[0], h = x.shape[1], s = x.shape[2], d = x.shape[3];
  int64_t half = cosT.shape[2];
  std::vector<double> out = x.values();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t si = 0; si < s; ++si) {
        int64_t row = ((bi * h + hi) * s + si) * d;
        int64_t cb = cosT.shape[0] == 1 ? 0 : bi;
        for (int64_t i = 0; i < half; ++i) {
          double c = cosT.get((cb * s + si) * half + i);
          double sn = sinT.get((cb * s + si) * half + i);
          int64_t i1 = interleaved ? 2 * i : i;
          int64_t i2 = interleaved ? 2 * i + 1 : i + half;
          double x1 = x.get(row + i1), x2 = x.get(row + i2);
          out[row + i1] = x1 * c - x2 * sn;
          out[row + i2] = x2 * c + x1 * sn;
        }
      }
  return out;
}

/// attention_partial with positions: query rows and keys in any order,
/// key j visible to row i when kpos[j] <= qpos[i]; the output is normalized
/// within the block, with the visible scores' maximum and sum of
/// exp(score - maximum).
TEST(AttentionPartialTest, PositionsAndRowStatistics) {
  const int64_t b = 1, hq = 4, hkv = 2, sq = 40, skv = 70, d = 8;
  std::mt19937 rng(7);
  Buffer q = randomBuffer(rng, program::F32, {b, hq, sq, d});
  Buffer k = randomBuffer(rng, program::F32, {b, hkv, skv, d});
  Buffer v = randomBuffer(rng, program::F32, {b, hkv, skv, d});
  // Zigzag-like positions: queries from two far-apart chunks, keys spread
  // so that some rows see no key at all.
  Buffer qpos(program::I64, {sq}), kpos(program::I64, {skv});
  for (int64_t i = 0; i < sq; ++i)
    qpos.setInt(i, i < sq / 2 ? 10 + i : 200 + i);
  for (int64_t j = 0; j < skv; ++j)
    kpos.setInt(j, 3 * j);
  Buffer out(program::F32, {b, hq, sq, d}), rowMax(program::F32, {b, hq, sq}),
      rowSum(program::F32, {b, hq, sq});
  double scale = 0.4;
  Status s = KernelBuilder("attention_partial")
                 .operand(q)
                 .operand(k)
                 .operand(v)
                 .operand(qpos)
                 .operand(kpos)
                 .result(out)
                 .result(rowMax)
                 .result(rowSum)
                 .attr("scale", scale)
                 .attr("has_mask", false)
                 .attr("has_positions", true)
                 .run(testPool());
  ASSERT_TRUE(s.isOk()) << s.message();
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < sq; ++i) {
      int64_t hk = h / (hq / hkv);
      std::vector<double> scores;
      std::vector<int64_t> keys;
      for (int64_t j = 0; j < skv; ++j) {
        if (kpos.get(j) > qpos.get(i))
          continue;
        double dot = 0;
        for (int64_t t = 0; t < d; ++t)
          dot += q.get((h * sq + i) * d + t) * k.get((hk * skv + j) * d + t);
        scores.push_back(dot * scale);
        keys.push_back(j);
      }
      double gotMax = rowMax.get(h * sq + i), gotSum = rowSum.get(h * sq + i);
      if (scores.empty()) {
        EXPECT_EQ(gotMax, -INFINITY);
        EXPECT_EQ(gotSum, 0.0);
        for (int64_t t = 0; t < d; ++t)
          EXPECT_EQ(out.get((h * sq + i) * d + t), 0.0);
        continue;
      }
      double m = *std::max_element(scores.begin(), scores.end()), sum = 0;
      for (double x : scores)
        sum += std::exp(x - m);
      EXPECT_NEAR(gotMax, m, 1e-5) << "row " << i;
      EXPECT_NEAR(gotSum, sum, 1e-4 * sum) << "row " << i;
      for (int64_t t = 0; t < d; ++t) {
        double want = 0;
        for (size_t n = 0; n < keys.size(); ++n)
          want += std::exp(scores[n] - m) / sum *
                  v.get((hk * skv + keys[n]) * d + t);
        EXPECT_NEAR(out.get((h * sq + i) * d + t), want, 1e-4);
      }
    }
}

TEST(AttentionPartialTest, OperandCountFollowsTheFlags) {
  Buffer q(program::F32, {1, 1, 2, 4}), out(program::F32, {1, 1, 2, 4}),
      stats(program::F32, {1, 1, 2});
  Status s = KernelBuilder("attention_partial")
                 .operand(q)
                 .operand(q)
                 .operand(q)
                 .result(out)
                 .result(stats)
                 .result(stats)
                 .attr("has_positions", true)
                 .run(testPool());
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("expected 5 operands"), std::string::npos)
      << s.message();
}

/// A fully masked row's scores are all near the mask's value (-10000 here,
/// as older BERT exports add): the row's maximum is that exact score and
/// the sum counts the keys, where a log-sum-exp of that size would round
/// the log of the count away (docs/reliability.md).
TEST(AttentionPartialTest, FullyMaskedRowKeepsItsKeyCount) {
  const int64_t keys = 8;
  Buffer q(program::F32, {1, 1, 1, 4}), k(program::F32, {1, 1, keys, 4}),
      mask(program::F32, {1, 1, 1, keys}), out(program::F32, {1, 1, 1, 4}),
      rowMax(program::F32, {1, 1, 1}), rowSum(program::F32, {1, 1, 1});
  for (int64_t j = 0; j < keys; ++j)
    mask.set(j, -10000.0);
  Status s = KernelBuilder("attention_partial")
                 .operand(q)
                 .operand(k)
                 .operand(k)
                 .operand(mask)
                 .result(out)
                 .result(rowMax)
                 .result(rowSum)
                 .attr("has_mask", true)
                 .attr("has_positions", false)
                 .run(testPool());
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(rowMax.get(0), -10000.0);
  EXPECT_EQ(rowSum.get(0), double(keys));
}

TEST(RopeTest, SplitHalvesAndInterleaved) {
  std::mt19937 rng(61);
  struct Case {
    std::vector<int64_t> x;
    int64_t tableBatch, half;
  };
  for (DType dtype : kFloatTypes)
    for (Case c : {Case{{2, 3, 5, 8}, 1, 4}, Case{{2, 2, 7, 10}, 2, 3},
                   Case{{1, 4, 3, 64}, 1, 32}})
      for (bool interleaved : {false, true}) {
        SCOPED_TRACE(typeName(dtype) + " " + shapeString(c.x) +
                     (interleaved ? " interleaved" : " halves"));
        Buffer x = randomBuffer(rng, dtype, c.x);
        Buffer cosT =
            randomBuffer(rng, dtype, {c.tableBatch, c.x[2], c.half}, -1, 1);
        Buffer sinT =
            randomBuffer(rng, dtype, {c.tableBatch, c.x[2], c.half}, -1, 1);
        Buffer out(dtype, c.x);
        Status s = KernelBuilder("rope")
                       .operand(x)
                       .operand(cosT)
                       .operand(sinT)
                       .result(out)
                       .attr("interleaved", interleaved)
                       .run(testPool());
        ASSERT_TRUE(s.isOk()) << s.message();
        std::vector<double> expected = refRope(x, cosT, sinT, interleaved);
        for (double &e : expected)
          e = roundTo(dtype, e);
        EXPECT_TRUE(allClose(out.values(), expected, toleranceFor(dtype)));
      }
}

TEST(RopeTest, RotaryWiderThanHeadIsAnError) {
  Buffer x(program::F32, {1, 1, 2, 4}), cosT(program::F32, {1, 2, 3}),
      sinT(program::F32, {1, 2, 3}), out(program::F32, {1, 1, 2, 4});
  Status s = KernelBuilder("rope")
                 .operand(x)
                 .operand(cosT)
                 .operand(sinT)
                 .result(out)
                 .run(testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("rope"), std::string::npos);
}

} // namespace
} // namespace partita::runtime::test
