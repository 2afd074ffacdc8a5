//===- RaiseRope.cpp - raise HF's rotary embedding to nn.rope -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Hugging Face applies rotary position embeddings as
//
//   rotate_half(x) = concat(-x[..., r/2:], x[..., :r/2])
//   y = x * cos + rotate_half(x) * sin
//
// with cos = cos(concat(f, f)) and sin likewise (f: positions times inverse
// frequencies), broadcast over the heads. Where cos and sin have equal
// halves along the last axis, that is nn.rope on their first halves:
// y1 = x1 c - x2 s and y2 = x2 c + x1 s. Partial rotary embeddings
// (concat(rope(x[..., :r]), x[..., r:])) pass the other features through,
// as nn.rope does.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "RaiseUtils.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;
using namespace mlir::partita::nn::raise;

namespace {

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// `slice(x, [.., start], [.., limit])` of `x`'s last axis only, as
/// `(x, start, limit)`.
std::optional<std::tuple<Value, int64_t, int64_t>> matchLastAxisSlice(Value v) {
  auto slice = v.getDefiningOp<SliceOp>();
  if (!slice)
    return std::nullopt;
  ArrayRef<int64_t> in = shapeOf(slice.getInput());
  if (in.empty())
    return std::nullopt;
  size_t last = in.size() - 1;
  for (size_t d = 0; d < in.size(); ++d) {
    if (slice.getStride()[d] != 1)
      return std::nullopt;
    if (d != last && (slice.getStart()[d] != 0 || slice.getLimit()[d] != in[d]))
      return std::nullopt;
  }
  return std::make_tuple(slice.getInput(), slice.getStart()[last],
                         slice.getLimit()[last]);
}

/// Whether every element of `value` at `[..., j]` equals the one at
/// `[..., j + n/2]` (n: the last dimension's size): cos and sin tables built
/// from concat(f, f), seen through the elementwise maths and data movement
/// that keep that property.
bool hasEqualHalves(Value value, unsigned depth = 0) {
  constexpr unsigned kMaxDepth = 16;
  ArrayRef<int64_t> shape = shapeOf(value);
  if (shape.empty() || shape.back() % 2 != 0 || depth > kMaxDepth)
    return false;
  int64_t n = shape.back(), half = n / 2;
  if (value.getDefiningOp<ConstantOp>()) {
    std::optional<std::vector<double>> elements = readConstant(value);
    if (!elements)
      return false;
    for (size_t row = 0; row < elements->size(); row += n)
      for (int64_t j = 0; j < half; ++j)
        if ((*elements)[row + j] != (*elements)[row + j + half])
          return false;
    return true;
  }
  Operation *op = value.getDefiningOp();
  if (!op)
    return false;
  if (auto concat = dyn_cast<ConcatOp>(op)) {
    OperandRange inputs = concat.getInputs();
    return static_cast<int64_t>(concat.getAxis()) ==
               static_cast<int64_t>(shape.size()) - 1 &&
           inputs.size() == 2 && inputs[0] == inputs[1];
  }
  // Data movement that keeps the last axis whole and last.
  if (isa<ReshapeOp, BroadcastToOp>(op)) {
    Value input = op->getOperand(0);
    return !shapeOf(input).empty() && shapeOf(input).back() == n &&
           hasEqualHalves(input, depth + 1);
  }
  if (auto transpose = dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = transpose.getPermutation();
    return perm.back() == static_cast<int64_t>(perm.size()) - 1 &&
           hasEqualHalves(transpose.getInput(), depth + 1);
  }
  if (auto slice = dyn_cast<SliceOp>(op)) {
    size_t last = shape.size() - 1;
    return slice.getStart()[last] == 0 && slice.getStride()[last] == 1 &&
           slice.getLimit()[last] == shapeOf(slice.getInput())[last] &&
           hasEqualHalves(slice.getInput(), depth + 1);
  }
  if (auto gather = dyn_cast<GatherOp>(op)) {
    // Rows picked along another axis (cos_cached[position_ids], which the
    // importer may also write as nn.embedding).
    ArrayRef<int64_t> table = shapeOf(gather.getData());
    return static_cast<int64_t>(gather.getAxis()) !=
               static_cast<int64_t>(table.size()) - 1 &&
           hasEqualHalves(gather.getData(), depth + 1);
  }
  if (auto embedding = dyn_cast<EmbeddingOp>(op))
    return hasEqualHalves(embedding.getTable(), depth + 1);
  // Elementwise maths of one operand (cos, sin, casts), and products with a
  // scalar (HF's attention_scaling).
  if (isa<CastOp>(op) ||
      (op->getNumOperands() == 1 && op->getNumResults() == 1 &&
       op->hasTrait<OpTrait::SameOperandsAndResultType>() &&
       op->getAttrs().empty()))
    return hasEqualHalves(op->getOperand(0), depth + 1);
  if (auto product = matchScalarOperand<MulOp>(value))
    return hasEqualHalves(product->first, depth + 1);
  if (auto quotient = matchScalarOperand<DivOp>(value, /*commutative=*/false))
    return hasEqualHalves(quotient->first, depth + 1);
  return false;
}

/// `-x` as `neg(x)` or `x * -1`.
std::optional<Value> matchNegation(Value value) {
  if (auto neg = value.getDefiningOp<NegOp>())
    return neg.getInput();
  if (auto product = matchScalarOperand<MulOp>(value);
      product && product->second == -1.0)
    return product->first;
  return std::nullopt;
}

/// `rotate_half(x)`: `concat(-x[..., h:2h], x[..., :h])` over the whole last
/// axis of `x` (2h features).
std::optional<Value> matchRotateHalf(Value value) {
  auto concat = value.getDefiningOp<ConcatOp>();
  if (!concat || concat.getInputs().size() != 2 ||
      static_cast<int64_t>(concat.getAxis()) !=
          static_cast<int64_t>(shapeOf(value).size()) - 1)
    return std::nullopt;
  std::optional<Value> negated = matchNegation(concat.getInputs()[0]);
  if (!negated)
    return std::nullopt;
  auto upper = matchLastAxisSlice(*negated);
  auto lower = matchLastAxisSlice(concat.getInputs()[1]);
  if (!upper || !lower)
    return std::nullopt;
  auto [x, upperStart, upperLimit] = *upper;
  auto [x2, lowerStart, lowerLimit] = *lower;
  int64_t width = shapeOf(x).back(), half = width / 2;
  if (x != x2 || width % 2 != 0 || lowerStart != 0 || lowerLimit != half ||
      upperStart != half || upperLimit != width)
    return std::nullopt;
  return x;
}

/// The `[b or 1, s, r/2]` first half of a cos or sin table that broadcasts
/// onto `x: [b, h, s, r]` along the heads only; none for any other shape.
FailureOr<Value> conformTable(PatternRewriter &rewriter, Location loc,
                              Value table, RankedTensorType xType,
                              bool createOps) {
  ArrayRef<int64_t> t = shapeOf(table), x = xType.getShape();
  if (t.size() > 4 || t.size() < 2 ||
      cast<RankedTensorType>(table.getType()).getElementType() !=
          xType.getElementType())
    return failure();
  SmallVector<int64_t> padded(4 - t.size(), 1);
  llvm::append_range(padded, t);
  int64_t batch = padded[0];
  if ((batch != 1 && batch != x[0]) || padded[1] != 1 || padded[2] != x[2] ||
      padded[3] != x[3])
    return failure();
  if (!createOps)
    return table;
  int64_t half = x[3] / 2;
  SmallVector<int64_t> start(t.size(), 0), limit(t), stride(t.size(), 1);
  limit.back() = half;
  SmallVector<int64_t> sliced(t);
  sliced.back() = half;
  auto elementType = xType.getElementType();
  Value first =
      SliceOp::create(rewriter, loc, RankedTensorType::get(sliced, elementType),
                      table, start, limit, stride);
  auto type = RankedTensorType::get({batch, x[2], half}, elementType);
  if (type == first.getType())
    return first;
  return Value(ReshapeOp::create(rewriter, loc, type, first));
}

/// `x * cos + rotate_half(x) * sin` → `nn.rope(x, cos[..., :r/2],
/// sin[..., :r/2])`.
struct RaiseRope : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp op,
                                PatternRewriter &rewriter) const override {
    auto xType = op.getType();
    if (xType.getRank() != 4 || !isa<FloatType>(xType.getElementType()))
      return rewriter.notifyMatchFailure(op, "not a rank-4 float add");
    // One term is x * cos, the other rotate_half(x) * sin, either way round.
    std::pair<Value, Value> orders[] = {{op.getLhs(), op.getRhs()},
                                        {op.getRhs(), op.getLhs()}};
    for (auto [direct, rotated] : orders) {
      auto cosProduct = direct.getDefiningOp<MulOp>();
      auto sinProduct = rotated.getDefiningOp<MulOp>();
      if (!cosProduct || !sinProduct)
        continue;
      std::pair<Value, Value> sinOrders[] = {
          {sinProduct.getLhs(), sinProduct.getRhs()},
          {sinProduct.getRhs(), sinProduct.getLhs()}};
      for (auto [rotation, sin] : sinOrders) {
        std::optional<Value> x = matchRotateHalf(rotation);
        if (!x || x->getType() != xType)
          continue;
        Value cos;
        if (cosProduct.getLhs() == *x)
          cos = cosProduct.getRhs();
        else if (cosProduct.getRhs() == *x)
          cos = cosProduct.getLhs();
        else
          continue;
        if (failed(conformTable(rewriter, op.getLoc(), cos, xType, false)) ||
            failed(conformTable(rewriter, op.getLoc(), sin, xType, false)) ||
            !hasEqualHalves(cos) || !hasEqualHalves(sin))
          continue;
        FailureOr<Value> cosHalf =
            conformTable(rewriter, op.getLoc(), cos, xType, true);
        FailureOr<Value> sinHalf =
            conformTable(rewriter, op.getLoc(), sin, xType, true);
        rewriter.replaceOpWithNewOp<RopeOp>(op, xType, *x, *cosHalf, *sinHalf,
                                            UnitAttr());
        return success();
      }
    }
    return rewriter.notifyMatchFailure(op, "not x cos + rotate_half(x) sin");
  }
};

