//===- KernelSupport.h - shared pieces of the host kernels ------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What every host kernel needs: storage types and their fp32/int64 compute
// types, attribute readers, broadcast maps, and the kernel entry points the
// dispatcher (HostKernels.cpp) calls. Private to the kernel library.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_KERNELS_KERNELSUPPORT_H
#define PARTITA_RUNTIME_KERNELS_KERNELSUPPORT_H

#include "partita/runtime/Float16.h"
#include "partita/runtime/HostKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

// Hot loops get an AVX2+FMA clone chosen at load time (an ifunc), so one
// binary runs everywhere and still uses the wide units where they exist.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) &&          \
    !defined(__clang__)
#define PARTITA_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
// Where a kernel may also carry a function compiled for AVX-512
// (target("arch=x86-64-v4")), chosen with __builtin_cpu_supports.
#define PARTITA_HAVE_AVX512_PATH 1
#else
#define PARTITA_HOT
#endif

namespace partita::runtime::kernels {

/// The highest tensor rank the kernels take (the runtime's index arrays are
/// fixed-size so that hot paths do not allocate).
constexpr size_t kMaxRank = 16;

//===----------------------------------------------------------------------===//
// Storage types
//===----------------------------------------------------------------------===//

/// IEEE binary16 and bfloat16 bits, and a one-byte bool; distinct types so
/// that templates can tell them from the integers of the same width.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Bool8 {
  uint8_t value;
};

/// Storage type -> compute type (fp32 for floats, int64 for integers and
/// bool), with the conversions on load and store.
template <typename T> struct Storage;
template <> struct Storage<float> {
  using Compute = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
template <> struct Storage<Half> {
  using Compute = float;
  static float load(Half v) { return f16ToFloat(v.bits); }
  static Half store(float v) { return Half{floatToF16(v)}; }
};
template <> struct Storage<BFloat16> {
  using Compute = float;
  static float load(BFloat16 v) { return bf16ToFloat(v.bits); }
  static BFloat16 store(float v) { return BFloat16{floatToBf16(v)}; }
};
template <typename I> struct IntStorage {
  using Compute = int64_t;
  static int64_t load(I v) { return v; }
  // Integer results wrap to the storage width (two's complement).
  static I store(int64_t v) { return static_cast<I>(v); }
};
template <> struct Storage<int64_t> : IntStorage<int64_t> {};
template <> struct Storage<int32_t> : IntStorage<int32_t> {};
template <> struct Storage<int8_t> : IntStorage<int8_t> {};
template <> struct Storage<Bool8> {
  using Compute = int64_t;
  static int64_t load(Bool8 v) { return v.value != 0; }
  static Bool8 store(int64_t v) { return Bool8{static_cast<uint8_t>(v != 0)}; }
};

template <typename T> float loadFloat(T v) { return Storage<T>::load(v); }
template <typename T> T storeFloat(float v) { return Storage<T>::store(v); }

inline bool isFloatDType(DType d) {
  return d == program::F32 || d == program::F16 || d == program::BF16;
}
inline bool isIntDType(DType d) {
  return d == program::I64 || d == program::I32 || d == program::I8 ||
         d == program::BOOL;
}

template <typename T> struct TypeTag {
  using type = T;
};

//===----------------------------------------------------------------------===//
// Kernel context and attributes
//===----------------------------------------------------------------------===//

using AttributeMap = google::protobuf::Map<std::string, program::Attribute>;

/// Reads the attributes of a kernel or epilogue step; errors name `op`.
class Attributes {
public:
  Attributes(const AttributeMap &map, std::string op)
      : map(map), op(std::move(op)) {}

  Status getInt(const char *name, int64_t &value) const;
  /// Accepts an integer attribute too.
  Status getFloat(const char *name, double &value) const;
  /// An absent bool attribute is `absentValue` (proto3 leaves false out).
  Status getBool(const char *name, bool &value, bool absentValue) const;
  Status getString(const char *name, std::string &value) const;
  Status getInts(const char *name, std::vector<int64_t> &values) const;
  bool has(const char *name) const { return map.count(name) != 0; }

private:
  Status missing(const char *name, const char *kind) const;
  const AttributeMap &map;
  std::string op;
};

struct KernelContext {
  const program::Kernel &kernel;
  std::vector<Tensor> operands;
  std::vector<Tensor> results;
  /// The operand of each epilogue step (an empty Tensor for unary steps).
  std::vector<Tensor> epilogueOperands;
  ThreadPool &pool;
  Attributes attrs;
  /// Set by the dispatcher when the kernel may apply its epilogue itself
  /// (it keeps the element type); the kernel sets `epilogueDone` if it did.
  bool mayFuseEpilogue = false;
  bool epilogueDone = false;

  const std::string &op() const { return kernel.op(); }
  /// "op: message", so that every error names the failing op.
  Status error(const std::string &message) const {
    return Status::error(op() + ": " + message);
  }
  /// Fails unless `tensor` has `shape`; `what` names it in the message.
  Status expectShape(const Tensor &tensor, const std::vector<int64_t> &shape,
                     const std::string &what) const;
  Status expectDType(const Tensor &tensor, DType dtype,
                     const std::string &what) const;
  Status expectFloat(const Tensor &tensor, const std::string &what) const;
};

/// `axis` normalized into [0, rank), or an error naming the op.
Status normalizeAxis(const KernelContext &ctx, int64_t &axis, int64_t rank,
                     const char *what = "axis");

/// Calls f(TypeTag<T>{}) for the float storage types; an error otherwise.
template <typename F>
Status visitFloat(const KernelContext &ctx, DType dtype, F &&f) {
  switch (dtype) {
  case program::F32:
    return f(TypeTag<float>{});
  case program::F16:
    return f(TypeTag<Half>{});
  case program::BF16:
    return f(TypeTag<BFloat16>{});
  default:
    return ctx.error("unsupported element type " + dtypeName(dtype) +
                     " (expected f32, f16 or bf16)");
  }
}

/// Calls f(TypeTag<T>{}) for every storage type.
template <typename F>
Status visitAny(const KernelContext &ctx, DType dtype, F &&f) {
  switch (dtype) {
  case program::F32:
    return f(TypeTag<float>{});
  case program::F16:
    return f(TypeTag<Half>{});
  case program::BF16:
    return f(TypeTag<BFloat16>{});
  case program::I64:
    return f(TypeTag<int64_t>{});
  case program::I32:
    return f(TypeTag<int32_t>{});
  case program::I8:
    return f(TypeTag<int8_t>{});
  case program::BOOL:
    return f(TypeTag<Bool8>{});
  default:
    return ctx.error("unsupported element type " + dtypeName(dtype));
  }
}

//===----------------------------------------------------------------------===//
// Shapes and broadcasting
//===----------------------------------------------------------------------===//

/// Row-major element strides of `shape`.
std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape);

