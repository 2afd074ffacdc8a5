//===- RaiseMoe.cpp - raise transformers' batched experts to nn.moe -------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// transformers' "batched_mm" experts (Mixtral, Qwen2-MoE, Qwen3-MoE), as the
// legacy and dynamo exporters write them, compute each token's k routed
// experts by gathering the experts' weights per (token, slot) and
// multiplying in a batch of T * k products:
//
//   idx = reshape(ids [T, k]) -> [T*k]      (dynamo: wrapped and checked)
//   w1  = gather(fc1 [E, F1, H], idx)       (dynamo: through [E, F1*H])
//   h   = matmul(w1, repeat(x [T, H], k) [T*k, H, 1]) -> [T*k, F1]
//   a   = silu(h[:, :F]) * h[:, F:]          (or one activation of h)
//   y   = matmul(gather(fc2 [E, H, F], idx), a [T*k, F, 1]) -> [T*k, H]
//   out = sum_j reshape(y * reshape(weights [T, k]) [T*k, 1]) [T, k, H]
//
// which is nn.moe on the same weights, without the gathers' copies of each
// token's expert weights.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Raise.h"

#include "RaiseUtils.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// `v` with reshapes stripped.
Value throughReshapes(Value v) {
  while (auto reshape = v.getDefiningOp<ReshapeOp>())
    v = reshape.getInput();
  return v;
}

/// The ids a gather index was computed from, through the dynamo
/// exporter's index normalization for `experts` rows (a negative index
/// wrapped by adding the row count, then an out-of-range one replaced) and
/// reshapes. The router's top k writes ids in [0, E), on which both steps
/// are the identity.
Value peelIndexNormalization(Value v, int64_t experts) {
  while (true) {
    v = throughReshapes(v);
    auto where = v.getDefiningOp<WhereOp>();
    if (!where)
      return v;
    Value chosen = where.getOnTrue(), other = where.getOnFalse();
    // where(0 <= a < E, a, constant) -> a.
    if (auto both = where.getCondition().getDefiningOp<AndOp>();
        both && raise::getScalarConstant(other)) {
      auto bound = [&](Value c, CompareDirection direction, double limit) {
        auto compare = c.getDefiningOp<CompareOp>();
        std::optional<double> value =
            compare ? raise::getScalarConstant(compare.getRhs()) : std::nullopt;
        return compare && compare.getDirection() == direction &&
               compare.getLhs() == chosen && value && *value == limit;
      };
      if ((bound(both.getLhs(), CompareDirection::GE, 0) &&
           bound(both.getRhs(), CompareDirection::LT, experts)) ||
          (bound(both.getRhs(), CompareDirection::GE, 0) &&
           bound(both.getLhs(), CompareDirection::LT, experts))) {
        v = chosen;
        continue;
      }
    }
    // where(a < 0, a + E, a) -> a.
    auto negative = where.getCondition().getDefiningOp<CompareOp>();
    auto shifted = raise::matchScalarOperand<AddOp>(chosen);
    if (negative && negative.getDirection() == CompareDirection::LT &&
        negative.getLhs() == other &&
        raise::getScalarConstant(negative.getRhs()) == 0.0 && shifted &&
        shifted->first == other && shifted->second == double(experts)) {
      v = other;
      continue;
    }
    return v;
  }
}

/// The stacked expert weight `[E, out, in]` and gather index of `v`, the
/// per-slot weights `[T*k, out, in]`: a gather of its rows, directly or
/// through its `[E, out * in]` view.
std::optional<std::pair<Value, Value>> matchGatheredWeight(Value v) {
  v = throughReshapes(v);
  auto gather = v.getDefiningOp<GatherOp>();
  if (!gather || gather.getAxis() != 0 ||
      shapeOf(gather.getIndices()).size() != 1)
    return std::nullopt;
  Value stacked = throughReshapes(gather.getData());
  if (shapeOf(stacked).size() != 3)
    return std::nullopt;
  return std::make_pair(stacked, gather.getIndices());
}

