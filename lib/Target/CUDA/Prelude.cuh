// Device helpers shared by every kernel of a generated CUDA module
// (lib/Target/CUDA/Prelude.cuh, embedded by the code generator). Each
// generated kernel is an extern "C" wrapper that instantiates these
// templates with the static shapes of its instruction. Semantics follow the
// host kernels (runtime/src/kernels): fp32 compute, f16/bf16 storage types
// rounded to nearest even on store, integers computed in int64 and wrapped.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// Run-time errors of the generated kernels (kv_cache_write's slot): the
// first failing thread stores a code and three values; the runtime reads
// and clears it after a run (CudaDevice::synchronize, the emulator after
// each launch). One per module. PT_EXPORT makes it visible to dlsym under
// the emulator.
#ifndef PT_EXPORT
#define PT_EXPORT
#endif
extern "C" {
PT_EXPORT __device__ unsigned long long partita_status[4];
}

namespace pt {

typedef unsigned long long u64;

/// Error codes of partita_status[0] (the runtime's messages know them).
enum : u64 { kStatusKvCacheOverflow = 1 };

__device__ __forceinline__ void report_error(u64 code, long long a, long long b,
                                             long long c) {
  if (atomicCAS(&partita_status[0], 0ULL, code) == 0ULL) {
    partita_status[1] = (u64)a;
    partita_status[2] = (u64)b;
    partita_status[3] = (u64)c;
  }
}

//===----------------------------------------------------------------------===//
// Loads and stores
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const __half *p) {
  return __half2float(*p);
}
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ long long ldi(const long long *p) { return *p; }
__device__ __forceinline__ long long ldi(const int *p) { return *p; }
__device__ __forceinline__ long long ldi(const signed char *p) { return *p; }
__device__ __forceinline__ long long ldi(const unsigned char *p) {
  return *p != 0;
}

__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(__half *p, float v) {
  *p = __float2half_rn(v);
}
__device__ __forceinline__ void stf(__nv_bfloat16 *p, float v) {
  *p = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void sti(long long *p, long long v) { *p = v; }
__device__ __forceinline__ void sti(int *p, long long v) { *p = (int)v; }
__device__ __forceinline__ void sti(signed char *p, long long v) {
  *p = (signed char)v;
}
__device__ __forceinline__ void sti(unsigned char *p, long long v) {
  *p = v != 0;
}

/// V consecutive elements as floats; V > 1 is one 16-byte load (the caller
/// guarantees the alignment).
template <int V, typename T>
__device__ __forceinline__ void ldvec(const T *p, float (&v)[V]) {
  if constexpr (V == 4 && sizeof(T) == 4) {
    float4 w = *reinterpret_cast<const float4 *>(p);
    v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
  } else if constexpr (V == 8 && sizeof(T) == 2) {
    uint4 w = *reinterpret_cast<const uint4 *>(p);
    const T *e = reinterpret_cast<const T *>(&w);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      v[k] = ldf(e + k);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k)
      v[k] = ldf(p + k);
  }
}

/// V consecutive elements from floats; V > 1 is one 16-byte store.
template <int V, typename T>
__device__ __forceinline__ void stvec(T *p, const float (&v)[V]) {
  if constexpr (V == 4 && sizeof(T) == 4) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (V == 8 && sizeof(T) == 2) {
    uint4 w;
    T *e = reinterpret_cast<T *>(&w);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      stf(e + k, v[k]);
    *reinterpret_cast<uint4 *>(p) = w;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k)
      stf(p + k, v[k]);
  }
}

//===----------------------------------------------------------------------===//
// Scalar semantics (Elementwise.cpp)
//===----------------------------------------------------------------------===//

// What storing a value as the step's type and loading it back keeps: fused
// chains round after every step, as the separate kernels would.
__device__ __forceinline__ float round_f16(float v) {
  return __half2float(__float2half_rn(v));
}
__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ long long wrap_i32(long long v) { return (int)v; }
__device__ __forceinline__ long long wrap_i8(long long v) {
  return (signed char)v;
}
__device__ __forceinline__ long long wrap_bool(long long v) { return v != 0; }

// Integer arithmetic wraps: through uint64, as signed overflow is undefined.
__device__ __forceinline__ long long iadd(long long a, long long b) {
  return (long long)((u64)a + (u64)b);
}
__device__ __forceinline__ long long isub(long long a, long long b) {
  return (long long)((u64)a - (u64)b);
}
__device__ __forceinline__ long long imul(long long a, long long b) {
  return (long long)((u64)a * (u64)b);
}
// Truncates; x / 0 is 0 (numpy's answer, without the trap).
__device__ __forceinline__ long long idiv(long long a, long long b) {
  return b == 0 ? 0 : b == -1 ? isub(0, a) : a / b;
}
__device__ __forceinline__ long long ipow(long long base, long long exponent) {
  if (exponent < 0)
    return base == 1 ? 1 : base == -1 ? ((exponent & 1) ? -1 : 1) : 0;
  u64 result = 1, b = (u64)base;
  for (u64 e = (u64)exponent; e; e >>= 1) {
    if (e & 1)
      result *= b;
    b *= b;
  }
  return (long long)result;
}
__device__ __forceinline__ long long imax(long long a, long long b) {
  return a > b ? a : b;
}
__device__ __forceinline__ long long imin(long long a, long long b) {
  return a < b ? a : b;
}
// NaN in either operand wins.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  return (a > b || a != a) ? a : b;
}
__device__ __forceinline__ float fmin_nan(float a, float b) {
  return (a < b || a != a) ? a : b;
}
// A saturating cast's clamp: finite values beyond `largest` become it,
// with their sign; infinities and NaN stay.
__device__ __forceinline__ float saturate(float x, float largest) {
  const float ax = fabsf(x);
  return (ax > largest && ax <= 3.402823466e38f) ? copysignf(largest, x) : x;
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
// x * Phi(x) through erfc, which keeps its accuracy in the negative tail.
__device__ __forceinline__ float gelu_erf(float x) {
  return 0.5f * x * erfcf(x * -0.70710678118654752f);
}
// 0.5 (1 + tanh u) = sigmoid(2u).
__device__ __forceinline__ float gelu_tanh(float x) {
  float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}
__device__ __forceinline__ float relu(float x) { return x < 0.0f ? 0.0f : x; }
__device__ __forceinline__ float rsqrt_exact(float x) {
  return 1.0f / sqrtf(x);
}

/// Float to integer: toward zero, saturating, NaN gives 0.
__device__ __forceinline__ long long f2i(float x) {
  if (!(x == x))
    return 0;
  if (x >= 9.2233720368547758e18f)
    return 0x7fffffffffffffffLL;
  if (x <= -9.2233720368547758e18f)
    return (long long)(-0x7fffffffffffffffLL - 1);
  return (long long)x;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmax_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// The inclusive prefix sum of `v` over the lanes of a warp (every lane
/// takes part): lane l gets v[0] + ... + v[l], in a tree order.
template <typename T, typename Add>
__device__ __forceinline__ T warp_inclusive_scan(T v, Add add) {
  const unsigned lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    T t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= (unsigned)d)
      v = add(t, v);
  }
  return v;
}

