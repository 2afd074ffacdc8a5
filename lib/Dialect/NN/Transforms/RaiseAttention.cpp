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
//   s = cap * tanh(s / cap)      Gemma2's softcap, or none
//   s = s + mask | where(m, s, -big)   any number of masks
//   p = softmax(s, axis = -1)
//   p = where(isnan(p), 0, p)    torch's sdpa lowering only
//   o = matmul(p, v)
//
// on [b, h, s, d] operands, or [b * h, s, d] ones (MultiheadAttention).
// The pattern is rooted at the last matmul and walks up to the first one,
// collecting the scale and the masks. A constant mask with the causal
// pattern becomes `causal`, one with a sliding window's `causal` and
// `window`; the others become the `mask` operand. Key and
// value heads repeated for grouped-query attention (HF's repeat_kv) are
// un-repeated, since nn.attention reads them grouped; the dynamo exporter's
// key transpose through [b * h, s, d] is lifted back to rank 4 first.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "RaiseUtils.h"

#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>

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
  /// Gemma2's tanh capping of the scaled scores; 0 for none.
  double softcap = 0.0;
};

/// `c * tanh(x / c)` (or `x * (1 / c)` inside): {x, c}.
std::optional<std::pair<Value, double>> matchSoftcap(Value value) {
  auto outer = matchScalarOperand<MulOp>(value);
  if (!outer || !(outer->second > 0.0) || !std::isfinite(outer->second))
    return std::nullopt;
  auto tanh = outer->first.getDefiningOp<TanhOp>();
  if (!tanh)
    return std::nullopt;
  double cap = outer->second, inverse;
  Value inner;
  if (auto quotient =
          matchScalarOperand<DivOp>(tanh.getInput(), /*commutative=*/false)) {
    inner = quotient->first;
    inverse = 1.0 / quotient->second;
  } else if (auto product = matchScalarOperand<MulOp>(tanh.getInput())) {
    inner = product->first;
    inverse = product->second;
  } else {
    return std::nullopt;
  }
  // The two constants are the same cap, up to the rounding of 1 / c.
  if (std::fabs(inverse * cap - 1.0) > 1e-6)
    return std::nullopt;
  return std::make_pair(inner, cap);
}

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
      // baddbmm's beta: MultiheadAttention multiplies its mask by 1.
      if (auto unit = matchScalarOperand<MulOp>(mask);
          unit && unit->second == 1.0)
        mask = unit->first;
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
  // The cap applies to the scaled scores (scales above it fold into the
  // scale) and before every mask (none may come above it).
  if (std::optional<std::pair<Value, double>> cap = matchSoftcap(value)) {
    if (scaled)
      return failure();
    FailureOr<Scores> scores = peelScores(cap->first, true, depth + 1);
    if (failed(scores) || scores->softcap != 0.0)
      return failure();
    scores->softcap = cap->second;
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

/// The elements of `mask` when it is a constant of `sq` query rows and
/// `skv` key columns (after any leading dimensions); none otherwise.
std::optional<std::vector<double>> patternElements(const MaskTerm &mask,
                                                   int64_t sq, int64_t skv) {
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(mask.value.getType()).getShape();
  if (shape.size() < 2 || shape[shape.size() - 2] != sq || shape.back() != skv)
    return std::nullopt;
  return readConstantView(mask.value);
}

/// Whether `elements` (of `mask`) keep exactly the keys of causal attention
/// with a sliding `window` (0: none) in every leading slice: query `i`
/// keeps key `j` iff `0 <= i + skv - sq - j` (and `< window`). A float mask
/// keeps with 0 and hides with at most `hiddenAtMost`.
bool followsCausalPattern(const MaskTerm &mask, ArrayRef<double> elements,
                          int64_t sq, int64_t skv, int64_t window,
                          double hiddenAtMost) {
  for (auto [index, element] : llvm::enumerate(elements)) {
    int64_t i = static_cast<int64_t>(index);
    int64_t distance = (i / skv) % sq + skv - sq - i % skv;
    bool keep = distance >= 0 && (window == 0 || distance < window);
    if (mask.isBool) {
      if ((element != 0.0) != (keep != mask.isInverted))
        return false;
    } else if (keep ? element != 0.0 : !(element <= hiddenAtMost)) {
      return false;
    }
  }
  return true;
}

/// Whether `mask` is a constant holding the causal pattern of
/// nn.attention's `causal` for `sq` queries and `skv` keys: query `i` keeps
/// key `j` iff `j <= i + skv - sq`, in every leading slice.
bool isCausalMask(const MaskTerm &mask, int64_t sq, int64_t skv) {
  std::optional<std::vector<double>> elements = patternElements(mask, sq, skv);
  return elements &&
         followsCausalPattern(mask, *elements, sq, skv, 0, kMaskedScore);
}

/// The window w of `mask` when it is a constant holding the pattern of
/// nn.attention's `causal` with `window` w for `sq` queries and `skv` keys
/// (query `i` keeps key `j` iff `0 <= i + skv - sq - j < w`, in every
/// leading slice), with w < skv (a wider window is plain causal); none
/// otherwise. A float mask must hide with -inf (see the caller).
std::optional<int64_t> windowOfMask(const MaskTerm &mask, int64_t sq,
                                    int64_t skv) {
  std::optional<std::vector<double>> elements = patternElements(mask, sq, skv);
  if (!elements || elements->empty() || skv < 2)
    return std::nullopt;
  auto kept = [&](double element) {
    return mask.isBool ? (element != 0.0) != mask.isInverted : element == 0.0;
  };
  // The last row keeps keys [skv - w, skv): its first kept key gives w.
  int64_t last = int64_t(elements->size()) - skv, first = 0;
  while (first < skv && !kept((*elements)[size_t(last + first)]))
    ++first;
  int64_t window = skv - first;
  if (window <= 0 || window >= skv ||
      !followsCausalPattern(mask, *elements, sq, skv, window,
                            -std::numeric_limits<double>::infinity()))
    return std::nullopt;
  return window;
}

/// What determines the elements of a constant view (readConstantView's
/// chain of reshapes, broadcasts and slices down to a constant): each op's
/// name, attributes (the constant's value among them) and result type, all
/// uniqued by the context and so compared by address; none for a value
/// that is not such a view.
std::optional<std::vector<const void *>> viewFingerprint(Value value) {
  std::vector<const void *> key;
  for (int depth = 0; depth < 8; ++depth) {
    Operation *op = value.getDefiningOp();
    if (!op)
      return std::nullopt;
    key.push_back(op->getName().getAsOpaquePointer());
    key.push_back(op->getAttrDictionary().getAsOpaquePointer());
    key.push_back(value.getType().getAsOpaquePointer());
    if (isa<ConstantOp>(op))
      return key;
    if (!isa<ReshapeOp, BroadcastToOp, SliceOp>(op))
      return std::nullopt;
    value = op->getOperand(0);
  }
  return std::nullopt;
}

/// isCausalMask's and windowOfMask's answers by the mask's fingerprint:
/// every layer of a model shares one mask (16M elements at a sequence of
/// 4096), read once.
class CausalMaskCache {
public:
  bool isCausal(const MaskTerm &mask, int64_t sq, int64_t skv) {
    return lookup(causal, mask, sq, skv,
                  [&] { return int64_t(isCausalMask(mask, sq, skv)); }) != 0;
  }
  /// windowOfMask's answer.
  std::optional<int64_t> window(const MaskTerm &mask, int64_t sq, int64_t skv) {
    int64_t w = lookup(windows, mask, sq, skv,
                       [&] { return windowOfMask(mask, sq, skv).value_or(0); });
    return w ? std::optional<int64_t>(w) : std::nullopt;
  }

private:
  using Key = std::pair<std::vector<const void *>, std::array<int64_t, 4>>;
  int64_t lookup(std::map<Key, int64_t> &answers, const MaskTerm &mask,
                 int64_t sq, int64_t skv, function_ref<int64_t()> compute) {
    std::optional<std::vector<const void *>> view = viewFingerprint(mask.value);
    if (!view)
      return compute();
    Key key{std::move(*view), {sq, skv, mask.isBool, mask.isInverted}};
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (auto found = answers.find(key); found != answers.end())
        return found->second;
    }
    int64_t answer = compute();
    std::lock_guard<std::mutex> lock(mutex);
    answers.emplace(std::move(key), answer);
    return answer;
  }

  std::mutex mutex;
  std::map<Key, int64_t> causal, windows;
};

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

