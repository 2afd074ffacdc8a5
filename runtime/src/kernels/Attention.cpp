//===- Attention.cpp - blockwise attention, its backward, rotary ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Attention never forms the [sq, skv] score matrix. Each task owns a block
// of kQueryBlock query rows of one (batch, head) and walks the keys in
// blocks of kKeyBlock with an online softmax: a running maximum and sum per
// row, rescaling the partial output when the maximum grows. Memory is one
// block of scores and one of output per task. Key blocks wholly above the
// causal diagonal, or wholly masked out by a bool mask, are skipped.
//
// The two products per block (Q K^T, P V) are small matrices; they run in a
// register-tiled loop here rather than in OpenBLAS, whose own threads would
// oversubscribe the cores when called from every pool worker.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"
#include "MathApprox.h"

#include <cstring>
#include <limits>
#include <type_traits>

namespace partita::runtime::kernels {

namespace {

constexpr int64_t kQueryBlock = 32;
constexpr int64_t kKeyBlock = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Eight floats as one value: a ymm register in the AVX2 clone, a pair of
/// xmm registers in the baseline one.
typedef float Vec8 __attribute__((vector_size(32)));

/// A full tile of C (+)= A B: R rows by 16 columns, the accumulators held
/// in registers across the whole contraction.
template <int R>
inline void gemmTile(int64_t depth, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float *c, int64_t ldc, bool accumulate) {
  Vec8 acc[R][2];
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) {
      if (accumulate)
        std::memcpy(&acc[r][h], c + r * ldc + 8 * h, sizeof(Vec8));
      else
        acc[r][h] = Vec8{};
    }
  for (int64_t t = 0; t < depth; ++t) {
    Vec8 b0, b1;
    std::memcpy(&b0, b + t * ldb, sizeof(Vec8));
    std::memcpy(&b1, b + t * ldb + 8, sizeof(Vec8));
    for (int r = 0; r < R; ++r) {
      float av = a[r * lda + t];
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h)
      std::memcpy(c + r * ldc + 8 * h, &acc[r][h], sizeof(Vec8));
}

/// The columns right of the last full tile, one row at a time.
inline void gemmEdge(int64_t rows, int64_t cols, int64_t depth, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c,
                     int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < rows; ++i) {
    float acc[16];
    for (int64_t w = 0; w < cols; ++w)
      acc[w] = accumulate ? c[i * ldc + w] : 0.0f;
    for (int64_t t = 0; t < depth; ++t) {
      float av = a[i * lda + t];
      for (int64_t w = 0; w < cols; ++w)
        acc[w] += av * b[t * ldb + w];
    }
    for (int64_t w = 0; w < cols; ++w)
      c[i * ldc + w] = acc[w];
  }
}

/// C[rows, cols] (+)= A[rows, depth] B[depth, cols], row-major fp32.
PARTITA_HOT void smallGemm(int64_t rows, int64_t cols, int64_t depth,
                           const float *a, int64_t lda, const float *b,
                           int64_t ldb, float *c, int64_t ldc,
                           bool accumulate) {
  constexpr int64_t kWidth = 16;
  int64_t fullCols = cols / kWidth * kWidth;
  for (int64_t j = 0; j < fullCols; j += kWidth) {
    int64_t i = 0;
    for (; i + 4 <= rows; i += 4)
      gemmTile<4>(depth, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc,
                  accumulate);
    for (; i < rows; ++i)
      gemmTile<1>(depth, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc,
                  accumulate);
  }
  if (fullCols < cols)
    gemmEdge(rows, cols - fullCols, depth, a, lda, b + fullCols, ldb,
             c + fullCols, ldc, accumulate);
}

/// `count` contiguous elements of `data` as f32: the data itself, or its
/// conversion in `scratch` (which holds at least `count`).
template <typename T>
const float *rowsAsFloat(const T *data, int64_t count,
                         std::vector<float> &scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return data;
  } else {
    for (int64_t i = 0; i < count; ++i)
      scratch[i] = loadFloat(data[i]);
    return scratch.data();
  }
}

/// s[j] = q . k[j] for the `n` rows of k (each `d` long, contiguous): one
/// query row's scores against a block of keys, without transposing it.
template <typename T>
PARTITA_HOT void scoreRow(const float *q, const T *k, int64_t d, int64_t n,
                          float *s) {
  int64_t vectors = d / 8 * 8;
  for (int64_t j = 0; j < n; ++j) {
    const T *row = k + j * d;
    Vec8 acc = {};
    for (int64_t t = 0; t < vectors; t += 8) {
      Vec8 qv, kv;
      std::memcpy(&qv, q + t, sizeof(Vec8));
      if constexpr (std::is_same_v<T, float>) {
        std::memcpy(&kv, row + t, sizeof(Vec8));
      } else {
        for (int lane = 0; lane < 8; ++lane)
          kv[lane] = loadFloat(row[t + lane]);
      }
      acc += qv * kv;
    }
    float sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
                ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (int64_t t = vectors; t < d; ++t)
      sum += q[t] * loadFloat(row[t]);
    s[j] = sum;
  }
}

