//===- MatMul.cpp - batched matrix products through OpenBLAS --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// cblas_sgemm does the arithmetic (cblas_sgemv for a single row, a loop of
// our own for two to eight rows: smallRowsGemm), one call per block of the
// output, the blocks spread over the kernel's ThreadPool.
// OpenBLAS is kept at one thread: its own idle workers spin in sched_yield for
// a while after every call, and in perf profiles of the host kernels that
// spinning took 7% to 35% of all cycles, competing with the pool threads
// running the next kernels. One set of threads, the pool's, does all the work
// instead.
//
// A weight without batch dimensions folds the activation's batch into the
// rows (one [b*s, k] x [k, n] product). Each product is split along n or m,
// whichever makes the blocks re-pack the smaller operand; many small
// batched products run one per task instead. f16 and bf16 are widened to
// fp32 scratch first.
//
// The thread that computed a block finishes it at once, while it is in
// cache: bias, narrowing to f16/bf16, and the fused epilogue (a matmul,
// its GELU and its residual add are one pass over the output).
//
// A packed int4 or int8 weight (quantized_matmul, onnxruntime's
// MatMulNBits) is never dequantized whole: each task dequantizes a panel
// of kPanel columns into fp32 scratch, k values per column in the packed
// order, and multiplies by it (sgemm with the panel transposed), so a rank
// holds the packed bytes plus one panel per thread.
//
//===----------------------------------------------------------------------===//

// smallRowsGemm's vector helpers pass 32-byte vectors, whose ABI differs
// between its AVX2 clone and the baseline; they are inlined into it, never
// called across that boundary.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include "KernelSupport.h"
#include "partita/runtime/MatmulShape.h"

#include <cblas.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <type_traits>

