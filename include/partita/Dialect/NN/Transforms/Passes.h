//===- Passes.h - nn transformation passes ----------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_TRANSFORMS_PASSES_H
#define PARTITA_DIALECT_NN_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "partita/Dialect/NN/IR/NNDialect.h"
#include "partita/Options/CommandLine.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::partita {

#define GEN_PASS_DECL
#include "partita/Dialect/NN/Transforms/Passes.h.inc"

/// The values partita-differentiate differentiates through in `body`: float
/// values that depend on one of `parameters` and reach `loss`. An op is
/// given its vector-Jacobian product where one of its results is active.
llvm::DenseSet<Value> getActiveValues(Block &body, ArrayRef<Value> parameters,
                                      Value loss);

} // namespace mlir::partita

#endif // PARTITA_DIALECT_NN_TRANSFORMS_PASSES_H