/// `p` when `probs` is `where(isnan(p), 0, p)`: torch's lowering of
/// scaled_dot_product_attention zeroes the NaN rows softmax gives a query
/// that sees no key. IsNaN imports as `compare ne, p, p`; `not(compare eq,
/// p, p)` is the same. The guard's ops are appended to `guard`.
std::optional<Value> matchNanGuard(Value probs,
                                   SmallVectorImpl<Operation *> &guard) {
  auto where = probs.getDefiningOp<WhereOp>();
  if (!where || where.getOnFalse().getType() != probs.getType())
    return std::nullopt;
  Value p = where.getOnFalse();
  std::optional<double> fill = getUniformConstant(where.getOnTrue());
  if (!fill || *fill != 0.0)
    return std::nullopt;
  auto selfCompare = [&](Value v, CompareDirection direction) {
    auto compare = v.getDefiningOp<CompareOp>();
    return compare && compare.getDirection() == direction &&
                   compare.getLhs() == p && compare.getRhs() == p
               ? compare
               : CompareOp();
  };
  SmallVector<Operation *> ops = {where};
  Value condition = where.getCondition();
  if (CompareOp ne = selfCompare(condition, CompareDirection::NE)) {
    ops.push_back(ne);
  } else if (auto negation = condition.getDefiningOp<NotOp>()) {
    CompareOp eq = selfCompare(negation.getInput(), CompareDirection::EQ);
    if (!eq)
      return std::nullopt;
    ops.append({negation, eq});
  } else {
    return std::nullopt;
  }
  guard.append(ops);
  return p;
}