namespace partita::runtime::kernels {

namespace {

template <typename T>
PARTITA_HOT void narrowRun(const float *__restrict src, int64_t n,
                           T *__restrict dst) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = storeFloat<T>(src[i]);
}

typedef float F32x8 __attribute__((vector_size(32)));

[[gnu::always_inline]] inline F32x8 load8(const float *p) {
  F32x8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

[[gnu::always_inline]] inline void store8(float *p, F32x8 v) {
  std::memcpy(p, &v, sizeof(v));
}

/// The most rows smallRowsGemm computes: past it sgemm's packing of B pays
/// for itself (at 16 rows the two were within 10% on Zen 4).
constexpr int64_t kSmallRows = 8;

/// C[rows, cols] = A[rows, k] B[k, cols] for a few rows (a decode step's
/// tokens), B's and C's rows `ldb` apart, without packing B: sgemm copies
/// the whole block of B into its panel layout on every call, which for a
/// few rows is most of the time (62% of a batch-8 decode step of GPT-2
/// small, in perf). This streams B once instead: for each tile of C's
/// columns (kept in L1 across k), each block of kBlockRows rows of B is
/// multiplied into every row of the tile, that row's A values held in
/// registers. On Zen 4 it took 0.6x sgemm's time for 8 rows and 0.5x for
/// 2 to 4, single-threaded over GPT-2 small's weights.
PARTITA_HOT void smallRowsGemm(int64_t rows, int64_t cols, int64_t k,
                               const float *__restrict a, int64_t ldb,
                               const float *__restrict b, float *__restrict c) {
  constexpr int64_t kTile = 512;
  constexpr int64_t kBlockRows = 8;
  for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
    int64_t width = std::min(kTile, cols - j0);
    int64_t vectors = width / 8 * 8;
    for (int64_t r = 0; r < rows; ++r)
      std::memset(c + r * ldb + j0, 0, width * sizeof(float));
    int64_t kk = 0;
    for (; kk + kBlockRows <= k; kk += kBlockRows) {
      const float *block = b + kk * ldb + j0;
      for (int64_t r = 0; r < rows; ++r) {
        const float *ar = a + r * k + kk;
        float *cr = c + r * ldb + j0;
        F32x8 s[kBlockRows];
        for (int64_t q = 0; q < kBlockRows; ++q)
          s[q] = F32x8{} + ar[q];
        // Row r of C fetches row r of the next block of B meanwhile (the
        // hardware prefetchers see eight short streams; this was 5%).
        const float *next = kk + 2 * kBlockRows <= k && r < kBlockRows
                                ? block + (kBlockRows + r) * ldb
                                : nullptr;
        for (int64_t j = 0; j < vectors; j += 8) {
          if (next && j % 16 == 0)
            __builtin_prefetch(next + j, 0, 3);
          F32x8 acc = load8(cr + j);
          for (int64_t q = 0; q < kBlockRows; ++q)
            acc += s[q] * load8(block + q * ldb + j);
          store8(cr + j, acc);
        }
        for (int64_t j = vectors; j < width; ++j) {
          float acc = cr[j];
          for (int64_t q = 0; q < kBlockRows; ++q)
            acc += ar[q] * block[q * ldb + j];
          cr[j] = acc;
        }
      }
    }
    for (; kk < k; ++kk) {
      const float *row = b + kk * ldb + j0;
      for (int64_t r = 0; r < rows; ++r) {
        float scale = a[r * k + kk];
        float *cr = c + r * ldb + j0;
        for (int64_t j = 0; j < width; ++j)
          cr[j] += scale * row[j];
      }
    }
  }
}

/// C[rows, cols] = A[rows, k] B[k, cols], with B's rows `ldb` apart and
/// C's `ldb` apart too (a column block of a wider product).
void gemm(int64_t rows, int64_t cols, int64_t k, const float *a, int64_t ldb,
          const float *b, float *c) {
  if (rows > 1 && rows <= kSmallRows) {
    smallRowsGemm(rows, cols, k, a, ldb, b, c);
    return;
  }
  // One row (a decode step's token): sgemm would pack the block of B, a
  // second pass over the weight; sgemv streams it once.
  if (rows == 1) {
    cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(k),
                static_cast<int>(cols), 1.0f, b, static_cast<int>(ldb), a, 1,
                0.0f, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(cols), static_cast<int>(k), 1.0f, a,
              static_cast<int>(k), b, static_cast<int>(ldb), 0.0f, c,
              static_cast<int>(ldb));
}

/// One product on the whole pool, calling `finish(begin, length)` on the
/// flat ranges of each block (offset by `base`) as soon as it is computed.
/// Splitting n makes every block pack all of A; splitting m, all of B:
/// split the dimension whose operand is smaller.
template <typename Finish>
void parallelGemm(ThreadPool &pool, int64_t m, int64_t n, int64_t k,
                  const float *a, const float *b, float *c, int64_t base,
                  const Finish &finish) {
  // Below ~2 MFLOP a block's packing outweighs the parallelism.
  constexpr int64_t kMinBlockWork = 1 << 20;
  constexpr int64_t kAlign = 16;
  bool splitN = m * k <= k * n;
  int64_t extent = splitN ? n : m;
  int64_t units = (extent + kAlign - 1) / kAlign;
  int64_t unitWork = std::max<int64_t>(1, (splitN ? m : n) * k * kAlign);
  // One block per thread: blocks of a product are equal, and fewer blocks
  // pack less.
  int64_t threads = static_cast<int64_t>(pool.size());
  int64_t grain =
      std::max(kMinBlockWork / unitWork, (units + threads - 1) / threads);
  pool.parallelFor(units, std::max<int64_t>(1, grain),
                   [&](int64_t u0, int64_t u1) {
                     int64_t lo = u0 * kAlign;
                     int64_t hi = std::min(extent, u1 * kAlign);
                     if (splitN) {
                       gemm(m, hi - lo, k, a, n, b + lo, c + lo);
                       for (int64_t r = 0; r < m; ++r)
                         finish(base + r * n + lo, hi - lo);
                     } else {
                       gemm(hi - lo, n, k, a + lo * k, n, b, c + lo * n);
                       finish(base + lo * n, (hi - lo) * n);
                     }
                   });
}

PARTITA_HOT void addBiasRun(float *__restrict c, int64_t n,
                            const float *__restrict bias) {
  for (int64_t j = 0; j < n; ++j)
    c[j] += bias[j];
}

/// What happens to a finished block of the fp32 product.
template <typename T> struct BlockFinisher {
  float *c;
  T *out; // The result when it is not f32 (c is scratch then).
  const float *bias;
  int64_t n;
  const RangeEpilogue *epilogue;

  void operator()(int64_t begin, int64_t length) const {
    if (bias) // The range may span rows: add the bias row piece by piece.
      for (int64_t done = 0; done < length;) {
        int64_t col = (begin + done) % n;
        int64_t len = std::min(n - col, length - done);
        addBiasRun(c + begin + done, len, bias + col);
        done += len;
      }
    if constexpr (!std::is_same_v<T, float>)
      narrowRun(c + begin, length, out + begin);
    if (epilogue)
      epilogue->run(begin, length);
  }
};

/// Where a product of `elements` fp32 values goes and how each finished
/// block is completed: the result itself when it is f32, else fp32
/// scratch narrowed block by block; the bias (widened), then the epilogue.
template <typename T> struct Fp32Product {
  std::unique_ptr<Fp32<T>> bias;
  std::unique_ptr<float[]> owned;
  float *c;
  BlockFinisher<T> finish;

  Fp32Product(ThreadPool &pool, const Tensor &result, const Tensor *biasTensor,
              int64_t elements, int64_t n, const RangeEpilogue &epilogue) {
    if (biasTensor)
      bias = std::make_unique<Fp32<T>>(pool, *biasTensor);
    if constexpr (std::is_same_v<T, float>) {
      c = result.as<float>();
    } else {
      owned.reset(new float[std::max<int64_t>(elements, 1)]);
      c = owned.get();
    }
    finish = {c, result.as<T>(), bias ? bias->data : nullptr, n,
              epilogue.empty() ? nullptr : &epilogue};
  }
};

/// Builds the kernel's epilogue into `epilogue` where the matmul may apply
/// it to each block it finishes.
Status prepareEpilogue(KernelContext &ctx, const Tensor &result,
                       RangeEpilogue &epilogue) {
  useSingleThreadedBlas();
  if (ctx.mayFuseEpilogue && ctx.kernel.epilogue_size() > 0) {
    PARTITA_RETURN_IF_ERROR(epilogue.build(ctx, result));
    ctx.epilogueDone = true;
  }
  return Status::ok();
}

} // namespace

