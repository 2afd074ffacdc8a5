//===- Elementwise.cpp - elementwise kernels and fused epilogues ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// An elementwise kernel and the epilogue fused into it run as one chain:
// each thread takes chunks of 512 result elements, loads the first operand
// (broadcast) into fp32 or int64 scratch, applies every step to the chunk
// while it sits in L1, and stores it once. Each step loads its own operand
// through a broadcast map into a second scratch array, so the loops are
// plain, unit-stride and vectorizable, and the op and element types are
// dispatched once per chunk and step, never per element.
//
// After each step the value is rounded (f16, bf16) or wrapped (i32, i8,
// bool) to the type the unfused op would have stored, so a fused chain
// computes exactly what the separate kernels would.
//
// Where C++ leaves results undefined the kernels pick one: integer x / 0 is
// 0 (numpy's answer, without the trap), and float-to-integer casts saturate
// (NaN gives 0). A cast step converts to the type the next step with an
// operand needs, or to the result buffer's type.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"
#include "MathApprox.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <unordered_map>

namespace partita::runtime::kernels {

namespace {

constexpr int64_t kChunk = 512;

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max, Min, And, Or, Xor };
enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };
enum class UnaryOp {
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Tanh,
  Erf,
  Sin,
  Cos,
  Sigmoid,
  Relu,
  Silu,
  NotLogical,
  NotBitwise,
  GeluErf,
  GeluTanh,
  Square,
  Cube,
};

//===----------------------------------------------------------------------===//
// Scalar semantics
//===----------------------------------------------------------------------===//

// Signed overflow is undefined in C++; integer results wrap, so the
// arithmetic goes through uint64.
inline int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) +
                              static_cast<uint64_t>(b));
}
inline int64_t wrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) -
                              static_cast<uint64_t>(b));
}
inline int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) *
                              static_cast<uint64_t>(b));
}

inline int64_t intPow(int64_t base, int64_t exponent) {
  if (exponent < 0)
    return base == 1 ? 1 : base == -1 ? (exponent & 1 ? -1 : 1) : 0;
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exponent); e; e >>= 1) {
    if (e & 1)
      result *= b;
    b *= b;
  }
  return static_cast<int64_t>(result);
}

template <BinaryOp Op> inline float binaryFloat(float a, float b) {
  if constexpr (Op == BinaryOp::Add)
    return a + b;
  else if constexpr (Op == BinaryOp::Sub)
    return a - b;
  else if constexpr (Op == BinaryOp::Mul)
    return a * b;
  else if constexpr (Op == BinaryOp::Div)
    return a / b;
  else if constexpr (Op == BinaryOp::Pow)
    return std::pow(a, b);
  else if constexpr (Op == BinaryOp::Max) // NaN in either operand wins.
    return (a > b || a != a) ? a : b;
  else
    return (a < b || a != a) ? a : b;
}

template <BinaryOp Op> inline int64_t binaryInt(int64_t a, int64_t b) {
  if constexpr (Op == BinaryOp::Add)
    return wrapAdd(a, b);
  else if constexpr (Op == BinaryOp::Sub)
    return wrapSub(a, b);
  else if constexpr (Op == BinaryOp::Mul)
    return wrapMul(a, b);
  else if constexpr (Op == BinaryOp::Div) // Truncates; x / 0 is 0.
    return b == 0 ? 0 : b == -1 ? wrapSub(0, a) : a / b;
  else if constexpr (Op == BinaryOp::Pow)
    return intPow(a, b);
  else if constexpr (Op == BinaryOp::Max)
    return a > b ? a : b;
  else if constexpr (Op == BinaryOp::Min)
    return a < b ? a : b;
  else if constexpr (Op == BinaryOp::And)
    return a & b;
  else if constexpr (Op == BinaryOp::Or)
    return a | b;
  else
    return a ^ b;
}

template <CompareOp Op, typename C> inline int64_t compare(C a, C b) {
  if constexpr (Op == CompareOp::Eq)
    return a == b;
  else if constexpr (Op == CompareOp::Ne)
    return a != b;
  else if constexpr (Op == CompareOp::Lt)
    return a < b;
  else if constexpr (Op == CompareOp::Le)
    return a <= b;
  else if constexpr (Op == CompareOp::Gt)
    return a > b;
  else
    return a >= b;
}

