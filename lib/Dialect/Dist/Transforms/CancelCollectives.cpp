//===- CancelCollectives.cpp - collectives that undo each other -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"

namespace mlir::partita {
#define GEN_PASS_DEF_CANCELCOLLECTIVESPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

/// all_slice(all_gather(x)) and all_gather(all_slice(x)) over the same
/// axes and dimension are x.
template <typename OuterOp, typename InnerOp>
struct CancelInverse : OpRewritePattern<OuterOp> {
  using OpRewritePattern<OuterOp>::OpRewritePattern;
  static uint64_t dimOf(AllGatherOp op) { return op.getGatherDim(); }
  static uint64_t dimOf(AllSliceOp op) { return op.getSliceDim(); }

  LogicalResult matchAndRewrite(OuterOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().template getDefiningOp<InnerOp>();
    if (!inner || inner.getMesh() != op.getMesh() ||
        inner.getAxes() != op.getAxes() || dimOf(inner) != dimOf(op) ||
        inner.getInput().getType() != op.getType())
      return failure();
    rewriter.replaceOp(op, inner.getInput());
    return success();
  }
};

/// all_slice(all_reduce sum(x)) over the same axes is one reduce_scatter:
/// half the bytes on the wire.
struct FuseReduceThenSlice : OpRewritePattern<AllSliceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AllSliceOp op,
                                PatternRewriter &rewriter) const override {
    auto reduce = op.getInput().getDefiningOp<AllReduceOp>();
    if (!reduce || reduce.getReduction() != ReductionKind::Sum ||
        reduce.getMesh() != op.getMesh() || reduce.getAxes() != op.getAxes() ||
        !reduce->hasOneUse())
      return failure();
    auto scatter = rewriter.replaceOpWithNewOp<ReduceScatterOp>(
        op, op.getType(), reduce.getInput(), op.getMeshAttr(), op.getAxes(),
        reduce.getReductionAttr(), op.getSliceDimAttr());
    if (auto reason = reduce->getAttr(kReasonAttr))
      scatter->setAttr(kReasonAttr, reason);
    return success();
  }
};

/// A max or min all_reduce of a value every device of the group holds
/// alike (the result of a collective over at least those axes) is that
/// value.
struct DropIdempotentReduce : OpRewritePattern<AllReduceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AllReduceOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getReduction() == ReductionKind::Sum)
      return failure();
    Operation *def = op.getInput().getDefiningOp();
    if (!isa_and_nonnull<AllReduceOp, AllGatherOp>(def))
      return failure();
    auto covered = def->getAttrOfType<ArrayAttr>("axes");
    if (def->getAttr("mesh") != op.getMeshAttr() || !covered)
      return failure();
    for (Attribute axis : op.getAxes())
      if (!llvm::is_contained(covered, axis))
        return failure();
    rewriter.replaceOp(op, op.getInput());
    return success();
  }
};

struct CancelCollectivesPass
    : mlir::partita::impl::CancelCollectivesPassBase<CancelCollectivesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<CancelInverse<AllSliceOp, AllGatherOp>,
                 CancelInverse<AllGatherOp, AllSliceOp>, FuseReduceThenSlice,
                 DropIdempotentReduce>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