/// Keeps OpenBLAS at one thread (see the file comment). Checked on every
/// call, as code outside the runtime may have raised it since.
void useSingleThreadedBlas() {
  if (openblas_get_num_threads() != 1)
    openblas_set_num_threads(1);
}

Status runMatmul(KernelContext &ctx) {
  bool hasBias;
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_bias", hasBias, false));
  if (static_cast<int>(ctx.operands.size()) != 2 + int(hasBias))
    return ctx.error(
        "expected " + std::to_string(2 + int(hasBias)) +
        " operands for has_bias = " + (hasBias ? "true" : "false") + ", got " +
        std::to_string(ctx.operands.size()));
  const Tensor &lhs = ctx.operands[0];
  const Tensor &rhs = ctx.operands[1];
  const Tensor &result = ctx.results[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectFloat(lhs, "lhs"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(rhs, lhs.dtype, "rhs"));
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, lhs.dtype, "the result"));
  MatmulShape mm;
  if (Status shaped = matmulShape(lhs.shape, rhs.shape, mm); !shaped)
    return ctx.error(shaped.message());
  const int64_t m = mm.m, n = mm.n, k = mm.k, batches = mm.batches;
  PARTITA_RETURN_IF_ERROR(
      ctx.expectShape(result, mm.resultShape(), "the result"));
  if (hasBias) {
    PARTITA_RETURN_IF_ERROR(
        ctx.expectDType(ctx.operands[2], lhs.dtype, "bias"));
    PARTITA_RETURN_IF_ERROR(ctx.expectShape(ctx.operands[2], {n}, "bias"));
  }
  if (batches * m * n == 0)
    return Status::ok();
  if (batches * m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return ctx.error("matrices above 2^31 rows or columns are not supported "
                     "by cblas");

  // The matrix each output batch reads from lhs and from rhs.
  std::vector<int64_t> lhsIndex(batches), rhsIndex(batches);
  for (auto [from, index] : {std::pair(&mm.lhsBatch, &lhsIndex),
                             std::pair(&mm.rhsBatch, &rhsIndex)}) {
    BroadcastMap map;
    map.build(*from, mm.batch);
    std::vector<int64_t> &dst = *index;
    map.forEachRun(0, batches,
                   [&](int64_t off, int64_t src, int64_t len, int64_t stride) {
                     for (int64_t t = 0; t < len; ++t)
                       dst[off + t] = src + t * stride;
                   });
  }

  RangeEpilogue epilogue;
  PARTITA_RETURN_IF_ERROR(prepareEpilogue(ctx, result, epilogue));
  return visitFloat(ctx, lhs.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Fp32<T> a(ctx.pool, lhs), b(ctx.pool, rhs);
    Fp32Product<T> product(ctx.pool, result,
                           hasBias ? &ctx.operands[2] : nullptr,
                           batches * m * n, n, epilogue);
    float *c = product.c;
    const BlockFinisher<T> &finish = product.finish;
    int64_t rows = batches * m;
    const float *aData = a.data, *bData = b.data;
    if (k == 0) { // Nothing to contract: the bias alone, or zeros.
      ctx.pool.parallelFor(rows, grainFor(n, 1 << 16),
                           [&](int64_t r0, int64_t r1) {
                             std::fill(c + r0 * n, c + r1 * n, 0.0f);
                             finish(r0 * n, (r1 - r0) * n);
                           });
    } else if (mm.batchFoldsIntoRows()) {
      parallelGemm(ctx.pool, rows, n, k, aData, bData, c, 0, finish);
    } else if (batches >= static_cast<int64_t>(ctx.pool.size())) {
      ctx.pool.parallelFor(batches, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t i = b0; i < b1; ++i) {
          gemm(m, n, k, aData + lhsIndex[i] * m * k, n,
               bData + rhsIndex[i] * k * n, c + i * m * n);
          finish(i * m * n, m * n);
        }
      });
    } else {
      for (int64_t i = 0; i < batches; ++i)
        parallelGemm(ctx.pool, m, n, k, aData + lhsIndex[i] * m * k,
                     bData + rhsIndex[i] * k * n, c + i * m * n, i * m * n,
                     finish);
    }
    return Status::ok();
  });
}