/// Whether every user of every result of `ops` is in `allowed`: the chain
/// between the softmax and the product dies with the rewrite.
bool usedOnlyWithin(ArrayRef<Operation *> ops, ArrayRef<Operation *> allowed) {
  return llvm::all_of(ops, [&](Operation *op) {
    return llvm::all_of(op->getUsers(), [&](Operation *user) {
      return llvm::is_contained(allowed, user);
    });
  });
}

/// The batch and head counts `[b, h]` of a rank-3 attention whose leading
/// dimension `n = b * h` merges both (torch's MultiheadAttention works on
/// `[b * h, s, d]`). Read off the reshape that merged them: walking up from
/// `q` through transposes to a reshape `[..., b, h * d, ...]` →
/// `[..., b * h, d, ...]`. `[1, n]` when no such reshape is found: still
/// correct, only the heads are not told apart from the batch.
std::pair<int64_t, int64_t> inferBatchAndHeads(Value q) {
  int64_t n = cast<RankedTensorType>(q.getType()).getDimSize(0);
  Value value = q;
  int64_t dim = 0;
  for (unsigned depth = 0; depth < 8; ++depth) {
    if (auto transpose = value.getDefiningOp<TransposeOp>()) {
      dim = transpose.getPermutation()[dim];
      value = transpose.getInput();
      continue;
    }
    double unused = 1.0;
    if (Value stripped = stripScalarFactors(value, unused); stripped != value) {
      value = stripped;
      continue;
    }
    auto reshape = value.getDefiningOp<ReshapeOp>();
    if (!reshape)
      break;
    ArrayRef<int64_t> in = reshape.getInput().getType().getShape();
    ArrayRef<int64_t> out = reshape.getType().getShape();
    if (dim + 1 >= static_cast<int64_t>(out.size()))
      break;
    int64_t before = 1;
    for (int64_t d = 0; d < dim; ++d)
      before *= out[d];
    // The input dimension starting where the merged one starts.
    int64_t prefix = 1;
    size_t i = 0;
    while (i < in.size() && prefix < before)
      prefix *= in[i++];
    if (prefix != before || i + 1 >= in.size())
      break;
    int64_t b = in[i], headSize = out[dim + 1];
    if (b > 0 && n % b == 0 && in[i + 1] == (n / b) * headSize)
      return {b, n / b};
    break;
  }
  return {1, n};
}

