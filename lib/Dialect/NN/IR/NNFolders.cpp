//===- NNFolders.cpp - folders and canonicalizations of nn ops ------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Exported graphs compute shapes at run time (Shape, Gather, Concat, ...).
// Once shapes are static those computations are constants, and the folders
// here reduce them so the transformer ops are left alone. Constant folding
// only produces inline `dense` values up to ConstantOp::kMaxInlineElements;
// larger values stay computed.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/APSInt.h"

#include <cmath>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;

namespace {

/// The inline dense value of a folder's operand, if it is one.
DenseElementsAttr getDense(Attribute attr) {
  return dyn_cast_if_present<DenseElementsAttr>(attr);
}

bool isSmall(ShapedType type) {
  return type.getNumElements() <= ConstantOp::kMaxInlineElements;
}

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// The linear index into an operand of shape `from` that numpy broadcasting
/// reads for the result element at linear index `linear` of shape `to`.
int64_t broadcastSource(ArrayRef<int64_t> from, ArrayRef<int64_t> to,
                        ArrayRef<int64_t> toStrides, int64_t linear) {
  SmallVector<int64_t> fromStrides = stridesOf(from);
  int64_t offset = to.size() - from.size(), index = 0;
  for (size_t d = 0; d < to.size(); ++d) {
    int64_t coord = (linear / toStrides[d]) % to[d];
    int64_t fd = static_cast<int64_t>(d) - offset;
    if (fd >= 0 && from[fd] != 1)
      index += coord * fromStrides[fd];
  }
  return index;
}

/// Folds an elementwise op over inline constants with numpy broadcasting.
/// `fn` maps the operands' elements to the result element, or returns a null
/// attribute to give up (integer division by zero).
template <typename Fn>
Attribute foldElementwise(ShapedType resultType, ArrayRef<Attribute> operands,
                          Fn fn) {
  if (!isSmall(resultType))
    return {};
  SmallVector<DenseElementsAttr> dense;
  for (Attribute attr : operands) {
    DenseElementsAttr value = getDense(attr);
    if (!value)
      return {};
    dense.push_back(value);
  }
  SmallVector<SmallVector<Attribute>> values;
  for (DenseElementsAttr value : dense)
    values.push_back(llvm::to_vector(value.getValues<Attribute>()));
  ArrayRef<int64_t> shape = resultType.getShape();
  SmallVector<int64_t> strides = stridesOf(shape);
  SmallVector<Attribute> out;
  SmallVector<Attribute> args(dense.size());
  for (int64_t i = 0, e = resultType.getNumElements(); i < e; ++i) {
    for (size_t k = 0; k < dense.size(); ++k)
      args[k] = values[k][broadcastSource(dense[k].getType().getShape(), shape,
                                          strides, i)];
    Attribute element = fn(ArrayRef<Attribute>(args));
    if (!element)
      return {};
    out.push_back(element);
  }
  return DenseElementsAttr::get(resultType, out);
}

/// Folds a binary arithmetic op given its integer and float semantics.
template <typename IntFn, typename FloatFn>
Attribute foldArithmetic(Operation *op, ArrayRef<Attribute> operands,
                         IntFn intFn, FloatFn floatFn) {
  auto resultType = cast<ShapedType>(op->getResult(0).getType());
  Type elementType = resultType.getElementType();
  return foldElementwise(
      resultType, operands, [&](ArrayRef<Attribute> args) -> Attribute {
        if (auto lhs = dyn_cast<IntegerAttr>(args[0])) {
          std::optional<APInt> value =
              intFn(lhs.getValue(), cast<IntegerAttr>(args[1]).getValue());
          if (!value)
            return {};
          return IntegerAttr::get(elementType, *value);
        }
        auto lhs = cast<FloatAttr>(args[0]);
        return FloatAttr::get(
            elementType,
            floatFn(lhs.getValue(), cast<FloatAttr>(args[1]).getValue()));
      });
}

} // namespace