/// The sum (or maximum) over a group of GROUP threads that work on one row:
/// a warp (GROUP == 32) or the whole block (GROUP == blockDim.x). `red` is
/// 32 floats of shared memory; every thread of the group gets the result.
template <int GROUP, bool MAX>
__device__ __forceinline__ float group_reduce(float v, float *red) {
  v = MAX ? warp_max(v) : warp_sum(v);
  if constexpr (GROUP > 32) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); // The previous reduction's readers are done with red.
    if (lane == 0)
      red[warp] = v;
    __syncthreads();
    float init = MAX ? -__int_as_float(0x7f800000) : 0.0f;
    v = lane < GROUP / 32 ? red[lane] : init;
    v = MAX ? warp_max(v) : warp_sum(v);
  }
  return v;
}

//===----------------------------------------------------------------------===//
// Row kernels: layer_norm, rms_norm, softmax, log_softmax (Normalization.cpp)
//===----------------------------------------------------------------------===//
//
// GROUP threads own a row of N elements (a warp for short rows, the block
// otherwise). With CACHE the row is read once into registers (each thread
// holds ITEMS vectors of VEC elements: column (it * GROUP + tid) * VEC) and
// the statistics come from there: one pass over global memory. Rows too long
// for registers (CACHE false) are read again from L2 for each pass.

template <int N, int GROUP, int VEC> struct RowLayout {
  static constexpr int ITEMS = (N + GROUP * VEC - 1) / (GROUP * VEC);
  __device__ static int col(int it, int tid) {
    return (it * GROUP + tid) * VEC;
  }
};

/// y = (x - mean) * rstd [* scale] [+ bias] over rows of N (mean 0 for RMS
/// norm). Two passes over the cached row: the mean, then the centered sum
/// of squares, as the host does.
template <typename T, int N, int GROUP, int VEC, bool CACHE, bool CENTERED,
          bool HAS_SCALE, bool HAS_BIAS, typename Sink>
__device__ __forceinline__ void norm_row(const T *x, const T *scale,
                                         const T *bias, u64 row, float eps,
                                         const Sink &sink, float *red) {
  typedef RowLayout<N, GROUP, VEC> L;
  const int tid = threadIdx.x % GROUP;
  const T *xr = x + row * (u64)N;
  const u64 base = row * (u64)N;
  if constexpr (CACHE) {
    float v[L::ITEMS][VEC];
#pragma unroll
    for (int it = 0; it < L::ITEMS; ++it) {
      const int c = L::col(it, tid);
      if (c < N) {
        ldvec<VEC>(xr + c, v[it]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          v[it][e] = 0.0f;
      }
    }
    float mean = 0.0f;
    if constexpr (CENTERED) {
      float s = 0.0f;
#pragma unroll
      for (int it = 0; it < L::ITEMS; ++it)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          s += v[it][e]; // Padding is 0.
      mean = group_reduce<GROUP, false>(s, red) / (float)N;
    }
    float sq = 0.0f;
#pragma unroll
    for (int it = 0; it < L::ITEMS; ++it)
      if (L::col(it, tid) < N)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          float d = v[it][e] - mean;
          sq += d * d;
        }
    float var = group_reduce<GROUP, false>(sq, red) / (float)N;
    float rstd = 1.0f / sqrtf(var + eps);
#pragma unroll
    for (int it = 0; it < L::ITEMS; ++it) {
      const int c = L::col(it, tid);
      if (c >= N)
        continue;
      float g[VEC], b[VEC];
      if constexpr (HAS_SCALE)
        ldvec<VEC>(scale + c, g);
      if constexpr (HAS_BIAS)
        ldvec<VEC>(bias + c, b);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        float y = (v[it][e] - mean) * rstd;
        if constexpr (HAS_SCALE)
          y *= g[e];
        if constexpr (HAS_BIAS)
          y += b[e];
        v[it][e] = y;
      }
      sink.template vec<VEC>(base + c, v[it]);
    }
  } else {
    float mean = 0.0f;
    if constexpr (CENTERED) {
      float s = 0.0f;
      for (int c = tid; c < N; c += GROUP)
        s += ldf(xr + c);
      mean = group_reduce<GROUP, false>(s, red) / (float)N;
    }
    float sq = 0.0f;
    for (int c = tid; c < N; c += GROUP) {
      float d = ldf(xr + c) - mean;
      sq += d * d;
    }
    float var = group_reduce<GROUP, false>(sq, red) / (float)N;
    float rstd = 1.0f / sqrtf(var + eps);
    for (int c = tid; c < N; c += GROUP) {
      float y = (ldf(xr + c) - mean) * rstd;
      if constexpr (HAS_SCALE)
        y *= ldf(scale + c);
      if constexpr (HAS_BIAS)
        y += ldf(bias + c);
      sink(base + c, y);
    }
  }
}

/// softmax (or log_softmax) over N elements INNER apart: row r is
/// [r / INNER][*][r % INNER] of a [outer, N, INNER] tensor. exp(x - max) /
/// sum, or (x - max) - log(sum).
template <typename T, int N, int INNER, int GROUP, int VEC, bool CACHE,
          bool LOG, typename Sink>
