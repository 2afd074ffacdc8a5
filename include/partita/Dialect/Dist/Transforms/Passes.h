//===- Passes.h - sharding passes -------------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_H
#define PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "partita/Dialect/Dist/IR/DistDialect.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNDialect.h"
#include "partita/Options/CommandLine.h"

namespace mlir::partita {

#define GEN_PASS_DECL
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"

struct Plan;

/// The module attribute partita-plan-mesh writes its choice to.
constexpr llvm::StringLiteral kPlanAttrName = "partita.plan";

/// partita-plan-mesh, which also hands the whole plan (every candidate, the
/// reasons, the budget) to `sink`: what the driver's report and
/// --explain-plan read besides the IR.
std::unique_ptr<Pass> createPlanMeshPass(const PlanMeshPassOptions &options,
                                         Plan *sink);

} // namespace mlir::partita

#endif // PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_H