/// Whether `v` ([T*k, H, 1] or [T*k, H]) holds row t of `x` at rows
/// t*k .. t*k + k - 1: a reshape of a broadcast that repeats x's rows k
/// times in place. Sets `x` to the repeated value.
bool matchRepeatedRows(Value v, int64_t tokens, int64_t k, int64_t hidden,
                       Value &x) {
  auto broadcast = throughReshapes(v).getDefiningOp<BroadcastToOp>();
  if (!broadcast)
    return false;
  Value source = throughReshapes(broadcast.getInput());
  ArrayRef<int64_t> in = shapeOf(broadcast.getInput());
  ArrayRef<int64_t> out = shapeOf(broadcast.getResult());
  if (in.size() != out.size() ||
      RankedTensorType(cast<RankedTensorType>(source.getType()))
              .getNumElements() != tokens * hidden)
    return false;
  // Exactly one dimension broadcast, from 1 to k, with T elements before
  // it and H after it.
  int64_t before = 1, after = 1;
  std::optional<size_t> repeated;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == out[d]) {
      (repeated ? after : before) *= in[d];
      continue;
    }
    if (repeated || in[d] != 1 || out[d] != k)
      return false;
    repeated = d;
  }
  if (!repeated || before != tokens || after != hidden)
    return false;
  x = source;
  return true;
}

struct Activation {
  MoeActivation kind;
  /// The fc1 output the activation reads ([T*k, F1]).
  Value input;
};

/// The activation `a` of the fc1 output: `silu(g) * u` with g and u its
/// halves (slices or a split), or one of silu, gelu and relu of it.
std::optional<Activation> matchActivation(Value a, int64_t ffn) {
  if (auto mul = a.getDefiningOp<MulOp>()) {
    // The halves of one [S, 2F] value along dimension 1.
    auto half = [&](Value v, int64_t which) -> Value {
      if (auto slice = v.getDefiningOp<SliceOp>()) {
        ArrayRef<int64_t> shape = shapeOf(slice.getInput());
        if (shape.size() != 2 || shape[1] != 2 * ffn ||
            slice.getStart() != ArrayRef<int64_t>{0, which * ffn} ||
            slice.getLimit() !=
                ArrayRef<int64_t>{shape[0], (which + 1) * ffn} ||
            slice.getStride() != ArrayRef<int64_t>{1, 1})
          return {};
        return slice.getInput();
      }
      if (auto split = v.getDefiningOp<SplitOp>()) {
        if (split.getAxis() != 1 || split->getNumResults() != 2 ||
            cast<OpResult>(v).getResultNumber() != which ||
            shapeOf(split.getInput())[1] != 2 * ffn)
          return {};
        return split.getInput();
      }
      return {};
    };
    std::pair<Value, Value> orders[] = {{mul.getLhs(), mul.getRhs()},
                                        {mul.getRhs(), mul.getLhs()}};
    for (auto [gated, up] : orders) {
      auto silu = gated.getDefiningOp<SiluOp>();
      if (!silu)
        continue;
      Value gate = half(silu.getInput(), 0);
      if (gate && half(up, 1) == gate)
        return Activation{MoeActivation::Swiglu, gate};
    }
    return std::nullopt;
  }
  Operation *def = a.getDefiningOp();
  if (auto silu = dyn_cast_or_null<SiluOp>(def))
    return Activation{MoeActivation::Silu, silu.getInput()};
  if (auto relu = dyn_cast_or_null<ReluOp>(def))
    return Activation{MoeActivation::Relu, relu.getInput()};
  if (auto gelu = dyn_cast_or_null<GeluOp>(def))
    return Activation{gelu.getApproximation() == GeluApproximation::Tanh
                          ? MoeActivation::GeluTanh
                          : MoeActivation::Gelu,
                      gelu.getInput()};
  return std::nullopt;
}