namespace {

/// The operands of dequantize and quantized_matmul that describe a packed
/// `[k, n]` weight (nn.dequantize in docs/generated): `bits`-bit unsigned
/// integers, column after column, block after block, the low bits of each
/// byte first; a scale per block of each column; packed zero points, or
/// 2^(bits - 1).
struct PackedWeight {
  const uint8_t *packed = nullptr;
  const uint8_t *zeroPoints = nullptr;
  int64_t k = 0, n = 0, bits = 0, blockSize = 0, blocks = 0;
  int64_t blockBytes = 0, zeroPointBytes = 0;

  /// Checks `packed` (operand `first`), the scales after it and, when
  /// `hasZeroPoints`, the zero points after those, for a `[k, n]` weight.
  Status parse(const KernelContext &ctx, size_t first, bool hasZeroPoints,
               int64_t k, DType scaleType) {
    return parse(ctx, ctx.operands[first], ctx.operands[first + 1],
                 hasZeroPoints ? &ctx.operands[first + 2] : nullptr, k,
                 scaleType);
  }
  Status parse(const KernelContext &ctx, const Tensor &p, const Tensor &s,
               const Tensor *z, int64_t k, DType scaleType) {
    PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("bits", bits));
    PARTITA_RETURN_IF_ERROR(ctx.attrs.getInt("block_size", blockSize));
    if ((bits != 4 && bits != 8) || blockSize < 16 ||
        (blockSize & (blockSize - 1)) != 0)
      return ctx.error("bits must be 4 or 8 and block_size a power of two of "
                       "at least 16, got " +
                       std::to_string(bits) + " and " +
                       std::to_string(blockSize));
    if (p.shape.size() != 3)
      return ctx.error("packed must be [n, blocks, bytes per block]");
    this->k = k;
    n = p.shape[0];
    blocks = (k + blockSize - 1) / blockSize;
    blockBytes = blockSize * bits / 8;
    PARTITA_RETURN_IF_ERROR(ctx.expectDType(p, program::I8, "packed"));
    PARTITA_RETURN_IF_ERROR(
        ctx.expectShape(p, {n, blocks, blockBytes}, "packed"));
    PARTITA_RETURN_IF_ERROR(ctx.expectDType(s, scaleType, "scales"));
    PARTITA_RETURN_IF_ERROR(ctx.expectShape(s, {n, blocks}, "scales"));
    packed = static_cast<const uint8_t *>(p.data);
    if (z) {
      zeroPointBytes = (blocks * bits + 7) / 8;
      PARTITA_RETURN_IF_ERROR(ctx.expectDType(*z, program::I8, "zero_points"));
      PARTITA_RETURN_IF_ERROR(
          ctx.expectShape(*z, {n, zeroPointBytes}, "zero_points"));
      zeroPoints = static_cast<const uint8_t *>(z->data);
    }
    return Status::ok();
  }

