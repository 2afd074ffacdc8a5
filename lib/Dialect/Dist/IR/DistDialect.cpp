//===- DistDialect.cpp - dist dialect -------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/IR/DistDialect.h"

#include "partita/Dialect/Dist/IR/DistOps.h"

using namespace mlir;
using namespace mlir::partita::dist;

#include "partita/Dialect/Dist/IR/DistDialect.cpp.inc"

void DistDialect::initialize() {
  registerAttributes();
  registerTypes();
  registerOps();
}