//===----------------------------------------------------------------------===//
// Constants and arithmetic
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      *this, adaptor.getOperands(),
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a + b;
      },
      [](const APFloat &a, const APFloat &b) { return a + b; });
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      *this, adaptor.getOperands(),
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a - b;
      },
      [](const APFloat &a, const APFloat &b) { return a - b; });
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      *this, adaptor.getOperands(),
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a * b;
      },
      [](const APFloat &a, const APFloat &b) { return a * b; });
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      *this, adaptor.getOperands(),
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        // Division by zero and INT_MIN / -1 are left for run time.
        if (b.isZero() || (a.isMinSignedValue() && b.isAllOnes()))
          return std::nullopt;
        return a.sdiv(b);
      },
      [](const APFloat &a, const APFloat &b) { return a / b; });
}

OpFoldResult MaxOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      *this, adaptor.getOperands(),
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a.sge(b) ? a : b;
      },
      [](const APFloat &a, const APFloat &b) { return llvm::maximum(a, b); });
}

OpFoldResult MinOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      *this, adaptor.getOperands(),
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return a.sle(b) ? a : b;
      },
      [](const APFloat &a, const APFloat &b) { return llvm::minimum(a, b); });
}

template <typename Fn>
static Attribute foldLogical(Operation *op, ArrayRef<Attribute> operands,
                             Fn fn) {
  return foldArithmetic(
      op, operands,
      [&](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return fn(a, b);
      },
      [](const APFloat &a, const APFloat &) { return a; });
}

OpFoldResult AndOp::fold(FoldAdaptor adaptor) {
  return foldLogical(*this, adaptor.getOperands(),
                     [](const APInt &a, const APInt &b) { return a & b; });
}

OpFoldResult OrOp::fold(FoldAdaptor adaptor) {
  return foldLogical(*this, adaptor.getOperands(),
                     [](const APInt &a, const APInt &b) { return a | b; });
}

OpFoldResult XorOp::fold(FoldAdaptor adaptor) {
  return foldLogical(*this, adaptor.getOperands(),
                     [](const APInt &a, const APInt &b) { return a ^ b; });
}

OpFoldResult CompareOp::fold(FoldAdaptor adaptor) {
  auto boolType = IntegerType::get(getContext(), 1);
  CompareDirection direction = getDirection();
  return foldElementwise(
      getType(), adaptor.getOperands(),
      [&](ArrayRef<Attribute> args) -> Attribute {
        int cmp;
        if (auto lhs = dyn_cast<IntegerAttr>(args[0])) {
          const APInt &a = lhs.getValue();
          const APInt &b = cast<IntegerAttr>(args[1]).getValue();
          // i1 compares as unsigned (false < true), wider integers as signed.
          bool isBool = a.getBitWidth() == 1;
          cmp = a == b ? 0 : ((isBool ? a.ult(b) : a.slt(b)) ? -1 : 1);
        } else {
          APFloat::cmpResult r = cast<FloatAttr>(args[0]).getValue().compare(
              cast<FloatAttr>(args[1]).getValue());
          if (r == APFloat::cmpUnordered)
            return IntegerAttr::get(boolType,
                                    direction == CompareDirection::NE);
          cmp =
              r == APFloat::cmpLessThan ? -1 : (r == APFloat::cmpEqual ? 0 : 1);
        }
        bool value = false;
        switch (direction) {
        case CompareDirection::EQ:
          value = cmp == 0;
          break;
        case CompareDirection::NE:
          value = cmp != 0;
          break;
        case CompareDirection::LT:
          value = cmp < 0;
          break;
        case CompareDirection::LE:
          value = cmp <= 0;
          break;
        case CompareDirection::GT:
          value = cmp > 0;
          break;
        case CompareDirection::GE:
          value = cmp >= 0;
          break;
        }
        return IntegerAttr::get(boolType, value);
      });
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  // A uniform condition picks one side, when that side already has the
  // result type (no broadcasting left to do).
  if (DenseElementsAttr cond = getDense(adaptor.getCondition());
      cond && cond.isSplat()) {
    bool pickTrue = cond.getSplatValue<bool>();
    Value chosen = pickTrue ? getOnTrue() : getOnFalse();
    if (chosen.getType() == getType())
      return chosen;
    // A splat side broadcast to the result is a splat of the result type.
    if (DenseElementsAttr side =
            getDense(pickTrue ? adaptor.getOnTrue() : adaptor.getOnFalse());
        side && side.isSplat())
      return DenseElementsAttr::get(cast<ShapedType>(getType()),
                                    side.getSplatValue<Attribute>());
  }
  return foldElementwise(getType(), adaptor.getOperands(),
                         [](ArrayRef<Attribute> args) -> Attribute {
                           return cast<IntegerAttr>(args[0]).getValue().isOne()
                                      ? args[1]
                                      : args[2];
                         });
}