/// `value` reshaped to `shape` (itself when it has that shape already).
Value reshapeTo(PatternRewriter &rewriter, Location loc, Value value,
                ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getShape() == shape)
    return value;
  return ReshapeOp::create(rewriter, loc, type.clone(shape), value);
}

/// A float mask `where(m, 0, -inf)` (or `where(m, -inf, 0)`) is the boolean
/// mask `m` (or `not m`) exactly: adding 0 keeps a score, adding -inf drops
/// it. torch's sdpa lowering writes a boolean attn_mask this way. A finite
/// fill (finfo.min) stays a float mask: for a query that sees no key it
/// gives the average of the values, not zeros.
std::optional<MaskTerm> asBoolMask(const MaskTerm &term) {
  if (term.isBool)
    return std::nullopt;
  auto where = term.value.getDefiningOp<WhereOp>();
  if (!where)
    return std::nullopt;
  std::optional<double> onTrue = getUniformConstant(where.getOnTrue());
  std::optional<double> onFalse = getUniformConstant(where.getOnFalse());
  if (!onTrue || !onFalse)
    return std::nullopt;
  auto isNegInf = [](double x) { return std::isinf(x) && x < 0.0; };
  Value condition = where.getCondition();
  // The fills may broadcast the condition; the mask keeps the shape of
  // the where only then.
  if (cast<RankedTensorType>(condition.getType()).getShape() !=
      where.getType().getShape())
    return std::nullopt;
  if (*onTrue == 0.0 && isNegInf(*onFalse))
    return MaskTerm{condition, true, false};
  if (isNegInf(*onTrue) && *onFalse == 0.0)
    return MaskTerm{condition, true, true};
  return std::nullopt;
}

/// Splits a boolean mask `and(a, b)` into its terms, so that a constant
/// causal term among them becomes `causal`.
void splitConjunction(const MaskTerm &term, SmallVectorImpl<MaskTerm> &out,
                      unsigned depth = 0) {
  auto conjunction = term.value.getDefiningOp<AndOp>();
  if (!term.isBool || term.isInverted || !conjunction || depth > 8) {
    out.push_back(term);
    return;
  }
  splitConjunction({conjunction.getLhs(), true, false}, out, depth + 1);
  splitConjunction({conjunction.getRhs(), true, false}, out, depth + 1);
}

/// Attention's masks sorted out: a constant causal pattern is `causal`, a
/// sliding window's `causal` with `window`, the rest the mask operand.
struct MaskParts {
  bool causal = false;
  std::optional<int64_t> window;
  SmallVector<MaskTerm> masks;
};

/// Splits `given` (the masks applied to [.., sq, skv] scores) into its
/// terms (a float mask of -inf as a boolean one, conjunctions as their
/// operands) and sorts them (MaskParts). A window comes only from a
/// boolean or -inf mask: a window's float mask of finfo.min, as Gemma2's
/// eager export writes, gives a row whose window is all padding the mean
/// of every value, which only the mask itself reproduces.
MaskParts splitMasks(ArrayRef<MaskTerm> given, int64_t sq, int64_t skv,
                     CausalMaskCache &cache) {
  SmallVector<MaskTerm> terms;
  for (const MaskTerm &mask : given)
    splitConjunction(asBoolMask(mask).value_or(mask), terms);
  MaskParts parts;
  for (const MaskTerm &mask : terms) {
    if (cache.isCausal(mask, sq, skv)) {
      parts.causal = true;
      continue;
    }
    if (!parts.window && (parts.window = cache.window(mask, sq, skv))) {
      parts.causal = true;
      continue;
    }
    parts.masks.push_back(mask);
  }
  return parts;
}

/// The one mask operand of `masks` (all boolean or all float): their
/// conjunction or sum; null for none.
Value combineMasks(PatternRewriter &rewriter, Location loc,
                   ArrayRef<MaskTerm> masks) {
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
  return mask;
}