/// Where the elements of a result-shaped range come from in an operand that
/// broadcasts (numpy-style) to the result: the result's dimensions,
/// collapsed where the operand is contiguous or repeated alike, with the
/// operand's element stride on each (0 where it repeats).
struct BroadcastMap {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  bool identity = false; // Same shape: element i of the result is element i.

  /// Builds the map; false when `from` does not broadcast to `to`.
  bool build(const std::vector<int64_t> &from, const std::vector<int64_t> &to);

  /// Calls f(resultOffset, operandOffset, length, operandStride) for the
  /// runs of [begin, begin + n) that are contiguous in the result;
  /// `resultOffset` is relative to `begin`, `operandStride` 0 or 1.
  template <typename F> void forEachRun(int64_t begin, int64_t n, F &&f) const;
};

template <typename F>
void BroadcastMap::forEachRun(int64_t begin, int64_t n, F &&f) const {
  if (n <= 0)
    return;
  if (identity) {
    f(int64_t(0), begin, n, int64_t(1));
    return;
  }
  if (dims.empty()) { // Everything collapsed away: a scalar.
    f(int64_t(0), int64_t(0), n, int64_t(0));
    return;
  }
  size_t rank = dims.size();
  int64_t index[kMaxRank];
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % dims[d];
    rest /= dims[d];
  }
  int64_t outer = 0;
  for (size_t d = 0; d + 1 < rank; ++d)
    outer += index[d] * strides[d];
  int64_t inner = dims[rank - 1];
  int64_t innerStride = strides[rank - 1];
  int64_t done = 0;
  while (done < n) {
    int64_t len = std::min(inner - index[rank - 1], n - done);
    f(done, outer + index[rank - 1] * innerStride, len, innerStride);
    done += len;
    index[rank - 1] += len;
    if (index[rank - 1] < inner)
      continue;
    index[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      outer += strides[d];
      if (++index[d] < dims[d])
        break;
      outer -= strides[d] * dims[d];
      index[d] = 0;
    }
  }
}

/// Bytes per element and a typed pointer helper for the data movers.
inline const char *bytesOf(const Tensor &t) {
  return static_cast<const char *>(t.data);
}
inline char *mutableBytesOf(const Tensor &t) {
  return static_cast<char *>(t.data);
}