template <UnaryOp Op> inline float unaryFloat(float x) {
  if constexpr (Op == UnaryOp::Neg)
    return -x;
  else if constexpr (Op == UnaryOp::Abs)
    return std::fabs(x);
  else if constexpr (Op == UnaryOp::Exp)
    return expApprox(x);
  else if constexpr (Op == UnaryOp::Log)
    return std::log(x);
  else if constexpr (Op == UnaryOp::Sqrt)
    return std::sqrt(x);
  else if constexpr (Op == UnaryOp::Rsqrt)
    return 1.0f / std::sqrt(x);
  else if constexpr (Op == UnaryOp::Reciprocal)
    return 1.0f / x;
  else if constexpr (Op == UnaryOp::Tanh)
    return tanhApprox(x);
  else if constexpr (Op == UnaryOp::Erf)
    return erfApprox(x);
  // libm's, with full range reduction: rotary angles reach thousands of
  // radians, where a short polynomial would lose every digit.
  else if constexpr (Op == UnaryOp::Sin)
    return std::sin(x);
  else if constexpr (Op == UnaryOp::Cos)
    return std::cos(x);
  else if constexpr (Op == UnaryOp::Sigmoid)
    return sigmoidApprox(x);
  else if constexpr (Op == UnaryOp::Relu) // Keeps NaN, as max(x, 0) does.
    return x < 0.0f ? 0.0f : x;
  else if constexpr (Op == UnaryOp::Silu)
    return x * sigmoidApprox(x);
  else if constexpr (Op == UnaryOp::GeluErf)
    return geluErfApprox(x);
  else if constexpr (Op == UnaryOp::GeluTanh)
    return geluTanhApprox(x);
  else if constexpr (Op == UnaryOp::Square)
    return x * x;
  else
    return x * x * x;
}

template <UnaryOp Op> inline int64_t unaryInt(int64_t x) {
  if constexpr (Op == UnaryOp::Neg)
    return wrapSub(0, x);
  else if constexpr (Op == UnaryOp::Abs)
    return x < 0 ? wrapSub(0, x) : x;
  else if constexpr (Op == UnaryOp::Relu)
    return x < 0 ? 0 : x;
  else if constexpr (Op == UnaryOp::NotLogical)
    return x == 0;
  else if constexpr (Op == UnaryOp::NotBitwise)
    return ~x;
  else if constexpr (Op == UnaryOp::Square)
    return wrapMul(x, x);
  else
    return wrapMul(wrapMul(x, x), x);
}

/// The largest finite value of a float type, as a float.
inline float largestFinite(DType type) {
  switch (type) {
  case program::F16:
    return 65504.0f;
  case program::BF16:
    return 3.38953139e38f; // 0x7f7f.
  default:
    return std::numeric_limits<float>::max();
  }
}

/// A saturating cast's clamp before the rounding: finite values beyond
/// `largest` become it, with their sign; infinities and NaN stay.
PARTITA_HOT void saturateLoop(float *f, int64_t n, float largest) {
  for (int64_t k = 0; k < n; ++k) {
    float x = f[k];
    bool finite = std::fabs(x) <= std::numeric_limits<float>::max();
    f[k] = finite && std::fabs(x) > largest ? std::copysign(largest, x) : x;
  }
}

/// Float to integer: toward zero, saturating (NaN gives 0) rather than the
/// undefined behaviour of an out-of-range conversion.
inline int64_t floatToInt(float x) {
  if (!(x == x))
    return 0;
  if (x >= 9.2233720368547758e18f)
    return INT64_MAX;
  if (x <= -9.2233720368547758e18f)
    return INT64_MIN;
  return static_cast<int64_t>(x);
}

//===----------------------------------------------------------------------===//
// Loops
//===----------------------------------------------------------------------===//

template <typename T, typename C = typename Storage<T>::Compute>
PARTITA_HOT void loadRun(const T *__restrict src, int64_t stride, int64_t n,
                         C *__restrict dst) {
  if (stride == 0) {
    C v = Storage<T>::load(src[0]);
    for (int64_t k = 0; k < n; ++k)
      dst[k] = v;
    return;
  }
  for (int64_t k = 0; k < n; ++k)
    dst[k] = Storage<T>::load(src[k]);
}

template <typename T, typename C = typename Storage<T>::Compute>
PARTITA_HOT void storeRun(const C *__restrict src, int64_t n,
                          T *__restrict dst) {
  for (int64_t k = 0; k < n; ++k)
    dst[k] = Storage<T>::store(src[k]);
}

