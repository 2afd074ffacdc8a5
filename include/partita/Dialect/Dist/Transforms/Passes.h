//===- Passes.h - sharding passes -------------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_H
#define PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "partita/Dialect/Dist/IR/DistDialect.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNDialect.h"
#include "partita/Options/CommandLine.h"

namespace mlir::partita {

#define GEN_PASS_DECL
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"

} // namespace mlir::partita

#endif // PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_H
