//===- RaiseNorms.cpp - raise decomposed layer and RMS norms --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// torch exports LayerNorm and RMSNorm modules written by hand (GPT-2's
// Conv1D-era LayerNorm, T5 and Llama's RMSNorm) as their arithmetic:
//
//   d = x - mean(x); y = d / sqrt(mean(d * d) + eps) * gamma + beta
//   y = x * rsqrt(mean(x ^ 2) + eps) * w
//
// The normalization itself is raised first; the affine `* gamma` and
// `+ beta` are folded into it by separate patterns, so a norm whose
// parameters cannot be its scale or bias is still raised.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "RaiseUtils.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;
using namespace mlir::partita::nn::raise;

namespace {

/// The value under a square root: `sqrt(s)` gives `s`.
Value sqrtOperand(Value value) {
  if (auto sqrt = value.getDefiningOp<SqrtOp>())
    return sqrt.getInput();
  return {};
}

/// The value under a reciprocal square root, spelled `rsqrt(s)`,
/// `reciprocal(sqrt(s))` or `1 / sqrt(s)`.
Value rsqrtOperand(Value value) {
  if (auto rsqrt = value.getDefiningOp<RsqrtOp>())
    return rsqrt.getInput();
  if (auto reciprocal = value.getDefiningOp<ReciprocalOp>())
    return sqrtOperand(reciprocal.getInput());
  if (auto div = value.getDefiningOp<DivOp>()) {
    std::optional<double> one = getScalarConstant(div.getLhs());
    if (one && *one == 1.0 && div.getRhs().getType() == div.getType())
      return sqrtOperand(div.getRhs());
  }
  return {};
}

/// The `(numerator, s)` readings of `root` as `numerator / sqrt(s)`: a
/// division by `sqrt(s)` or a product with a reciprocal square root, in
/// either operand order.
SmallVector<std::pair<Value, Value>> matchDivisionBySqrt(Operation *root) {
  SmallVector<std::pair<Value, Value>> readings;
  if (auto div = dyn_cast<DivOp>(root)) {
    if (Value s = sqrtOperand(div.getRhs()))
      readings.emplace_back(div.getLhs(), s);
  } else if (auto mul = dyn_cast<MulOp>(root)) {
    if (Value s = rsqrtOperand(mul.getRhs()))
      readings.emplace_back(mul.getLhs(), s);
    if (Value s = rsqrtOperand(mul.getLhs()))
      readings.emplace_back(mul.getRhs(), s);
  }
  return readings;
}

/// `s = v + eps` with a positive scalar constant `eps`: returns `v`, `eps`.
std::optional<std::pair<Value, double>> matchPlusEpsilon(Value s) {
  std::optional<std::pair<Value, double>> sum = matchScalarOperand<AddOp>(s);
  if (!sum || !(sum->second > 0.0))
    return std::nullopt;
  return sum;
}

/// A mean over the trailing dimensions `[axis, rank)`, keeping them.
struct TrailingMean {
  Value input;
  ArrayRef<int64_t> axes;
  int64_t axis;
};

std::optional<TrailingMean> matchTrailingMean(Value value) {
  auto reduce = value.getDefiningOp<ReduceOp>();
  if (!reduce || reduce.getKind() != ReduceKind::Mean || !reduce.getKeepdims())
    return std::nullopt;
  std::optional<int64_t> axis =
      getTrailingAxis(reduce.getAxes(), reduce.getInput().getType().getRank());
  if (!axis)
    return std::nullopt;
  return TrailingMean{reduce.getInput(), reduce.getAxes(), *axis};
}

/// `d = x - mean(x)` over trailing dimensions; returns the mean (of `x`).
std::optional<TrailingMean> matchCentered(Value d) {
  auto sub = d.getDefiningOp<SubOp>();
  if (!sub || sub.getLhs().getType() != d.getType())
    return std::nullopt;
  std::optional<TrailingMean> mean = matchTrailingMean(sub.getRhs());
  if (!mean || mean->input != sub.getLhs())
    return std::nullopt;
  return mean;
}

/// Whether `value` is `d` or computes the same centering as `d` does.
bool isSameCentering(Value value, Value d, const TrailingMean &centering) {
  if (value == d)
    return true;
  std::optional<TrailingMean> other = matchCentered(value);
  return other && other->input == centering.input &&
         other->axes == centering.axes;
}

/// Whether `value` is `d * d` or `d ^ 2` for the centering of `d`.
bool isSquareOfCentered(Value value, Value d, const TrailingMean &centering) {
  if (auto mul = value.getDefiningOp<MulOp>())
    return mul.getLhs().getType() == value.getType() &&
           mul.getRhs().getType() == value.getType() &&
           isSameCentering(mul.getLhs(), d, centering) &&
           isSameCentering(mul.getRhs(), d, centering);
  std::optional<std::pair<Value, double>> pow =
      matchScalarOperand<PowOp>(value, /*commutative=*/false);
  return pow && pow->second == 2.0 && isSameCentering(pow->first, d, centering);
}

/// `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)` → `nn.layer_norm`.
/// The root is the division or the product with the reciprocal square root.
template <typename OpTy> struct RaiseLayerNorm : OpRewritePattern<OpTy> {
  // Above RaiseRmsNorm, which would read the same root as the RMS norm of
  // `x - mean(x)`.
  RaiseLayerNorm(MLIRContext *context)
      : OpRewritePattern<OpTy>(context, /*benefit=*/2) {}

  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    for (auto [d, s] : matchDivisionBySqrt(op)) {
      std::optional<TrailingMean> centering = matchCentered(d);
      if (!centering || centering->input.getType() != op.getType())
        continue;
      std::optional<std::pair<Value, double>> plusEps = matchPlusEpsilon(s);
      if (!plusEps)
        continue;
      std::optional<TrailingMean> variance = matchTrailingMean(plusEps->first);
      if (!variance || variance->axes != centering->axes ||
          !isSquareOfCentered(variance->input, d, *centering))
        continue;
      rewriter.replaceOpWithNewOp<LayerNormOp>(
          op, op.getType(), centering->input, /*scale=*/Value(),
          /*bias=*/Value(), rewriter.getI64IntegerAttr(centering->axis),
          rewriter.getF32FloatAttr(plusEps->second));
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not a decomposed layer norm");
  }
};

/// `x * rsqrt(mean(x^2) + eps)` (or `x / sqrt(...)`) → `nn.rms_norm`.
template <typename OpTy> struct RaiseRmsNorm : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    for (auto [x, s] : matchDivisionBySqrt(op)) {
      if (x.getType() != op.getType())
        continue;
      std::optional<std::pair<Value, double>> plusEps = matchPlusEpsilon(s);
      if (!plusEps)
        continue;
      std::optional<TrailingMean> meanSquare =
          matchTrailingMean(plusEps->first);
      if (!meanSquare || !isPowerOf(meanSquare->input, x, 2))
        continue;
      rewriter.replaceOpWithNewOp<RmsNormOp>(
          op, op.getType(), x, /*scale=*/Value(),
          rewriter.getI64IntegerAttr(meanSquare->axis),
          rewriter.getF32FloatAttr(plusEps->second));
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not a decomposed RMS norm");
  }
};

