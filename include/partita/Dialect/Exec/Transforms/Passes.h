//===- Passes.h - exec stage passes -----------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_EXEC_TRANSFORMS_PASSES_H
#define PARTITA_DIALECT_EXEC_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "partita/Dialect/Dist/IR/DistDialect.h"
#include "partita/Dialect/Exec/IR/ExecDialect.h"
#include "partita/Dialect/NN/IR/NNDialect.h"

namespace mlir::partita {

#define GEN_PASS_DECL
#include "partita/Dialect/Exec/Transforms/Passes.h.inc"

/// Whether `op` may join a kernel's epilogue (the runtime's epilogue step
/// ops). The one list of them.
bool isFusibleElementwise(Operation *op);

/// Whether `op` becomes a kernel instruction of its own: an nn op other
/// than a constant or a reshape (which become buffers).
bool isKernel(Operation *op);

} // namespace mlir::partita

#endif // PARTITA_DIALECT_EXEC_TRANSFORMS_PASSES_H
