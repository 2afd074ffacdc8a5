//===- Moe.cpp - mixtures of experts as grouped products ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// nn.moe on the host: the routed (token, slot) pairs are sorted by expert (a
// counting sort, stable, so each expert's rows keep token order), the
// tokens' hidden states gathered into one [S, H] matrix in that order, and
// each projection is one grouped product: for every expert, its rows times
// its weight, one cblas_sgemm per (expert, block of features), the blocks
// of all experts spread over the pool together. A block of fc1 (a swiglu's
// gate and up rows of the same features, and fc3's) is activated as soon
// as it is computed, while in cache; fc2 follows; each token's result is
// then its slots' rows weighted by their routing weights, added in slot
// order. The work is the routed work only: S = the routed slots, at most
// T * k rows.
//
// Weights are [E, out, in] (transformers' and onnxruntime's layout), so
// each product multiplies by the transposed block, which sgemm reads in
// place. f16 and bf16 operands are widened to fp32 first, the result
// narrowed at the end.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"
#include "MathApprox.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <optional>

namespace partita::runtime::kernels {

namespace {

enum class Activation { Relu, Gelu, GeluTanh, Silu, Identity, Swiglu };

/// nn.moe's activations by their names in a program (MoeActivation's).
std::optional<Activation> parseActivation(const std::string &name) {
  static const std::pair<const char *, Activation> kNames[] = {
      {"relu", Activation::Relu},          {"gelu", Activation::Gelu},
      {"gelu_tanh", Activation::GeluTanh}, {"silu", Activation::Silu},
      {"identity", Activation::Identity},  {"swiglu", Activation::Swiglu}};
  for (auto [spelling, activation] : kNames)
    if (name == spelling)
      return activation;
  return std::nullopt;
}

struct MoeParams {
  Activation activation = Activation::Identity;
  bool interleaved = false;
  float alpha = 1.0f, beta = 0.0f;
  std::optional<float> limit;
  int64_t tokens = 0, hidden = 0, k = 0, experts = 0, ffn = 0, fused = 0;
};

/// The routed slots, grouped by expert: `slot[r]` is the flat (token, slot)
/// index of row r; expert e's rows are [first[e], first[e + 1]).
struct Dispatch {
  std::vector<int64_t> slot;
  std::vector<int64_t> first;
  /// Each flat (token, slot) index's row, or -1 where it selects no expert.
  std::vector<int64_t> rowOf;
};

template <typename I>
Dispatch dispatch(const I *ids, int64_t slots, int64_t experts) {
  Dispatch d;
  d.first.assign(experts + 1, 0);
  for (int64_t i = 0; i < slots; ++i)
    if (ids[i] >= 0 && ids[i] < experts)
      ++d.first[ids[i] + 1];
  for (int64_t e = 0; e < experts; ++e)
    d.first[e + 1] += d.first[e];
  d.slot.resize(d.first[experts]);
  d.rowOf.assign(slots, -1);
  std::vector<int64_t> next(d.first.begin(), d.first.end() - 1);
  for (int64_t i = 0; i < slots; ++i)
    if (ids[i] >= 0 && ids[i] < experts) {
      int64_t row = next[ids[i]]++;
      d.slot[row] = i;
      d.rowOf[i] = row;
    }
  return d;
}

/// c[r, j] = in[r, :] . w[j, :] + bias[j] for `rows` rows of `in` ([.,
/// kIn]) and `count` rows of `w`, into `c` with rows `ldc` apart: one sgemm
/// (sgemv for one row).
void blockProduct(const float *in, int64_t rows, int64_t kIn, const float *w,
                  const float *bias, int64_t count, float *c, int64_t ldc) {
  if (kIn == 0) { // Nothing to contract (cblas refuses a leading dim 0).
    for (int64_t r = 0; r < rows; ++r)
      std::fill_n(c + r * ldc, count, 0.0f);
  } else if (rows == 1) { // One token (decode): sgemv streams the block.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(count),
                static_cast<int>(kIn), 1.0f, w, static_cast<int>(kIn), in, 1,
                0.0f, c, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                static_cast<int>(count), static_cast<int>(kIn), 1.0f, in,
                static_cast<int>(kIn), w, static_cast<int>(kIn), 0.0f, c,
                static_cast<int>(ldc));
  }
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < count; ++j)
        c[r * ldc + j] += bias[j];
}

