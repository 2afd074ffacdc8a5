//===- ExecOps.h - exec dialect ops and attributes --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_EXEC_IR_EXECOPS_H
#define PARTITA_DIALECT_EXEC_IR_EXECOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "partita/Dialect/Exec/IR/ExecDialect.h"

#include <string>
#include <vector>

#include "partita/Dialect/Exec/IR/ExecEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "partita/Dialect/Exec/IR/ExecAttrs.h.inc"

#define GET_OP_CLASSES
#include "partita/Dialect/Exec/IR/ExecOps.h.inc"

namespace mlir::partita::exec {

/// The planned buffer of `value`: the `exec.buffer` of a function argument
/// or the matching entry of its op's `exec.buffers`; null when unplanned.
BufferAttr getBuffer(Value value);

/// Whether `value` is a weight the program holds only in blocks: an
/// `nn.constant` read only by `exec.slice_block`s, or such a block read only
/// by further blocks. Its bytes stay on the host; no instruction slices it.
bool isHostOnly(Value value);

/// Whether `value` is a weight or a block of one (host data, sliced when
/// the program is written rather than by a kernel).
bool isHostData(Value value);

/// Bytes of one element of `type` in a program (one per bool).
size_t getElementBytes(Type type);

/// An inline dense value as the little-endian bytes the runtime reads (one
/// byte per bool, splats expanded).
std::vector<char> serializeDense(DenseElementsAttr attr);

/// The weight name of a constant that has none of its own (one folded or
/// built by the compiler): a hash of its type and bytes, so that equal
/// constants of two ranks' programs share one copy.
std::string getConstantWeightName(RankedTensorType type, ArrayRef<char> bytes);

/// The name of block `block` of `parts` along `dim` of weight `name`.
std::string getBlockWeightName(StringRef name, SliceBlockOp op);

} // namespace mlir::partita::exec

#endif // PARTITA_DIALECT_EXEC_IR_EXECOPS_H
