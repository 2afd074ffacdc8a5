//===- Passes.td - every Partita pass ----------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Includes the Passes.td of every Transforms/ folder so that one generated
// registerPartitaPasses() registers them all, and one document lists them.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_TD
#define PARTITA_PASSES_TD

include "partita/Dialect/Dist/Transforms/Passes.td"
include "partita/Dialect/Exec/Transforms/Passes.td"
include "partita/Dialect/NN/Transforms/Passes.td"

#endif // PARTITA_PASSES_TD