/// The online-softmax update of one row of scores: turns `s` into
/// probabilities against the new running maximum, rescales the output row,
/// and updates the running maximum `m` and sum `l`.
PARTITA_HOT void softmaxUpdate(float *s, int64_t n, float *o, int64_t dv,
                               float &m, float &l) {
  // Eight lanes for the max and the sum, so that both loops vectorize.
  constexpr int kLanes = 8;
  float lanes[kLanes];
  for (int k = 0; k < kLanes; ++k)
    lanes[k] = kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k)
      lanes[k] = s[j + k] > lanes[k] ? s[j + k] : lanes[k];
  float mx = kNegInf;
  for (; j < n; ++j)
    mx = s[j] > mx ? s[j] : mx;
  for (int k = 0; k < kLanes; ++k)
    mx = lanes[k] > mx ? lanes[k] : mx;
  if (mx == kNegInf) { // Every key of this block is masked for the row.
    for (j = 0; j < n; ++j)
      s[j] = 0.0f;
    return;
  }
  float mNew = mx > m ? mx : m;
  float correction = expApprox(m - mNew);
  for (j = 0; j < n; ++j)
    s[j] = expApprox(s[j] - mNew);
  for (int k = 0; k < kLanes; ++k)
    lanes[k] = 0.0f;
  for (j = 0; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k)
      lanes[k] += s[j + k];
  float sum = 0.0f;
  for (; j < n; ++j)
    sum += s[j];
  for (int k = 0; k < kLanes; ++k)
    sum += lanes[k];
  l = l * correction + sum;
  m = mNew;
  if (correction != 1.0f)
    for (int64_t c = 0; c < dv; ++c)
      o[c] *= correction;
}

template <typename M>
void addFloatMask(float *s, int64_t n, const M *mask, int64_t stride) {
  for (int64_t j = 0; j < n; ++j)
    s[j] += loadFloat(mask[j * stride]);
}

void applyBoolMask(float *s, int64_t n, const uint8_t *mask, int64_t stride) {
  for (int64_t j = 0; j < n; ++j)
    s[j] = mask[j * stride] ? s[j] : kNegInf;
}

struct AttentionShape {
  int64_t batch, qHeads, kvHeads, sq, skv, d, dv;
  float scale;
  /// Scores capped as softcap * tanh(score / softcap) when positive.
  float softcap = 0.0f;
  bool causal;
  /// With causal (or positions): row i sees only keys less than `window`
  /// positions before it; 0 for no window.
  int64_t window = 0;
  const Tensor *mask;     // Null without one.
  int64_t maskStrides[4]; // Per [b, hq, sq, skv]; 0 where it broadcasts.
  // attention_partial: the global positions of the query rows and keys
  // (key j is masked for row i when kPos[j] > qPos[i]), and where to write
  // each row's largest score and sum of exp(score - max) [b, hq, sq]; null
  // when absent.
  const int64_t *qPos = nullptr, *kPos = nullptr;
  float *rowMax = nullptr, *rowSum = nullptr;
};

/// Where row `i0`'s mask elements start for batch `b`, query head `h`
/// (null without a mask).
const char *maskRowsOf(const AttentionShape &g, int64_t b, int64_t h,
                       int64_t i0) {
  if (!g.mask)
    return nullptr;
  return bytesOf(*g.mask) +
         (b * g.maskStrides[0] + h * g.maskStrides[1] + i0 * g.maskStrides[2]) *
             static_cast<int64_t>(dtypeSize(g.mask->dtype));
}

/// Whether a bool mask keeps no score of the block of rows [0, nq) and keys
/// [j0, j0 + nk) from `maskRows`: the block is then skipped whole.
bool boolMaskDropsBlock(const AttentionShape &g, const char *maskRows,
                        int64_t nq, int64_t j0, int64_t nk) {
  if (!g.mask || g.mask->dtype != program::BOOL)
    return false;
  const uint8_t *mk = reinterpret_cast<const uint8_t *>(maskRows);
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j)
      if (mk[i * g.maskStrides[2] + (j0 + j) * g.maskStrides[3]])
        return false;
  return true;
}

/// The first key block that causal rows [i0, ...) with a sliding window
/// can see (rows see keys j <= i + offset and, with a window, j > i +
/// offset - window): 0 without a window.
int64_t firstKeyBlock(const AttentionShape &g, int64_t i0, int64_t offset) {
  if (!g.causal || g.window <= 0)
    return 0;
  int64_t first = std::max<int64_t>(0, i0 + offset - g.window + 1);
  return first / kKeyBlock * kKeyBlock;
}

