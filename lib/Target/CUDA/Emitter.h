//===- Emitter.h - shared pieces of the CUDA kernel emitters ----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What every kernel family's emitter needs: the buffers of the instruction
// with their static types, the kernel signature being built, C expressions
// for broadcast and strided offsets, and the epilogue chain. Private to
// lib/Target/CUDA.
//
// Generated kernels name themselves `@NAME@`; the driver replaces it once
// identical kernels are merged, so the text of a kernel depends only on
// shapes, types and attributes, never on buffer ids or locations.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_TARGET_CUDA_EMITTER_H
#define PARTITA_LIB_TARGET_CUDA_EMITTER_H

#include "partita/proto/program.pb.h"
#include "partita/runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace partita::target::cuda {

using program::DType;

/// The placeholder for a kernel's function name in its generated text.
inline constexpr const char *kNamePlaceholder = "@NAME@";

/// A buffer as a kernel sees it.
struct BufferView {
  int32_t id = -1;
  DType dtype = program::DTYPE_UNSPECIFIED;
  llvm::SmallVector<int64_t, 6> shape;
  /// The device address is 16-byte aligned.
  bool aligned16 = true;

  int64_t numElements() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

bool isFloat(DType dtype);
bool isInteger(DType dtype);
/// The CUDA storage type: float, __half, __nv_bfloat16, long long, ...
const char *cudaType(DType dtype);
/// "f32", "bf16", ... for messages, and bytes per element: the runtime's.
using ::partita::runtime::dtypeName;
using ::partita::runtime::dtypeSize;
std::string shapeString(llvm::ArrayRef<int64_t> shape);

/// One generated launch: the kernel's text (with the name placeholder) and
/// how to launch it.
struct GeneratedKernel {
  /// The op part of the function name (`partita_<label>_<n>`).
  std::string label;
  /// One line saying what it computes, e.g. "layer_norm epilogue: add".
  std::string summary;
  std::string text;
  /// The entry point's suffix, where the text defines several that share
  /// its statics (`@NAME@<entry>`); empty: the function itself.
  std::string entry;
  std::array<uint32_t, 3> grid = {1, 1, 1};
  std::array<uint32_t, 3> block = {1, 1, 1};
  uint32_t sharedBytes = 0;
  std::vector<int32_t> arguments;
};

/// A cuBLASLt matmul step and the launch that finishes its epilogue.
struct LoweredKernel {
  bool hasMatmul = false;
  program::CublasLtMatmul matmul;
  std::vector<GeneratedKernel> launches;
};

/// The kernel parameter list under construction: each buffer passed is a
/// device pointer named by its role (a0 for operand 0, r0 for result 0, e0
/// for the operand of epilogue step 0).
class Signature {
public:
  /// Adds a parameter and returns its name.
  std::string addInput(const BufferView &buffer, const std::string &name);
  std::string addOutput(const BufferView &buffer, const std::string &name);
  std::string parameters() const;
  const std::vector<int32_t> &arguments() const { return ids; }

private:
  std::vector<std::string> params;
  std::vector<int32_t> ids;
};

/// The instruction being lowered.
class KernelContext {
public:
  KernelContext(const program::Program &program, const program::Kernel &kernel,
                std::string location)
      : program(program), kernel(kernel), location(std::move(location)) {}

  const program::Kernel &getKernel() const { return kernel; }
  const std::string &op() const { return kernel.op(); }
  const std::string &getLocation() const { return location; }

  /// The view of buffer `id`, or an error.
  llvm::Expected<BufferView> buffer(int32_t id) const;
  llvm::Expected<BufferView> operand(int index) const;
  llvm::Expected<BufferView> result(int index) const;

  llvm::Expected<int64_t> getInt(llvm::StringRef name) const;
  llvm::Expected<double> getFloat(llvm::StringRef name) const;
  /// An absent bool is false (proto3 leaves false out).
  llvm::Expected<bool> getBool(llvm::StringRef name) const;
  llvm::Expected<std::string> getString(llvm::StringRef name,
                                        llvm::StringRef absent = "") const;
  llvm::Expected<std::vector<int64_t>> getInts(llvm::StringRef name) const;

  /// "<op> at <location>: <message>".
  llvm::Error error(const llvm::Twine &message) const;
  /// Fails unless the kernel has `operands` operands and `results` results.
  llvm::Error expectCounts(int operands, int results) const;

  /// The one-line summary of the kernel with its epilogue.
  std::string summary() const;

