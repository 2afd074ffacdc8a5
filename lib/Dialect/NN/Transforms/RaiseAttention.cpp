//===- RaiseAttention.cpp - raise softmax(q k^T) v to nn.attention --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// An exported attention block is
//
//   s = matmul(q, kT)            kT = transpose(k) (possibly scaled)
//   s = s / c  or  s * c         the scale, or none
//   s = s + mask | where(m, s, -big)   any number of masks
//   o = matmul(softmax(s, axis = -1), v)
//
// The pattern is rooted at the last matmul and walks up to the first one,
// collecting the scale and the masks. A constant mask with the causal
// pattern becomes `causal`; the others become the `mask` operand. Key and
// value heads repeated for grouped-query attention (HF's repeat_kv) are
// un-repeated, since nn.attention reads them grouped.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "RaiseUtils.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;
using namespace mlir::partita::nn::raise;

namespace {

/// A masked-out score is at most this (-1e4 in older HF code, finfo.min or
/// -inf elsewhere): softmax gives it no weight.
constexpr double kMaskedScore = -1e4;

/// One mask applied to the scores.
struct MaskTerm {
  Value value;
  /// An `i1` mask applied with `where`, rather than a float mask added.
  bool isBool = false;
  /// The `i1` mask is true where scores are masked out: `where(m, -big, s)`.
  bool isInverted = false;
};

/// What the ops between `matmul(q, kT)` and the softmax contribute.
struct Scores {
  MatmulOp product;
  double scale = 1.0;
  SmallVector<MaskTerm> masks;
};

bool isMaskedScore(Value fill) {
  std::optional<double> value = getUniformConstant(fill);
  return value && *value <= kMaskedScore;
}

/// Walks from the softmax input `value` up to `matmul(q, kT)`. Masks must
/// come after any scaling (`scaled`: a scale was seen on the way up): a mask
/// inside the scaling would be scaled too.
FailureOr<Scores> peelScores(Value value, bool scaled, unsigned depth) {
  constexpr unsigned kMaxDepth = 16;
  Operation *op = value.getDefiningOp();
  if (!op || depth > kMaxDepth)
    return failure();
  if (auto product = dyn_cast<MatmulOp>(op)) {
    Scores scores{product, 1.0, {}};
    // A mask [1, ..., 1, skv] added right after the product may already be
    // its bias epilogue (RaiseMatmulBias).
    if (Value bias = product.getBias()) {
      if (scaled)
        return failure();
      scores.masks.push_back({bias});
    }
    return scores;
  }
  if (auto add = dyn_cast<AddOp>(op)) {
    if (scaled)
      return failure();
    std::pair<Value, Value> orders[] = {{add.getLhs(), add.getRhs()},
                                        {add.getRhs(), add.getLhs()}};
    for (auto [chain, mask] : orders) {
      if (chain.getType() != value.getType())
        continue;
      FailureOr<Scores> scores = peelScores(chain, scaled, depth + 1);
      if (failed(scores))
        continue;
      scores->masks.push_back({mask});
      return scores;
    }
    return failure();
  }
  if (auto where = dyn_cast<WhereOp>(op)) {
    if (scaled)
      return failure();
    bool inverted;
    Value chain;
    if (where.getOnTrue().getType() == value.getType() &&
        isMaskedScore(where.getOnFalse())) {
      chain = where.getOnTrue();
      inverted = false;
    } else if (where.getOnFalse().getType() == value.getType() &&
               isMaskedScore(where.getOnTrue())) {
      chain = where.getOnFalse();
      inverted = true;
    } else {
      return failure();
    }
    FailureOr<Scores> scores = peelScores(chain, scaled, depth + 1);
    if (succeeded(scores))
      scores->masks.push_back({where.getCondition(), true, inverted});
    return scores;
  }
  if (auto product = matchScalarOperand<MulOp>(value)) {
    FailureOr<Scores> scores = peelScores(product->first, true, depth + 1);
    if (succeeded(scores))
      scores->scale *= product->second;
    return scores;
  }
  if (auto quotient = matchScalarOperand<DivOp>(value, /*commutative=*/false)) {
    if (quotient->second == 0.0)
      return failure();
    FailureOr<Scores> scores = peelScores(quotient->first, true, depth + 1);
    if (succeeded(scores))
      scores->scale /= quotient->second;
    return scores;
  }
  return failure();
}

/// Strips products and quotients by scalar constants off `value` (exporters
/// may scale q and k by sqrt(scale) each), folding them into `scale`.
Value stripScalarFactors(Value value, double &scale) {
  while (true) {
    if (auto product = matchScalarOperand<MulOp>(value)) {
      scale *= product->second;
      value = product->first;
    } else if (auto quotient =
                   matchScalarOperand<DivOp>(value, /*commutative=*/false);
               quotient && quotient->second != 0.0) {
      scale /= quotient->second;
      value = quotient->first;
    } else {
      return value;
    }
  }
}

/// `kT` as `transpose(source, permutation)` up to scalar factors, which go
/// into `scale`; the permutation is the identity when `kT` is no transpose.
std::pair<Value, SmallVector<int64_t>> stripTransposes(Value kT,
                                                       double &scale) {
  Value source = stripScalarFactors(kT, scale);
  auto permutation = llvm::to_vector(
      llvm::seq<int64_t>(0, cast<RankedTensorType>(kT.getType()).getRank()));
  while (auto transpose = source.getDefiningOp<TransposeOp>()) {
    for (int64_t &p : permutation)
      p = transpose.getPermutation()[p];
    source = stripScalarFactors(transpose.getInput(), scale);
  }
  return {source, permutation};
}

/// The elements of `value` when it is a constant seen through the data
/// movement an importer may leave on a mask (reshape, broadcast_to, slice).
std::optional<std::vector<double>> readConstantView(Value value,
                                                    unsigned depth = 0) {
  constexpr unsigned kMaxDepth = 8;
  constexpr int64_t kMaxElements = int64_t(1) << 24;
  auto type = cast<RankedTensorType>(value.getType());
  if (depth > kMaxDepth || type.getNumElements() > kMaxElements)
    return std::nullopt;
  if (value.getDefiningOp<ConstantOp>())
    return readConstant(value);
  if (auto reshape = value.getDefiningOp<ReshapeOp>())
    return readConstantView(reshape.getInput(), depth + 1);
  // Broadcasts and slices: walk the result's coordinates in row-major order
  // and read the source element each one comes from.
  Value source;
  std::function<int64_t(size_t, int64_t)> sourceCoordinate;
  if (auto broadcast = value.getDefiningOp<BroadcastToOp>()) {
    source = broadcast.getInput();
    ArrayRef<int64_t> in = broadcast.getInput().getType().getShape();
    size_t offset = type.getRank() - in.size();
    sourceCoordinate = [in, offset](size_t d, int64_t coordinate) {
      return in[d - offset] == 1 ? int64_t(0) : coordinate;
    };
  } else if (auto slice = value.getDefiningOp<SliceOp>()) {
    source = slice.getInput();
    ArrayRef<int64_t> start = slice.getStart(), stride = slice.getStride();
    sourceCoordinate = [start, stride](size_t d, int64_t coordinate) {
      return start[d] + coordinate * stride[d];
    };
  } else {
    return std::nullopt;
  }
  std::optional<std::vector<double>> in = readConstantView(source, depth + 1);
  if (!in)
    return std::nullopt;
  ArrayRef<int64_t> inShape =
      cast<RankedTensorType>(source.getType()).getShape();
  SmallVector<int64_t> inStrides(inShape.size(), 1);
  for (int64_t d = static_cast<int64_t>(inShape.size()) - 2; d >= 0; --d)
    inStrides[d] = inStrides[d + 1] * inShape[d + 1];
  ArrayRef<int64_t> shape = type.getShape();
  size_t offset = shape.size() - inShape.size();
  SmallVector<int64_t> coordinates(shape.size(), 0);
  std::vector<double> out;
  out.reserve(type.getNumElements());
  for (int64_t i = 0, e = type.getNumElements(); i < e; ++i) {
    int64_t index = 0;
    for (size_t d = offset; d < shape.size(); ++d)
      index += sourceCoordinate(d, coordinates[d]) * inStrides[d - offset];
    out.push_back((*in)[index]);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++coordinates[d] < shape[d])
        break;
      coordinates[d] = 0;
    }
  }
  return out;
}