/// Scales row `i` of a block of scores (query `i0 + i`, keys from `j0`),
/// caps it (softcap) and masks it: causally, by positions, by the mask.
/// With a softcap and `capSlope`, each capped score's slope
/// 1 - tanh(x / softcap)^2 goes to `capSlope[j]` (the backward's).
void maskScoreRow(const AttentionShape &g, float *sRow, int64_t nk, int64_t i0,
                  int64_t i, int64_t j0, const char *maskRows,
                  float *capSlope = nullptr) {
  for (int64_t j = 0; j < nk; ++j)
    sRow[j] *= g.scale;
  if (g.softcap > 0.0f)
    for (int64_t j = 0; j < nk; ++j) {
      float t = std::tanh(sRow[j] / g.softcap);
      sRow[j] = g.softcap * t;
      if (capSlope)
        capSlope[j] = 1.0f - t * t;
    }
  if (g.causal) {
    int64_t firstMasked = i0 + i + (g.skv - g.sq) + 1 - j0;
    for (int64_t j = std::max<int64_t>(firstMasked, 0); j < nk; ++j)
      sRow[j] = kNegInf;
    // Keys `window` or more positions back are outside the window.
    if (g.window > 0)
      for (int64_t j = 0; j < std::min(nk, firstMasked - g.window); ++j)
        sRow[j] = kNegInf;
  }
  if (g.qPos) {
    int64_t position = g.qPos[i0 + i];
    for (int64_t j = 0; j < nk; ++j)
      if (g.kPos[j0 + j] > position ||
          (g.window > 0 && position - g.kPos[j0 + j] >= g.window))
        sRow[j] = kNegInf;
  }
  if (!g.mask)
    return;
  const char *mRow =
      maskRows + (i * g.maskStrides[2] + j0 * g.maskStrides[3]) *
                     static_cast<int64_t>(dtypeSize(g.mask->dtype));
  int64_t stride = g.maskStrides[3];
  switch (g.mask->dtype) {
  case program::BOOL:
    applyBoolMask(sRow, nk, reinterpret_cast<const uint8_t *>(mRow), stride);
    break;
  case program::F32:
    addFloatMask(sRow, nk, reinterpret_cast<const float *>(mRow), stride);
    break;
  case program::F16:
    addFloatMask(sRow, nk, reinterpret_cast<const Half *>(mRow), stride);
    break;
  default:
    addFloatMask(sRow, nk, reinterpret_cast<const BFloat16 *>(mRow), stride);
    break;
  }
}

/// The scores of `nq` query rows `qs` ([nq, d], f32) against keys
/// [j0, j0 + nk) of `kBase`, unscaled, into `s` (rows kKeyBlock apart), in
/// the order the models write it, so that a product that overflows does so
/// as onnxruntime's does (an inf, and NaN from inf - inf). One query row (a
/// decode step) takes a dot product with each key row as it lies; more
/// rows share a transposed block of K in `kt`, [d, keys].
template <typename T>
void blockScores(const float *qs, int64_t nq, const T *kBase, int64_t j0,
                 int64_t nk, int64_t d, float *kt, float *s) {
  if (nq == 1) {
    scoreRow(qs, kBase + j0 * d, d, nk, s);
    return;
  }
  for (int64_t j = 0; j < nk; ++j) {
    const T *kRow = kBase + (j0 + j) * d;
    for (int64_t t = 0; t < d; ++t)
      kt[t * kKeyBlock + j] = loadFloat(kRow[t]);
  }
  smallGemm(nq, nk, d, qs, d, kt, kKeyBlock, s, kKeyBlock, false);
}