OpFoldResult NegOp::fold(FoldAdaptor adaptor) {
  Type elementType = getType().getElementType();
  return foldElementwise(
      getType(), adaptor.getOperands(),
      [&](ArrayRef<Attribute> args) -> Attribute {
        if (auto i = dyn_cast<IntegerAttr>(args[0]))
          return IntegerAttr::get(elementType, -i.getValue());
        return FloatAttr::get(elementType,
                              -cast<FloatAttr>(args[0]).getValue());
      });
}

/// Folds a float unary op through `fn` in double precision, rounded once to
/// the element type.
template <typename Fn>
static Attribute foldFloatUnary(ShapedType type, ArrayRef<Attribute> operands,
                                Fn fn) {
  Type elementType = type.getElementType();
  const llvm::fltSemantics &semantics =
      cast<FloatType>(elementType).getFloatSemantics();
  return foldElementwise(
      type, operands, [&](ArrayRef<Attribute> args) -> Attribute {
        APFloat x = cast<FloatAttr>(args[0]).getValue();
        bool losesInfo;
        x.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                  &losesInfo);
        APFloat y(fn(x.convertToDouble()));
        y.convert(semantics, APFloat::rmNearestTiesToEven, &losesInfo);
        return FloatAttr::get(elementType, y);
      });
}

OpFoldResult SinOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(getType(), adaptor.getOperands(),
                        [](double x) { return std::sin(x); });
}

OpFoldResult CosOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(getType(), adaptor.getOperands(),
                        [](double x) { return std::cos(x); });
}

OpFoldResult NotOp::fold(FoldAdaptor adaptor) {
  Type elementType = getType().getElementType();
  return foldElementwise(getType(), adaptor.getOperands(),
                         [&](ArrayRef<Attribute> args) -> Attribute {
                           return IntegerAttr::get(
                               elementType,
                               ~cast<IntegerAttr>(args[0]).getValue());
                         });
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  Type to = getType().getElementType();
  return foldElementwise(
      getType(), adaptor.getOperands(),
      [&](ArrayRef<Attribute> args) -> Attribute {
        if (auto i = dyn_cast<IntegerAttr>(args[0])) {
          const APInt &value = i.getValue();
          // i1 is a boolean: true converts to 1, not -1.
          bool isBool = value.getBitWidth() == 1;
          if (auto intType = dyn_cast<IntegerType>(to)) {
            if (intType.getWidth() == 1)
              return IntegerAttr::get(to, !value.isZero());
            return IntegerAttr::get(
                to, isBool ? value.zext(intType.getWidth())
                           : value.sextOrTrunc(intType.getWidth()));
          }
          APFloat result(cast<FloatType>(to).getFloatSemantics());
          result.convertFromAPInt(value, /*IsSigned=*/!isBool,
                                  APFloat::rmNearestTiesToEven);
          return FloatAttr::get(to, result);
        }
        APFloat value = cast<FloatAttr>(args[0]).getValue();
        if (auto intType = dyn_cast<IntegerType>(to)) {
          if (intType.getWidth() == 1)
            return IntegerAttr::get(to, !value.isZero());
          APSInt result(intType.getWidth(), /*isUnsigned=*/false);
          bool exact;
          if (value.isNaN() ||
              value.convertToInteger(result, APFloat::rmTowardZero, &exact) ==
                  APFloat::opInvalidOp)
            return {};
          return IntegerAttr::get(to, result);
        }
        bool losesInfo, finite = value.isFinite();
        const llvm::fltSemantics &semantics =
            cast<FloatType>(to).getFloatSemantics();
        value.convert(semantics, APFloat::rmNearestTiesToEven, &losesInfo);
        if (getSaturate() && finite && value.isInfinity())
          value = APFloat::getLargest(semantics, value.isNegative());
        return FloatAttr::get(to, value);
      });
}

