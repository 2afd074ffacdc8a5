//===- ExpandMoe.cpp - nn.moe as dense nn ops -----------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "partita/Dialect/NN/IR/NNOps.h"

namespace mlir::partita {
#define GEN_PASS_DEF_EXPANDMOEPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

class MoeExpander {
public:
  explicit MoeExpander(nn::MoeOp op)
      : op(op), b(op), loc(op.getLoc()),
        element(op.getInput().getType().getElementType()),
        experts(op.getNumExperts()),
        tokens(op.getInput().getType().getDimSize(0)),
        hidden(op.getInput().getType().getDimSize(1)), ffn(op.getFfnSize()) {}

  Value run();

private:
  Value scalar(double value) {
    return nn::ConstantOp::create(b, loc,
                                  cast<ElementsAttr>(DenseElementsAttr::get(
                                      RankedTensorType::get({}, element),
                                      b.getFloatAttr(element, value))));
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    auto type = cast<RankedTensorType>(v.getType());
    return nn::ReshapeOp::create(b, loc, type.clone(shape), v);
  }
  /// Every expert's projection of every token: `lhs [1 or E, T, in]` times
  /// `weight [E, out, in]` transposed, plus `bias [E, out]`: `[E, T, out]`.
  Value project(Value lhs, Value weight, Value bias) {
    auto w = cast<RankedTensorType>(weight.getType());
    int64_t out = w.getDimSize(1), in = w.getDimSize(2);
    // The reads of the stacked tensors carry the experts' dimension to the
    // annotation: ep splits it (a training step's mixture is this form).
    UnitAttr mark = b.getUnitAttr();
    auto read = nn::TransposeOp::create(b, loc, w.clone({experts, in, out}),
                                        weight, ArrayRef<int64_t>{0, 2, 1});
    read->setAttr(nn::NNDialect::kExpertsAttrName, mark);
    Value product = nn::MatmulOp::create(
        b, loc, w.clone({experts, tokens, out}), lhs, read, Value());
    if (bias) {
      Value column = reshape(bias, {experts, 1, out});
      column.getDefiningOp()->setAttr(nn::NNDialect::kExpertsAttrName, mark);
      product = nn::AddOp::create(b, loc, product, column);
    }
    return product;
  }
  Value activate(Value h, Value x);