template <BinaryOp Op, typename C>
PARTITA_HOT void binaryLoop(C *__restrict r, const C *__restrict t, int64_t n,
                            bool operandFirst) {
  if constexpr (std::is_same_v<C, float>) {
    if (operandFirst)
      for (int64_t k = 0; k < n; ++k)
        r[k] = binaryFloat<Op>(t[k], r[k]);
    else
      for (int64_t k = 0; k < n; ++k)
        r[k] = binaryFloat<Op>(r[k], t[k]);
  } else {
    if (operandFirst)
      for (int64_t k = 0; k < n; ++k)
        r[k] = binaryInt<Op>(t[k], r[k]);
    else
      for (int64_t k = 0; k < n; ++k)
        r[k] = binaryInt<Op>(r[k], t[k]);
  }
}

template <CompareOp Op, typename C>
PARTITA_HOT void compareLoop(const C *__restrict r, const C *__restrict t,
                             int64_t n, bool operandFirst,
                             int64_t *__restrict out) {
  if (operandFirst)
    for (int64_t k = 0; k < n; ++k)
      out[k] = compare<Op>(t[k], r[k]);
  else
    for (int64_t k = 0; k < n; ++k)
      out[k] = compare<Op>(r[k], t[k]);
}

template <UnaryOp Op> PARTITA_HOT void unaryFloatLoop(float *r, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    r[k] = unaryFloat<Op>(r[k]);
}

template <UnaryOp Op> PARTITA_HOT void unaryIntLoop(int64_t *r, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    r[k] = unaryInt<Op>(r[k]);
}

template <typename C>
PARTITA_HOT void selectLoop(C *__restrict r, const int64_t *__restrict cond,
                            const C *__restrict onFalse, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    r[k] = cond[k] ? r[k] : onFalse[k];
}

template <typename T> PARTITA_HOT void roundFloatLoop(float *r, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    r[k] = Storage<T>::load(Storage<T>::store(r[k]));
}

template <typename T> PARTITA_HOT void wrapIntLoop(int64_t *r, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    r[k] = Storage<T>::load(Storage<T>::store(r[k]));
}

PARTITA_HOT void floatToIntLoop(const float *__restrict f, int64_t n,
                                int64_t *__restrict out) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = floatToInt(f[k]);
}

PARTITA_HOT void floatToBoolLoop(const float *__restrict f, int64_t n,
                                 int64_t *__restrict out) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = f[k] != 0.0f;
}

PARTITA_HOT void intToFloatLoop(const int64_t *__restrict i, int64_t n,
                                float *__restrict out) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = static_cast<float>(i[k]);
}

//===----------------------------------------------------------------------===//
// Dispatch (once per chunk and step)
//===----------------------------------------------------------------------===//

#define PARTITA_BINARY_CASE(NAME)                                              \
  case BinaryOp::NAME:                                                         \
    return binaryLoop<BinaryOp::NAME>(r, t, n, operandFirst);

template <typename C>
void applyBinary(BinaryOp op, C *r, const C *t, int64_t n, bool operandFirst) {
  switch (op) {
    PARTITA_BINARY_CASE(Add)
    PARTITA_BINARY_CASE(Sub)
    PARTITA_BINARY_CASE(Mul)
    PARTITA_BINARY_CASE(Div)
    PARTITA_BINARY_CASE(Pow)
    PARTITA_BINARY_CASE(Max)
    PARTITA_BINARY_CASE(Min)
  default:
    break;
  }
  // Bitwise ops exist on integers only (checked when the chain is built).
  if constexpr (std::is_same_v<C, int64_t>) {
    switch (op) {
      PARTITA_BINARY_CASE(And)
      PARTITA_BINARY_CASE(Or)
      PARTITA_BINARY_CASE(Xor)
    default:
      break;
    }
  }
}
#undef PARTITA_BINARY_CASE

template <typename C>
void applyCompare(CompareOp op, const C *r, const C *t, int64_t n,
                  bool operandFirst, int64_t *out) {
  switch (op) {
  case CompareOp::Eq:
    return compareLoop<CompareOp::Eq>(r, t, n, operandFirst, out);
  case CompareOp::Ne:
    return compareLoop<CompareOp::Ne>(r, t, n, operandFirst, out);
  case CompareOp::Lt:
    return compareLoop<CompareOp::Lt>(r, t, n, operandFirst, out);
  case CompareOp::Le:
    return compareLoop<CompareOp::Le>(r, t, n, operandFirst, out);
  case CompareOp::Gt:
    return compareLoop<CompareOp::Gt>(r, t, n, operandFirst, out);
  case CompareOp::Ge:
    return compareLoop<CompareOp::Ge>(r, t, n, operandFirst, out);
  }
}