/// Whether `mask` is a constant holding the causal pattern of
/// nn.attention's `causal` for `sq` queries and `skv` keys: query `i` keeps
/// key `j` iff `j <= i + skv - sq`, in every leading slice.
bool isCausalMask(const MaskTerm &mask, int64_t sq, int64_t skv) {
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(mask.value.getType()).getShape();
  if (shape.size() < 2 || shape[shape.size() - 2] != sq || shape.back() != skv)
    return false;
  std::optional<std::vector<double>> elements = readConstantView(mask.value);
  if (!elements)
    return false;
  for (auto [index, element] : llvm::enumerate(*elements)) {
    int64_t i = static_cast<int64_t>(index);
    int64_t key = i % skv, query = (i / skv) % sq;
    bool keep = key <= query + skv - sq;
    if (mask.isBool) {
      if ((element != 0.0) != (keep != mask.isInverted))
        return false;
    } else if (keep ? element != 0.0 : !(element <= kMaskedScore)) {
      return false;
    }
  }
  return true;
}

/// Key or value heads repeated for grouped-query attention:
/// `reshape(broadcast_to(r))` with `r: [b, hkv, 1, s, d]` broadcast to
/// `[b, hkv, n, s, d]` and merged to `[b, hkv * n, s, d]`.
struct RepeatedHeads {
  /// `r`, the heads before repetition with a unit dimension inserted.
  Value unitHeads;
  int64_t repeats;
};

