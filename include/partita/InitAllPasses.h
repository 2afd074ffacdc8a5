//===- InitAllPasses.h - every pass Partita uses ----------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_INITALLPASSES_H
#define PARTITA_INITALLPASSES_H

#include "mlir/Transforms/Passes.h"
#include "partita/Dialect/Dist/Transforms/Passes.h"
#include "partita/Dialect/Exec/Transforms/Passes.h"
#include "partita/Dialect/NN/Transforms/Passes.h"
#include "partita/Pipelines/Pipelines.h"

namespace mlir::partita {

#define GEN_PASS_REGISTRATION
#include "partita/Passes.h.inc"

/// Registers Partita's passes and pipelines and the upstream passes its
/// pipelines use (canonicalize, cse, symbol-dce, ...).
inline void registerAllPasses() {
  registerPartitaPasses();
  registerPartitaPipelines();
  mlir::registerTransformsPasses();
}

} // namespace mlir::partita

#endif // PARTITA_INITALLPASSES_H