__device__ __forceinline__ void softmax_row(const T *x, u64 row,
                                            const Sink &sink, float *red) {
  typedef RowLayout<N, GROUP, VEC> L;
  const float kNegInf = -__int_as_float(0x7f800000);
  const int tid = threadIdx.x % GROUP;
  const u64 base = (row / INNER) * (u64)N * INNER + row % INNER;
  const T *xr = x + base;
  if constexpr (CACHE) {
    float v[L::ITEMS][VEC];
    float m = kNegInf;
#pragma unroll
    for (int it = 0; it < L::ITEMS; ++it) {
      const int c = L::col(it, tid);
      if (c < N) {
        if constexpr (INNER == 1) {
          ldvec<VEC>(xr + c, v[it]);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            v[it][e] = ldf(xr + (u64)(c + e) * INNER);
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          m = fmax_nan(m, v[it][e]);
      }
    }
    m = group_reduce<GROUP, true>(m, red);
    float s = 0.0f;
#pragma unroll
    for (int it = 0; it < L::ITEMS; ++it)
      if (L::col(it, tid) < N)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          float d = v[it][e] - m;
          float p = expf(d);
          v[it][e] = LOG ? d : p;
          s += p;
        }
    s = group_reduce<GROUP, false>(s, red);
    // (x - m) - log(sum), not x - (m + log(sum)): see Normalization.cpp.
    const float k = LOG ? logf(s) : 1.0f / s;
#pragma unroll
    for (int it = 0; it < L::ITEMS; ++it) {
      const int c = L::col(it, tid);
      if (c >= N)
        continue;
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        v[it][e] = LOG ? v[it][e] - k : v[it][e] * k;
      if constexpr (INNER == 1) {
        sink.template vec<VEC>(base + c, v[it]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          sink(base + (u64)(c + e) * INNER, v[it][e]);
      }
    }
  } else {
    // Per thread a running maximum and sum, merged across the group.
    float m = kNegInf, s = 0.0f;
    for (int c = tid; c < N; c += GROUP) {
      float v = ldf(xr + (u64)c * INNER);
      if (v > m) {
        s = s * expf(m - v);
        m = v;
      }
      s += v == kNegInf ? 0.0f : expf(v - m); // -inf - -inf is NaN.
    }
    float gm = group_reduce<GROUP, true>(m, red);
    s = m == kNegInf ? 0.0f : s * expf(m - gm);
    s = group_reduce<GROUP, false>(s, red);
    const float k = LOG ? logf(s) : 1.0f / s;
    for (int c = tid; c < N; c += GROUP) {
      float d = ldf(xr + (u64)c * INNER) - gm;
      sink(base + (u64)c * INNER, LOG ? d - k : expf(d) * k);
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention (Attention.cpp)
//===----------------------------------------------------------------------===//
//
// FlashAttention-style: a block of WARPS warps owns ROWS query rows per warp
// of one (batch, head) and walks the keys in tiles of 32 staged in shared
// memory, with an online softmax (running maximum and sum per row); the
// [sq, skv] scores never exist in memory. In a tile, lane j scores key j
// against the warp's rows (q from shared memory, broadcast, the sum then
// scaled; K rows padded to D + 1 floats so the lanes hit distinct banks),
// and then owns output columns lane + 32 c for P V. Key tiles wholly past the
// causal diagonal of the block's last row are never loaded.
//
// MASK: 0 none, 1 bool (keep where true), 2 float (added); the mask element
// of (b, h, i, j) is at b MS0 + h MS1 + i MS2 + j MS3 (0 where it
// broadcasts). POS: key j is masked for row i when kpos[j] > qpos[i].
// STATS: also write each row's largest score and its sum of
// exp(score - max) (attention_partial; -inf and 0 for a row without keys).

template <int B, int HQ, int HKV, int SQ, int SKV, int D, int DV, int ROWS,
          int WARPS>
struct AttentionShape {
  static constexpr int BQ = WARPS * ROWS;
  static constexpr int QBLOCKS = (SQ + BQ - 1) / BQ;
  static constexpr int DVL = (DV + 31) / 32;
  static constexpr int BLOCKS = B * HQ * QBLOCKS;
  static_assert(HQ % HKV == 0, "GQA needs hq to be a multiple of hkv");
};

/// A scaled score capped as softcap * tanh(s / softcap) (Gemma2's; softcap
/// 0: none), and the cap's slope at it.
__device__ __forceinline__ float cap_score(float s, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}
__device__ __forceinline__ float cap_slope(float s, float softcap) {
  if (softcap <= 0.0f)
    return 1.0f;
  const float t = tanhf(s / softcap);
  return 1.0f - t * t;
}

template <typename T, typename M, int B, int HQ, int HKV, int SQ, int SKV,
          int D, int DV, int ROWS, int WARPS, bool VECLOAD, bool CAUSAL,
          int MASK, long long MS0, long long MS1, long long MS2, long long MS3,
          bool POS, bool STATS, typename Sink>
__device__ __forceinline__ void
attention(const T *q, const T *k, const T *v, const M *mask,
          const long long *qpos, const long long *kpos, float *rowMax,
          float *rowSum, float scale, float softcap, int window,
          const Sink &sink) {
  typedef AttentionShape<B, HQ, HKV, SQ, SKV, D, DV, ROWS, WARPS> S;
  constexpr int BQ = S::BQ, DVL = S::DVL, THREADS = WARPS * 32;
  constexpr int OFFSET = SKV - SQ; // Causal: row i sees keys j <= i + OFFSET.
  constexpr int KVEC = VECLOAD ? 16 / (int)sizeof(T) : 1;
  const float kNegInf = -__int_as_float(0x7f800000);

  __shared__ float qs[BQ][D];
  __shared__ float ks[32][D + 1];
  __shared__ float vs[32][DVL * 32];
  __shared__ float ps[WARPS][ROWS][32];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qb = blockIdx.x % S::QBLOCKS;
  const int h = (blockIdx.x / S::QBLOCKS) % HQ;
  const int b = blockIdx.x / S::QBLOCKS / HQ;
  const int hk = h / (HQ / HKV);
  const int i0 = qb * BQ;
  const T *qBase = q + ((u64)(b * HQ + h) * SQ + i0) * D;
  const T *kBase = k + (u64)(b * HKV + hk) * SKV * D;
  const T *vBase = v + (u64)(b * HKV + hk) * SKV * DV;

  for (int e = threadIdx.x * KVEC; e < BQ * D; e += THREADS * KVEC) {
    const int r = e / D, t = e % D;
    float w[KVEC];
    if (i0 + r < SQ)
      ldvec<KVEC>(qBase + e, w);
    else
#pragma unroll
      for (int u = 0; u < KVEC; ++u)
        w[u] = 0.0f;
#pragma unroll
    for (int u = 0; u < KVEC; ++u)
      qs[r][t + u] = w[u];
  }

  float o[ROWS][DVL], m[ROWS], l[ROWS];
  long long myPos[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f; // This lane's share of the row's sum.
#pragma unroll
    for (int c = 0; c < DVL; ++c)
      o[r][c] = 0.0f;
    const int i = i0 + warp * ROWS + r;
    myPos[r] = 0;
    if constexpr (POS)
      myPos[r] = i < SQ ? qpos[i] : 0;
  }

  // Keys past the causal limit of the block's last row are masked for all,
  // and with a sliding window those before the first row's window.
  const int lastRow = min(i0 + BQ, SQ) - 1;
  const int keyEnd = CAUSAL ? min(SKV, max(0, lastRow + OFFSET + 1)) : SKV;
  const int keyStart =
      CAUSAL && window > 0 ? max(0, i0 + OFFSET - window + 1) / 32 * 32 : 0;

  for (int j0 = keyStart; j0 < keyEnd; j0 += 32) {
    __syncthreads(); // The previous tile's readers are done.
    for (int e = threadIdx.x * KVEC; e < 32 * D; e += THREADS * KVEC) {
      const int j = e / D, t = e % D;
      float w[KVEC];
      if (j0 + j < SKV)
        ldvec<KVEC>(kBase + (u64)(j0 + j) * D + t, w);
      else
#pragma unroll
        for (int u = 0; u < KVEC; ++u)
          w[u] = 0.0f;
#pragma unroll
      for (int u = 0; u < KVEC; ++u)
        ks[j][t + u] = w[u];
    }
    for (int e = threadIdx.x; e < 32 * DVL * 32; e += THREADS) {
      const int j = e / (DVL * 32), c = e % (DVL * 32);
      vs[j][c] =
          (j0 + j < SKV && c < DV) ? ldf(vBase + (u64)(j0 + j) * DV + c) : 0.0f;
    }
    __syncthreads();

    // Scores of this lane's key against the warp's rows.
    const int j = j0 + lane;
    float s[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      s[r] = 0.0f;
#pragma unroll 8
    for (int t = 0; t < D; ++t) {
      const float kv = ks[lane][t];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        s[r] += qs[warp * ROWS + r][t] * kv;
    }
    // (q k) * scale, in the models' order: an overflowing product gives
    // inf (and NaN from inf - inf) as onnxruntime's does.
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      s[r] = cap_score(s[r] * scale, softcap);

#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int i = i0 + warp * ROWS + r;
      bool keep = i < SQ && j < SKV;
      if constexpr (CAUSAL)
        keep = keep && j <= i + OFFSET && (window <= 0 || i + OFFSET - j < window);
      if constexpr (POS) {
        const long long kp = kpos[min(j, SKV - 1)];
        keep = keep && kp <= myPos[r] && (window <= 0 || myPos[r] - kp < window);
      }
      if constexpr (MASK != 0) {
        if (i < SQ && j < SKV) {
          const M *mp = mask + (long long)b * MS0 + (long long)h * MS1 +
                        (long long)i * MS2 + (long long)j * MS3;
          if constexpr (MASK == 1)
            keep = keep && *mp != 0;
          else
            s[r] += ldf(mp);
        }
      }
      const float sv = keep ? s[r] : kNegInf;
      const float mx = warp_max(sv);
      float p = 0.0f;
      // A tile wholly masked for the row changes nothing (mx is uniform).
      if (mx != kNegInf) {
        const float mNew = fmax_nan(m[r], mx);
        const float corr = expf(m[r] - mNew); // 0 while m is -inf.
        p = expf(sv - mNew);
        l[r] = l[r] * corr + p;
#pragma unroll
        for (int c = 0; c < DVL; ++c)
          o[r][c] *= corr;
        m[r] = mNew;
      }
      ps[warp][r][lane] = p;
    }
    __syncwarp();

    // o += P V: this lane's output columns.
    const int nk = min(32, SKV - j0);
    for (int jj = 0; jj < nk; ++jj) {
#pragma unroll
      for (int c = 0; c < DVL; ++c) {
        const float vv = vs[jj][lane + 32 * c];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
          o[r][c] += ps[warp][r][jj] * vv;
      }
    }
  }

  // Rows that saw no key (sum 0) come out as zeros.
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = i0 + warp * ROWS + r;
    const float sum = warp_sum(l[r]);
    if (i >= SQ)
      continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const u64 rowBase = ((u64)(b * HQ + h) * SQ + i) * DV;
#pragma unroll
    for (int c = 0; c < DVL; ++c)
      if (lane + 32 * c < DV)
        sink(rowBase + lane + 32 * c, o[r][c] * inv);
    if constexpr (STATS) {
      if (lane == 0) {
        rowMax[(u64)(b * HQ + h) * SQ + i] = m[r]; // -inf: no key seen.
        rowSum[(u64)(b * HQ + h) * SQ + i] = sum;
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention's backward (Attention.cpp): attention_grad
//===----------------------------------------------------------------------===//
//
// One block of WARPS warps per (batch, kv head), which owns that head's dk
// and dv: no atomics. In every dot product the lanes split the columns
// (lane + 32 c) and a shuffle sum adds them, as in decode attention.
// Phase 1, a warp per query row of the group's heads: one walk over the
// keys gives the row's maximum m and sum l of exp(score - m), D =
// dout . out, and a second walk P = exp(score - m) / l, dP = dout . v_j,
// dS = P (dP - D) scale and dq += dS k_j; the row's m, 1 / l and D go to
// `stats` (3 floats per row, the function's scratch). Phase 2, after
// __syncthreads, a warp per key: over the group's query rows that see it,
// dk += dS q_i and dv += P dout_i. No score is stored; a row that sees no
// key (m = -inf) has P = 0 and a zero dq. Simple rather than fast: each
// score is computed three times and a (batch, kv head) is one block.

/// The score of query row i of head h against key j (lane-split dot
/// product `dot`, already summed), scaled, capped and masked: -inf where
/// masked.
template <typename M, int SQ, int SKV, bool CAUSAL, int MASK, long long MS0,
          long long MS1, long long MS2, long long MS3>
__device__ __forceinline__ float
grad_score(float dot, float scale, float softcap, int window, const M *mask,
           int b, int h, int i, int j) {
  const float kNegInf = -__int_as_float(0x7f800000);
  float s = cap_score(dot * scale, softcap); // (q k) * scale, as the forward.
  if constexpr (CAUSAL)
    if (j > i + (SKV - SQ) || (window > 0 && i + (SKV - SQ) - j >= window))
      return kNegInf;
  if constexpr (MASK != 0) {
    const M *mp = mask + (long long)b * MS0 + (long long)h * MS1 +
                  (long long)i * MS2 + (long long)j * MS3;
    if constexpr (MASK == 1) {
      if (*mp == 0)
        return kNegInf;
    } else {
      s += ldf(mp);
    }
  }
  return s;
}

template <typename T, typename M, int B, int HQ, int HKV, int SQ, int SKV,
          int D, int DV, int WARPS, bool CAUSAL, int MASK, long long MS0,
          long long MS1, long long MS2, long long MS3>
__device__ __forceinline__ void
attention_grad(const T *q, const T *k, const T *v, const M *mask, const T *out,
               const T *dout, float scale, float softcap, int window,
               float *stats, T *dq, T *dk, T *dv) {
  constexpr int GROUP = HQ / HKV, ROWS = GROUP * SQ;
  constexpr int DL = (D + 31) / 32, DVL = (DV + 31) / 32;
  static_assert(HQ % HKV == 0, "GQA needs hq to be a multiple of hkv");
  const float kNegInf = -__int_as_float(0x7f800000);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.x / HKV, hk = blockIdx.x % HKV;
  const T *kBase = k + (u64)(b * HKV + hk) * SKV * D;
  const T *vBase = v + (u64)(b * HKV + hk) * SKV * DV;
  float *st = stats + (u64)blockIdx.x * ROWS * 3;
  auto scoreOf = [&](float dot, int h, int i, int j) {
    return grad_score<M, SQ, SKV, CAUSAL, MASK, MS0, MS1, MS2, MS3>(
        dot, scale, softcap, window, mask, b, h, i, j);
  };

  // Phase 1: the rows' statistics and dq.
  for (int r = warp; r < ROWS; r += WARPS) {
    const int h = hk * GROUP + r / SQ, i = r % SQ;
    const u64 row = (u64)(b * HQ + h) * SQ + i;
    float qv[DL], gv[DVL], dqv[DL];
    float dsum = 0.0f;
#pragma unroll
    for (int c = 0; c < DL; ++c) {
      qv[c] = lane + 32 * c < D ? ldf(q + row * D + lane + 32 * c) : 0.0f;
      dqv[c] = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < DVL; ++c) {
      const bool in = lane + 32 * c < DV;
      gv[c] = in ? ldf(dout + row * DV + lane + 32 * c) : 0.0f;
      dsum += in ? gv[c] * ldf(out + row * DV + lane + 32 * c) : 0.0f;
    }
    dsum = warp_sum(dsum);
    const int keyEnd = CAUSAL ? min(SKV, max(0, i + (SKV - SQ) + 1)) : SKV;
    const int keyStart =
        CAUSAL && window > 0 ? max(0, i + (SKV - SQ) - window + 1) : 0;
    float m = kNegInf, l = 0.0f;
    for (int j = keyStart; j < keyEnd; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < DL; ++c)
        if (lane + 32 * c < D)
          dot += qv[c] * ldf(kBase + (u64)j * D + lane + 32 * c);
      const float qk = warp_sum(dot);
      const float s = scoreOf(qk, h, i, j);
      if (s == kNegInf) // Uniform over the warp.
        continue;
      const float mNew = fmax_nan(m, s);
      l = l * expf(m - mNew) + expf(s - mNew); // expf(-inf) = 0 at first.
      m = mNew;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int j = 0; j < keyEnd && m != kNegInf; ++j) {
      float dot = 0.0f, dp = 0.0f;
#pragma unroll
      for (int c = 0; c < DL; ++c)
        if (lane + 32 * c < D)
          dot += qv[c] * ldf(kBase + (u64)j * D + lane + 32 * c);
#pragma unroll
      for (int c = 0; c < DVL; ++c)
        if (lane + 32 * c < DV)
          dp += gv[c] * ldf(vBase + (u64)j * DV + lane + 32 * c);
      const float qk = warp_sum(dot);
      const float s = scoreOf(qk, h, i, j);
      dp = warp_sum(dp);
      const float p = s == kNegInf ? 0.0f : expf(s - m) * inv;
      const float ds =
          p * (dp - dsum) * scale * cap_slope(qk * scale, softcap);
#pragma unroll
      for (int c = 0; c < DL; ++c)
        if (lane + 32 * c < D)
          dqv[c] += ds * ldf(kBase + (u64)j * D + lane + 32 * c);
    }
#pragma unroll
    for (int c = 0; c < DL; ++c)
      if (lane + 32 * c < D)
        stf(dq + row * D + lane + 32 * c, dqv[c]);
    if (lane == 0) {
      st[r * 3] = m;
      st[r * 3 + 1] = inv;
      st[r * 3 + 2] = dsum;
    }
  }
  __syncthreads(); // Every row's statistics are in `stats`.

  // Phase 2: dk and dv, a key per warp.
  for (int j = warp; j < SKV; j += WARPS) {
    float kv[DL], vv[DVL], dkv[DL], dvv[DVL];
#pragma unroll
    for (int c = 0; c < DL; ++c) {
      kv[c] =
          lane + 32 * c < D ? ldf(kBase + (u64)j * D + lane + 32 * c) : 0.0f;
      dkv[c] = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < DVL; ++c) {
      vv[c] =
          lane + 32 * c < DV ? ldf(vBase + (u64)j * DV + lane + 32 * c) : 0.0f;
      dvv[c] = 0.0f;
    }
    for (int r = 0; r < ROWS; ++r) {
      const int h = hk * GROUP + r / SQ, i = r % SQ;
      const float m = st[r * 3];
      if (m == kNegInf ||
          (CAUSAL && (j > i + (SKV - SQ) ||
                      (window > 0 && i + (SKV - SQ) - j >= window))))
        continue; // Uniform over the warp.
      const u64 row = (u64)(b * HQ + h) * SQ + i;
      float qv[DL], gv[DVL], dot = 0.0f, dp = 0.0f;
#pragma unroll
      for (int c = 0; c < DL; ++c) {
        qv[c] = lane + 32 * c < D ? ldf(q + row * D + lane + 32 * c) : 0.0f;
        dot += qv[c] * kv[c];
      }
#pragma unroll
      for (int c = 0; c < DVL; ++c) {
        gv[c] =
            lane + 32 * c < DV ? ldf(dout + row * DV + lane + 32 * c) : 0.0f;
        dp += gv[c] * vv[c];
      }
      const float qk = warp_sum(dot);
      const float s = scoreOf(qk, h, i, j);
      dp = warp_sum(dp);
      if (s == kNegInf)
        continue;
      const float p = expf(s - m) * st[r * 3 + 1];
      const float ds =
          p * (dp - st[r * 3 + 2]) * scale * cap_slope(qk * scale, softcap);
#pragma unroll
      for (int c = 0; c < DL; ++c)
        dkv[c] += ds * qv[c];
#pragma unroll
      for (int c = 0; c < DVL; ++c)
        dvv[c] += p * gv[c];
    }
#pragma unroll
    for (int c = 0; c < DL; ++c)
      if (lane + 32 * c < D)
        stf(dk + (u64)(b * HKV + hk) * SKV * D + (u64)j * D + lane + 32 * c,
            dkv[c]);
#pragma unroll
    for (int c = 0; c < DVL; ++c)
      if (lane + 32 * c < DV)
        stf(dv + (u64)(b * HKV + hk) * SKV * DV + (u64)j * DV + lane + 32 * c,
            dvv[c]);
  }
}

//===----------------------------------------------------------------------===//
// Decode attention (Attention.cpp): flash-decoding
//===----------------------------------------------------------------------===//
//
// One query row per (batch, head) and a long key range: SPLIT keys per
// block of 4 warps, so a (b, h) spreads over SPLITS = ceil(SKV / SPLIT)
// blocks. In a block, warp w takes keys j0 + w, j0 + w + 4, ...: the lanes
// split the head dimension, a shuffle sum gives the score, and each warp
// keeps an online max m, sum l and weighted values o (lane + 32 c). The
// warps merge in shared memory into the block's (m, l, o), which goes to
// `part`; the last block of a (b, h) to finish (a counter in `done`, reset
// by it) merges the SPLITS partials and stores o / l. With one split the
// block stores directly. Masked keys (bool false, or a score of -inf) are
// skipped; a block or row that sees no key contributes nothing (zeros).

template <typename T, typename M, int B, int HQ, int HKV, int SKV, int D,
          int DV, int SPLIT, int MASK, long long MS0, long long MS1,
          long long MS3, typename Sink>
__device__ __forceinline__ void
attention_decode(const T *q, const T *k, const T *v, const M *mask, float scale,
                 float softcap, int window, float *part, unsigned *done,
                 const Sink &sink) {
  constexpr int WARPS = 4, THREADS = WARPS * 32;
  constexpr int SPLITS = (SKV + SPLIT - 1) / SPLIT;
  constexpr int DL = (D + 31) / 32, DVL = (DV + 31) / 32;
  static_assert(HQ % HKV == 0, "GQA needs hq to be a multiple of hkv");
  const float kNegInf = -__int_as_float(0x7f800000);

  __shared__ float wm[WARPS], wl[WARPS];
  __shared__ float wo[WARPS][DVL * 32];
  __shared__ int isLast;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x % SPLITS;
  const int bh = blockIdx.x / SPLITS, h = bh % HQ, b = bh / HQ;
  const int hk = h / (HQ / HKV);
  const T *qRow = q + (u64)bh * D;
  const T *kBase = k + (u64)(b * HKV + hk) * SKV * D;
  const T *vBase = v + (u64)(b * HKV + hk) * SKV * DV;

  float qv[DL];
#pragma unroll
  for (int c = 0; c < DL; ++c)
    qv[c] = lane + 32 * c < D ? ldf(qRow + lane + 32 * c) : 0.0f;
  float m = kNegInf, l = 0.0f, o[DVL];
#pragma unroll
  for (int c = 0; c < DVL; ++c)
    o[c] = 0.0f;

  // A causal sliding window (the one row is the last position): the last
  // `window` keys only.
  const int j0 = max(split * SPLIT, window > 0 ? SKV - window : 0);
  const int j1 = min(SKV, split * SPLIT + SPLIT);
  for (int j = j0 + warp; j < j1; j += WARPS) {
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < DL; ++c)
      if (lane + 32 * c < D)
        s += qv[c] * ldf(kBase + (u64)j * D + lane + 32 * c);
    s = cap_score(warp_sum(s) * scale, softcap); // As in attention.
    bool keep = true;
    if constexpr (MASK != 0) {
      const M *mp =
          mask + (long long)b * MS0 + (long long)h * MS1 + (long long)j * MS3;
      if constexpr (MASK == 1)
        keep = *mp != 0;
      else
        s += ldf(mp);
    }
    if (!keep || s == kNegInf) // Uniform over the warp.
      continue;
    const float mNew = fmax_nan(m, s);
    const float corr = expf(m - mNew); // 0 while m is -inf.
    const float p = expf(s - mNew);
    l = l * corr + p;
#pragma unroll
    for (int c = 0; c < DVL; ++c)
      o[c] = o[c] * corr + (lane + 32 * c < DV
                                ? p * ldf(vBase + (u64)j * DV + lane + 32 * c)
                                : 0.0f);
    m = mNew;
  }

  // The block's partial: the warps' merged.
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < DVL; ++c)
    wo[warp][lane + 32 * c] = o[c];
  __syncthreads();
  float bm = kNegInf;
#pragma unroll
  for (int w = 0; w < WARPS; ++w)
    bm = fmax_nan(bm, wm[w]);
  float weight[WARPS], bl = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    weight[w] = wm[w] == kNegInf ? 0.0f : expf(wm[w] - bm);
    bl += wl[w] * weight[w];
  }
  if constexpr (SPLITS == 1) {
    const float inv = bl > 0.0f ? 1.0f / bl : 0.0f;
    for (int c = threadIdx.x; c < DV; c += THREADS) {
      float acc = 0.0f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w)
        acc += wo[w][c] * weight[w];
      sink((u64)bh * DV + c, acc * inv);
    }
    return;
  } else {
    float *mine = part + ((u64)bh * SPLITS + split) * (DV + 2);
    if (threadIdx.x == 0) {
      mine[0] = bm;
      mine[1] = bl;
    }
    for (int c = threadIdx.x; c < DV; c += THREADS) {
      float acc = 0.0f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w)
        acc += wo[w][c] * weight[w];
      mine[2 + c] = acc;
    }
    // Publish the partial, then count it: the last block merges.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
      isLast = atomicAdd(&done[bh], 1u) == SPLITS - 1;
    __syncthreads();
    if (!isLast)
      return;
    __threadfence();
    const volatile float *all = part + (u64)bh * SPLITS * (DV + 2);
    float gm = kNegInf;
    for (int s = 0; s < SPLITS; ++s)
      gm = fmax_nan(gm, all[s * (DV + 2)]);
    float gl = 0.0f;
    for (int s = 0; s < SPLITS; ++s) {
      const float sm = all[s * (DV + 2)];
      if (sm != kNegInf)
        gl += all[s * (DV + 2) + 1] * expf(sm - gm);
    }
    const float inv = gl > 0.0f ? 1.0f / gl : 0.0f;
    for (int c = threadIdx.x; c < DV; c += THREADS) {
      float acc = 0.0f;
      for (int s = 0; s < SPLITS; ++s) {
        const float sm = all[s * (DV + 2)];
        if (sm != kNegInf)
          acc += all[s * (DV + 2) + 2 + c] * expf(sm - gm);
      }
      sink((u64)bh * DV + c, acc * inv);
    }
    if (threadIdx.x == 0)
      done[bh] = 0; // For the next launch.
  }
}

//===----------------------------------------------------------------------===//
// KV cache write (DataMovement.cpp)
//===----------------------------------------------------------------------===//
//
// The update [OUTER, TOKENS, INNER] goes to slots [slot, slot + TOKENS) of
// the cache [OUTER, SLOTS, INNER], one thread per update element; the slot
// is read on the device: position[o / ROW] for outer index o (ROW = OUTER:
// one slot for every row; ROW = OUTER / batch: a slot per row of the
// batch). The runtime binds a cache's input and output to one memory, so
// only the slice moves; into another result the rest of the cache is
// copied too (disjoint elements, so one launch suffices). A slot that does
// not fit refuses the whole write and reports kStatusKvCacheOverflow.
// E is an unsigned type of the element's size (the bytes are copied).

template <typename E, long long OUTER, long long SLOTS, long long TOKENS,
          long long INNER, long long ROW>
__device__ __forceinline__ void kv_cache_write(const E *cache, const E *update,
                                               const long long *position,
                                               E *out) {
  for (long long p = 0; p < OUTER / ROW; ++p) {
    const long long slot = position[p];
    if (slot < 0 || slot > SLOTS - TOKENS) {
      if (blockIdx.x == 0 && threadIdx.x == 0)
        report_error(kStatusKvCacheOverflow, TOKENS, slot, SLOTS);
      return;
    }
  }
  const u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
       i < (u64)(OUTER * TOKENS * INNER); i += stride) {
    const u64 outer = i / (TOKENS * INNER), t = i / INNER % TOKENS,
              in = i % INNER;
    const long long slot = position[outer / ROW];
    out[(outer * SLOTS + slot + t) * INNER + in] = update[i];
  }
  if (out == cache)
    return;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
       i < (u64)(OUTER * SLOTS * INNER); i += stride) {
    const long long t = (long long)(i / INNER % SLOTS);
    const long long slot = position[i / (SLOTS * INNER) / ROW];
    if (t < slot || t >= slot + TOKENS)
      out[i] = cache[i];
  }
}