template <typename T>
void attentionTyped(ThreadPool &pool, const AttentionShape &g, const T *q,
                    const T *k, const T *v, T *out) {
  int64_t queryBlocks = (g.sq + kQueryBlock - 1) / kQueryBlock;
  int64_t group = g.qHeads / g.kvHeads;
  int64_t offset = g.skv - g.sq; // Causal: row i sees keys j <= i + offset.
  int64_t tasks = g.batch * g.qHeads * queryBlocks;
  int64_t d = g.d, dv = g.dv;
  pool.parallelFor(tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> qs(kQueryBlock * d), kt(d * kKeyBlock),
        vb(std::is_same_v<T, float> ? 0 : kKeyBlock * dv),
        s(kQueryBlock * kKeyBlock), o(kQueryBlock * dv), m(kQueryBlock),
        l(kQueryBlock);
    for (int64_t task = t0; task < t1; ++task) {
      int64_t qb = task % queryBlocks;
      int64_t h = (task / queryBlocks) % g.qHeads;
      int64_t b = task / queryBlocks / g.qHeads;
      int64_t hk = h / group;
      int64_t i0 = qb * kQueryBlock;
      int64_t nq = std::min(kQueryBlock, g.sq - i0);
      const T *qBase = q + ((b * g.qHeads + h) * g.sq + i0) * d;
      const T *kBase = k + (b * g.kvHeads + hk) * g.skv * d;
      const T *vBase = v + (b * g.kvHeads + hk) * g.skv * dv;
      for (int64_t i = 0; i < nq * d; ++i)
        qs[i] = loadFloat(qBase[i]);
      std::fill(o.begin(), o.begin() + nq * dv, 0.0f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);

      // Keys past the last row's causal limit are masked for every row.
      int64_t keyEnd =
          g.causal
              ? std::min(g.skv, std::max<int64_t>(0, i0 + nq - 1 + offset + 1))
              : g.skv;
      // With positions, a key block after every row of the query block is
      // skipped whole.
      // With a window, a key block before every row's window likewise.
      int64_t lastQuery = 0, firstQuery = 0;
      if (g.qPos) {
        lastQuery = firstQuery = g.qPos[i0];
        for (int64_t i = 0; i < nq; ++i) {
          lastQuery = std::max(lastQuery, g.qPos[i0 + i]);
          firstQuery = std::min(firstQuery, g.qPos[i0 + i]);
        }
      }
      const char *maskRows = maskRowsOf(g, b, h, i0);

      for (int64_t j0 = firstKeyBlock(g, i0, offset); j0 < keyEnd;
           j0 += kKeyBlock) {
        int64_t nk = std::min(kKeyBlock, keyEnd - j0);
        if (g.kPos) {
          bool any = false;
          for (int64_t j = 0; j < nk && !any; ++j)
            any = g.kPos[j0 + j] <= lastQuery &&
                  (g.window <= 0 || firstQuery - g.kPos[j0 + j] < g.window);
          if (!any)
            continue;
        }
        if (boolMaskDropsBlock(g, maskRows, nq, j0, nk))
          continue;
        // Scores: (q K^T) * scale, masked.
        blockScores(qs.data(), nq, kBase, j0, nk, d, kt.data(), s.data());
        for (int64_t i = 0; i < nq; ++i) {
          float *sRow = s.data() + i * kKeyBlock;
          maskScoreRow(g, sRow, nk, i0, i, j0, maskRows);
          softmaxUpdate(sRow, nk, o.data() + i * dv, dv, m[i], l[i]);
        }
        // Output: o += P V.
        const float *vBlock = rowsAsFloat(vBase + j0 * dv, nk * dv, vb);
        smallGemm(nq, dv, nk, s.data(), kKeyBlock, vBlock, dv, o.data(), dv,
                  true);
      }
      // Rows that saw no key at all (l == 0) come out as zeros.
      T *outBase = out + ((b * g.qHeads + h) * g.sq + i0) * dv;
      for (int64_t i = 0; i < nq; ++i) {
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int64_t c = 0; c < dv; ++c)
          outBase[i * dv + c] = storeFloat<T>(o[i * dv + c] * inv);
      }
      if (g.rowMax) {
        int64_t row = (b * g.qHeads + h) * g.sq + i0;
        for (int64_t i = 0; i < nq; ++i) {
          g.rowMax[row + i] = m[i]; // -inf where no key was seen.
          g.rowSum[row + i] = l[i];
        }
      }
    }
  });
}

/// The operands and results of attention_grad beyond attention's.
template <typename T> struct GradTensors {
  const T *q, *k, *v, *out, *dout;
  T *dq, *dk, *dv;
};