#define PARTITA_UNARY_CASE(NAME, LOOP)                                         \
  case UnaryOp::NAME:                                                          \
    return LOOP<UnaryOp::NAME>(r, n);

void applyUnaryFloat(UnaryOp op, float *r, int64_t n) {
  switch (op) {
    PARTITA_UNARY_CASE(Neg, unaryFloatLoop)
    PARTITA_UNARY_CASE(Abs, unaryFloatLoop)
    PARTITA_UNARY_CASE(Exp, unaryFloatLoop)
    PARTITA_UNARY_CASE(Log, unaryFloatLoop)
    PARTITA_UNARY_CASE(Sqrt, unaryFloatLoop)
    PARTITA_UNARY_CASE(Rsqrt, unaryFloatLoop)
    PARTITA_UNARY_CASE(Reciprocal, unaryFloatLoop)
    PARTITA_UNARY_CASE(Tanh, unaryFloatLoop)
    PARTITA_UNARY_CASE(Erf, unaryFloatLoop)
    PARTITA_UNARY_CASE(Sin, unaryFloatLoop)
    PARTITA_UNARY_CASE(Cos, unaryFloatLoop)
    PARTITA_UNARY_CASE(Sigmoid, unaryFloatLoop)
    PARTITA_UNARY_CASE(Relu, unaryFloatLoop)
    PARTITA_UNARY_CASE(Silu, unaryFloatLoop)
    PARTITA_UNARY_CASE(GeluErf, unaryFloatLoop)
    PARTITA_UNARY_CASE(GeluTanh, unaryFloatLoop)
    PARTITA_UNARY_CASE(Square, unaryFloatLoop)
    PARTITA_UNARY_CASE(Cube, unaryFloatLoop)
  default:
    return; // Integer-only ops, rejected when the chain is built.
  }
}

void applyUnaryInt(UnaryOp op, int64_t *r, int64_t n) {
  switch (op) {
    PARTITA_UNARY_CASE(Neg, unaryIntLoop)
    PARTITA_UNARY_CASE(Abs, unaryIntLoop)
    PARTITA_UNARY_CASE(Relu, unaryIntLoop)
    PARTITA_UNARY_CASE(NotLogical, unaryIntLoop)
    PARTITA_UNARY_CASE(NotBitwise, unaryIntLoop)
    PARTITA_UNARY_CASE(Square, unaryIntLoop)
    PARTITA_UNARY_CASE(Cube, unaryIntLoop)
  default:
    return; // Float-only ops, rejected when the chain is built.
  }
}
#undef PARTITA_UNARY_CASE

/// Loads [begin, begin + n) of the result-shaped view of `t` into `f` or
/// `i`, by `t`'s kind.
void loadRange(const Tensor &t, const BroadcastMap &map, int64_t begin,
               int64_t n, float *f, int64_t *i) {
  auto load = [&](auto tag, auto *dst) {
    using T = typename decltype(tag)::type;
    const T *base = static_cast<const T *>(t.data);
    map.forEachRun(begin, n,
                   [&](int64_t off, int64_t src, int64_t len, int64_t stride) {
                     loadRun<T>(base + src, stride, len, dst + off);
                   });
  };
  switch (t.dtype) {
  case program::F32:
    return load(TypeTag<float>{}, f);
  case program::F16:
    return load(TypeTag<Half>{}, f);
  case program::BF16:
    return load(TypeTag<BFloat16>{}, f);
  case program::I64:
    return load(TypeTag<int64_t>{}, i);
  case program::I32:
    return load(TypeTag<int32_t>{}, i);
  case program::I8:
    return load(TypeTag<int8_t>{}, i);
  case program::BOOL:
    return load(TypeTag<Bool8>{}, i);
  default:
    return;
  }
}

void storeRange(const Tensor &t, int64_t begin, int64_t n, const float *f,
                const int64_t *i) {
  switch (t.dtype) {
  case program::F32:
    return storeRun<float>(f, n, static_cast<float *>(t.data) + begin);
  case program::F16:
    return storeRun<Half>(f, n, static_cast<Half *>(t.data) + begin);
  case program::BF16:
    return storeRun<BFloat16>(f, n, static_cast<BFloat16 *>(t.data) + begin);
  case program::I64:
    return storeRun<int64_t>(i, n, static_cast<int64_t *>(t.data) + begin);
  case program::I32:
    return storeRun<int32_t>(i, n, static_cast<int32_t *>(t.data) + begin);
  case program::I8:
    return storeRun<int8_t>(i, n, static_cast<int8_t *>(t.data) + begin);
  case program::BOOL:
    return storeRun<Bool8>(i, n, static_cast<Bool8 *>(t.data) + begin);
  default:
    return;
  }
}