/// `reshape(transpose(reshape(x) : [n, ...], p) : [n, ...]) : [l..., ...]`
/// with `n = prod(l)` and `p[0] = 0` is `transpose(reshape(x) : [l..., ...])`
/// with `p` shifted past `l`. The dynamo exporter transposes keys as
/// `[b * h, s, d]` between two reshapes (the inner one may merge repeated
/// key/value heads, `[b, hkv, n, s, d]`); with the leading dimensions kept,
/// the transpose composes with the others and repeat_kv shows again.
struct MergedTranspose {
  Value source;
  SmallVector<int64_t> splitShape, permutation;
};

std::optional<MergedTranspose> matchMergedTranspose(Value value) {
  auto op = value.getDefiningOp<ReshapeOp>();
  if (!op)
    return std::nullopt;
  auto transpose = op.getInput().getDefiningOp<TransposeOp>();
  if (!transpose || !transpose->hasOneUse())
    return std::nullopt;
  auto merge = transpose.getInput().getDefiningOp<ReshapeOp>();
  if (!merge)
    return std::nullopt;
  ArrayRef<int64_t> perm = transpose.getPermutation();
  ArrayRef<int64_t> merged = transpose.getType().getShape(); // [n, t...]
  ArrayRef<int64_t> out = op.getType().getShape();           // [l..., t...]
  ArrayRef<int64_t> inner = merge.getType().getShape();      // [n, r...]
  ArrayRef<int64_t> source = merge.getInput().getType().getShape();
  size_t tail = merged.size() - 1;
  if (perm.empty() || perm[0] != 0 || out.size() <= tail + 1 ||
      out.take_back(tail) != merged.drop_front())
    return std::nullopt;
  // The inner reshape only merges leading dimensions into n.
  if (source.size() < tail + 1 || source.take_back(tail) != inner.drop_front())
    return std::nullopt;
  ArrayRef<int64_t> leading = out.drop_back(tail);
  int64_t product = 1;
  for (int64_t l : leading)
    product *= l;
  if (product != merged[0])
    return std::nullopt;
  MergedTranspose lifted{merge.getInput(), SmallVector<int64_t>(leading), {}};
  llvm::append_range(lifted.splitShape, inner.drop_front());
  for (size_t d = 0; d < leading.size(); ++d)
    lifted.permutation.push_back(static_cast<int64_t>(d));
  for (int64_t p : perm.drop_front())
    lifted.permutation.push_back(p - 1 + static_cast<int64_t>(leading.size()));
  return lifted;
}

struct LiftMergedTranspose : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    std::optional<MergedTranspose> lifted = matchMergedTranspose(op);
    if (!lifted)
      return failure();
    Value split =
        reshapeTo(rewriter, op.getLoc(), lifted->source, lifted->splitShape);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(), split,
                                             lifted->permutation);
    return success();
  }
};

/// BLOOM's scores are computed on heads merged into the batch
/// (`baddbmm(alibi, q, kT)` on `[b * h, s, d]`), then split to
/// `[b, h, s, s]` for the mask and the softmax, and merged again for the
/// product with the values. The two patterns below lift the merged parts to
/// rank 4, where RaiseAttention sees one chain (the ALiBi bias becomes a
/// per-head float mask `[b, h, 1, s]`):
///
/// - SplitBeforeScores: `reshape([n, s, t] → [b, h, s, t])` of a product,
///   a transpose of the last two dimensions, or a sum, product or quotient
///   of them (n = b * h) is the same op of its operands split likewise;
/// - SplitBeforeValues: `matmul(reshape(softmax : [b, h, s, t] → [n, s,
///   t]), v : [n, t, d])` is the product of the softmax and `v` split,
///   merged after.
///
/// `n`'s split of `value` into `[b, h, ...]`: a rank-3 operand whose first
/// dimension is n, or 1 (`[1, 1, ...]`); a lower rank broadcasts as it is.
std::optional<Value> splitMergedBatch(PatternRewriter &rewriter, Location loc,
                                      Value value, int64_t b, int64_t h) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() < 3)
    return value;
  if (type.getRank() != 3)
    return std::nullopt;
  int64_t lead = type.getDimSize(0);
  if (lead != b * h && lead != 1)
    return std::nullopt;
  SmallVector<int64_t> shape = {lead == 1 ? 1 : b, lead == 1 ? 1 : h};
  llvm::append_range(shape, type.getShape().drop_front());
  return reshapeTo(rewriter, loc, value, shape);
}