/// attention_grad, the flash-attention backward. One task per (batch, kv
/// head) owns that head's dk and dv, accumulated in f32 over the query
/// heads of its group, so tasks never write the same memory. For each block
/// of kQueryBlock query rows, a first walk over the key blocks recomputes
/// each row's maximum and sum of exp(score - max) (the forward's online
/// softmax, without the output); a second recomputes the scores and, with
/// P = exp(score - max) / sum, D = rowsum(dout * out), dP = dout V^T and
/// dS = P (dP - D) * scale, adds dS K to the rows' dq, dS^T Q to dk and
/// P^T dout to dv. Memory is a few blocks per task and its head's dk and
/// dv; no [sq, skv] matrix. A row that sees no key has P = 0, as the
/// forward gives it zeros: its dq is zero and it adds nothing to dk, dv.
template <typename T>
void attentionGradTyped(ThreadPool &pool, const AttentionShape &g,
                        const GradTensors<T> &t) {
  int64_t queryBlocks = (g.sq + kQueryBlock - 1) / kQueryBlock;
  int64_t group = g.qHeads / g.kvHeads;
  int64_t offset = g.skv - g.sq; // Causal: row i sees keys j <= i + offset.
  int64_t d = g.d, dv = g.dv;
  pool.parallelFor(g.batch * g.kvHeads, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> qs(kQueryBlock * d), dos(kQueryBlock * dv),
        rowD(kQueryBlock), m(kQueryBlock), l(kQueryBlock), kt(d * kKeyBlock),
        kb(kKeyBlock * d), vt(dv * kKeyBlock), s(kQueryBlock * kKeyBlock),
        dp(kQueryBlock * kKeyBlock), st(kKeyBlock * kQueryBlock),
        slope(g.softcap > 0.0f ? kKeyBlock : 0), dqAcc(kQueryBlock * d),
        dkAcc(g.skv * d), dvAcc(g.skv * dv);
    for (int64_t task = t0; task < t1; ++task) {
      int64_t b = task / g.kvHeads, hk = task % g.kvHeads;
      const T *kBase = t.k + (b * g.kvHeads + hk) * g.skv * d;
      const T *vBase = t.v + (b * g.kvHeads + hk) * g.skv * dv;
      std::fill(dkAcc.begin(), dkAcc.end(), 0.0f);
      std::fill(dvAcc.begin(), dvAcc.end(), 0.0f);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t qb = 0; qb < queryBlocks; ++qb) {
          int64_t i0 = qb * kQueryBlock;
          int64_t nq = std::min(kQueryBlock, g.sq - i0);
          int64_t row0 = (b * g.qHeads + h) * g.sq + i0;
          for (int64_t i = 0; i < nq * d; ++i)
            qs[i] = loadFloat(t.q[row0 * d + i]);
          for (int64_t i = 0; i < nq; ++i) {
            float dot = 0.0f;
            for (int64_t c = 0; c < dv; ++c) {
              float g0 = loadFloat(t.dout[(row0 + i) * dv + c]);
              dos[i * dv + c] = g0;
              dot += g0 * loadFloat(t.out[(row0 + i) * dv + c]);
            }
            rowD[i] = dot;
          }
          int64_t keyEnd =
              g.causal
                  ? std::min(g.skv,
                             std::max<int64_t>(0, i0 + nq - 1 + offset + 1))
                  : g.skv;
          const char *maskRows = maskRowsOf(g, b, h, i0);

          // 1. Each row's maximum score and sum of exp(score - max).
          std::fill(m.begin(), m.end(), kNegInf);
          std::fill(l.begin(), l.end(), 0.0f);
          for (int64_t j0 = firstKeyBlock(g, i0, offset); j0 < keyEnd;
               j0 += kKeyBlock) {
            int64_t nk = std::min(kKeyBlock, keyEnd - j0);
            if (boolMaskDropsBlock(g, maskRows, nq, j0, nk))
              continue;
            blockScores(qs.data(), nq, kBase, j0, nk, d, kt.data(), s.data());
            for (int64_t i = 0; i < nq; ++i) {
              float *sRow = s.data() + i * kKeyBlock;
              maskScoreRow(g, sRow, nk, i0, i, j0, maskRows);
              float mx = kNegInf;
              for (int64_t j = 0; j < nk; ++j)
                mx = sRow[j] > mx ? sRow[j] : mx;
              if (mx == kNegInf)
                continue;
              float mNew = mx > m[i] ? mx : m[i];
              float sum = 0.0f;
              for (int64_t j = 0; j < nk; ++j)
                sum += expApprox(sRow[j] - mNew);
              l[i] = l[i] * expApprox(m[i] - mNew) + sum;
              m[i] = mNew;
            }
          }

          // 2. The cotangents, block by block.
          std::fill(dqAcc.begin(), dqAcc.begin() + nq * d, 0.0f);
          for (int64_t j0 = firstKeyBlock(g, i0, offset); j0 < keyEnd;
               j0 += kKeyBlock) {
            int64_t nk = std::min(kKeyBlock, keyEnd - j0);
            if (boolMaskDropsBlock(g, maskRows, nq, j0, nk))
              continue;
            blockScores(qs.data(), nq, kBase, j0, nk, d, kt.data(), s.data());
            // V^T and K of the block, in f32.
            for (int64_t j = 0; j < nk; ++j)
              for (int64_t c = 0; c < dv; ++c)
                vt[c * kKeyBlock + j] = loadFloat(vBase[(j0 + j) * dv + c]);
            const float *kBlock = rowsAsFloat(kBase + j0 * d, nk * d, kb);
            smallGemm(nq, nk, dv, dos.data(), dv, vt.data(), kKeyBlock,
                      dp.data(), kKeyBlock, false);
            for (int64_t i = 0; i < nq; ++i) {
              float *sRow = s.data() + i * kKeyBlock;
              float *dpRow = dp.data() + i * kKeyBlock;
              maskScoreRow(g, sRow, nk, i0, i, j0, maskRows,
                           slope.empty() ? nullptr : slope.data());
              // s becomes P and dp becomes dS * scale (times the cap's
              // slope); a row that sees no key has P = 0.
              float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
              for (int64_t j = 0; j < nk; ++j) {
                float p =
                    m[i] == kNegInf ? 0.0f : expApprox(sRow[j] - m[i]) * inv;
                sRow[j] = p;
                dpRow[j] = p * (dpRow[j] - rowD[i]) * g.scale;
                if (!slope.empty())
                  dpRow[j] *= slope[j];
              }
            }
            // dq += dS K.
            smallGemm(nq, d, nk, dp.data(), kKeyBlock, kBlock, d, dqAcc.data(),
                      d, true);
            // dk += dS^T Q and dv += P^T dout, through [keys, rows]
            // transposes.
            for (int64_t i = 0; i < nq; ++i)
              for (int64_t j = 0; j < nk; ++j)
                st[j * kQueryBlock + i] = dp[i * kKeyBlock + j];
            smallGemm(nk, d, nq, st.data(), kQueryBlock, qs.data(), d,
                      dkAcc.data() + j0 * d, d, true);
            for (int64_t i = 0; i < nq; ++i)
              for (int64_t j = 0; j < nk; ++j)
                st[j * kQueryBlock + i] = s[i * kKeyBlock + j];
            smallGemm(nk, dv, nq, st.data(), kQueryBlock, dos.data(), dv,
                      dvAcc.data() + j0 * dv, dv, true);
          }
          for (int64_t i = 0; i < nq * d; ++i)
            t.dq[row0 * d + i] = storeFloat<T>(dqAcc[i]);
        }
      }
      T *dkBase = t.dk + (b * g.kvHeads + hk) * g.skv * d;
      T *dvBase = t.dv + (b * g.kvHeads + hk) * g.skv * dv;
      for (int64_t i = 0; i < g.skv * d; ++i)
        dkBase[i] = storeFloat<T>(dkAcc[i]);
      for (int64_t i = 0; i < g.skv * dv; ++i)
        dvBase[i] = storeFloat<T>(dvAcc[i]);
    }
  });
}

