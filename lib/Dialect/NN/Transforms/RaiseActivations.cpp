//===- RaiseActivations.cpp - raise decomposed GELU and SiLU --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// GELU and SiLU arrive as products. The exporters associate them in
// different orders (`(x * 0.5) * (1 + erf(x / sqrt 2))`,
// `x * (0.5 * (1 + erf(x * 0.7071)))`, ...), so the GELU patterns flatten
// the product first and look for its factors: `x`, `1 + f(...)` and
// constants multiplying to 0.5.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "RaiseUtils.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;
using namespace mlir::partita::nn::raise;

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752;
constexpr double kSqrt2OverPi = 0.79788456080286536;
constexpr double kCubicCoefficient = 0.044715;

/// `1 + f(z)` for the unary op `UnaryOp`: returns `z`.
template <typename UnaryOp> Value matchOnePlus(Value value) {
  std::optional<std::pair<Value, double>> sum =
      matchScalarOperand<AddOp>(value);
  if (!sum || !isNear(sum->second, 1.0))
    return {};
  auto unary = sum->first.getDefiningOp<UnaryOp>();
  return unary ? unary.getInput() : Value();
}

/// Whether `root` is the product `0.5 * x * onePlus` and nothing else.
bool isHalfProduct(Value root, Value x, Value onePlus) {
  if (x.getType() != root.getType() || onePlus.getType() != root.getType())
    return false;
  Product product = flattenProduct(root, x);
  return isNear(product.constant, 0.5) && product.factors.size() == 2 &&
         llvm::is_contained(product.factors, x) &&
         llvm::is_contained(product.factors, onePlus) && x != onePlus;
}

/// `z = x / sqrt(2)` (as a product or a quotient): returns `x`.
Value matchErfArgument(Value z) {
  if (auto product = matchScalarOperand<MulOp>(z);
      product && isNear(product->second, kInvSqrt2))
    return product->first;
  if (auto quotient = matchScalarOperand<DivOp>(z, /*commutative=*/false);
      quotient && isNear(quotient->second, 1.0 / kInvSqrt2))
    return quotient->first;
  return {};
}

/// `x * 0.5 * (1 + erf(x / sqrt(2)))` → `nn.gelu`.
struct RaiseGeluErf : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    for (Value factor : flattenProduct(op).factors) {
      Value z = matchOnePlus<ErfOp>(factor);
      if (!z)
        continue;
      Value x = matchErfArgument(z);
      if (!x || !isHalfProduct(op, x, factor))
        continue;
      rewriter.replaceOpWithNewOp<GeluOp>(op, op.getType(), x,
                                          GeluApproximation::None);
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not an erf GELU");
  }
};

/// `u = sqrt(2/pi) * (x + 0.044715 x^3)` or, as HF's FastGELU writes it,
/// `u = sqrt(2/pi) * x * (1 + 0.044715 x^2)`: returns `x`.
Value matchTanhArgument(Value u) {
  Product outer = flattenProduct(u);
  if (outer.factors.size() == 1 && isNear(outer.constant, kSqrt2OverPi)) {
    if (auto sum = outer.factors.front().getDefiningOp<AddOp>()) {
      std::pair<Value, Value> orders[] = {{sum.getLhs(), sum.getRhs()},
                                          {sum.getRhs(), sum.getLhs()}};
      for (auto [x, cubic] : orders) {
        if (x.getType() != sum.getType())
          continue;
        Product term = flattenProduct(cubic, x);
        if (isNear(term.constant, kCubicCoefficient) &&
            getPowerOf(term.factors, x) == 3)
          return x;
      }
    }
  }
  for (Value factor : outer.factors) {
    std::optional<std::pair<Value, double>> sum =
        matchScalarOperand<AddOp>(factor);
    if (!sum || !isNear(sum->second, 1.0))
      continue;
    Product term = flattenProduct(sum->first);
    if (!isNear(term.constant, kCubicCoefficient) || term.factors.empty())
      continue;
    // x is the base of the square: the first factor, or what it raises.
    Value x = term.factors.front();
    if (auto pow = matchScalarOperand<PowOp>(x, /*commutative=*/false))
      x = pow->first;
    if (getPowerOf(term.factors, x) != 2)
      continue;
    Product rest = flattenProduct(u, x);
    if (isNear(rest.constant, kSqrt2OverPi) && rest.factors.size() == 2 &&
        llvm::is_contained(rest.factors, x) &&
        llvm::is_contained(rest.factors, factor) && x != factor)
      return x;
  }
  return {};
}

/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))` →
/// `nn.gelu approximation = tanh`.
struct RaiseGeluTanh : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    for (Value factor : flattenProduct(op).factors) {
      Value u = matchOnePlus<TanhOp>(factor);
      if (!u)
        continue;
      Value x = matchTanhArgument(u);
      if (!x || !isHalfProduct(op, x, factor))
        continue;
      rewriter.replaceOpWithNewOp<GeluOp>(op, op.getType(), x,
                                          GeluApproximation::Tanh);
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not a tanh GELU");
  }
};

/// `x * sigmoid(x)` → `nn.silu`.
struct RaiseSilu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op,
                                PatternRewriter &rewriter) const override {
    std::pair<Value, Value> orders[] = {{op.getLhs(), op.getRhs()},
                                        {op.getRhs(), op.getLhs()}};
    for (auto [x, gate] : orders) {
      auto sigmoid = gate.getDefiningOp<SigmoidOp>();
      if (!sigmoid || sigmoid.getInput() != x || x.getType() != op.getType())
        continue;
      rewriter.replaceOpWithNewOp<SiluOp>(op, op.getType(), x);
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not x * sigmoid(x)");
  }
};

} // namespace

void nn::populateRaiseGeluPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseGeluErf, RaiseGeluTanh>(patterns.getContext());
}

void nn::populateRaiseSiluPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseSilu>(patterns.getContext());
}
