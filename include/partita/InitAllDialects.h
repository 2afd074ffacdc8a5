//===- InitAllDialects.h - every dialect Partita uses -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_INITALLDIALECTS_H
#define PARTITA_INITALLDIALECTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "partita/Dialect/Dist/IR/DistDialect.h"
#include "partita/Dialect/Exec/IR/ExecDialect.h"
#include "partita/Dialect/NN/IR/NNDialect.h"

namespace mlir::partita {

/// Registers Partita's dialects and the upstream ones its IR contains.
inline void registerAllDialects(DialectRegistry &registry) {
  registry.insert<nn::NNDialect, dist::DistDialect, exec::ExecDialect,
                  func::FuncDialect>();
}

} // namespace mlir::partita

#endif // PARTITA_INITALLDIALECTS_H
