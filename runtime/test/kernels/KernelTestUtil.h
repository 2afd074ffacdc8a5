//===- KernelTestUtil.h - helpers of the kernel tests -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Owned test buffers of every element type (values set and read as double,
// with conversions written independently of the library's), a builder for
// Kernel messages, numpy-style broadcasting for the reference
// implementations, and the tolerance check.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TEST_KERNELS_KERNELTESTUTIL_H
#define PARTITA_RUNTIME_TEST_KERNELS_KERNELTESTUTIL_H

#include "partita/runtime/HostKernels.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace partita::runtime::test {

using program::DType;

inline constexpr DType kFloatTypes[] = {program::F32, program::F16,
                                        program::BF16};
inline constexpr DType kIntTypes[] = {program::I64, program::I32, program::I8};

/// The reference conversions: the compiler's _Float16 (correctly rounded)
/// for f16, and nearest-even chosen in double for bf16.
inline uint16_t refToHalf(double v) {
  _Float16 h = static_cast<_Float16>(static_cast<float>(v));
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
inline double refFromHalf(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<double>(h);
}
inline double refFromBf16(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t refToBf16(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(f))
    return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t lo = static_cast<uint16_t>(u >> 16);
  uint16_t hi = static_cast<uint16_t>(lo + 1);
  if (std::isinf(f))
    return lo;
  // Past the largest finite value, infinity stands for 2^128 (IEEE's
  // overflow threshold is the midpoint to that).
  double hiValue = (hi & 0x7FFF) == 0x7F80
                       ? std::copysign(std::ldexp(1.0, 128), f)
                       : refFromBf16(hi);
  double dl = std::fabs(refFromBf16(lo) - f);
  double dh = std::fabs(hiValue - f);
  if (dh < dl || (dh == dl && (lo & 1)))
    return hi;
  return lo;
}

/// A tensor that owns its bytes.
struct Buffer {
  DType dtype = program::F32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage; // 8-byte aligned bytes.

  Buffer() = default;
  Buffer(DType dtype, std::vector<int64_t> shape)
      : dtype(dtype), shape(std::move(shape)) {
    storage.assign((numElements() * dtypeSize(dtype) + 7) / 8 + 1, 0);
  }
  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  void *data() { return storage.data(); }
  const void *data() const { return storage.data(); }
  Tensor view() { return Tensor{data(), dtype, shape}; }

  double get(int64_t i) const {
    const char *p = reinterpret_cast<const char *>(data());
    switch (dtype) {
    case program::F32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case program::F16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return refFromHalf(b);
    }
    case program::BF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return refFromBf16(b);
    }
    case program::I64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return static_cast<double>(v);
    }
    case program::I32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case program::I8:
      return static_cast<int8_t>(p[i]);
    default:
      return p[i] != 0;
    }
  }
  int64_t getInt(int64_t i) const {
    const char *p = reinterpret_cast<const char *>(data());
    if (dtype == program::I64) {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    return static_cast<int64_t>(get(i));
  }
  /// Stores v converted to the element type (integers wrap).
  void set(int64_t i, double v) {
    char *p = reinterpret_cast<char *>(data());
    switch (dtype) {
    case program::F32: {
      float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      return;
    }
    case program::F16: {
      uint16_t b = refToHalf(v);
      std::memcpy(p + 2 * i, &b, 2);
      return;
    }
    case program::BF16: {
      uint16_t b = refToBf16(v);
      std::memcpy(p + 2 * i, &b, 2);
      return;
    }
    default:
      setInt(i, static_cast<int64_t>(v));
    }
  }
  void setInt(int64_t i, int64_t v) {
    char *p = reinterpret_cast<char *>(data());
    switch (dtype) {
    case program::I64:
      std::memcpy(p + 8 * i, &v, 8);
      return;
    case program::I32: {
      int32_t w = static_cast<int32_t>(v);
      std::memcpy(p + 4 * i, &w, 4);
      return;
    }
    case program::I8:
      p[i] = static_cast<char>(static_cast<int8_t>(v));
      return;
    case program::BOOL:
      p[i] = v != 0;
      return;
    default:
      set(i, static_cast<double>(v));
    }
  }
  std::vector<double> values() const {
    std::vector<double> out(numElements());
    for (int64_t i = 0; i < numElements(); ++i)
      out[i] = get(i);
    return out;
  }
  void setValues(const std::vector<double> &values) {
    for (size_t i = 0; i < values.size(); ++i)
      set(static_cast<int64_t>(i), values[i]);
  }
};

inline bool isFloat(DType d) {
  return d == program::F32 || d == program::F16 || d == program::BF16;
}

/// Random values: uniform floats in [lo, hi], integers in [lo, hi], bools.
inline Buffer randomBuffer(std::mt19937 &rng, DType dtype,
                           std::vector<int64_t> shape, double lo = -2.0,
                           double hi = 2.0) {
  Buffer b(dtype, std::move(shape));
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int64_t> integer(static_cast<int64_t>(lo),
                                                 static_cast<int64_t>(hi));
  for (int64_t i = 0; i < b.numElements(); ++i) {
    if (isFloat(dtype))
      b.set(i, real(rng));
    else if (dtype == program::BOOL)
      b.setInt(i, rng() & 1);
    else
      b.setInt(i, integer(rng));
  }
  return b;
}

