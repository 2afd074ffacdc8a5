//===- NNVocabulary.cpp - nn ops in the exec program's vocabulary ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// An nn op becomes the kernel of the same name; what OpVocabulary.def says
// about that kernel decides what the exec lowering may do with the op.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/NNOps.h"

#include "partita/runtime/OpVocabulary.h"

using namespace mlir;
using namespace mlir::partita;
namespace runtime = ::partita::runtime;

bool nn::isEpilogueFusible(Operation *op) {
  if (!isa_and_present<NNDialect>(op->getDialect()))
    return false;
  const runtime::OpInfo *info = runtime::lookupOp(op->getName().stripDialect());
  // A type change would need the producer's result in scratch memory first.
  return info && info->isEpilogueStep() && !info->changesElementType();
}
