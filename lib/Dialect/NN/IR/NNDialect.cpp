//===- NNDialect.cpp - nn dialect -----------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/NNDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::partita::nn;

#include "partita/Dialect/NN/IR/NNDialect.cpp.inc"
#include "partita/Dialect/NN/IR/NNEnums.cpp.inc"

#include "partita/Dialect/NN/IR/NNInterfaces.cpp.inc"

void NNDialect::initialize() {
  registerOps();
  registerAttributes();
  registerDerivatives(getContext());
}

Operation *NNDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