/// Rounds or wraps the chunk to what storing it as `dtype` would keep.
void roundTo(DType dtype, float *f, int64_t *i, int64_t n) {
  switch (dtype) {
  case program::F16:
    return roundFloatLoop<Half>(f, n);
  case program::BF16:
    return roundFloatLoop<BFloat16>(f, n);
  case program::I32:
    return wrapIntLoop<int32_t>(i, n);
  case program::I8:
    return wrapIntLoop<int8_t>(i, n);
  case program::BOOL:
    return wrapIntLoop<Bool8>(i, n);
  default:
    return; // f32 and i64 hold every compute value.
  }
}

//===----------------------------------------------------------------------===//
// Chains
//===----------------------------------------------------------------------===//

enum class StepKind { Binary, Compare, Unary, Cast, Select };

struct Step {
  StepKind kind;
  int code = 0; // BinaryOp, CompareOp or UnaryOp.
  const Tensor *operand = nullptr;
  BroadcastMap map;
  const Tensor *onFalse = nullptr; // Select only.
  BroadcastMap onFalseMap;
  bool operandFirst = false;
  /// Cast only: float to a narrower float keeps finite values finite.
  bool saturate = false;
  DType outType = program::DTYPE_UNSPECIFIED;
};

/// A step as the program states it, before its types are known.
struct StepSpec {
  std::string op;
  const AttributeMap *attributes;
  const Tensor *operand;
  bool operandFirst;
  const Tensor *onFalse = nullptr; // The `where` kernel's third operand.
};

const std::unordered_map<std::string, BinaryOp> &binaryOps() {
  static const std::unordered_map<std::string, BinaryOp> ops = {
      {"add", BinaryOp::Add}, {"sub", BinaryOp::Sub}, {"mul", BinaryOp::Mul},
      {"div", BinaryOp::Div}, {"pow", BinaryOp::Pow}, {"max", BinaryOp::Max},
      {"min", BinaryOp::Min}, {"and", BinaryOp::And}, {"or", BinaryOp::Or},
      {"xor", BinaryOp::Xor}};
  return ops;
}

const std::unordered_map<std::string, UnaryOp> &unaryOps() {
  static const std::unordered_map<std::string, UnaryOp> ops = {
      {"neg", UnaryOp::Neg},
      {"abs", UnaryOp::Abs},
      {"exp", UnaryOp::Exp},
      {"log", UnaryOp::Log},
      {"sqrt", UnaryOp::Sqrt},
      {"rsqrt", UnaryOp::Rsqrt},
      {"reciprocal", UnaryOp::Reciprocal},
      {"tanh", UnaryOp::Tanh},
      {"erf", UnaryOp::Erf},
      {"sin", UnaryOp::Sin},
      {"cos", UnaryOp::Cos},
      {"sigmoid", UnaryOp::Sigmoid},
      {"relu", UnaryOp::Relu},
      {"silu", UnaryOp::Silu},
      {"not", UnaryOp::NotLogical},
  };
  return ops;
}

bool isIntegerOnly(UnaryOp op) {
  return op == UnaryOp::NotLogical || op == UnaryOp::NotBitwise;
}
bool worksOnIntegers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu ||
         op == UnaryOp::Square || op == UnaryOp::Cube || isIntegerOnly(op);
}

/// The value of a one-element tensor as a double.
double scalarValue(const Tensor &t) {
  switch (t.dtype) {
  case program::F32:
    return *t.as<float>();
  case program::F16:
    return f16ToFloat(t.as<Half>()->bits);
  case program::BF16:
    return bf16ToFloat(t.as<BFloat16>()->bits);
  case program::I64:
    return static_cast<double>(*t.as<int64_t>());
  case program::I32:
    return *t.as<int32_t>();
  case program::I8:
    return *t.as<int8_t>();
  default:
    return t.as<Bool8>()->value != 0;
  }
}