  /// The value of a one-element CONSTANT buffer, if `id` is one.
  std::optional<double> constantScalar(int32_t id) const;

private:
  const program::Program &program;
  const program::Kernel &kernel;
  std::string location;
};

/// A C expression for the element offset, in a tensor of shape `from`
/// that broadcasts numpy-style to `to`, of the element with flat index
/// `index` of `to` (dimensions that repeat or stay contiguous merged).
std::string broadcastOffset(llvm::ArrayRef<int64_t> from,
                            llvm::ArrayRef<int64_t> to,
                            const std::string &index);
/// A C expression for sum_d coordinate_d(index) * strides[d], the flat
/// `index` taken over `shape`.
std::string stridedOffset(llvm::ArrayRef<int64_t> shape,
                          llvm::ArrayRef<int64_t> strides,
                          const std::string &index);
llvm::SmallVector<int64_t, 6> contiguousStrides(llvm::ArrayRef<int64_t> shape);
/// A C integer literal.
std::string literal(int64_t value);
/// A C float literal that reads back as exactly `value` rounded to float.
std::string floatLiteral(double value);
/// "unsigned" when every index below `count` fits 31 bits, else
/// "unsigned long long".
std::string indexType(int64_t count);

/// One step of an elementwise chain: the kernel's own op (step 0 of an
/// elementwise kernel) or an epilogue step.
struct ChainStep {
  std::string op;
  const google::protobuf::Map<std::string, program::Attribute> *attributes =
      nullptr;
  /// The operand's view and its parameter name; absent for unary steps.
  std::optional<BufferView> operand;
  std::string operandName;
  bool operandFirst = false;
  /// `where` only: the on_false operand (operand is the condition).
  std::optional<BufferView> onFalse;
  std::string onFalseName;
};

/// The epilogue steps of the kernel, with their operands added to `sig` as
/// e0, e1, ...
llvm::Expected<std::vector<ChainStep>> epilogueSteps(const KernelContext &ctx,
                                                     Signature &sig);

/// Where a chain's values come from and go, when not from and to memory.
struct ChainIO {
  /// Operand values already loaded, by parameter name (e.g. "x1[u]").
  std::map<std::string, std::string> operandValues;
  /// The statement that stores `f` or `n`; empty: into the result buffer.
  std::string store;
};

/// Emits the statements of `steps` applied to the value in `f` (float
/// types) or `n` (integer types) of type `start`, for the element with flat
/// index `index` of `result`, then the store into `resultName`. Rounds or
/// wraps after each step as the host does. Fails on a step that does not
/// apply to the current type or whose operand does not broadcast.
llvm::Error emitChain(const KernelContext &ctx, llvm::ArrayRef<ChainStep> steps,
                      DType start, const BufferView &result,
                      const std::string &resultName, const std::string &index,
                      const std::string &indent, std::string &out,
                      const ChainIO &io = {});

/// A functor struct `@NAME@_sink` with `operator()(i, float v)` (and
/// `vec<V>(i, v[V])`) that stores a float-valued kernel's result element i
/// through the kernel's epilogue; members are the result and epilogue
/// pointers in `sig` order after the kernel's own. `init` gets the brace
/// initializer the kernel constructs it with.
llvm::Expected<std::string> emitFloatSink(const KernelContext &ctx,
                                          const BufferView &result,
                                          Signature &sig, std::string &init);

/// The family emitters.
llvm::Expected<GeneratedKernel> emitElementwise(const KernelContext &ctx);
llvm::Expected<GeneratedKernel> emitNormalization(const KernelContext &ctx);
llvm::Expected<GeneratedKernel> emitSoftmax(const KernelContext &ctx);
llvm::Expected<GeneratedKernel> emitReduce(const KernelContext &ctx);
llvm::Expected<GeneratedKernel> emitCumsum(const KernelContext &ctx);
/// `decodeKeySplit`: keys per block of the decode form (one query row).
llvm::Expected<GeneratedKernel> emitAttention(const KernelContext &ctx,
                                              int64_t decodeKeySplit);
llvm::Expected<GeneratedKernel> emitAttentionGrad(const KernelContext &ctx);
llvm::Expected<GeneratedKernel> emitRope(const KernelContext &ctx);
/// A matmul by a packed int4/int8 weight, and such a weight alone
/// (CodeGen.cpp).
llvm::Expected<GeneratedKernel> emitQuantizedMatmul(const KernelContext &ctx);
llvm::Expected<GeneratedKernel> emitDequantize(const KernelContext &ctx);
/// nn.moe: four launches of one function's entry points (Moe.cpp).
llvm::Expected<LoweredKernel> emitMoe(const KernelContext &ctx);
llvm::Expected<GeneratedKernel> emitDataMovement(const KernelContext &ctx);
llvm::Expected<LoweredKernel> emitMatmul(const KernelContext &ctx);

bool isElementwiseOp(llvm::StringRef op);

/// The device helper library every module starts with (Prelude.cuh).
extern const char *const kPrelude;

} // namespace partita::target::cuda

#endif // PARTITA_LIB_TARGET_CUDA_EMITTER_H
