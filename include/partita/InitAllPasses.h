//===- InitAllPasses.h - every pass Partita uses ----------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_INITALLPASSES_H
#define PARTITA_INITALLPASSES_H

#include "mlir/Transforms/Passes.h"
#include "partita/Dialect/NN/Transforms/Passes.h"

namespace mlir::partita {

#define GEN_PASS_REGISTRATION
#include "partita/Passes.h.inc"

/// Registers Partita's passes and the upstream ones its pipelines use
/// (canonicalize, cse, symbol-dce, ...).
inline void registerAllPasses() {
  registerPartitaPasses();
  mlir::registerTransformsPasses();
}

} // namespace mlir::partita

#endif // PARTITA_INITALLPASSES_H