/// The operand orders of a commutative binary op.
template <typename OpTy>
SmallVector<std::pair<Value, Value>, 2> operandOrders(OpTy op) {
  return {{op.getLhs(), op.getRhs()}, {op.getRhs(), op.getLhs()}};
}

/// `layer_norm(x) * gamma` → `layer_norm(x) scale(gamma)`.
struct FoldLayerNormScale : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    for (auto [normalized, gamma] : operandOrders(op)) {
      auto norm = normalized.getDefiningOp<LayerNormOp>();
      if (!norm || norm.getScale() || norm.getBias() || !norm->hasOneUse() ||
          norm.getType() != op.getType() ||
          !isNormParameter(gamma, norm.getType(), norm.getAxis()))
        continue;
      Value scale = conformNormParameter(rewriter, op.getLoc(), gamma,
                                         norm.getType(), norm.getAxis());
      rewriter.replaceOpWithNewOp<LayerNormOp>(
          op, norm.getType(), norm.getInput(), scale, /*bias=*/Value(),
          norm.getAxisAttr(), norm.getEpsilonAttr());
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no layer norm to scale");
  }
};

/// `layer_norm(x) + beta` → `layer_norm(x) bias(beta)`.
struct FoldLayerNormBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    for (auto [normalized, beta] : operandOrders(op)) {
      auto norm = normalized.getDefiningOp<LayerNormOp>();
      if (!norm || norm.getBias() || !norm->hasOneUse() ||
          norm.getType() != op.getType() ||
          !isNormParameter(beta, norm.getType(), norm.getAxis()))
        continue;
      Value bias = conformNormParameter(rewriter, op.getLoc(), beta,
                                        norm.getType(), norm.getAxis());
      rewriter.replaceOpWithNewOp<LayerNormOp>(
          op, norm.getType(), norm.getInput(), norm.getScale(), bias,
          norm.getAxisAttr(), norm.getEpsilonAttr());
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no layer norm to shift");
  }
};

/// `rms_norm(x) * w` → `rms_norm(x) scale(w)`.
struct FoldRmsNormScale : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    for (auto [normalized, weight] : operandOrders(op)) {
      auto norm = normalized.getDefiningOp<RmsNormOp>();
      if (!norm || norm.getScale() || !norm->hasOneUse() ||
          norm.getType() != op.getType() ||
          !isNormParameter(weight, norm.getType(), norm.getAxis()))
        continue;
      Value scale = conformNormParameter(rewriter, op.getLoc(), weight,
                                         norm.getType(), norm.getAxis());
      rewriter.replaceOpWithNewOp<RmsNormOp>(
          op, norm.getType(), norm.getInput(), scale, norm.getAxisAttr(),
          norm.getEpsilonAttr());
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no RMS norm to scale");
  }
};

} // namespace

void nn::populateRaiseLayerNormPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseLayerNorm<DivOp>, RaiseLayerNorm<MulOp>, FoldLayerNormScale,
               FoldLayerNormBias>(patterns.getContext());
}

void nn::populateRaiseRmsNormPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseRmsNorm<DivOp>, RaiseRmsNorm<MulOp>, FoldRmsNormScale>(
      patterns.getContext());
}
