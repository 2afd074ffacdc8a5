//===- PrintShardingRules.cpp - report every op's sharding rule -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "partita/Dialect/NN/IR/NNOps.h"

namespace mlir::partita {
#define GEN_PASS_DEF_PRINTSHARDINGRULESPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {
struct PrintShardingRulesPass
    : mlir::partita::impl::PrintShardingRulesPassBase<PrintShardingRulesPass> {
  void runOnOperation() override {
    WalkResult walk = getOperation()->walk([&](nn::ShardingRuleOpInterface op) {
      ShardingRule rule = op.getShardingRule();
      if (failed(rule.verify(op)))
        return WalkResult::interrupt();
      op->emitRemark() << op->getName().getStringRef() << ": " << rule.str();
      ++numRules;
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