/// Builds a Kernel message over Buffers (buffer id = order of first use).
class KernelBuilder {
public:
  explicit KernelBuilder(const std::string &op) { kernel.set_op(op); }

  KernelBuilder &operand(Buffer &b) {
    kernel.add_operands(id(b));
    return *this;
  }
  KernelBuilder &result(Buffer &b) {
    kernel.add_results(id(b));
    return *this;
  }
  KernelBuilder &attr(const std::string &name, int64_t v) {
    (*kernel.mutable_attributes())[name].set_i(v);
    return *this;
  }
  KernelBuilder &attr(const std::string &name, int v) {
    return attr(name, static_cast<int64_t>(v));
  }
  KernelBuilder &attr(const std::string &name, double v) {
    (*kernel.mutable_attributes())[name].set_f(v);
    return *this;
  }
  KernelBuilder &attr(const std::string &name, bool v) {
    (*kernel.mutable_attributes())[name].set_b(v);
    return *this;
  }
  KernelBuilder &attr(const std::string &name, const char *v) {
    (*kernel.mutable_attributes())[name].set_s(v);
    return *this;
  }
  KernelBuilder &attr(const std::string &name, std::vector<int64_t> v) {
    auto *ints = (*kernel.mutable_attributes())[name].mutable_ints();
    for (int64_t x : v)
      ints->add_values(x);
    return *this;
  }
  /// An epilogue step; `operand` null for unary steps.
  KernelBuilder &step(const std::string &op, Buffer *operand = nullptr,
                      bool operandFirst = false,
                      std::map<std::string, std::string> strings = {}) {
    program::ElementwiseStep *s = kernel.add_epilogue();
    s->set_op(op);
    s->set_operand(operand ? id(*operand) : -1);
    s->set_operand_first(operandFirst);
    for (auto &[k, v] : strings)
      (*s->mutable_attributes())[k].set_s(v);
    return *this;
  }

  Status run(ThreadPool &pool) {
    BufferResolver resolver = [this](int32_t bufferId) {
      if (bufferId < 0 || bufferId >= static_cast<int32_t>(buffers.size()))
        return Tensor{};
      return buffers[bufferId]->view();
    };
    return runHostKernel(kernel, resolver, pool);
  }

  program::Kernel kernel;

private:
  int32_t id(Buffer &b) {
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i] == &b)
        return static_cast<int32_t>(i);
    buffers.push_back(&b);
    return static_cast<int32_t>(buffers.size() - 1);
  }
  std::vector<Buffer *> buffers;
};

/// The shared pool of the tests: four threads, so that chunking is
/// exercised even on a two-core machine.
inline ThreadPool &testPool() {
  static ThreadPool pool(4);
  return pool;
}

/// Numpy broadcasting: the element of `from` that result index `i` reads.
inline int64_t broadcastIndex(int64_t i, const std::vector<int64_t> &to,
                              const std::vector<int64_t> &from) {
  int64_t offset = 0, stride = 1;
  size_t lead = to.size() - from.size();
  for (size_t d = to.size(); d-- > 0;) {
    int64_t index = i % to[d];
    i /= to[d];
    if (d >= lead) {
      int64_t size = from[d - lead];
      if (size != 1)
        offset += index * stride;
      stride *= size;
    }
  }
  return offset;
}

/// Tolerances for a result stored as `dtype` (relative, absolute).
struct Tolerance {
  double rtol, atol;
};
inline Tolerance toleranceFor(DType dtype, double f32rtol = 1e-5) {
  switch (dtype) {
  case program::F32:
    return {f32rtol, f32rtol * 0.1};
  case program::F16: // 2^-11 relative rounding, twice.
    return {2e-3, 2e-3};
  case program::BF16: // 2^-8 relative rounding, twice.
    return {1.6e-2, 1.6e-2};
  default:
    return {0, 0};
  }
}

/// Compares elementwise; NaNs must match NaNs, infinities exactly.
inline ::testing::AssertionResult allClose(const std::vector<double> &actual,
                                           const std::vector<double> &expected,
                                           Tolerance tol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs " << expected.size();
  int failures = 0;
  std::string message;
  for (size_t i = 0; i < actual.size(); ++i) {
    double a = actual[i], e = expected[i];
    bool ok;
    if (std::isnan(e))
      ok = std::isnan(a);
    else if (std::isinf(e))
      ok = a == e;
    else
      ok = std::fabs(a - e) <= tol.atol + tol.rtol * std::fabs(e);
    if (!ok && failures++ < 5)
      message += "\n  [" + std::to_string(i) + "] got " + std::to_string(a) +
                 ", expected " + std::to_string(e);
  }
  if (failures)
    return ::testing::AssertionFailure()
           << failures << " of " << actual.size() << " differ:" << message;
  return ::testing::AssertionSuccess();
}

/// The values `b` would hold after storing `v` (the reference rounds its
/// double results the way the kernel's store does, for exact comparisons).
inline double roundTo(DType dtype, double v) {
  Buffer b(dtype, {1});
  b.set(0, v);
  return b.get(0);
}

inline std::string typeName(DType d) { return dtypeName(d); }

} // namespace partita::runtime::test

#endif // PARTITA_RUNTIME_TEST_KERNELS_KERNELTESTUTIL_H