//===----------------------------------------------------------------------===//
// Scans
//===----------------------------------------------------------------------===//

OpFoldResult CumsumOp::fold(FoldAdaptor adaptor) {
  DenseElementsAttr dense = getDense(adaptor.getInput());
  if (!dense || !isSmall(getType()))
    return {};
  ArrayRef<int64_t> shape = getType().getShape();
  int64_t axis = getAxis(), size = shape[axis];
  int64_t inner = stridesOf(shape)[axis];
  int64_t outer =
      getType().getNumElements() / std::max<int64_t>(size * inner, 1);
  Type elementType = getType().getElementType();
  auto values = llvm::to_vector(dense.getValues<Attribute>());
  SmallVector<Attribute> out(values.size());
  bool exclusive = getExclusive(), reverse = getReverse();
  // The order of the run-time kernel: integers wrap at their width, floats
  // accumulate in fp32 along the axis and round once to the element type.
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < inner; ++c) {
      APInt intAcc(isa<IntegerType>(elementType)
                       ? elementType.getIntOrFloatBitWidth()
                       : 1,
                   0);
      APFloat floatAcc(0.0f);
      for (int64_t step = 0; step < size; ++step) {
        int64_t k = reverse ? size - 1 - step : step;
        int64_t at = (o * size + k) * inner + c;
        Attribute element = values[at];
        if (auto i = dyn_cast<IntegerAttr>(element)) {
          if (!exclusive)
            intAcc += i.getValue();
          out[at] = IntegerAttr::get(elementType, intAcc);
          if (exclusive)
            intAcc += i.getValue();
          continue;
        }
        APFloat x = cast<FloatAttr>(element).getValue();
        bool losesInfo;
        x.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven,
                  &losesInfo);
        if (!exclusive)
          floatAcc.add(x, APFloat::rmNearestTiesToEven);
        APFloat stored = floatAcc;
        stored.convert(cast<FloatType>(elementType).getFloatSemantics(),
                       APFloat::rmNearestTiesToEven, &losesInfo);
        out[at] = FloatAttr::get(elementType, stored);
        if (exclusive)
          floatAcc.add(x, APFloat::rmNearestTiesToEven);
      }
    }
  }
  return DenseElementsAttr::get(getType(), out);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// Folds an op that only moves elements: result element `i` is input element
/// `source(i)` of the single constant operand.
template <typename Fn>
static Attribute foldGather(ShapedType resultType, Attribute input, Fn source) {
  DenseElementsAttr dense = getDense(input);
  if (!dense)
    return {};
  if (dense.isSplat())
    return DenseElementsAttr::get(resultType, dense.getSplatValue<Attribute>());
  if (!isSmall(resultType))
    return {};
  auto values = llvm::to_vector(dense.getValues<Attribute>());
  SmallVector<Attribute> out;
  for (int64_t i = 0, e = resultType.getNumElements(); i < e; ++i)
    out.push_back(values[source(i)]);
  return DenseElementsAttr::get(resultType, out);
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  DenseElementsAttr indices = getDense(adaptor.getIndices());
  if (!indices)
    return {};
  auto indexValues = llvm::to_vector(indices.getValues<APInt>());
  ArrayRef<int64_t> data = getData().getType().getShape();
  int64_t axis = getAxis(), axisSize = data[axis];
  int64_t inner = 1;
  for (int64_t size : data.drop_front(axis + 1))
    inner *= size;
  int64_t numIndices = indexValues.size();
  for (const APInt &index : indexValues) {
    int64_t i = index.getSExtValue();
    if (i < -axisSize || i >= axisSize)
      return {};
  }
  return foldGather(getType(), adaptor.getData(), [&](int64_t linear) {
    int64_t innerIndex = linear % inner;
    int64_t rest = linear / inner;
    int64_t index = indexValues[rest % numIndices].getSExtValue();
    if (index < 0)
      index += axisSize;
    int64_t outer = rest / numIndices;
    return (outer * axisSize + index) * inner + innerIndex;
  });
}

