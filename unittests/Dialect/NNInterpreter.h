//===- NNInterpreter.h - nn functions evaluated in double -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A reference evaluator of nn IR for the fp64 check of the vjp rules
// (DerivativesF64Test.cpp): it walks a func.func of one block and computes
// every op with plain loops in double, independently of the runtime's
// kernels, whose semantics it follows (broadcasting, attention's causal
// alignment and grouped heads, gather's negative indices, ...). Integer and
// bool tensors are held as doubles too.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_UNITTESTS_DIALECT_NNINTERPRETER_H
#define PARTITA_UNITTESTS_DIALECT_NNINTERPRETER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace mlir::partita::test {

/// A tensor of any nn element type, row-major, its elements as doubles
/// (bools as 0 and 1).
struct DoubleTensor {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

/// Evaluates `func` on `arguments` (one per argument, shaped as its type)
/// and returns the operands of its return. An op it does not know, or an
/// operand outside the op's contract (an index out of range), is an error
/// that names the op.
llvm::Expected<std::vector<DoubleTensor>>
interpretInDouble(func::FuncOp func,
                  const std::vector<DoubleTensor> &arguments);

} // namespace mlir::partita::test

#endif // PARTITA_UNITTESTS_DIALECT_NNINTERPRETER_H