template <typename T>
void ropeTyped(ThreadPool &pool, const T *x, const T *cosTable,
               const T *sinTable, T *y, int64_t batch, int64_t heads,
               int64_t seq, int64_t d, int64_t half, bool cosPerBatch,
               bool interleaved) {
  int64_t rows = batch * heads * seq;
  pool.parallelFor(rows, grainFor(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t pos = r % seq, b = r / (heads * seq);
      int64_t tableRow = ((cosPerBatch ? b : 0) * seq + pos) * half;
      const T *c = cosTable + tableRow;
      const T *s = sinTable + tableRow;
      const T *xr = x + r * d;
      T *yr = y + r * d;
      for (int64_t i = 0; i < half; ++i) {
        int64_t i1 = interleaved ? 2 * i : i;
        int64_t i2 = interleaved ? 2 * i + 1 : i + half;
        float x1 = loadFloat(xr[i1]), x2 = loadFloat(xr[i2]);
        float cv = loadFloat(c[i]), sv = loadFloat(s[i]);
        yr[i1] = storeFloat<T>(x1 * cv - x2 * sv);
        yr[i2] = storeFloat<T>(x2 * cv + x1 * sv);
      }
      for (int64_t i = 2 * half; i < d; ++i)
        yr[i] = xr[i];
    }
  });
}

} // namespace