/// `concat(rope(x[..., :r]), x[..., r:])` → `rope(x)`: nn.rope passes the
/// features past its rotary ones through.
struct MergePartialRope : OpRewritePattern<ConcatOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ConcatOp op,
                                PatternRewriter &rewriter) const override {
    auto type = op.getType();
    if (type.getRank() != 4 || op.getAxis() != 3 || op.getInputs().size() != 2)
      return failure();
    auto rope = op.getInputs()[0].getDefiningOp<RopeOp>();
    if (!rope || rope.getInterleaved() || !rope->hasOneUse())
      return failure();
    auto rotary = matchLastAxisSlice(rope.getInput());
    auto pass = matchLastAxisSlice(op.getInputs()[1]);
    if (!rotary || !pass)
      return failure();
    auto [x, rotaryStart, rotaryLimit] = *rotary;
    auto [x2, passStart, passLimit] = *pass;
    if (x != x2 || x.getType() != type || rotaryStart != 0 ||
        passStart != rotaryLimit || passLimit != type.getDimSize(3))
      return failure();
    rewriter.replaceOpWithNewOp<RopeOp>(op, type, x, rope.getCos(),
                                        rope.getSin(), UnitAttr());
    return success();
  }
};

} // namespace

void nn::populateRaiseRopePatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseRope, MergePartialRope>(patterns.getContext());
}