//===----------------------------------------------------------------------===//
// Matmul fallback (MatMul.cpp)
//===----------------------------------------------------------------------===//
//
// For the rare matmul whose batch broadcast cuBLASLt's one stride per
// operand cannot express: one 16x16 tile of one batch's C = A B (+ bias)
// per block, through shared memory, fp32 accumulation. `aOff` and `bOff`
// are the element offsets of the batch's matrices.

template <typename T, int M, int N, int K, bool BIAS, typename Sink>
__device__ __forceinline__ void
matmul_tile(const T *a, const T *b, const T *bias, u64 batch, u64 aOff,
            u64 bOff, int tileM, int tileN, const Sink &sink) {
  __shared__ float as[16][17];
  __shared__ float bs[16][17];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row = tileM * 16 + ty, col = tileN * 16 + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    as[ty][tx] = (row < M && k0 + tx < K)
                     ? ldf(a + aOff + (u64)row * K + k0 + tx)
                     : 0.0f;
    bs[ty][tx] = (k0 + ty < K && col < N)
                     ? ldf(b + bOff + (u64)(k0 + ty) * N + col)
                     : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk)
      acc += as[ty][kk] * bs[kk][tx];
    __syncthreads();
  }
  if (row < M && col < N) {
    if constexpr (BIAS)
      acc += ldf(bias + col);
    sink(batch * M * N + (u64)row * N + col, acc);
  }
}