std::optional<RepeatedHeads> matchRepeatedHeads(Value value) {
  auto merge = value.getDefiningOp<ReshapeOp>();
  if (!merge)
    return std::nullopt;
  auto broadcast = merge.getInput().getDefiningOp<BroadcastToOp>();
  if (!broadcast)
    return std::nullopt;
  ArrayRef<int64_t> out = merge.getType().getShape();
  ArrayRef<int64_t> repeated = broadcast.getType().getShape();
  ArrayRef<int64_t> unit = broadcast.getInput().getType().getShape();
  if (out.size() != 4 || repeated.size() != 5 || unit.size() != 5)
    return std::nullopt;
  int64_t b = out[0], h = out[1], s = out[2], d = out[3];
  int64_t hkv = unit[1], n = repeated[2];
  if (ArrayRef<int64_t>(unit) != ArrayRef<int64_t>({b, hkv, 1, s, d}) ||
      ArrayRef<int64_t>(repeated) != ArrayRef<int64_t>({b, hkv, n, s, d}) ||
      hkv * n != h)
    return std::nullopt;
  return RepeatedHeads{broadcast.getInput(), n};
}

/// The `[b, hkv, s, d]` heads of `repeated`: the value the exporter
/// unsqueezed, or a reshape dropping the unit dimension.
Value unrepeat(PatternRewriter &rewriter, Location loc,
               const RepeatedHeads &repeated) {
  auto unitType = cast<RankedTensorType>(repeated.unitHeads.getType());
  ArrayRef<int64_t> unit = unitType.getShape();
  auto type = RankedTensorType::get({unit[0], unit[1], unit[3], unit[4]},
                                    unitType.getElementType());
  if (auto unsqueeze = repeated.unitHeads.getDefiningOp<ReshapeOp>();
      unsqueeze && unsqueeze.getInput().getType() == type)
    return unsqueeze.getInput();
  return ReshapeOp::create(rewriter, loc, type, repeated.unitHeads);
}