/// Copies `shape` elements of `elementSize` bytes from `src` (element
/// strides `srcStrides`) to `dst` (`dstStrides`), on the pool. Used by every
/// data-movement kernel: transpose, slice, broadcast, concat and split are
/// all one strided copy.
void stridedCopy(ThreadPool &pool, size_t elementSize,
                 const std::vector<int64_t> &shape, char *dst,
                 const std::vector<int64_t> &dstStrides, const char *src,
                 const std::vector<int64_t> &srcStrides);

/// The parallelFor grain that gives each task about `targetWork` units
/// when one item costs `itemCost` units.
inline int64_t grainFor(int64_t itemCost, int64_t targetWork = 32768) {
  return std::max<int64_t>(1, targetWork / std::max<int64_t>(1, itemCost));
}

template <typename T>
PARTITA_HOT void widenRun(const T *__restrict src, int64_t n,
                          float *__restrict dst) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = loadFloat(src[i]);
}

/// An fp32 view of a float tensor: the tensor itself, or a widened copy.
template <typename T> struct Fp32 {
  std::unique_ptr<float[]> owned;
  const float *data = nullptr;

  Fp32(ThreadPool &pool, const Tensor &t) {
    if constexpr (std::is_same_v<T, float>) {
      data = t.as<float>();
    } else {
      int64_t n = t.numElements();
      owned.reset(new float[std::max<int64_t>(n, 1)]);
      const T *src = t.as<T>();
      float *dst = owned.get();
      pool.parallelFor(n, grainFor(1, 1 << 16), [&](int64_t b, int64_t e) {
        widenRun(src + b, e - b, dst + b);
      });
      data = dst;
    }
  }
};

/// Keeps OpenBLAS at one thread, for kernels that call cblas (MatMul.cpp
/// says why).
void useSingleThreadedBlas();

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

bool isElementwiseOp(const std::string &op);
/// Elementwise kernels (binary, compare, unary, gelu, cast, where) with the
/// kernel's epilogue fused into the same pass.
Status runElementwise(KernelContext &ctx);
/// Applies `ctx.kernel.epilogue` to `source` (the kernel's first result as
/// computed) and writes the outcome to `dest` (may be `source` itself).
Status runEpilogue(KernelContext &ctx, const Tensor &source,
                   const Tensor &dest);
/// The kernel's epilogue as a function of flat ranges of the result, for
/// kernels that finish each block of their result right after computing it,
/// while it is in cache. Applies in place; only for epilogues that keep the
/// result's element type (KernelContext::mayFuseEpilogue).
class RangeEpilogue {
public:
  RangeEpilogue();
  ~RangeEpilogue();
  Status build(const KernelContext &ctx, const Tensor &result);
  bool empty() const;
  void run(int64_t begin, int64_t n) const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// The element type the kernel's own computation yields for results[0],
/// before any epilogue cast or compare changes it.
DType naturalResultType(const KernelContext &ctx);
/// Whether the epilogue changes the element type (cast or compare steps).
bool epilogueChangesType(const program::Kernel &kernel);

Status runReduce(KernelContext &ctx);
Status runCumsum(KernelContext &ctx);
Status runSoftmax(KernelContext &ctx);
Status runLogSoftmax(KernelContext &ctx);
Status runLayerNorm(KernelContext &ctx);
Status runRmsNorm(KernelContext &ctx);
Status runMatmul(KernelContext &ctx);
Status runDequantize(KernelContext &ctx);
Status runQuantizedMatmul(KernelContext &ctx);
Status runAttention(KernelContext &ctx);
Status runAttentionPartial(KernelContext &ctx);
Status runAttentionGrad(KernelContext &ctx);
Status runRope(KernelContext &ctx);
Status runMoe(KernelContext &ctx);
Status runEmbedding(KernelContext &ctx);
Status runGather(KernelContext &ctx);
Status runTranspose(KernelContext &ctx);
Status runBroadcastTo(KernelContext &ctx);
Status runSlice(KernelContext &ctx);
Status runConcat(KernelContext &ctx);
Status runSplit(KernelContext &ctx);
Status runCopy(KernelContext &ctx);
/// Writes operand 1 into operand 0 at slot operand 2 along `axis`, in place
/// when the result is operand 0's memory (KvCache.cpp).
Status runKvCacheWrite(KernelContext &ctx);

} // namespace partita::runtime::kernels

#endif // PARTITA_RUNTIME_KERNELS_KERNELSUPPORT_H