/// Runs `unit(e, j0, j1)` for every expert with rows and block [j0, j1) of
/// `n` columns, over the pool together. Each sgemm packs its rows of the
/// input again, so the blocks are as wide as keeping every thread busy
/// allows: about two units per thread over the experts that have rows, at
/// least 64 columns. `cost` is one unit's work per row and column.
template <typename Unit>
void forEachExpertBlock(ThreadPool &pool, const Dispatch &d, int64_t n,
                        int64_t cost, const Unit &unit) {
  int64_t experts = static_cast<int64_t>(d.first.size()) - 1;
  int64_t active = 0;
  for (int64_t e = 0; e < experts; ++e)
    active += d.first[e + 1] > d.first[e];
  int64_t threads = static_cast<int64_t>(pool.size());
  int64_t perExpert = std::max<int64_t>(1, (2 * threads + active - 1) /
                                               std::max<int64_t>(1, active));
  int64_t width =
      std::max<int64_t>(64, ((n + perExpert - 1) / perExpert + 15) / 16 * 16);
  int64_t blocks = (n + width - 1) / width;
  std::vector<std::pair<int64_t, int64_t>> units;
  for (int64_t e = 0; e < experts; ++e)
    if (d.first[e + 1] > d.first[e])
      for (int64_t b = 0; b < blocks; ++b)
        units.push_back({e, b});
  int64_t rowsPerUnit =
      units.empty() ? 1 : static_cast<int64_t>(d.slot.size()) / active + 1;
  pool.parallelFor(
      static_cast<int64_t>(units.size()),
      grainFor(rowsPerUnit * width * std::max<int64_t>(cost, 1), 1 << 20),
      [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          auto [e, b] = units[u];
          unit(e, b * width, std::min(n, (b + 1) * width));
        }
      });
}

float activate(Activation a, float x) {
  switch (a) {
  case Activation::Relu:
    return x > 0.0f ? x : 0.0f;
  case Activation::Gelu:
    return geluErfApprox(x);
  case Activation::GeluTanh:
    return geluTanhApprox(x);
  case Activation::Silu:
    return x * sigmoidApprox(x);
  default:
    return x;
  }
}

float swigluOf(const MoeParams &p, float g, float u) {
  if (p.limit) {
    g = std::min(g, *p.limit);
    u = std::clamp(u, -*p.limit, *p.limit);
  }
  return g * sigmoidApprox(p.alpha * g) * (u + p.beta);
}