  nn::MoeOp op;
  OpBuilder b;
  Location loc;
  Type element;
  int64_t experts, tokens, hidden, ffn;
};

Value MoeExpander::activate(Value h, Value x) {
  switch (op.getActivation()) {
  case nn::MoeActivation::Relu:
    return nn::ReluOp::create(b, loc, h);
  case nn::MoeActivation::Gelu:
    return nn::GeluOp::create(b, loc, h, nn::GeluApproximation::None);
  case nn::MoeActivation::GeluTanh:
    return nn::GeluOp::create(b, loc, h, nn::GeluApproximation::Tanh);
  case nn::MoeActivation::Silu:
    return nn::SiluOp::create(b, loc, h);
  case nn::MoeActivation::Identity:
    return h;
  case nn::MoeActivation::Swiglu:
    break;
  }
  auto half = RankedTensorType::get({experts, tokens, ffn}, element);
  auto slice = [&](int64_t start, int64_t limit, int64_t stride) -> Value {
    return nn::SliceOp::create(b, loc, half, h, ArrayRef<int64_t>{0, 0, start},
                               ArrayRef<int64_t>{experts, tokens, limit},
                               ArrayRef<int64_t>{1, 1, stride});
  };
  Value gate, up;
  if (op.getFc3()) {
    gate = h;
    up = project(x, op.getFc3(), op.getFc3Bias());
  } else if (op.getInterleaved()) {
    gate = slice(0, 2 * ffn, 2);
    up = slice(1, 2 * ffn, 2);
  } else {
    gate = slice(0, ffn, 1);
    up = slice(ffn, 2 * ffn, 1);
  }
  if (std::optional<APFloat> limit = op.getLimit()) {
    double l = limit->convertToDouble();
    gate = nn::MinOp::create(b, loc, gate, scalar(l));
    up = nn::MaxOp::create(b, loc, nn::MinOp::create(b, loc, up, scalar(l)),
                           scalar(-l));
  }
  double alpha = op.getAlpha() ? op.getAlpha()->convertToDouble() : 1.0;
  double beta = op.getBeta() ? op.getBeta()->convertToDouble() : 0.0;
  Value sigmoid = nn::SigmoidOp::create(
      b, loc, nn::MulOp::create(b, loc, gate, scalar(alpha)));
  return nn::MulOp::create(b, loc, nn::MulOp::create(b, loc, gate, sigmoid),
                           nn::AddOp::create(b, loc, up, scalar(beta)));
}

Value MoeExpander::run() {
  Value x = reshape(op.getInput(), {1, tokens, hidden});
  Value h = project(x, op.getFc1(), op.getFc1Bias());
  Value y = project(activate(h, x), op.getFc2(), op.getFc2Bias());

  // Each token's weight per expert (the sum of its slots that chose it)
  // and whether any slot did, [T, E].
  Value ids = op.getExpertIds();
  auto idType = cast<RankedTensorType>(ids.getType());
  Type index = idType.getElementType();
  SmallVector<APInt> numbers;
  for (int64_t e = 0; e < experts; ++e)
    numbers.push_back(APInt(index.getIntOrFloatBitWidth(), e));
  Value iota = nn::ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(
          RankedTensorType::get({1, experts}, index), numbers)));
  auto gridType = RankedTensorType::get({tokens, experts}, element);
  auto maskType = gridType.clone(b.getI1Type());
  Value gate =
      nn::ConstantOp::create(b, loc,
                             cast<ElementsAttr>(DenseElementsAttr::get(
                                 gridType, b.getFloatAttr(element, 0.0))));
  Value routed = nn::ConstantOp::create(
      b, loc, cast<ElementsAttr>(DenseElementsAttr::get(maskType, false)));
  for (int64_t j = 0; j < op.getTopK(); ++j) {
    auto column = [&](Value v) -> Value {
      auto type = cast<RankedTensorType>(v.getType());
      return nn::SliceOp::create(
          b, loc, type.clone({tokens, 1}), v, ArrayRef<int64_t>{0, j},
          ArrayRef<int64_t>{tokens, j + 1}, ArrayRef<int64_t>{1, 1});
    };
    Value hit = nn::CompareOp::create(
        b, loc, maskType, nn::CompareDirection::EQ, iota, column(ids));
    gate = nn::AddOp::create(b, loc, gate,
                             nn::WhereOp::create(b, loc, gridType, hit,
                                                 column(op.getRoutingWeights()),
                                                 scalar(0)));
    routed = nn::OrOp::create(b, loc, routed, hit);
  }
  auto perExpert = [&](Value v) {
    auto type = cast<RankedTensorType>(v.getType());
    return reshape(nn::TransposeOp::create(b, loc,
                                           type.clone({experts, tokens}), v,
                                           ArrayRef<int64_t>{1, 0}),
                   {experts, tokens, 1});
  };
  auto yType = cast<RankedTensorType>(y.getType());
  Value weighted = nn::MulOp::create(b, loc, y, perExpert(gate));
  Value kept = nn::WhereOp::create(b, loc, yType, perExpert(routed), weighted,
                                   scalar(0));
  Value sum = nn::ReduceOp::create(b, loc, yType.clone({1, tokens, hidden}),
                                   nn::ReduceKind::Sum, kept,
                                   ArrayRef<int64_t>{0}, true);
  return reshape(sum, {tokens, hidden});
}

struct ExpandMoePass : mlir::partita::impl::ExpandMoePassBase<ExpandMoePass> {
  void runOnOperation() override {
    SmallVector<nn::MoeOp> ops;
    getOperation().walk([&](nn::MoeOp op) { ops.push_back(op); });
    for (nn::MoeOp op : ops) {
      Value dense = MoeExpander(op).run();
      op.replaceAllUsesWith(dense);
      op.erase();
      ++numExpanded;
    }
  }
};

} // namespace