//===----------------------------------------------------------------------===//
// Packed weights (quantized_matmul, dequantize; MatMul.cpp)
//===----------------------------------------------------------------------===//
//
// Element (k, n) of a packed [K, N] weight: the BITS-bit unsigned integer
// of column n at row k (block k / BS, the low bits of each byte first),
// less its block's zero point (2^(BITS - 1) without zero points), times
// its block's scale, in the host kernel's order of operations.

template <typename T, int N, int K, int BITS, int BS, bool ZP>
__device__ __forceinline__ float
packed_weight(const unsigned char *q, const T *scales, const unsigned char *zp,
              int k, int n) {
  constexpr int B = (K + BS - 1) / BS;
  constexpr int BLOB = BS * BITS / 8;
  constexpr int ZB = (B * BITS + 7) / 8;
  const int b = k / BS, i = k % BS;
  const unsigned byte = q[((u64)n * B + b) * BLOB + i * BITS / 8];
  const int v = BITS == 8 ? (int)byte : (int)((i & 1) ? byte >> 4 : byte & 15u);
  int z = 1 << (BITS - 1);
  if constexpr (ZP) {
    const unsigned zb = zp[(u64)n * ZB + b * BITS / 8];
    z = BITS == 8 ? (int)zb : (int)((b & 1) ? zb >> 4 : zb & 15u);
  }
  return (float)(v - z) * ldf(scales + (u64)n * B + b);
}

