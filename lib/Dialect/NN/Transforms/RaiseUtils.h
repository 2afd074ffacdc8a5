//===- RaiseUtils.h - matchers shared by the raising patterns ---*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The exporters' decompositions are trees of elementwise ops over one input
// and scalar constants. These helpers read constants (inline `dense` or
// `dense_resource` blobs) and take such trees apart.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_DIALECT_NN_TRANSFORMS_RAISEUTILS_H
#define PARTITA_LIB_DIALECT_NN_TRANSFORMS_RAISEUTILS_H

#include "partita/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/PatternMatch.h"

#include <optional>
#include <utility>
#include <vector>

namespace mlir::partita::nn::raise {

/// Every element of the `nn.constant` defining `value`, as doubles (booleans
/// as 0 and 1), whether it is inline or a resource blob. None when `value`
/// is not a readable constant.
std::optional<std::vector<double>> readConstant(Value value);

/// The value of a constant with exactly one element (rank 0 or all sizes 1).
std::optional<double> getScalarConstant(Value value);

/// The value of a constant whose elements are all equal (a splat).
std::optional<double> getUniformConstant(Value value);

/// Whether `value` is within `tolerance` of `expected`.
bool isNear(double value, double expected, double tolerance = 1e-4);

/// The operand and constant of `value = OpTy(x, c)` (or `OpTy(c, x)` when
/// `commutative`) for a scalar constant `c`, provided the op does not
/// broadcast `x`: `x` has the result's type.
template <typename OpTy>
std::optional<std::pair<Value, double>>
matchScalarOperand(Value value, bool commutative = true) {
  auto op = value.getDefiningOp<OpTy>();
  if (!op)
    return std::nullopt;
  std::pair<Value, Value> orders[] = {{op.getLhs(), op.getRhs()},
                                      {op.getRhs(), op.getLhs()}};
  for (auto [x, c] : ArrayRef(orders).take_front(commutative ? 2 : 1)) {
    if (x.getType() != value.getType())
      continue;
    if (std::optional<double> constant = getScalarConstant(c))
      return std::make_pair(x, *constant);
  }
  return std::nullopt;
}

/// A product `constant * factors[0] * factors[1] * ...`.
struct Product {
  SmallVector<Value> factors;
  double constant = 1.0;
};

/// Takes the tree of `nn.mul` (and `nn.div` by a scalar constant) rooted at
/// `value` apart into its non-constant factors and the product of its scalar
/// constants. Values in `stopAt` are kept as factors even when they are
/// products themselves.
Product flattenProduct(Value value, ArrayRef<Value> stopAt = {});

/// The integer power of `base` that the product of `factors` is, each factor
/// being `base` or `nn.pow(base, n)`; none when a factor is anything else.
std::optional<int64_t> getPowerOf(ArrayRef<Value> factors, Value base);

/// Whether `value` is `base ^ exponent`: `nn.pow` by a scalar constant, a
/// product of `base` with itself, or a mix of both.
bool isPowerOf(Value value, Value base, int64_t exponent);

/// The first axis of `axes` when they are exactly the trailing dimensions
/// `[axis, rank)` of a tensor of rank `rank`.
std::optional<int64_t> getTrailingAxis(ArrayRef<int64_t> axes, int64_t rank);

/// Whether `param`, multiplied or added elementwise into a tensor of type
/// `inputType` without broadcasting it, varies only along the dimensions
/// `[axis, rank)` and can therefore be a norm's scale or bias.
bool isNormParameter(Value param, RankedTensorType inputType, int64_t axis);

/// `param` (see isNormParameter) reshaped and broadcast to the normalized
/// shape `inputType.shape[axis:]`.
Value conformNormParameter(PatternRewriter &rewriter, Location loc, Value param,
                           RankedTensorType inputType, int64_t axis);

} // namespace mlir::partita::nn::raise

#endif // PARTITA_LIB_DIALECT_NN_TRANSFORMS_RAISEUTILS_H
