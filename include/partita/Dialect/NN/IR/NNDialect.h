//===- NNDialect.h - nn dialect ---------------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_NNDIALECT_H
#define PARTITA_DIALECT_NN_IR_NNDIALECT_H

#include "mlir/IR/Dialect.h"

#include "partita/Dialect/NN/IR/NNDialect.h.inc"

#endif // PARTITA_DIALECT_NN_IR_NNDIALECT_H