/// The type a cast at `specs[index]` converts to: what the next step that
/// takes an operand needs, or the destination's type when none follows.
Status castTarget(const KernelContext &ctx, const std::vector<StepSpec> &specs,
                  size_t index, DType destType, DType &target) {
  for (size_t k = index + 1; k < specs.size(); ++k) {
    const std::string &op = specs[k].op;
    if (op == "cast")
      break;
    if ((op == "compare" || binaryOps().count(op)) && specs[k].operand) {
      target = specs[k].operand->dtype;
      return Status::ok();
    }
  }
  bool lastTypeChange = true;
  for (size_t k = index + 1; k < specs.size(); ++k)
    if (specs[k].op == "cast" || specs[k].op == "compare")
      lastTypeChange = false;
  if (!lastTypeChange)
    return ctx.error("cannot tell the target type of the cast in step " +
                     std::to_string(index));
  target = destType;
  return Status::ok();
}

Status buildChain(const KernelContext &ctx, DType startType,
                  const std::vector<StepSpec> &specs, const Tensor &dest,
                  std::vector<Step> &steps) {
  DType current = startType;
  steps.clear();
  for (size_t index = 0; index < specs.size(); ++index) {
    const StepSpec &spec = specs[index];
    const std::string &name = spec.op;
    Attributes attrs(*spec.attributes, ctx.op() + ": step '" + name + "'");
    Step step;
    step.outType = current;
    step.operandFirst = spec.operandFirst;
    bool isFloat = isFloatDType(current);
    auto unsupported = [&]() {
      return ctx.error("'" + name + "' does not apply to " +
                       dtypeName(current));
    };
    auto needOperand = [&]() -> Status {
      if (!spec.operand)
        return ctx.error("'" + name + "' needs an operand");
      if (isFloatDType(spec.operand->dtype) != isFloat)
        return ctx.error("'" + name + "' mixes " + dtypeName(current) +
                         " with an operand of " +
                         dtypeName(spec.operand->dtype));
      if (!step.map.build(spec.operand->shape, dest.shape))
        return ctx.error("the operand of '" + name + "' has shape " +
                         shapeString(spec.operand->shape) +
                         ", which does not broadcast to " +
                         shapeString(dest.shape));
      step.operand = spec.operand;
      return Status::ok();
    };

    if (auto it = binaryOps().find(name); it != binaryOps().end()) {
      BinaryOp op = it->second;
      PARTITA_RETURN_IF_ERROR(needOperand());
      bool bitwise =
          op == BinaryOp::And || op == BinaryOp::Or || op == BinaryOp::Xor;
      if (bitwise && isFloat)
        return unsupported();
      step.kind = StepKind::Binary;
      step.code = static_cast<int>(op);
      // x^2 and x^3 (layer norms written out, the tanh GELU) are products,
      // not calls to pow.
      if (op == BinaryOp::Pow && !spec.operandFirst &&
          spec.operand->numElements() == 1) {
        double e = scalarValue(*spec.operand);
        if (e == 2.0 || e == 3.0) {
          step.kind = StepKind::Unary;
          step.code =
              static_cast<int>(e == 2.0 ? UnaryOp::Square : UnaryOp::Cube);
          step.operand = nullptr;
        }
      }
    } else if (name == "compare") {
      std::string direction;
      PARTITA_RETURN_IF_ERROR(attrs.getString("direction", direction));
      static const std::unordered_map<std::string, CompareOp> directions = {
          {"eq", CompareOp::Eq}, {"ne", CompareOp::Ne}, {"lt", CompareOp::Lt},
          {"le", CompareOp::Le}, {"gt", CompareOp::Gt}, {"ge", CompareOp::Ge}};
      auto it = directions.find(direction);
      if (it == directions.end())
        return ctx.error("unknown compare direction '" + direction + "'");
      PARTITA_RETURN_IF_ERROR(needOperand());
      step.kind = StepKind::Compare;
      step.code = static_cast<int>(it->second);
      step.outType = program::BOOL;
    } else if (auto it = unaryOps().find(name);
               it != unaryOps().end() || name == "gelu") {
      UnaryOp op;
      if (name == "gelu") {
        std::string approximation = "none";
        if (attrs.has("approximation"))
          PARTITA_RETURN_IF_ERROR(
              attrs.getString("approximation", approximation));
        if (approximation != "none" && approximation != "tanh")
          return ctx.error("unknown gelu approximation '" + approximation +
                           "'");
        op = approximation == "tanh" ? UnaryOp::GeluTanh : UnaryOp::GeluErf;
      } else {
        op = it->second;
      }
      // `not` is logical on bool and bitwise on integers.
      if (op == UnaryOp::NotLogical && current != program::BOOL)
        op = UnaryOp::NotBitwise;
      if (isFloat ? isIntegerOnly(op) : !worksOnIntegers(op))
        return unsupported();
      step.kind = StepKind::Unary;
      step.code = static_cast<int>(op);
    } else if (name == "cast") {
      step.kind = StepKind::Cast;
      PARTITA_RETURN_IF_ERROR(
          castTarget(ctx, specs, index, dest.dtype, step.outType));
      PARTITA_RETURN_IF_ERROR(attrs.getBool("saturate", step.saturate, false));
      if (step.saturate && (!isFloat || !isFloatDType(step.outType)))
        return ctx.error("a saturating cast converts a float to a float, not " +
                         dtypeName(current) + " to " + dtypeName(step.outType));
    } else if (name == "where" && spec.onFalse) {
      // Only the `where` kernel itself: the chain starts from on_true.
      if (!spec.operand || spec.operand->dtype != program::BOOL)
        return ctx.error("the condition must be bool");
      if (!spec.onFalse || isFloatDType(spec.onFalse->dtype) != isFloat)
        return ctx.error("on_true and on_false must have the same kind of "
                         "element type");
      if (!step.map.build(spec.operand->shape, dest.shape) ||
          !step.onFalseMap.build(spec.onFalse->shape, dest.shape))
        return ctx.error("the operands do not broadcast to the result " +
                         shapeString(dest.shape));
      step.kind = StepKind::Select;
      step.operand = spec.operand;
      step.onFalse = spec.onFalse;
    } else {
      return ctx.error("'" + name + "' is not an elementwise op");
    }
    if (dtypeSize(step.outType) == 0)
      return ctx.error("step '" + name + "' has no result type");
    current = step.outType;
    steps.push_back(std::move(step));
  }
  if (current != dest.dtype)
    return ctx.error("the computation yields " + dtypeName(current) +
                     " but the result buffer holds " + dtypeName(dest.dtype));
  return Status::ok();
}