/// The f32 computation: x [T, H], ids and weights [T, k], fc1 [E, F1, H],
/// fc2 [E, H, F], fc3 [E, F, H] or null, biases or null; out [T, H].
template <typename I>
void moeF32(ThreadPool &pool, const MoeParams &p, const float *x, const I *ids,
            const float *weights, const float *fc1, const float *fc2,
            const float *fc3, const float *bias1, const float *bias2,
            const float *bias3, float *out) {
  Dispatch d = dispatch(ids, p.tokens * p.k, p.experts);
  int64_t rows = static_cast<int64_t>(d.slot.size());
  int64_t h = p.hidden, f = p.ffn;
  std::vector<float> gathered(std::max<int64_t>(rows * h, 1));
  pool.parallelFor(rows, grainFor(h), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      std::copy_n(x + (d.slot[r] / p.k) * h, h, gathered.data() + r * h);
  });
  // fc1 (and fc3) and the activation, a block of each expert's features
  // at a time, into [S, F]: the gate and up rows of a block (fc1's halves
  // or pairs, or fc1 and fc3) are multiplied together and activated while
  // in cache.
  std::vector<float> act(std::max<int64_t>(rows * f, 1));
  bool swiglu = p.activation == Activation::Swiglu;
  forEachExpertBlock(
      pool, d, f, (swiglu ? 2 : 1) * h, [&](int64_t e, int64_t j0, int64_t j1) {
        int64_t r0 = d.first[e], count = d.first[e + 1] - r0, n = j1 - j0;
        const float *in = gathered.data() + r0 * h;
        float *dst = act.data() + r0 * f + j0;
        auto weightRows = [&](const float *w, int64_t rowsOf, int64_t row) {
          return w + (e * rowsOf + row) * h;
        };
        auto biasOf = [&](const float *b, int64_t rowsOf, int64_t row) {
          return b ? b + e * rowsOf + row : nullptr;
        };
        if (!swiglu) {
          blockProduct(in, count, h, weightRows(fc1, f, j0),
                       biasOf(bias1, f, j0), n, dst, f);
          for (int64_t r = 0; r < count; ++r)
            for (int64_t j = 0; j < n; ++j)
              dst[r * f + j] = activate(p.activation, dst[r * f + j]);
          return;
        }
        // Gate and up of the block, [count, n] each (interleaved: pairs,
        // [count, 2n]).
        std::vector<float> scratch(std::max<int64_t>(2 * count * n, 1));
        float *gate = scratch.data(), *up = gate + count * n;
        if (fc3) {
          blockProduct(in, count, h, weightRows(fc1, f, j0),
                       biasOf(bias1, f, j0), n, gate, n);
          blockProduct(in, count, h, weightRows(fc3, f, j0),
                       biasOf(bias3, f, j0), n, up, n);
        } else if (p.interleaved) {
          blockProduct(in, count, h, weightRows(fc1, 2 * f, 2 * j0),
                       biasOf(bias1, 2 * f, 2 * j0), 2 * n, gate, 2 * n);
        } else {
          blockProduct(in, count, h, weightRows(fc1, 2 * f, j0),
                       biasOf(bias1, 2 * f, j0), n, gate, n);
          blockProduct(in, count, h, weightRows(fc1, 2 * f, f + j0),
                       biasOf(bias1, 2 * f, f + j0), n, up, n);
        }
        for (int64_t r = 0; r < count; ++r)
          for (int64_t j = 0; j < n; ++j) {
            float g, u;
            if (p.interleaved && !fc3) {
              g = gate[r * 2 * n + 2 * j];
              u = gate[r * 2 * n + 2 * j + 1];
            } else {
              g = gate[r * n + j];
              u = up[r * n + j];
            }
            dst[r * f + j] = swigluOf(p, g, u);
          }
      });
  std::vector<float> second(std::max<int64_t>(rows * h, 1));
  forEachExpertBlock(pool, d, h, f, [&](int64_t e, int64_t j0, int64_t j1) {
    int64_t r0 = d.first[e], count = d.first[e + 1] - r0;
    blockProduct(act.data() + r0 * f, count, f, fc2 + (e * h + j0) * f,
                 bias2 ? bias2 + e * h + j0 : nullptr, j1 - j0,
                 second.data() + r0 * h + j0, h);
  });
  // Combine: each token's slots in order, weighted.
  pool.parallelFor(p.tokens, grainFor(h * p.k), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float *o = out + t * h;
      std::fill_n(o, h, 0.0f);
      for (int64_t j = 0; j < p.k; ++j) {
        int64_t r = d.rowOf[t * p.k + j];
        if (r < 0)
          continue;
        float wt = weights[t * p.k + j];
        const float *y = second.data() + r * h;
        for (int64_t c = 0; c < h; ++c)
          o[c] += wt * y[c];
      }
    }
  });
}

} // namespace