/// One 16x16 tile of C = A W (+ bias) with W packed: A is [M, K] (the
/// batch folded into the rows), each block dequantizes its 16x16 tiles of
/// W into shared memory as it goes, fp32 accumulation.
template <typename T, int M, int N, int K, int BITS, int BS, bool ZP, bool BIAS,
          typename Sink>
__device__ __forceinline__ void
qmatmul_tile(const T *a, const unsigned char *q, const T *scales,
             const unsigned char *zp, const T *bias, int tileM, int tileN,
             const Sink &sink) {
  __shared__ float as[16][17];
  __shared__ float ws[16][17];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row = tileM * 16 + ty, col = tileN * 16 + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    as[ty][tx] =
        (row < M && k0 + tx < K) ? ldf(a + (u64)row * K + k0 + tx) : 0.0f;
    ws[ty][tx] =
        (k0 + ty < K && col < N)
            ? packed_weight<T, N, K, BITS, BS, ZP>(q, scales, zp, k0 + ty, col)
            : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk)
      acc += as[ty][kk] * ws[kk][tx];
    __syncthreads();
  }
  if (row < M && col < N) {
    if constexpr (BIAS)
      acc += ldf(bias + col);
    sink((u64)row * N + col, acc);
  }
}

//===----------------------------------------------------------------------===//
// Mixtures of experts (moe; Moe.cpp)
//===----------------------------------------------------------------------===//
//
// A grouped product over the routed (token, slot) pairs, as four launches
// of one generated function's entry points that share its scratch: route
// (one block) counts each expert's pairs, lays its rows out contiguously
// and cuts them into tiles of 16 rows of one expert (at most S/16 + E
// tiles); fc1 (with the activation) and fc2 multiply each tile by its
// expert's weights, a 16x16 block of outputs per CUDA block; combine adds
// each token's slots, in slot order, weighted. The rows an expert's pairs
// land on depend on the order of the atomics, but every row is computed
// alone and read back through its slot, so the result does not.