namespace {

/// Checks q, k, v, `output` (shaped as attention's result, `what` in
/// messages) and the mask (operand 3 when `hasMask`) and fills `g` with
/// their shape.
Status prepareAttention(KernelContext &ctx, bool hasMask, AttentionShape &g,
                        const Tensor &output, const std::string &what) {
  const Tensor &q = ctx.operands[0], &k = ctx.operands[1], &v = ctx.operands[2];
  PARTITA_RETURN_IF_ERROR(ctx.expectFloat(q, "q"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(k, q.dtype, "k"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(v, q.dtype, "v"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(output, q.dtype, what));
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4)
    return ctx.error("q, k and v need rank 4, got " + shapeString(q.shape) +
                     ", " + shapeString(k.shape) + ", " + shapeString(v.shape));
  g.batch = q.shape[0];
  g.qHeads = q.shape[1];
  g.sq = q.shape[2];
  g.d = q.shape[3];
  g.kvHeads = k.shape[1];
  g.skv = k.shape[2];
  g.dv = v.shape[3];
  if (k.shape[0] != g.batch || v.shape[0] != g.batch ||
      v.shape[1] != g.kvHeads || v.shape[2] != g.skv || k.shape[3] != g.d ||
      g.kvHeads == 0 || g.qHeads % g.kvHeads != 0)
    return ctx.error("inconsistent shapes q " + shapeString(q.shape) + ", k " +
                     shapeString(k.shape) + ", v " + shapeString(v.shape));
  PARTITA_RETURN_IF_ERROR(
      ctx.expectShape(output, {g.batch, g.qHeads, g.sq, g.dv}, what));
  double scale =
      1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(g.d, 1)));
  if (ctx.attrs.has("scale"))
    PARTITA_RETURN_IF_ERROR(ctx.attrs.getFloat("scale", scale));
  g.scale = static_cast<float>(scale);
  if (ctx.attrs.has("softcap")) {
    double softcap;
    PARTITA_RETURN_IF_ERROR(ctx.attrs.getFloat("softcap", softcap));
    if (!(softcap > 0.0) || !std::isfinite(softcap))
      return ctx.error("softcap " + std::to_string(softcap) +
                       " is not positive and finite");
    g.softcap = static_cast<float>(softcap);
  }
  if (ctx.attrs.has("window")) {
    PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("window", g.window));
    if (g.window <= 0)
      return ctx.error("window " + std::to_string(g.window) +
                       " is not positive");
  }
  g.mask = hasMask ? &ctx.operands[3] : nullptr;
  if (g.mask) {
    const Tensor &mask = *g.mask;
    if (mask.dtype != program::BOOL && !isFloatDType(mask.dtype))
      return ctx.error("the mask has element type " + dtypeName(mask.dtype) +
                       ", expected bool or a float type");
    int64_t target[4] = {g.batch, g.qHeads, g.sq, g.skv};
    if (mask.shape.size() > 4)
      return ctx.error("the mask has rank above 4: " + shapeString(mask.shape));
    std::vector<int64_t> strides = contiguousStrides(mask.shape);
    size_t lead = 4 - mask.shape.size();
    for (size_t dim = 0; dim < 4; ++dim) {
      int64_t size = dim < lead ? 1 : mask.shape[dim - lead];
      if (size != target[dim] && size != 1)
        return ctx.error("the mask " + shapeString(mask.shape) +
                         " does not broadcast to " +
                         shapeString({g.batch, g.qHeads, g.sq, g.skv}));
      g.maskStrides[dim] = size == 1 || dim < lead ? 0 : strides[dim - lead];
    }
  }
  return Status::ok();
}

Status dispatchAttention(KernelContext &ctx, const AttentionShape &g) {
  const Tensor &q = ctx.operands[0], &k = ctx.operands[1], &v = ctx.operands[2];
  const Tensor &result = ctx.results[0];
  if (result.numElements() == 0)
    return Status::ok();
  return visitFloat(ctx, q.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    attentionTyped<T>(ctx.pool, g, q.as<T>(), k.as<T>(), v.as<T>(),
                      result.as<T>());
    return Status::ok();
  });
}

} // namespace

