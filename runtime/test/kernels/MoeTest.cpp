//===- MoeTest.cpp - nn.moe's grouped kernel against a per-token loop -----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

namespace partita::runtime::test {
namespace {

struct MoeCase {
  int64_t tokens, hidden, ffn, experts, k;
  std::string activation = "silu";
  bool interleaved = false, fc3 = false, biases = false;
  DType dtype = program::F32;
  DType idType = program::I64;
};

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

/// Token by token, slot by slot, in double: the op's definition.
std::vector<double> refMoe(const MoeCase &c, const Buffer &x, const Buffer &ids,
                           const Buffer &w, const Buffer &fc1,
                           const Buffer &fc2, const Buffer *fc3,
                           const Buffer *b1, const Buffer *b2, const Buffer *b3,
                           double alpha, double beta) {
  bool swiglu = c.activation == "swiglu";
  int64_t fused = swiglu && !fc3 ? 2 * c.ffn : c.ffn;
  std::vector<double> out(c.tokens * c.hidden, 0.0);
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t j = 0; j < c.k; ++j) {
      int64_t e = static_cast<int64_t>(ids.get(t * c.k + j));
      if (e < 0 || e >= c.experts)
        continue;
      auto project = [&](const Buffer &weight, const Buffer *bias, int64_t rows,
                         const std::vector<double> &in, int64_t cols) {
        std::vector<double> y(rows);
        for (int64_t r = 0; r < rows; ++r) {
          double sum = bias ? bias->get(e * rows + r) : 0.0;
          for (int64_t i = 0; i < cols; ++i)
            sum += weight.get((e * rows + r) * cols + i) * in[i];
          y[r] = sum;
        }
        return y;
      };
      std::vector<double> xt(c.hidden);
      for (int64_t i = 0; i < c.hidden; ++i)
        xt[i] = x.get(t * c.hidden + i);
      std::vector<double> h = project(fc1, b1, fused, xt, c.hidden), a(c.ffn);
      std::vector<double> up;
      if (fc3)
        up = project(*fc3, b3, c.ffn, xt, c.hidden);
      for (int64_t f = 0; f < c.ffn; ++f) {
        if (!swiglu) {
          double v = h[f];
          a[f] = c.activation == "relu" ? std::max(v, 0.0)
                 : c.activation == "gelu"
                     ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
                     : v * sigmoid(v);
          continue;
        }
        double g = fc3 ? h[f] : c.interleaved ? h[2 * f] : h[f];
        double u = fc3 ? up[f] : c.interleaved ? h[2 * f + 1] : h[c.ffn + f];
        a[f] = g * sigmoid(alpha * g) * (u + beta);
      }
      std::vector<double> y = project(fc2, b2, c.hidden, a, c.ffn);
      for (int64_t i = 0; i < c.hidden; ++i)
        out[t * c.hidden + i] += w.get(t * c.k + j) * y[i];
    }
  return out;
}

void checkMoe(const MoeCase &c, unsigned seed) {
  std::mt19937 rng(seed);
  bool swiglu = c.activation == "swiglu";
  int64_t fused = swiglu && !c.fc3 ? 2 * c.ffn : c.ffn;
  Buffer x = randomBuffer(rng, c.dtype, {c.tokens, c.hidden});
  Buffer w = randomBuffer(rng, c.dtype, {c.tokens, c.k});
  Buffer fc1 = randomBuffer(rng, c.dtype, {c.experts, fused, c.hidden});
  Buffer fc2 = randomBuffer(rng, c.dtype, {c.experts, c.hidden, c.ffn});
  Buffer fc3 = randomBuffer(rng, c.dtype, {c.experts, c.ffn, c.hidden});
  Buffer b1 = randomBuffer(rng, c.dtype, {c.experts, fused});
  Buffer b2 = randomBuffer(rng, c.dtype, {c.experts, c.hidden});
  Buffer b3 = randomBuffer(rng, c.dtype, {c.experts, c.ffn});
  // Ids: every expert, and -1 and E, which select none.
  Buffer ids(c.idType, {c.tokens, c.k});
  std::uniform_int_distribution<int64_t> pick(-1, c.experts);
  for (int64_t i = 0; i < ids.numElements(); ++i)
    ids.setInt(i, pick(rng));
  double alpha = 1.702, beta = 1.0;
  Buffer out(c.dtype, {c.tokens, c.hidden});
  KernelBuilder kb("moe");
  kb.operand(x).operand(ids).operand(w).operand(fc1).operand(fc2);
  if (c.fc3)
    kb.operand(fc3);
  if (c.biases) {
    kb.operand(b1).operand(b2);
    if (c.fc3)
      kb.operand(b3);
  }
  kb.result(out)
      .attr("activation", c.activation.c_str())
      .attr("interleaved", c.interleaved)
      .attr("has_fc3", c.fc3)
      .attr("has_fc1_bias", c.biases)
      .attr("has_fc2_bias", c.biases)
      .attr("has_fc3_bias", c.biases && c.fc3);
  if (swiglu)
    kb.attr("alpha", alpha).attr("beta", beta);
  Status s = kb.run(testPool());
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<double> expected = refMoe(
      c, x, ids, w, fc1, fc2, c.fc3 ? &fc3 : nullptr, c.biases ? &b1 : nullptr,
      c.biases ? &b2 : nullptr, c.biases && c.fc3 ? &b3 : nullptr,
      swiglu ? alpha : 1.0, swiglu ? beta : 0.0);
  // fp32 sums of H and F products in another order: relative to the
  // outputs' scale (a few units).
  Tolerance tol =
      c.dtype == program::F32 ? Tolerance{1e-4, 1e-4} : toleranceFor(c.dtype);
  EXPECT_TRUE(allClose(out.values(), expected, tol));
}

TEST(MoeTest, SiluTopTwo) { checkMoe({9, 16, 24, 4, 2}, 1); }

TEST(MoeTest, FusedSwigluHalvesAndInterleaved) {
  checkMoe({12, 16, 20, 5, 2, "swiglu"}, 2);
  checkMoe({12, 16, 20, 5, 2, "swiglu", true}, 3);
}

TEST(MoeTest, SwigluWithFc3AndBiases) {
  checkMoe({7, 8, 12, 3, 3, "swiglu", false, true, true}, 4);
}

TEST(MoeTest, ReluGeluAndInt32Ids) {
  checkMoe({10, 8, 16, 6, 1, "relu", false, false, true}, 5);
  checkMoe({10, 8, 16, 6, 2, "gelu", false, false, false, program::F32,
            program::I32},
           6);
}

TEST(MoeTest, HalfAndBfloatStorage) {
  checkMoe({8, 16, 16, 4, 2, "swiglu", false, false, false, program::F16}, 7);
  checkMoe({8, 16, 16, 4, 2, "silu", false, false, true, program::BF16}, 8);
}

TEST(MoeTest, ManyTokensOverThePool) { checkMoe({300, 64, 96, 8, 2}, 9); }

TEST(MoeTest, DecodeStepsReachEachExpertOnce) {
  // One token: each routed expert has one row (the sgemv path).
  checkMoe({1, 32, 48, 6, 3, "swiglu"}, 11);
  checkMoe({1, 32, 48, 6, 2, "silu", false, false, true}, 12);
}

TEST(MoeTest, ExpertsWithoutFeaturesAddTheirBias) {
  // F = 0: fc2 contracts nothing; each routed slot adds its fc2 bias.
  checkMoe({5, 8, 0, 3, 2, "relu", false, false, true}, 10);
}

TEST(MoeTest, WrongOperandsAreErrors) {
  Buffer x(program::F32, {4, 8}), ids(program::I64, {4, 2}),
      w(program::F32, {4, 2}), fc1(program::F32, {3, 16, 8}),
      fc2(program::F32, {3, 8, 12}), out(program::F32, {4, 8});
  auto run = [&](const char *activation) {
    return KernelBuilder("moe")
        .operand(x)
        .operand(ids)
        .operand(w)
        .operand(fc1)
        .operand(fc2)
        .result(out)
        .attr("activation", activation)
        .run(testPool());
  };
  Status s = run("silu");
  EXPECT_FALSE(s.isOk()) << "fc1 [3, 16, 8] with fc2 [3, 8, 12]";
  EXPECT_NE(s.message().find("moe: fc1"), std::string::npos) << s.message();
  s = run("tanh");
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("unknown activation 'tanh'"), std::string::npos)
      << s.message();
}

} // namespace
} // namespace partita::runtime::test