struct MoeScratch {
  int *first;       // [E + 1]: expert e's rows are [first[e], first[e + 1]).
  int *slot;        // [S]: row r's flat (token, slot) index.
  int *row_of;      // [S]: a slot's row, -1 where it selects no expert.
  int *tile_expert; // [S / 16 + E]: each tile's expert and first row.
  int *tile_row;
  int *tiles;       // [1]: the tiles in use.
  float *act;       // [S, F]: the activated fc1 (and fc3) rows.
  float *out;       // [S, H]: the fc2 rows.
};

enum : int { kMoeRelu, kMoeGelu, kMoeGeluTanh, kMoeSilu, kMoeIdentity };
/// Where a swiglu's gate and up rows are: none (another activation), fc3,
/// fc1's pairs, fc1's halves.
enum : int { kGluNone, kGluFc3, kGluInterleaved, kGluHalves };

template <typename I, int S, int E>
__device__ __forceinline__ void moe_route(const I *ids, const MoeScratch &s) {
  __shared__ int count[E];
  __shared__ int next[E];
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < S; i += blockDim.x) {
    const long long e = ldi(ids + i);
    if (e >= 0 && e < E)
      atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int row = 0, tiles = 0;
    for (int e = 0; e < E; ++e) {
      s.first[e] = next[e] = row;
      for (int r = 0; r < count[e]; r += 16) {
        s.tile_expert[tiles] = e;
        s.tile_row[tiles++] = row + r;
      }
      row += count[e];
    }
    s.first[E] = row;
    *s.tiles = tiles;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < S; i += blockDim.x) {
    const long long e = ldi(ids + i);
    int r = -1;
    if (e >= 0 && e < E) {
      r = atomicAdd(&next[e], 1);
      s.slot[r] = i;
    }
    s.row_of[i] = r;
  }
}

