//===- RaiseMatmulBias.cpp - fold bias additions into nn.matmul -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// ONNX MatMul has no bias, so a linear layer exports as MatMul then Add.
// nn.matmul carries the bias as an epilogue, which the partitioner treats
// specially when the contracted dimension is split.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "RaiseUtils.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;

namespace {

/// `matmul(a, w) + b` with `b: [n]` or `[1, ..., 1, n]` →
/// `nn.matmul a, w bias b`. The product must have no other use, or it would
/// be computed twice.
struct RaiseMatmulBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    std::pair<Value, Value> orders[] = {{op.getLhs(), op.getRhs()},
                                        {op.getRhs(), op.getLhs()}};
    for (auto [product, bias] : orders) {
      auto matmul = product.getDefiningOp<MatmulOp>();
      if (!matmul || matmul.getBias() || !matmul->hasOneUse() ||
          matmul.getType() != op.getType())
        continue;
      auto biasType = cast<RankedTensorType>(bias.getType());
      int64_t n = matmul.getType().getShape().back();
      if (biasType.getRank() < 1 || biasType.getShape().back() != n ||
          llvm::any_of(biasType.getShape().drop_back(),
                       [](int64_t size) { return size != 1; }))
        continue;
      Value vector = bias;
      if (biasType.getRank() != 1)
        vector = ReshapeOp::create(
            rewriter, op.getLoc(),
            RankedTensorType::get({n}, biasType.getElementType()), bias);
      rewriter.replaceOpWithNewOp<MatmulOp>(
          op, matmul.getType(), matmul.getLhs(), matmul.getRhs(), vector);
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not a matmul plus a bias vector");
  }
};

} // namespace

void nn::populateRaiseMatmulBiasPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseMatmulBias>(patterns.getContext());
}