/// Per-thread scratch: the chunk's value and a step's operands.
struct Scratch {
  alignas(64) float f[kChunk];
  alignas(64) float ft[kChunk];
  alignas(64) int64_t i[kChunk];
  alignas(64) int64_t it[kChunk];
  alignas(64) int64_t iu[kChunk];
};

void runChunk(const Tensor &source, const BroadcastMap &sourceMap,
              const std::vector<Step> &steps, const Tensor &dest, int64_t begin,
              int64_t n, Scratch &s) {
  float *f = s.f, *ft = s.ft;
  int64_t *i = s.i, *it = s.it, *iu = s.iu;
  bool isFloat = isFloatDType(source.dtype);
  loadRange(source, sourceMap, begin, n, f, i);
  for (const Step &step : steps) {
    switch (step.kind) {
    case StepKind::Binary:
      loadRange(*step.operand, step.map, begin, n, ft, it);
      if (isFloat)
        applyBinary(static_cast<BinaryOp>(step.code), f, ft, n,
                    step.operandFirst);
      else
        applyBinary(static_cast<BinaryOp>(step.code), i, it, n,
                    step.operandFirst);
      break;
    case StepKind::Compare:
      loadRange(*step.operand, step.map, begin, n, ft, it);
      if (isFloat) {
        applyCompare(static_cast<CompareOp>(step.code), f, ft, n,
                     step.operandFirst, i);
      } else {
        applyCompare(static_cast<CompareOp>(step.code), i, it, n,
                     step.operandFirst, iu);
        std::swap(i, iu);
      }
      isFloat = false;
      break;
    case StepKind::Unary:
      if (isFloat)
        applyUnaryFloat(static_cast<UnaryOp>(step.code), f, n);
      else
        applyUnaryInt(static_cast<UnaryOp>(step.code), i, n);
      break;
    case StepKind::Cast:
      if (isFloat && step.outType == program::BOOL)
        floatToBoolLoop(f, n, i);
      else if (isFloat && isIntDType(step.outType))
        floatToIntLoop(f, n, i);
      else if (!isFloat && isFloatDType(step.outType))
        intToFloatLoop(i, n, f);
      else if (step.saturate)
        saturateLoop(f, n, largestFinite(step.outType));
      isFloat = isFloatDType(step.outType);
      break;
    case StepKind::Select:
      loadRange(*step.operand, step.map, begin, n, ft, iu);
      if (isFloat) {
        loadRange(*step.onFalse, step.onFalseMap, begin, n, ft, it);
        selectLoop(f, iu, ft, n);
      } else {
        loadRange(*step.onFalse, step.onFalseMap, begin, n, ft, it);
        selectLoop(i, iu, it, n);
      }
      break;
    }
    roundTo(step.outType, f, i, n);
  }
  storeRange(dest, begin, n, f, i);
}