struct SplitBeforeScores : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> in = op.getInput().getType().getShape(),
                      out = op.getType().getShape();
    if (in.size() != 3 || out.size() != 4 || out[0] * out[1] != in[0] ||
        out.drop_front(2) != in.drop_front() || out[1] == 1)
      return failure();
    Operation *def = op.getInput().getDefiningOp();
    if (!def || !def->hasOneUse())
      return failure();
    int64_t b = out[0], h = out[1];
    Location loc = def->getLoc();
    auto split = [&](Value v) {
      return splitMergedBatch(rewriter, loc, v, b, h);
    };
    if (auto matmul = dyn_cast<MatmulOp>(def)) {
      if (matmul.getBias() || matmul.getLhs().getType().getRank() != 3)
        return failure();
      // The product with the values stays as the rank-3 raising expects
      // it (MultiheadAttention's [b * h, s, d] blocks).
      SmallVector<Operation *> guard;
      Value probs = matmul.getLhs();
      if (std::optional<Value> guarded = matchNanGuard(probs, guard))
        probs = *guarded;
      if (auto cast = probs.getDefiningOp<CastOp>())
        probs = cast.getInput();
      if (probs.getDefiningOp<SoftmaxOp>())
        return failure();
      std::optional<Value> lhs = split(matmul.getLhs()),
                           rhs = split(matmul.getRhs());
      if (!lhs || !rhs || (*lhs).getType() == matmul.getLhs().getType())
        return failure();
      rewriter.replaceOpWithNewOp<MatmulOp>(op, op.getType(), *lhs, *rhs,
                                            Value());
      return success();
    }
    if (auto transpose = dyn_cast<TransposeOp>(def)) {
      if (transpose.getPermutation() != ArrayRef<int64_t>{0, 2, 1})
        return failure();
      std::optional<Value> input = split(transpose.getInput());
      if (!input)
        return failure();
      rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(), *input,
                                               ArrayRef<int64_t>{0, 1, 3, 2});
      return success();
    }
    if (!isa<AddOp, MulOp, DivOp>(def))
      return failure();
    // One operand is the merged chain (a product, or a sum or scaling of
    // one); the other a bias or a scalar.
    Value lhs = def->getOperand(0), rhs = def->getOperand(1);
    auto isScores = [&](Value v) {
      return v.getType() == op.getInput().getType() &&
             isa_and_present<MatmulOp, AddOp, MulOp, DivOp>(v.getDefiningOp());
    };
    if (!isScores(lhs) && !isScores(rhs))
      return failure();
    std::optional<Value> l = split(lhs), r = split(rhs);
    if (!l || !r)
      return failure();
    OperationState state(loc, def->getName());
    state.addOperands({*l, *r});
    state.addTypes(op.getType());
    state.addAttributes(def->getAttrs());
    rewriter.replaceOp(op, rewriter.create(state)->getResults());
    return success();
  }
};

struct SplitBeforeValues : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    auto merge = op.getLhs().getDefiningOp<ReshapeOp>();
    if (op.getBias() || !merge || op.getType().getRank() != 3)
      return failure();
    auto softmax = merge.getInput().getDefiningOp<SoftmaxOp>();
    ArrayRef<int64_t> in = merge.getInput().getType().getShape(),
                      out = merge.getType().getShape();
    if (!softmax || in.size() != 4 || in[0] * in[1] != out[0] ||
        in.drop_front(2) != out.drop_front())
      return failure();
    std::optional<Value> value =
        splitMergedBatch(rewriter, op.getLoc(), op.getRhs(), in[0], in[1]);
    if (!value || (*value).getType() == op.getRhs().getType())
      return failure();
    auto type = cast<RankedTensorType>(op.getType());
    Value product = MatmulOp::create(
        rewriter, op.getLoc(),
        type.clone({in[0], in[1], type.getDimSize(1), type.getDimSize(2)}),
        merge.getInput(), *value, Value());
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), product);
    return success();
  }
};

