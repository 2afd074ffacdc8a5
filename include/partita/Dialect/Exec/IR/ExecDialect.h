//===- ExecDialect.h - exec dialect -----------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_EXEC_IR_EXECDIALECT_H
#define PARTITA_DIALECT_EXEC_IR_EXECDIALECT_H

#include "mlir/IR/Dialect.h"

#include "partita/Dialect/Exec/IR/ExecDialect.h.inc"

#endif // PARTITA_DIALECT_EXEC_IR_EXECDIALECT_H