namespace {
/// gather(x, iota) along `axis`, with constant indices 0, 1, ..., n - 1 in
/// order (n: the axis's size), keeps every element in place: it is a
/// reshape of x. Exporters write such gathers where index arithmetic folds
/// away (torch's legacy export of HF's padding mask gathers the flattened
/// mask at b * s + j); as a reshape, the sequence stays visible to
/// sharding.
struct GatherOfIotaIsReshape : OpRewritePattern<GatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GatherOp op,
                                PatternRewriter &rewriter) const override {
    DenseElementsAttr indices;
    if (!matchPattern(op.getIndices(), m_Constant(&indices)))
      return failure();
    int64_t size = op.getData().getType().getDimSize(op.getAxis());
    if (indices.getNumElements() != size)
      return failure();
    int64_t expected = 0;
    for (const APInt &index : indices.getValues<APInt>())
      if (index.getSExtValue() != expected++)
        return failure();
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), op.getData());
    return success();
  }
};
} // namespace

void GatherOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                           MLIRContext *context) {
  results.add<GatherOfIotaIsReshape>(context);
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // reshape(reshape(x)) is one reshape of x.
  if (auto producer = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(producer.getInput());
    return getResult();
  }
  if (DenseElementsAttr dense = getDense(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

namespace {
/// reshape(matmul(reshape(x) : [m, k], w) : [m, n]) : [l..., n] with
/// prod(l) = m is matmul(reshape(x) : [l..., k], w): exporters write linear
/// layers this way (GPT-2's Conv1D flattens the tokens), and with the
/// batched form the sequence dimension stays visible to sharding and
/// fusion. The new reshape usually folds into x's producer.
struct FoldReshapesAroundMatmul : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto matmul = op.getInput().getDefiningOp<MatmulOp>();
    if (!matmul || !matmul->hasOneUse() ||
        matmul.getRhs().getType().getRank() != 2 ||
        matmul.getType().getRank() != 2)
      return failure();
    auto merge = matmul.getLhs().getDefiningOp<ReshapeOp>();
    if (!merge || !merge->hasOneUse())
      return failure();
    ArrayRef<int64_t> out = op.getType().getShape();
    int64_t n = matmul.getType().getDimSize(1);
    if (out.size() < 2 || out.back() != n)
      return failure();
    SmallVector<int64_t> lhsShape(out.drop_back());
    lhsShape.push_back(matmul.getLhs().getType().getDimSize(1));
    Value lhs = merge.getInput();
    auto lhsType = merge.getInput().getType().clone(lhsShape);
    if (lhsType != lhs.getType())
      lhs = ReshapeOp::create(rewriter, op.getLoc(), lhsType, lhs);
    rewriter.replaceOpWithNewOp<MatmulOp>(op, op.getType(), lhs,
                                          matmul.getRhs(), matmul.getBias());
    return success();
  }
};
} // namespace

namespace {
/// A norm of a reshape that merges dimensions before the normalized ones
/// (Qwen3's and OLMo2's per-head query/key norms: [b, s, h * d] read as
/// [b, s * h, d], normalized over d, read back) normalizes the unmerged
/// form [b, s, h, d] instead, and the merge follows it: the heads stay a
/// dimension of their own, which tensor parallelism splits (a split of a
/// merged dimension's minor part cannot be shown). The merge then usually
/// folds into the reshape after the norm.
template <typename NormOp> struct NormBeforeMerge : OpRewritePattern<NormOp> {
  using OpRewritePattern<NormOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(NormOp op,
                                PatternRewriter &rewriter) const override {
    auto merge = op.getInput().template getDefiningOp<ReshapeOp>();
    if (!merge || !merge->hasOneUse())
      return failure();
    auto type = cast<RankedTensorType>(op.getType());
    int64_t axis = op.getAxis();
    ArrayRef<int64_t> normalized = type.getShape().drop_front(axis);
    int64_t width = 1;
    for (int64_t size : normalized)
      width *= size;
    ArrayRef<int64_t> source = merge.getInput().getType().getShape();
    if (source.empty() || width == 0 || source.back() % width != 0 ||
        source.back() == width)
      return failure();
    // The source's last dimension split into [last / width, normalized...].
    SmallVector<int64_t> unmerged(source.drop_back());
    unmerged.push_back(source.back() / width);
    unmerged.append(normalized.begin(), normalized.end());
    if (ArrayRef<int64_t>(unmerged).drop_back(normalized.size()) ==
        type.getShape().drop_back(normalized.size()))
      return failure();
    Location loc = op.getLoc();
    auto unmergedType = type.clone(unmerged);
    Value input =
        ReshapeOp::create(rewriter, loc, unmergedType, merge.getInput());
    Operation *norm = rewriter.clone(*op);
    norm->setOperand(0, input);
    norm->getResult(0).setType(unmergedType);
    norm->setAttr("axis", rewriter.getI64IntegerAttr(unmerged.size() -
                                                     normalized.size()));
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, type, norm->getResult(0));
    return success();
  }
};
} // namespace

void RmsNormOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<NormBeforeMerge<RmsNormOp>>(context);
}

void LayerNormOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<NormBeforeMerge<LayerNormOp>>(context);
}

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<FoldReshapesAroundMatmul>(context);
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int64_t> perm = getPermutation();
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return getInput();
  ArrayRef<int64_t> in = getInput().getType().getShape();
  SmallVector<int64_t> inStrides = stridesOf(in);
  SmallVector<int64_t> outStrides = stridesOf(getType().getShape());
  return foldGather(getType(), adaptor.getInput(), [&](int64_t linear) {
    int64_t index = 0;
    for (size_t d = 0; d < perm.size(); ++d)
      index += (linear / outStrides[d]) % in[perm[d]] * inStrides[perm[d]];
    return index;
  });
}

namespace {
/// transpose(transpose(x, p), q) is transpose(x, p o q).
struct ComposeTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto producer = op.getInput().getDefiningOp<TransposeOp>();
    if (!producer)
      return failure();
    SmallVector<int64_t> perm;
    for (int64_t p : op.getPermutation())
      perm.push_back(producer.getPermutation()[p]);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(),
                                             producer.getInput(), perm);
    return success();
  }
};
} // namespace

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<ComposeTransposes>(context);
}

OpFoldResult BroadcastToOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  ArrayRef<int64_t> in = getInput().getType().getShape();
  ArrayRef<int64_t> out = getType().getShape();
  SmallVector<int64_t> outStrides = stridesOf(out);
  return foldGather(getType(), adaptor.getInput(), [&](int64_t linear) {
    return broadcastSource(in, out, outStrides, linear);
  });
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  ArrayRef<int64_t> start = getStart(), stride = getStride();
  ArrayRef<int64_t> out = getType().getShape();
  SmallVector<int64_t> inStrides = stridesOf(getInput().getType().getShape());
  SmallVector<int64_t> outStrides = stridesOf(out);
  return foldGather(getType(), adaptor.getInput(), [&](int64_t linear) {
    int64_t index = 0;
    for (size_t d = 0; d < out.size(); ++d)
      index += (start[d] + (linear / outStrides[d]) % out[d] * stride[d]) *
               inStrides[d];
    return index;
  });
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1 && getInputs().front().getType() == getType())
    return getInputs().front();
  if (!isSmall(getType()))
    return {};
  SmallVector<SmallVector<Attribute>> values;
  for (Attribute attr : adaptor.getInputs()) {
    DenseElementsAttr dense = getDense(attr);
    if (!dense)
      return {};
    values.push_back(llvm::to_vector(dense.getValues<Attribute>()));
  }
  // Row-major: for each index of the dimensions before the axis, copy each
  // operand's contiguous block.
  int64_t axis = getAxis();
  int64_t outer = 1;
  for (int64_t size : getType().getShape().take_front(axis))
    outer *= size;
  SmallVector<Attribute> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (auto [input, vals] : llvm::zip(getInputs(), values)) {
      int64_t block = vals.size() / outer;
      llvm::append_range(out,
                         ArrayRef<Attribute>(vals).slice(o * block, block));
    }
  }
  return DenseElementsAttr::get(getType(), out);
}