Status runMoe(KernelContext &ctx) {
  std::string activationName;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getString("activation", activationName));
  std::optional<Activation> activation = parseActivation(activationName);
  if (!activation)
    return ctx.error("unknown activation '" + activationName + "'");
  MoeParams p;
  p.activation = *activation;
  bool hasFc3, hasBias[3];
  PARTITA_RETURN_IF_ERROR(
      ctx.attrs.getBool("interleaved", p.interleaved, false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_fc3", hasFc3, false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_fc1_bias", hasBias[0], false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_fc2_bias", hasBias[1], false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_fc3_bias", hasBias[2], false));
  for (auto [name, field] :
       {std::pair("alpha", &p.alpha), std::pair("beta", &p.beta)})
    if (ctx.attrs.has(name)) {
      double value;
      PARTITA_RETURN_IF_ERROR(ctx.attrs.getFloat(name, value));
      *field = static_cast<float>(value);
    }
  if (ctx.attrs.has("limit")) {
    double value;
    PARTITA_RETURN_IF_ERROR(ctx.attrs.getFloat("limit", value));
    p.limit = static_cast<float>(value);
  }
  bool swiglu = p.activation == Activation::Swiglu;
  if ((hasFc3 || p.interleaved || p.limit) && !swiglu)
    return ctx.error("fc3, interleaved and limit belong to a swiglu");
  if (hasBias[2] && !hasFc3)
    return ctx.error("fc3_bias needs fc3");
  size_t expected = 5 + hasFc3 + hasBias[0] + hasBias[1] + hasBias[2];
  if (ctx.operands.size() != expected)
    return ctx.error("expected " + std::to_string(expected) +
                     " operands for its has_* attributes, got " +
                     std::to_string(ctx.operands.size()));

  const Tensor &x = ctx.operands[0], &ids = ctx.operands[1],
               &weights = ctx.operands[2], &fc1 = ctx.operands[3],
               &fc2 = ctx.operands[4];
  size_t next = 5;
  const Tensor *fc3 = hasFc3 ? &ctx.operands[next++] : nullptr;
  const Tensor *bias[3];
  for (int i = 0; i < 3; ++i)
    bias[i] = hasBias[i] ? &ctx.operands[next++] : nullptr;
  const Tensor &result = ctx.results[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectFloat(x, "the input"));
  if (x.shape.size() != 2 || ids.shape.size() != 2 ||
      ids.shape[0] != x.shape[0] || ids.shape[1] < 1)
    return ctx.error("the input " + shapeString(x.shape) +
                     " must be [tokens, hidden] and the expert ids " +
                     shapeString(ids.shape) + " [tokens, k]");
  if (ids.dtype != program::I64 && ids.dtype != program::I32)
    return ctx.error("the expert ids must be i32 or i64, got " +
                     dtypeName(ids.dtype));
  p.tokens = x.shape[0];
  p.hidden = x.shape[1];
  p.k = ids.shape[1];
  if (fc1.shape.size() != 3 || fc2.shape.size() != 3)
    return ctx.error("fc1 " + shapeString(fc1.shape) + " and fc2 " +
                     shapeString(fc2.shape) + " must be [E, out, in]");
  p.experts = fc1.shape[0];
  p.ffn = fc2.shape[2];
  p.fused = swiglu && !hasFc3 ? 2 * p.ffn : p.ffn;
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(weights, x.dtype, "routing weights"));
  PARTITA_RETURN_IF_ERROR(
      ctx.expectShape(weights, ids.shape, "routing weights"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, x.dtype, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, x.shape, "the result"));
  struct Expected {
    const Tensor *tensor;
    std::vector<int64_t> shape;
    const char *what;
  };
  Expected checks[] = {{&fc1, {p.experts, p.fused, p.hidden}, "fc1"},
                       {&fc2, {p.experts, p.hidden, p.ffn}, "fc2"},
                       {fc3, {p.experts, p.ffn, p.hidden}, "fc3"},
                       {bias[0], {p.experts, p.fused}, "fc1_bias"},
                       {bias[1], {p.experts, p.hidden}, "fc2_bias"},
                       {bias[2], {p.experts, p.ffn}, "fc3_bias"}};
  for (const Expected &c : checks) {
    if (!c.tensor)
      continue;
    PARTITA_RETURN_IF_ERROR(ctx.expectDType(*c.tensor, x.dtype, c.what));
    PARTITA_RETURN_IF_ERROR(ctx.expectShape(*c.tensor, c.shape, c.what));
  }
  int64_t largest = std::max({p.hidden, p.fused, p.tokens * p.k});
  if (largest > INT32_MAX)
    return ctx.error("matrices above 2^31 rows or columns are not supported "
                     "by cblas");
  if (x.numElements() == 0)
    return Status::ok();
  useSingleThreadedBlas();
  return visitFloat(ctx, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Fp32<T> xs(ctx.pool, x), ws(ctx.pool, weights), w1(ctx.pool, fc1),
        w2(ctx.pool, fc2);
    std::optional<Fp32<T>> w3, b[3];
    if (fc3)
      w3.emplace(ctx.pool, *fc3);
    for (int i = 0; i < 3; ++i)
      if (bias[i])
        b[i].emplace(ctx.pool, *bias[i]);
    auto data = [](const std::optional<Fp32<T>> &v) {
      return v ? v->data : nullptr;
    };
    std::unique_ptr<float[]> wide;
    float *out;
    if constexpr (std::is_same_v<T, float>) {
      out = result.as<float>();
    } else {
      wide.reset(new float[result.numElements()]);
      out = wide.get();
    }
    auto run = [&](auto *idData) {
      moeF32(ctx.pool, p, xs.data, idData, ws.data, w1.data, w2.data, data(w3),
             data(b[0]), data(b[1]), data(b[2]), out);
    };
    if (ids.dtype == program::I64)
      run(ids.as<int64_t>());
    else
      run(ids.as<int32_t>());
    if constexpr (!std::is_same_v<T, float>) {
      T *dst = result.as<T>();
      int64_t n = result.numElements();
      ctx.pool.parallelFor(n, grainFor(1, 1 << 16),
                           [&](int64_t b0, int64_t b1) {
                             for (int64_t i = b0; i < b1; ++i)
                               dst[i] = storeFloat<T>(out[i]);
                           });
    }
    return Status::ok();
  });
}

} // namespace partita::runtime::kernels