/// The batched experts' weighted sum over the slots, `[T, k, H] -> [T, H]`,
/// to nn.moe.
struct RaiseBatchedExperts : OpRewritePattern<ReduceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReduceOp op,
                                PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> summed = shapeOf(op.getInput());
    if (op.getKind() != ReduceKind::Sum || op.getKeepdims() ||
        op.getAxes() != ArrayRef<int64_t>{1} || summed.size() != 3)
      return rewriter.notifyMatchFailure(op, "not a sum over [T, k, H]'s k");
    int64_t tokens = summed[0], k = summed[1], hidden = summed[2];
    int64_t slots = tokens * k;
    // y * routing weights, [T*k, H] * [T*k, 1].
    auto weighted = throughReshapes(op.getInput()).getDefiningOp<MulOp>();
    if (!weighted ||
        shapeOf(weighted.getResult()) != ArrayRef<int64_t>{slots, hidden})
      return rewriter.notifyMatchFailure(op, "not a sum of weighted rows");
    std::pair<Value, Value> orders[] = {{weighted.getLhs(), weighted.getRhs()},
                                        {weighted.getRhs(), weighted.getLhs()}};
    for (auto [product, routing] : orders) {
      if (shapeOf(routing) != ArrayRef<int64_t>{slots, 1})
        continue;
      auto down = throughReshapes(product).getDefiningOp<MatmulOp>();
      if (!down || down.getBias() ||
          shapeOf(down.getResult()) != ArrayRef<int64_t>{slots, hidden, 1})
        continue;
      auto fc2 = matchGatheredWeight(down.getLhs());
      if (!fc2)
        continue;
      auto [fc2Weight, index] = *fc2;
      ArrayRef<int64_t> fc2Shape = shapeOf(fc2Weight);
      int64_t experts = fc2Shape[0], ffn = fc2Shape[2];
      if (fc2Shape[1] != hidden)
        continue;
      Value activated = throughReshapes(down.getRhs());
      if (shapeOf(activated) != ArrayRef<int64_t>{slots, ffn})
        continue;
      std::optional<Activation> act = matchActivation(activated, ffn);
      if (!act)
        continue;
      auto up = throughReshapes(act->input).getDefiningOp<MatmulOp>();
      if (!up || up.getBias())
        continue;
      auto fc1 = matchGatheredWeight(up.getLhs());
      int64_t fused = act->kind == MoeActivation::Swiglu ? 2 * ffn : ffn;
      if (!fc1 ||
          shapeOf(fc1->first) != ArrayRef<int64_t>{experts, fused, hidden})
        continue;
      // Both gathers index by the same ids (dynamo normalizes the index
      // once per gather).
      Value ids = peelIndexNormalization(index, experts);
      if (peelIndexNormalization(fc1->second, experts) != ids)
        continue;
      Value x;
      if (!matchRepeatedRows(up.getRhs(), tokens, k, hidden, x))
        continue;
      auto idsType = cast<RankedTensorType>(ids.getType());
      Value routingWeights = throughReshapes(routing);
      if (idsType.getNumElements() != slots ||
          cast<RankedTensorType>(routingWeights.getType()).getNumElements() !=
              slots)
        continue;

      Location loc = op.getLoc();
      auto reshapeTo = [&](Value v, ArrayRef<int64_t> shape) -> Value {
        auto type = cast<RankedTensorType>(v.getType());
        if (type.getShape() == shape)
          return v;
        return ReshapeOp::create(rewriter, loc, type.clone(shape), v);
      };
      Value input = reshapeTo(x, {tokens, hidden});
      auto moe = MoeOp::create(
          rewriter, loc, input.getType(), input, reshapeTo(ids, {tokens, k}),
          reshapeTo(routingWeights, {tokens, k}), fc1->first, fc2Weight,
          Value(), Value(), Value(), Value(), act->kind, false, FloatAttr(),
          FloatAttr(), FloatAttr());
      rewriter.replaceOp(op, reshapeTo(moe, shapeOf(op.getResult())));
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not transformers' batched experts");
  }
};

} // namespace

void nn::populateRaiseMoePatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseBatchedExperts>(patterns.getContext());
}