Status runAttention(KernelContext &ctx) {
  bool causal, hasMask;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("causal", causal, false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_mask", hasMask, false));
  if (static_cast<int>(ctx.operands.size()) != 3 + int(hasMask))
    return ctx.error(
        "expected " + std::to_string(3 + int(hasMask)) +
        " operands for has_mask = " + (hasMask ? "true" : "false") + ", got " +
        std::to_string(ctx.operands.size()));
  AttentionShape g;
  PARTITA_RETURN_IF_ERROR(
      prepareAttention(ctx, hasMask, g, ctx.results[0], "the result"));
  g.causal = causal;
  if (g.window > 0 && !causal)
    return ctx.error("a window needs causal");
  return dispatchAttention(ctx, g);
}

Status runAttentionPartial(KernelContext &ctx) {
  bool hasMask, hasPositions;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_mask", hasMask, false));
  PARTITA_RETURN_IF_ERROR(
      ctx.attrs.getBool("has_positions", hasPositions, false));
  int expected = 3 + int(hasMask) + 2 * int(hasPositions);
  if (static_cast<int>(ctx.operands.size()) != expected)
    return ctx.error(
        "expected " + std::to_string(expected) +
        " operands for has_mask = " + (hasMask ? "true" : "false") +
        ", has_positions = " + (hasPositions ? "true" : "false") + ", got " +
        std::to_string(ctx.operands.size()));
  AttentionShape g;
  PARTITA_RETURN_IF_ERROR(
      prepareAttention(ctx, hasMask, g, ctx.results[0], "the result"));
  g.causal = false;
  if (ctx.results.size() != 3)
    return ctx.error("expected 3 results (the output, the row maxima and the "
                     "row sums), got " +
                     std::to_string(ctx.results.size()));
  for (int r = 1; r <= 2; ++r) {
    const Tensor &stats = ctx.results[r];
    const char *what = r == 1 ? "the row maxima" : "the row sums";
    PARTITA_RETURN_IF_ERROR(ctx.expectDType(stats, program::F32, what));
    PARTITA_RETURN_IF_ERROR(
        ctx.expectShape(stats, {g.batch, g.qHeads, g.sq}, what));
  }
  g.rowMax = ctx.results[1].as<float>();
  g.rowSum = ctx.results[2].as<float>();
  if (hasPositions) {
    const Tensor &qPos = ctx.operands[3 + int(hasMask)];
    const Tensor &kPos = ctx.operands[4 + int(hasMask)];
    PARTITA_RETURN_IF_ERROR(
        ctx.expectDType(qPos, program::I64, "the query positions"));
    PARTITA_RETURN_IF_ERROR(
        ctx.expectDType(kPos, program::I64, "the key positions"));
    PARTITA_RETURN_IF_ERROR(
        ctx.expectShape(qPos, {g.sq}, "the query positions"));
    PARTITA_RETURN_IF_ERROR(
        ctx.expectShape(kPos, {g.skv}, "the key positions"));
    g.qPos = qPos.as<int64_t>();
    g.kPos = kPos.as<int64_t>();
  }
  if (g.window > 0 && !hasPositions)
    return ctx.error("a window needs the positions");
  return dispatchAttention(ctx, g);
}

Status runAttentionGrad(KernelContext &ctx) {
  bool causal, hasMask;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("causal", causal, false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_mask", hasMask, false));
  int expected = 5 + int(hasMask);
  if (static_cast<int>(ctx.operands.size()) != expected)
    return ctx.error(
        "expected " + std::to_string(expected) + " operands (q, k, v, " +
        (hasMask ? "the mask, " : "") +
        "out, dout) for has_mask = " + (hasMask ? "true" : "false") + ", got " +
        std::to_string(ctx.operands.size()));
  if (ctx.results.size() != 3)
    return ctx.error("expected 3 results (dq, dk, dv), got " +
                     std::to_string(ctx.results.size()));
  const Tensor &out = ctx.operands[3 + int(hasMask)],
               &dout = ctx.operands[4 + int(hasMask)];
  AttentionShape g;
  PARTITA_RETURN_IF_ERROR(prepareAttention(ctx, hasMask, g, out, "out"));
  g.causal = causal;
  if (g.window > 0 && !causal)
    return ctx.error("a window needs causal");
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(dout, out.dtype, "dout"));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(dout, out.shape, "dout"));
  const char *names[] = {"dq", "dk", "dv"};
  for (int r = 0; r < 3; ++r) {
    PARTITA_RETURN_IF_ERROR(
        ctx.expectDType(ctx.results[r], ctx.operands[r].dtype, names[r]));
    PARTITA_RETURN_IF_ERROR(
        ctx.expectShape(ctx.results[r], ctx.operands[r].shape, names[r]));
  }
  if (ctx.results[0].numElements() == 0 && ctx.results[1].numElements() == 0 &&
      ctx.results[2].numElements() == 0)
    return Status::ok();
  return visitFloat(ctx, out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    GradTensors<T> t{ctx.operands[0].as<T>(),
                     ctx.operands[1].as<T>(),
                     ctx.operands[2].as<T>(),
                     out.as<T>(),
                     dout.as<T>(),
                     ctx.results[0].as<T>(),
                     ctx.results[1].as<T>(),
                     ctx.results[2].as<T>()};
    attentionGradTyped<T>(ctx.pool, g, t);
    return Status::ok();
  });
}

Status runRope(KernelContext &ctx) {
  bool interleaved;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("interleaved", interleaved, false));
  const Tensor &x = ctx.operands[0], &cosT = ctx.operands[1],
               &sinT = ctx.operands[2];
  const Tensor &result = ctx.results[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectFloat(x, "the input"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(cosT, x.dtype, "cos"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(sinT, x.dtype, "sin"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, x.dtype, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, x.shape, "the result"));
  if (x.shape.size() != 4)
    return ctx.error("the input needs rank 4, got " + shapeString(x.shape));
  int64_t batch = x.shape[0], heads = x.shape[1], seq = x.shape[2],
          d = x.shape[3];
  if (cosT.shape.size() != 3)
    return ctx.error("cos needs rank 3 [b or 1, s, r/2], got " +
                     shapeString(cosT.shape));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(sinT, cosT.shape, "sin"));
  int64_t half = cosT.shape[2];
  bool perBatch = cosT.shape[0] != 1;
  if ((perBatch && cosT.shape[0] != batch) || cosT.shape[1] != seq ||
      2 * half > d)
    return ctx.error("cos " + shapeString(cosT.shape) +
                     " does not fit the input " + shapeString(x.shape));
  if (x.numElements() == 0)
    return Status::ok();
  return visitFloat(ctx, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ropeTyped<T>(ctx.pool, x.as<T>(), cosT.as<T>(), sinT.as<T>(),
                 result.as<T>(), batch, heads, seq, d, half, perBatch,
                 interleaved);
    return Status::ok();
  });
}

} // namespace partita::runtime::kernels