  /// Columns [j0, j1) of the weight as fp32, column after column:
  /// `dst[(j - j0) * k + i]` is element (i, j).
  template <typename T>
  void dequantizeColumns(const T *scales, int64_t j0, int64_t j1,
                         float *__restrict dst) const {
    const int64_t defaultZero = int64_t(1) << (bits - 1);
    for (int64_t j = j0; j < j1; ++j) {
      float *column = dst + (j - j0) * k;
      for (int64_t b = 0; b < blocks; ++b) {
        float scale = loadFloat(scales[j * blocks + b]);
        int64_t zero = defaultZero;
        if (zeroPoints) {
          uint8_t byte = zeroPoints[j * zeroPointBytes + b * bits / 8];
          zero = bits == 8 ? byte : (b % 2 ? byte >> 4 : byte & 0xf);
        }
        const uint8_t *q = packed + (j * blocks + b) * blockBytes;
        int64_t first = b * blockSize;
        int64_t count = std::min(blockSize, k - first);
        float *out = column + first;
        if (bits == 8) {
          for (int64_t i = 0; i < count; ++i)
            out[i] = static_cast<float>(q[i] - zero) * scale;
        } else {
          for (int64_t i = 0; i + 1 < count; i += 2) {
            out[i] = static_cast<float>((q[i / 2] & 0xf) - zero) * scale;
            out[i + 1] = static_cast<float>((q[i / 2] >> 4) - zero) * scale;
          }
          if (count % 2)
            out[count - 1] =
                static_cast<float>((q[count / 2] & 0xf) - zero) * scale;
        }
      }
    }
  }
};

/// Columns of the weight each task dequantizes at once: 64 x k floats of
/// scratch (1 MiB at k = 4096), a wide enough panel for sgemm.
constexpr int64_t kPanel = 64;

