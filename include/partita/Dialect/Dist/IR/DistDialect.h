//===- DistDialect.h - dist dialect -----------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_IR_DISTDIALECT_H
#define PARTITA_DIALECT_DIST_IR_DISTDIALECT_H

#include "mlir/IR/Dialect.h"

#include "partita/Dialect/Dist/IR/DistDialect.h.inc"

#endif // PARTITA_DIALECT_DIST_IR_DISTDIALECT_H
