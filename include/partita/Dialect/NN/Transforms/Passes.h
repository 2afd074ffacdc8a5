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

namespace mlir::partita {

#define GEN_PASS_DECL
#include "partita/Dialect/NN/Transforms/Passes.h.inc"

} // namespace mlir::partita

#endif // PARTITA_DIALECT_NN_TRANSFORMS_PASSES_H