#if defined(__x86_64__)
/// Columns [j0, j1) of C = A W for at most kSmallRows rows of A (a decode
/// step), W read once and never written out: four-bit weights in whole
/// blocks of a multiple of 32, 16 bytes (32 weights) at a time, with AVX2
/// (the callers check the CPU). The low nibbles are the even rows of the
/// block and the high ones the odd rows, so A comes split once into its
/// even and odd elements (`even`, `odd`: rows x k/2) and each nibble vector
/// meets its half directly; `(q - z) * scale` is computed once per weight
/// for all rows, and each row keeps 8-lane partial sums across the column,
/// summed at its end. At one row this streams 4.5 bits per weight instead
/// of dequantizing a panel to scratch and reading it back (3x slower).
/// The low 8 bytes of `v` (values 0 to 15) as `(v - z) * scale`.
__attribute__((target("avx2,fma"), always_inline)) inline __m256
widenNibbles(__m128i v, __m256 z, __m256 scale) {
  return _mm256_mul_ps(
      _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), z), scale);
}

template <typename T>
__attribute__((target("avx2,fma"))) void
smallRowsPackedGemm(const PackedWeight &w, const T *scales, int64_t rows,
                    const float *__restrict even, const float *__restrict odd,
                    int64_t j0, int64_t j1, float *__restrict c) {
  const int64_t half = w.k / 2, chunks = w.blockBytes / 16;
  const __m128i nibble = _mm_set1_epi8(0x0f);
  for (int64_t j = j0; j < j1; ++j) {
    __m256 acc[kSmallRows];
    for (int64_t r = 0; r < rows; ++r)
      acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < w.blocks; ++b) {
      int zero = 8;
      if (w.zeroPoints) {
        uint8_t byte = w.zeroPoints[j * w.zeroPointBytes + b / 2];
        zero = b % 2 ? byte >> 4 : byte & 0xf;
      }
      const __m256 z = _mm256_set1_ps(static_cast<float>(zero));
      const __m256 scale = _mm256_set1_ps(loadFloat(scales[j * w.blocks + b]));
      const uint8_t *q = w.packed + (j * w.blocks + b) * w.blockBytes;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        __m128i bytes =
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(q + chunk * 16));
        __m128i low = _mm_and_si128(bytes, nibble);
        __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
        __m256 low0 = widenNibbles(low, z, scale);
        __m256 low1 = widenNibbles(_mm_srli_si128(low, 8), z, scale);
        __m256 high0 = widenNibbles(high, z, scale);
        __m256 high1 = widenNibbles(_mm_srli_si128(high, 8), z, scale);
        int64_t at = b * w.blockBytes + chunk * 16;
        for (int64_t r = 0; r < rows; ++r) {
          const float *e = even + r * half + at, *o = odd + r * half + at;
          __m256 sum = _mm256_mul_ps(_mm256_loadu_ps(e), low0);
          sum = _mm256_fmadd_ps(_mm256_loadu_ps(e + 8), low1, sum);
          sum = _mm256_fmadd_ps(_mm256_loadu_ps(o), high0, sum);
          sum = _mm256_fmadd_ps(_mm256_loadu_ps(o + 8), high1, sum);
          acc[r] = _mm256_add_ps(acc[r], sum);
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[r]);
      float sum = 0.0f;
      for (float lane : lanes)
        sum += lane;
      c[r * w.n + j] = sum;
    }
  }
}

bool hasAvx2() {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
}
#else
template <typename T>
void smallRowsPackedGemm(const PackedWeight &, const T *, int64_t,
                         const float *, const float *, int64_t, int64_t,
                         float *) {}
bool hasAvx2() { return false; }
#endif

} // namespace

/// Slice `b` of a tensor whose leading `batchRank` dimensions are batch
/// dimensions: a view of the rest.
Tensor batchSlice(const Tensor &t, size_t batchRank, int64_t b) {
  Tensor slice;
  slice.dtype = t.dtype;
  slice.shape.assign(t.shape.begin() + batchRank, t.shape.end());
  slice.data = static_cast<char *>(t.data) + b * slice.byteSize();
  return slice;
}