/// `matmul(softmax(scale * q kT + mask), v)` → `nn.attention`, on
/// `[b, h, s, d]` operands, or on `[b * h, s, d]` ones (reshaped to rank 4
/// around the attention).
struct RaiseAttention : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  /// Shared by the functions a pass runs on in parallel.
  mutable CausalMaskCache causalMasks;

  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    int64_t rank = static_cast<int64_t>(op.getType().getRank());
    if (op.getBias() || (rank != 3 && rank != 4))
      return rewriter.notifyMatchFailure(op, "not a rank-3 or rank-4 matmul");

    // Between the softmax and the product: torch's NaN guard, and for fp16
    // models a cast back from the f32 softmax: cast(softmax(cast(s))).
    SmallVector<Operation *> chain;
    Value probs = op.getLhs();
    if (std::optional<Value> guarded = matchNanGuard(probs, chain))
      probs = *guarded;
    auto outerCast = probs.getDefiningOp<CastOp>();
    if (outerCast) {
      chain.push_back(outerCast);
      probs = outerCast.getInput();
      if (std::optional<Value> guarded = matchNanGuard(probs, chain))
        probs = *guarded;
    }
    auto softmax = probs.getDefiningOp<SoftmaxOp>();
    if (!softmax || static_cast<int64_t>(softmax.getAxis()) != rank - 1)
      return rewriter.notifyMatchFailure(
          op, "lhs is not a softmax over the last axis");
    chain.push_back(softmax);
    SmallVector<Operation *> allowed(chain);
    allowed.push_back(op);
    if (!usedOnlyWithin(chain, allowed))
      return rewriter.notifyMatchFailure(op,
                                         "the probabilities have other uses");
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
    // Repeated heads show only once LiftMergedTranspose has run.
    if (matchMergedTranspose(query) || matchMergedTranspose(keySource) ||
        matchMergedTranspose(value))
      return rewriter.notifyMatchFailure(op,
                                         "a merged transpose is not lifted");

    // q: [b, h, sq, d], kT: [b, h, d, skv], v: [b, h, skv, dv] (or the
    // same without h), without batch broadcasting, which nn.attention does
    // not do.
    auto shapeOf = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getShape();
    };
    size_t lead = rank - 2;                // the batch (and head) dimensions
    ArrayRef<int64_t> s = shapeOf(logits); // [b, h, sq, skv]
    ArrayRef<int64_t> q = shapeOf(query),
                      kT = shapeOf(scores->product.getRhs()),
                      v = shapeOf(value);
    if (static_cast<int64_t>(q.size()) != rank ||
        static_cast<int64_t>(kT.size()) != rank ||
        static_cast<int64_t>(v.size()) != rank ||
        q.take_front(lead + 1) != s.take_front(lead + 1) ||
        kT.take_front(lead) != s.take_front(lead) || kT[lead] != q[lead + 1] ||
        kT[lead + 1] != s[lead + 1] ||
        v.take_front(lead) != s.take_front(lead) || v[lead] != s[lead + 1])
      return rewriter.notifyMatchFailure(op, "operand shapes do not line up");
    if (!(scale > 0.0) || !std::isfinite(scale))
      return rewriter.notifyMatchFailure(op, "scale is not positive");

    int64_t sq = s[lead], skv = s[lead + 1];
    MaskParts parts = splitMasks(scores->masks, sq, skv, causalMasks);
    if (llvm::any_of(parts.masks, [&](const MaskTerm &m) {
          return m.isBool != parts.masks.front().isBool;
        }))
      return rewriter.notifyMatchFailure(op, "mixes boolean and float masks");
    bool causal = parts.causal;
    std::optional<int64_t> window = parts.window;

    // kT = transpose(keySource, p) and key = transpose(kT, swap last two).
    SmallVector<int64_t> keyPermutation(kTPermutation);
    std::swap(keyPermutation[lead], keyPermutation[lead + 1]);
    bool keyIsSource = llvm::equal(keyPermutation, llvm::seq<int64_t>(0, rank));
    std::optional<RepeatedHeads> repeatedKey =
        keyIsSource && rank == 4 ? matchRepeatedHeads(keySource) : std::nullopt;
    std::optional<RepeatedHeads> repeatedValue =
        rank == 4 ? matchRepeatedHeads(value) : std::nullopt;
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

    Value mask = combineMasks(rewriter, loc, parts.masks);

    // Rank 3: [n, s, d] with n = b * h becomes [b, h, s, d]; a mask with
    // a leading n is split the same way, one broadcasting there keeps its
    // shape (right-aligned, its leading 1 lands on the heads).
    Type resultType = op.getType();
    if (rank == 3) {
      // Not a structured binding: C++17 lambdas cannot capture those.
      std::pair<int64_t, int64_t> batchAndHeads = inferBatchAndHeads(query);
      int64_t b = batchAndHeads.first, h = batchAndHeads.second;
      auto split = [&](Value x) {
        ArrayRef<int64_t> shape = shapeOf(x);
        return reshapeTo(rewriter, loc, x, {b, h, shape[1], shape[2]});
      };
      query = split(query);
      key = split(key);
      value = split(value);
      if (mask && shapeOf(mask).size() == 3 && shapeOf(mask)[0] != 1)
        mask = split(mask);
      resultType = RankedTensorType::get(
          {b, h, sq, v[2]},
          cast<RankedTensorType>(resultType).getElementType());
    }

    // nn.attention defaults to 1/sqrt(d); any other scale is explicit.
    double defaultScale = 1.0 / std::sqrt(static_cast<double>(q[lead + 1]));
    FloatAttr scaleAttr;
    if (std::fabs(scale - defaultScale) > 1e-6 * defaultScale)
      scaleAttr = rewriter.getF32FloatAttr(scale);
    UnitAttr causalAttr = causal ? rewriter.getUnitAttr() : UnitAttr();
    IntegerAttr windowAttr =
        window ? rewriter.getI64IntegerAttr(*window) : IntegerAttr();
    FloatAttr softcapAttr = scores->softcap > 0.0
                                ? rewriter.getF32FloatAttr(scores->softcap)
                                : FloatAttr();
    if (rank == 4) {
      rewriter.replaceOpWithNewOp<AttentionOp>(
          op, resultType, query, key, value, mask, causalAttr, scaleAttr,
          softcapAttr, windowAttr);
      return success();
    }
    Value attention =
        AttentionOp::create(rewriter, loc, resultType, query, key, value, mask,
                            causalAttr, scaleAttr, softcapAttr, windowAttr);
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), attention);
    return success();
  }
};