Status runChain(KernelContext &ctx, const Tensor &source,
                const BroadcastMap &sourceMap, const std::vector<Step> &steps,
                const Tensor &dest) {
  int64_t total = dest.numElements();
  int64_t numChunks = (total + kChunk - 1) / kChunk;
  ctx.pool.parallelFor(numChunks, grainFor(kChunk),
                       [&](int64_t c0, int64_t c1) {
                         Scratch scratch;
                         for (int64_t c = c0; c < c1; ++c) {
                           int64_t begin = c * kChunk;
                           runChunk(source, sourceMap, steps, dest, begin,
                                    std::min(kChunk, total - begin), scratch);
                         }
                       });
  return Status::ok();
}

void appendEpilogue(const KernelContext &ctx, std::vector<StepSpec> &specs) {
  for (int k = 0; k < ctx.kernel.epilogue_size(); ++k) {
    const program::ElementwiseStep &step = ctx.kernel.epilogue(k);
    const Tensor *operand =
        step.operand() >= 0 ? &ctx.epilogueOperands[k] : nullptr;
    specs.push_back(
        {step.op(), &step.attributes(), operand, step.operand_first()});
  }
}

} // namespace

bool epilogueChangesType(const program::Kernel &kernel) {
  for (const program::ElementwiseStep &step : kernel.epilogue())
    if (step.op() == "cast" || step.op() == "compare")
      return true;
  return false;
}

DType naturalResultType(const KernelContext &ctx) {
  // Every non-elementwise kernel yields its first operand's element type
  // (the table of an embedding, the data of a gather, the input of a norm).
  return ctx.operands.empty() ? program::DTYPE_UNSPECIFIED
                              : ctx.operands[0].dtype;
}

Status runElementwise(KernelContext &ctx) {
  const Tensor &result = ctx.results[0];
  const std::string &op = ctx.op();
  std::vector<StepSpec> specs;
  const Tensor *source;
  if (op == "where") {
    source = &ctx.operands[1];
    specs.push_back({op, &ctx.kernel.attributes(), &ctx.operands[0], false,
                     &ctx.operands[2]});
  } else {
    source = &ctx.operands[0];
    const Tensor *operand =
        ctx.operands.size() > 1 ? &ctx.operands[1] : nullptr;
    if (!operand)
      PARTITA_RETURN_IF_ERROR(
          ctx.expectShape(ctx.operands[0], result.shape, "the input"));
    specs.push_back({op, &ctx.kernel.attributes(), operand, false});
  }
  appendEpilogue(ctx, specs);
  BroadcastMap sourceMap;
  if (!sourceMap.build(source->shape, result.shape))
    return ctx.error("operand of shape " + shapeString(source->shape) +
                     " does not broadcast to the result " +
                     shapeString(result.shape));
  std::vector<Step> steps;
  PARTITA_RETURN_IF_ERROR(buildChain(ctx, source->dtype, specs, result, steps));
  return runChain(ctx, *source, sourceMap, steps, result);
}

struct RangeEpilogue::Impl {
  Tensor result;
  BroadcastMap identity;
  std::vector<Step> steps;
};

RangeEpilogue::RangeEpilogue() = default;
RangeEpilogue::~RangeEpilogue() = default;

Status RangeEpilogue::build(const KernelContext &ctx, const Tensor &result) {
  impl = std::make_unique<Impl>();
  impl->result = result;
  impl->identity.build(result.shape, result.shape);
  std::vector<StepSpec> specs;
  appendEpilogue(ctx, specs);
  return buildChain(ctx, result.dtype, specs, result, impl->steps);
}

bool RangeEpilogue::empty() const { return !impl || impl->steps.empty(); }

void RangeEpilogue::run(int64_t begin, int64_t n) const {
  if (empty())
    return;
  Scratch scratch;
  for (int64_t done = 0; done < n; done += kChunk)
    runChunk(impl->result, impl->identity, impl->steps, impl->result,
             begin + done, std::min(kChunk, n - done), scratch);
}

Status runEpilogue(KernelContext &ctx, const Tensor &source,
                   const Tensor &dest) {
  std::vector<StepSpec> specs;
  appendEpilogue(ctx, specs);
  BroadcastMap identity;
  identity.build(source.shape, dest.shape);
  std::vector<Step> steps;
  PARTITA_RETURN_IF_ERROR(buildChain(ctx, source.dtype, specs, dest, steps));
  return runChain(ctx, source, identity, steps, dest);
}

} // namespace partita::runtime::kernels