Status runDequantize(KernelContext &ctx) {
  bool hasZeroPoints;
  PARTITA_RETURN_IF_ERROR(
      ctx.attrs.getBool("has_zero_points", hasZeroPoints, false));
  if (ctx.operands.size() != 2 + size_t(hasZeroPoints))
    return ctx.error("expected " + std::to_string(2 + int(hasZeroPoints)) +
                     " operands, got " + std::to_string(ctx.operands.size()));
  const Tensor &result = ctx.results[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectFloat(result, "the result"));
  if (result.shape.size() < 2)
    return ctx.error("the result must be [B..., k, n]");
  // Leading batch dimensions (stacked experts), the same on every operand.
  size_t batchRank = result.shape.size() - 2;
  std::vector<int64_t> batch(result.shape.begin(),
                             result.shape.begin() + batchRank);
  int64_t batches = 1;
  for (int64_t d : batch)
    batches *= d;
  for (const Tensor &operand : ctx.operands)
    if (operand.shape.size() < batchRank ||
        !std::equal(batch.begin(), batch.end(), operand.shape.begin()))
      return ctx.error("every operand must lead with the result's batch "
                       "dimensions " +
                       shapeString(batch) + ", got " +
                       shapeString(operand.shape));
  std::vector<PackedWeight> weights(std::max<int64_t>(batches, 1));
  for (int64_t b = 0; b < batches; ++b) {
    Tensor z;
    if (hasZeroPoints)
      z = batchSlice(ctx.operands[2], batchRank, b);
    PARTITA_RETURN_IF_ERROR(weights[b].parse(
        ctx, batchSlice(ctx.operands[0], batchRank, b),
        batchSlice(ctx.operands[1], batchRank, b), hasZeroPoints ? &z : nullptr,
        result.shape[batchRank], result.dtype));
  }
  if (batches == 0)
    return Status::ok();
  const PackedWeight &w = weights[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(batchSlice(result, batchRank, 0),
                                          {w.k, w.n}, "a batch of the result"));
  return visitFloat(ctx, result.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t panels = (w.n + kPanel - 1) / kPanel;
    ctx.pool.parallelFor(batches * panels, 1, [&](int64_t u0, int64_t u1) {
      std::unique_ptr<float[]> panel(new float[kPanel * w.k]);
      for (int64_t u = u0; u < u1; ++u) {
        int64_t b = u / panels, j0 = (u % panels) * kPanel,
                j1 = std::min(w.n, j0 + kPanel);
        const T *scales =
            batchSlice(ctx.operands[1], batchRank, b).template as<T>();
        T *out = batchSlice(result, batchRank, b).template as<T>();
        weights[b].dequantizeColumns(scales, j0, j1, panel.get());
        // Row by row of the result: its stores contiguous, the panel (64
        // columns) in cache.
        for (int64_t i = 0; i < w.k; ++i)
          for (int64_t j = j0; j < j1; ++j)
            out[i * w.n + j] = storeFloat<T>(panel[(j - j0) * w.k + i]);
      }
    });
    return Status::ok();
  });
}