/// An nn.attention imported with its causal or sliding-window pattern in
/// the mask (ONNX's Attention, which the dynamo exporter writes at opset
/// 23, takes `and(padding, causal)`): the pattern becomes `causal` (and
/// `window`), the rest stays the mask, so that flash and ring attention
/// skip the blocks the pattern hides.
struct AttentionMaskToAttributes : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    Value given = op.getMask();
    if (op.getCausal() || !given)
      return rewriter.notifyMatchFailure(op, "causal already, or no mask");
    MaskTerm term{
        given,
        cast<RankedTensorType>(given.getType()).getElementType().isInteger(1),
        false};
    int64_t sq = op.getQuery().getType().getDimSize(2);
    int64_t skv = op.getKey().getType().getDimSize(2);
    MaskParts parts = splitMasks({term}, sq, skv, causalMasks);
    if (!parts.causal)
      return rewriter.notifyMatchFailure(op, "no causal pattern in the mask");
    if (llvm::any_of(parts.masks, [&](const MaskTerm &m) {
          return m.isBool != parts.masks.front().isBool;
        }))
      return rewriter.notifyMatchFailure(op, "mixes boolean and float masks");
    Value mask = combineMasks(rewriter, op.getLoc(), parts.masks);
    rewriter.replaceOpWithNewOp<AttentionOp>(
        op, op.getType(), op.getQuery(), op.getKey(), op.getValue(), mask,
        rewriter.getUnitAttr(), op.getScaleAttr(), op.getSoftcapAttr(),
        parts.window ? rewriter.getI64IntegerAttr(*parts.window)
                     : IntegerAttr());
    return success();
  }

  mutable CausalMaskCache causalMasks;
};

} // namespace

void nn::populateRaiseAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseAttention, LiftMergedTranspose, SplitBeforeScores,
               SplitBeforeValues, AttentionMaskToAttributes>(
      patterns.getContext());
}