template <int ACT> __device__ __forceinline__ float moe_activate(float x) {
  if constexpr (ACT == kMoeRelu)
    return relu(x);
  else if constexpr (ACT == kMoeGelu)
    return gelu_erf(x);
  else if constexpr (ACT == kMoeGeluTanh)
    return gelu_tanh(x);
  else if constexpr (ACT == kMoeSilu)
    return silu(x);
  else
    return x;
}

/// The tile of blockIdx.x, or false (the block returns) past the tiles in
/// use: its expert, first row and rows.
__device__ __forceinline__ bool moe_tile(const MoeScratch &s, int &e, int &r0,
                                         int &rows) {
  if ((int)blockIdx.x >= *s.tiles)
    return false;
  e = s.tile_expert[blockIdx.x];
  r0 = s.tile_row[blockIdx.x];
  rows = min(16, s.first[e + 1] - r0);
  return true;
}

/// act[r, c] for the 16 features c of blockIdx.y and the rows of the tile:
/// the token's hidden state times fc1's row (and with a swiglu the up
/// row: fc3's, fc1's pair or its second half), plus the biases, activated.
/// LIMIT < 0: no limit.
template <typename T, int K, int H, int F, int E, int ACT, int GLU, bool B1,
          bool B3>
__device__ __forceinline__ void
moe_fc1(const T *x, const T *w1, const T *w3, const T *b1, const T *b3,
        float alpha, float beta, float limit, const MoeScratch &s) {
  int e, r0, rows;
  if (!moe_tile(s, e, r0, rows))
    return;
  constexpr int F1 = (GLU == kGluInterleaved || GLU == kGluHalves) ? 2 * F : F;
  __shared__ float xs[16][17];
  __shared__ float gs[16][17];
  __shared__ float us[16][17];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int c0 = blockIdx.y * 16;
  // Thread (ty, tx) loads element tx of row ty of each 16x16 block: the
  // token of tile row ty, and the weight rows of feature c0 + ty.
  const T *xrow =
      ty < rows ? x + (u64)(s.slot[r0 + ty] / K) * H : (const T *)nullptr;
  const int cl = c0 + ty;
  const int gate_row = GLU == kGluInterleaved ? 2 * cl : cl;
  const int up_row = GLU == kGluInterleaved ? 2 * cl + 1
                     : GLU == kGluHalves    ? F + cl
                                            : cl;
  const T *gate_w = w1 + ((u64)e * F1 + gate_row) * H;
  const T *up_w = (GLU == kGluFc3 ? w3 + ((u64)e * F + up_row) * H
                                  : w1 + ((u64)e * F1 + up_row) * H);
  float gate = 0.0f, up = 0.0f;
  for (int k0 = 0; k0 < H; k0 += 16) {
    const bool in = k0 + tx < H;
    xs[ty][tx] = (xrow && in) ? ldf(xrow + k0 + tx) : 0.0f;
    gs[ty][tx] = (cl < F && in) ? ldf(gate_w + k0 + tx) : 0.0f;
    if constexpr (GLU != kGluNone)
      us[ty][tx] = (cl < F && in) ? ldf(up_w + k0 + tx) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      gate += xs[ty][kk] * gs[tx][kk];
      if constexpr (GLU != kGluNone)
        up += xs[ty][kk] * us[tx][kk];
    }
    __syncthreads();
  }
  const int c = c0 + tx;
  if (ty >= rows || c >= F)
    return;
  if constexpr (GLU == kGluNone) {
    if constexpr (B1)
      gate += ldf(b1 + (u64)e * F1 + c);
    s.act[(u64)(r0 + ty) * F + c] = moe_activate<ACT>(gate);
    return;
  } else {
    const int g_row = GLU == kGluInterleaved ? 2 * c : c;
    const int u_row = GLU == kGluInterleaved ? 2 * c + 1
                      : GLU == kGluHalves    ? F + c
                                             : c;
    if constexpr (B1)
      gate += ldf(b1 + (u64)e * F1 + g_row);
    if constexpr (B1 && GLU != kGluFc3)
      up += ldf(b1 + (u64)e * F1 + u_row);
    if constexpr (B3 && GLU == kGluFc3)
      up += ldf(b3 + (u64)e * F + u_row);
    // The host kernel's order: a NaN gate or up stays NaN.
    if (limit >= 0.0f) {
      gate = limit < gate ? limit : gate;
      up = up < -limit ? -limit : (limit < up ? limit : up);
    }
    s.act[(u64)(r0 + ty) * F + c] = gate * sigmoid(alpha * gate) * (up + beta);
  }
}

/// out[r, c] for the 16 outputs c of blockIdx.y and the rows of the tile:
/// the activated row times fc2's row, plus its bias.
template <typename T, int H, int F, bool B2>
__device__ __forceinline__ void moe_fc2(const T *w2, const T *b2,
                                        const MoeScratch &s) {
  int e, r0, rows;
  if (!moe_tile(s, e, r0, rows))
    return;
  __shared__ float as[16][17];
  __shared__ float ws[16][17];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int c0 = blockIdx.y * 16;
  const float *arow = s.act + (u64)(r0 + ty) * F;
  const T *wrow = w2 + ((u64)e * H + c0 + ty) * F;
  float acc = 0.0f;
  for (int k0 = 0; k0 < F; k0 += 16) {
    const bool in = k0 + tx < F;
    as[ty][tx] = (ty < rows && in) ? arow[k0 + tx] : 0.0f;
    ws[ty][tx] = (c0 + ty < H && in) ? ldf(wrow + k0 + tx) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk)
      acc += as[ty][kk] * ws[tx][kk];
    __syncthreads();
  }
  const int c = c0 + tx;
  if (ty >= rows || c >= H)
    return;
  if constexpr (B2)
    acc += ldf(b2 + (u64)e * H + c);
  s.out[(u64)(r0 + ty) * H + c] = acc;
}

/// result[t, c]: token t's slots in order, each fc2 row times its routing
/// weight; a slot that selects no expert adds nothing.
template <typename T, int TOKENS, int K, int H, typename Sink>
__device__ __forceinline__ void moe_combine(const T *weights,
                                            const MoeScratch &s,
                                            const Sink &sink) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
       i < (u64)TOKENS * H; i += (u64)gridDim.x * blockDim.x) {
    const u64 t = i / H, c = i % H;
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) {
      const int r = s.row_of[t * K + j];
      if (r >= 0)
        acc += ldf(weights + t * K + j) * s.out[(u64)r * H + c];
    }
    sink(i, acc);
  }
}

//===----------------------------------------------------------------------===//
// Sinks
//===----------------------------------------------------------------------===//

/// Stores a kernel's result without an epilogue.
template <typename T> struct StoreSink {
  T *r;
  __device__ __forceinline__ void operator()(u64 i, float v) const {
    stf(r + i, v);
  }
  template <int V>
  __device__ __forceinline__ void vec(u64 i, const float (&v)[V]) const {
    stvec<V>(r + i, v);
  }
};

} // namespace pt