Status runQuantizedMatmul(KernelContext &ctx) {
  bool hasZeroPoints, hasBias;
  PARTITA_RETURN_IF_ERROR(
      ctx.attrs.getBool("has_zero_points", hasZeroPoints, false));
  PARTITA_RETURN_IF_ERROR(ctx.attrs.getBool("has_bias", hasBias, false));
  size_t expected = 3 + size_t(hasZeroPoints) + size_t(hasBias);
  if (ctx.operands.size() != expected)
    return ctx.error("expected " + std::to_string(expected) +
                     " operands for has_zero_points and has_bias, got " +
                     std::to_string(ctx.operands.size()));
  const Tensor &lhs = ctx.operands[0];
  const Tensor &result = ctx.results[0];
  PARTITA_RETURN_IF_ERROR(ctx.expectFloat(lhs, "lhs"));
  if (lhs.shape.size() < 2)
    return ctx.error("lhs must have rank 2 or more");
  PackedWeight w;
  PARTITA_RETURN_IF_ERROR(
      w.parse(ctx, 1, hasZeroPoints, lhs.shape.back(), lhs.dtype));
  const int64_t k = w.k, n = w.n;
  std::vector<int64_t> shape = lhs.shape;
  shape.back() = n;
  PARTITA_RETURN_IF_ERROR(ctx.expectDType(result, lhs.dtype, "the result"));
  PARTITA_RETURN_IF_ERROR(ctx.expectShape(result, shape, "the result"));
  const Tensor *biasTensor = hasBias ? &ctx.operands.back() : nullptr;
  if (biasTensor) {
    PARTITA_RETURN_IF_ERROR(ctx.expectDType(*biasTensor, lhs.dtype, "bias"));
    PARTITA_RETURN_IF_ERROR(ctx.expectShape(*biasTensor, {n}, "bias"));
  }
  int64_t rows = lhs.numElements() / std::max<int64_t>(k, 1);
  if (k == 0)
    rows = result.numElements() / std::max<int64_t>(n, 1);
  if (rows * n == 0)
    return Status::ok();
  if (rows > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return ctx.error("matrices above 2^31 rows or columns are not supported "
                     "by cblas");
  RangeEpilogue epilogue;
  PARTITA_RETURN_IF_ERROR(prepareEpilogue(ctx, result, epilogue));
  return visitFloat(ctx, lhs.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Fp32<T> a(ctx.pool, lhs);
    Fp32Product<T> product(ctx.pool, result, biasTensor, rows * n, n, epilogue);
    float *c = product.c;
    const BlockFinisher<T> &finish = product.finish;
    const T *scales = ctx.operands[2].template as<T>();
    // A few rows of four-bit weights in whole blocks of 32s: streamed
    // (smallRowsPackedGemm), A split into its even and odd elements.
    bool streamed = rows <= kSmallRows && w.bits == 4 &&
                    w.blockSize % 32 == 0 && k == w.blocks * w.blockSize &&
                    hasAvx2();
    std::unique_ptr<float[]> even;
    if (streamed) {
      even.reset(new float[rows * k]);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < k / 2; ++i) {
          even[r * k / 2 + i] = a.data[r * k + 2 * i];
          even[rows * k / 2 + r * k / 2 + i] = a.data[r * k + 2 * i + 1];
        }
    }
    ctx.pool.parallelFor(
        (n + kPanel - 1) / kPanel, 1, [&](int64_t u0, int64_t u1) {
          std::unique_ptr<float[]> panel(
              streamed ? nullptr : new float[std::max<int64_t>(kPanel * k, 1)]);
          for (int64_t u = u0; u < u1; ++u) {
            int64_t j0 = u * kPanel, width = std::min(kPanel, n - j0);
            if (k == 0) {
              for (int64_t r = 0; r < rows; ++r)
                std::fill(c + r * n + j0, c + r * n + j0 + width, 0.0f);
            } else if (streamed) {
              smallRowsPackedGemm(w, scales, rows, even.get(),
                                  even.get() + rows * k / 2, j0, j0 + width, c);
            } else {
              w.dequantizeColumns(scales, j0, j0 + width, panel.get());
              // C[:, j0:j0+width] = A [rows, k] x panel^T [k, width].
              if (rows == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans,
                            static_cast<int>(width), static_cast<int>(k), 1.0f,
                            panel.get(), static_cast<int>(k), a.data, 1, 0.0f,
                            c + j0, 1);
              else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                            static_cast<int>(rows), static_cast<int>(width),
                            static_cast<int>(k), 1.0f, a.data,
                            static_cast<int>(k), panel.get(),
                            static_cast<int>(k), 0.0f, c + j0,
                            static_cast<int>(n));
            }
            for (int64_t r = 0; r < rows; ++r)
              finish(r * n + j0, width);
          }
        });
    return Status::ok();
  });
}

} // namespace partita::runtime::kernels
