//===- Raise.cpp - raise decomposed subgraphs to transformer ops ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::partita {
#define GEN_PASS_DEF_RAISEPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

void nn::populateRaisePatterns(RewritePatternSet &patterns) {
  populateRaiseLayerNormPatterns(patterns);
  populateRaiseRmsNormPatterns(patterns);
  populateRaiseGeluPatterns(patterns);
  populateRaiseSiluPatterns(patterns);
  populateRaiseAttentionPatterns(patterns);
  populateRaiseRopePatterns(patterns);
  populateRaiseMatmulBiasPatterns(patterns);
  populateRaiseMoePatterns(patterns);
}

namespace {

/// How many of each raised op a region holds. The pass reports the
/// difference, so ops the input already had are not counted.
struct RaisedOpCounts {
  int64_t layerNorms = 0, rmsNorms = 0, gelus = 0, silus = 0, attentions = 0,
          ropes = 0, matmulBiases = 0, moes = 0;

  explicit RaisedOpCounts(Operation *root) {
    root->walk([&](Operation *op) {
      if (isa<nn::LayerNormOp>(op))
        ++layerNorms;
      else if (isa<nn::RmsNormOp>(op))
        ++rmsNorms;
      else if (isa<nn::GeluOp>(op))
        ++gelus;
      else if (isa<nn::SiluOp>(op))
        ++silus;
      else if (isa<nn::AttentionOp>(op))
        ++attentions;
      else if (isa<nn::RopeOp>(op))
        ++ropes;
      else if (isa<nn::MoeOp>(op))
        ++moes;
      else if (auto matmul = dyn_cast<nn::MatmulOp>(op);
               matmul && matmul.getBias())
        ++matmulBiases;
    });
  }
};

struct RaisePass : mlir::partita::impl::RaisePassBase<RaisePass> {
  LogicalResult initialize(MLIRContext *context) override {
    RewritePatternSet set(context);
    nn::populateRaisePatterns(set);
    // The rewrites leave transposes to compose and reshapes to fold, and the
    // exporters' shape arithmetic must fold before some patterns can match.
    auto *dialect = context->getLoadedDialect<nn::NNDialect>();
    dialect->getCanonicalizationPatterns(set);
    for (RegisteredOperationName name : context->getRegisteredOperations())
      if (&name.getDialect() == dialect)
        name.getCanonicalizationPatterns(set, context);
    patterns = FrozenRewritePatternSet(std::move(set));
    return success();
  }

  void runOnOperation() override {
    Operation *root = getOperation();
    RaisedOpCounts before(root);
    // Like -canonicalize, a fixpoint not reached within the iteration limit
    // still leaves valid IR; it is not an error.
    (void)applyPatternsGreedily(root, patterns);
    RaisedOpCounts after(root);
    auto raised = [](int64_t a, int64_t b) {
      return static_cast<uint64_t>(std::max<int64_t>(a - b, 0));
    };
    numLayerNorms += raised(after.layerNorms, before.layerNorms);
    numRmsNorms += raised(after.rmsNorms, before.rmsNorms);
    numGelus += raised(after.gelus, before.gelus);
    numSilus += raised(after.silus, before.silus);
    numAttentions += raised(after.attentions, before.attentions);
    numRopes += raised(after.ropes, before.ropes);
    numMatmulBiases += raised(after.matmulBiases, before.matmulBiases);
    numMoes += raised(after.moes, before.moes);
  }

  FrozenRewritePatternSet patterns;
};

} // namespace