/// `matmul(softmax(scale * q kT + mask), v)` → `nn.attention`.
struct RaiseAttention : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getBias() || op.getType().getRank() != 4)
      return rewriter.notifyMatchFailure(op, "not a rank-4 matmul");

    // fp16 models run the softmax in f32: cast(softmax(cast(s))).
    Value probs = op.getLhs();
    auto outerCast = probs.getDefiningOp<CastOp>();
    if (outerCast) {
      if (!outerCast->hasOneUse())
        return rewriter.notifyMatchFailure(op, "softmax cast has other uses");
      probs = outerCast.getInput();
    }
    auto softmax = probs.getDefiningOp<SoftmaxOp>();
    if (!softmax || !softmax->hasOneUse() || softmax.getAxis() != 3)
      return rewriter.notifyMatchFailure(
          op, "lhs is not a single-use softmax over the last axis");
    Value logits = softmax.getInput();
    if (outerCast) {
      auto innerCast = logits.getDefiningOp<CastOp>();
      if (!innerCast || innerCast.getInput().getType() != op.getLhs().getType())
        return rewriter.notifyMatchFailure(op, "softmax casts do not pair");
      logits = innerCast.getInput();
    }

    FailureOr<Scores> scores = peelScores(logits, /*scaled=*/false, 0);
    if (failed(scores))
      return rewriter.notifyMatchFailure(op, "softmax input is not q kT");
    double scale = scores->scale;
    Value query = stripScalarFactors(scores->product.getLhs(), scale);
    auto [keySource, kTPermutation] =
        stripTransposes(scores->product.getRhs(), scale);
    Value value = op.getRhs();

    // q: [b, h, sq, d], kT: [b, h, d, skv], v: [b, h, skv, dv], without
    // batch broadcasting, which nn.attention does not do.
    auto shapeOf = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getShape();
    };
    ArrayRef<int64_t> s = shapeOf(logits); // [b, h, sq, skv]
    ArrayRef<int64_t> q = shapeOf(query),
                      kT = shapeOf(scores->product.getRhs()),
                      v = shapeOf(value);
    if (q.size() != 4 || kT.size() != 4 || v.size() != 4 ||
        q.take_front(3) != s.take_front(3) ||
        kT.take_front(2) != s.take_front(2) || kT[2] != q[3] || kT[3] != s[3] ||
        v.take_front(2) != s.take_front(2) || v[2] != s[3])
      return rewriter.notifyMatchFailure(op, "operand shapes do not line up");
    if (!(scale > 0.0) || !std::isfinite(scale))
      return rewriter.notifyMatchFailure(op, "scale is not positive");

    int64_t sq = s[2], skv = s[3];
    bool causal = false;
    SmallVector<MaskTerm> masks;
    for (const MaskTerm &mask : scores->masks) {
      if (isCausalMask(mask, sq, skv))
        causal = true;
      else
        masks.push_back(mask);
    }
    if (llvm::any_of(masks, [&](const MaskTerm &m) {
          return m.isBool != masks.front().isBool;
        }))
      return rewriter.notifyMatchFailure(op, "mixes boolean and float masks");

    // kT = transpose(keySource, p) and key = transpose(kT, [0, 1, 3, 2]).
    SmallVector<int64_t> keyPermutation = {kTPermutation[0], kTPermutation[1],
                                           kTPermutation[3], kTPermutation[2]};
    bool keyIsSource = llvm::equal(keyPermutation, llvm::seq<int64_t>(0, 4));
    std::optional<RepeatedHeads> repeatedKey =
        keyIsSource ? matchRepeatedHeads(keySource) : std::nullopt;
    std::optional<RepeatedHeads> repeatedValue = matchRepeatedHeads(value);
    bool grouped = repeatedKey && repeatedValue &&
                   repeatedKey->repeats == repeatedValue->repeats;

    Location loc = op.getLoc();
    Value key = keySource;
    if (grouped) {
      key = unrepeat(rewriter, loc, *repeatedKey);
      value = unrepeat(rewriter, loc, *repeatedValue);
    } else if (!keyIsSource) {
      auto sourceType = cast<RankedTensorType>(keySource.getType());
      SmallVector<int64_t> keyShape;
      for (int64_t p : keyPermutation)
        keyShape.push_back(sourceType.getDimSize(p));
      key = TransposeOp::create(
          rewriter, loc,
          RankedTensorType::get(keyShape, sourceType.getElementType()),
          keySource, keyPermutation);
    }

    Value mask;
    for (const MaskTerm &term : masks) {
      Value next = term.value;
      if (term.isInverted)
        next = NotOp::create(rewriter, loc, next);
      if (!mask)
        mask = next;
      else if (term.isBool)
        mask = AndOp::create(rewriter, loc, mask, next);
      else
        mask = AddOp::create(rewriter, loc, mask, next);
    }

    // nn.attention defaults to 1/sqrt(d); any other scale is explicit.
    double defaultScale = 1.0 / std::sqrt(static_cast<double>(q[3]));
    FloatAttr scaleAttr;
    if (std::fabs(scale - defaultScale) > 1e-6 * defaultScale)
      scaleAttr = rewriter.getF32FloatAttr(scale);
    rewriter.replaceOpWithNewOp<AttentionOp>(
        op, op.getType(), query, key, value, mask,
        causal ? rewriter.getUnitAttr() : UnitAttr(), scaleAttr);
    return success();
  }
};

} // namespace

void nn::populateRaiseAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseAttention>(patterns.getContext());
}
