//===- ConvertFloat.cpp - store fp32 tensors as bf16 or fp16 --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseSet.h"

#include <cstring>
#include <vector>

namespace mlir::partita {
#define GEN_PASS_DEF_CONVERTFLOATPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

bool isF32Tensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getElementType().isF32();
}

/// Adds to `angles` the ops computing the argument of `trig` (an nn.sin or
/// nn.cos) and `trig` itself, when every path up from it ends in a value
/// that is not f32 (integer positions cast to float) or in a constant:
/// rotary angles computed from positions. Rounding them to 16 bits would
/// ruin the angle (position 2000 times a frequency near 1 is off by up to 8
/// in bf16), so they stay f32. Adds nothing when a path reaches an f32
/// argument or a longer chain: such a sin/cos is converted with the rest.
void collectAngleOps(Operation *trig, llvm::DenseSet<Operation *> &angles) {
  constexpr unsigned kMaxOps = 64;
  SmallVector<Operation *> worklist{trig};
  llvm::DenseSet<Operation *> seen{trig};
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (isa<nn::ConstantOp>(op))
      continue;
    for (Value operand : op->getOperands()) {
      if (!isF32Tensor(operand.getType()))
        continue;
      Operation *producer = operand.getDefiningOp();
      if (!producer || producer->getNumRegions() != 0)
        return;
      if (seen.insert(producer).second) {
        if (seen.size() > kMaxOps)
          return;
        worklist.push_back(producer);
      }
    }
  }
  angles.insert(seen.begin(), seen.end());
}

/// `value` rounded to `semantics` (nearest, ties to even), as its bits. A
/// finite value beyond the range saturates to the largest finite value of
/// its sign instead of becoming infinite: exporters mask with f32's lowest
/// (`(1 - mask) * finfo(float32).min`), which stands for "the most negative
/// number" and must stay finite, or its product with 0 is NaN.
APInt roundTo(APFloat value, const llvm::fltSemantics &semantics) {
  bool losesInfo, finite = value.isFinite();
  value.convert(semantics, APFloat::rmNearestTiesToEven, &losesInfo);
  if (finite && value.isInfinity())
    value = APFloat::getLargest(semantics, value.isNegative());
  return value.bitcastToAPInt();
}

struct ConvertFloatPass
    : mlir::partita::impl::ConvertFloatPassBase<ConvertFloatPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext *context = &getContext();
    // The option parser accepts bf16 and fp16 only.
    Type target = to == StorageType::BF16 ? Type(BFloat16Type::get(context))
                                          : Type(Float16Type::get(context));
    auto convert = [&](Type type) -> Type {
      auto tensor = dyn_cast<RankedTensorType>(type);
      if (tensor && tensor.getElementType().isF32())
        return tensor.clone(target);
      return type;
    };

    // Rotary angles computed from positions stay f32 (collectAngleOps).
    llvm::DenseSet<Operation *> angles;
    func.walk([&](Operation *op) {
      if (isa<nn::SinOp, nn::CosOp>(op))
        collectAngleOps(op, angles);
    });

    WalkResult walk = func.walk([&](Operation *op) {
      if (angles.contains(op))
        return WalkResult::advance();
      if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
        FailureOr<ElementsAttr> value = convertValue(constant, target);
        if (failed(value))
          return WalkResult::interrupt();
        constant.setValueAttr(*value);
      }
      for (OpResult result : op->getResults())
        result.setType(convert(result.getType()));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    // Where an f32 angle op feeds a converted op (sin/cos into the rotary
    // products, a shared constant), the value is cast at the use.
    SmallVector<OpOperand *> angleUses;
    func.walk([&](Operation *op) {
      if (angles.contains(op) || isa<func::ReturnOp>(op))
        return;
      for (OpOperand &use : op->getOpOperands())
        if (Operation *producer = use.get().getDefiningOp();
            producer && angles.contains(producer))
          angleUses.push_back(&use);
    });
    for (OpOperand *use : angleUses) {
      OpBuilder ub(use->getOwner());
      Value angle = use->get();
      auto cast = nn::CastOp::create(ub, angle.getLoc(),
                                     convert(angle.getType()), angle);
      use->set(cast);
    }

    // The signature stays the model's: f32 arguments are cast on entry and
    // f32 results cast back before the return. A KV cache (partita-kv-cache)
    // is the runtime's state, not the model's interface: it is stored as
    // `to`, argument and result, so the kernel writes it in place.
    if (func.isExternal())
      return;
    Block &entry = func.front();
    SmallVector<Type> argumentTypes(func.getArgumentTypes());
    SmallVector<Type> resultTypes(func.getResultTypes());
    for (BlockArgument argument : entry.getArguments())
      if (func.getArgAttr(argument.getArgNumber(),
                          nn::NNDialect::kKvCacheAttrName)) {
        argument.setType(convert(argument.getType()));
        argumentTypes[argument.getArgNumber()] = argument.getType();
      }
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, nn::NNDialect::kKvCacheAttrName))
        resultTypes[i] = convert(resultTypes[i]);
    func.setType(
        FunctionType::get(func.getContext(), argumentTypes, resultTypes));
    // The entry casts saturate, as constants round (roundTo): an input
    // beyond 16 bits' range (a float mask of f32's lowest, a past value of
    // 1e20 in fp16) becomes the largest finite value of its sign, not an
    // infinity that would turn its row to NaN.
    OpBuilder b = OpBuilder::atBlockBegin(&entry);
    for (BlockArgument argument : entry.getArguments()) {
      Type type = convert(argument.getType());
      if (type == argument.getType())
        continue;
      auto cast = nn::CastOp::create(b, argument.getLoc(), type, argument);
      cast.setSaturate(true);
      argument.replaceAllUsesExcept(cast, cast);
    }
    func.walk([&](func::ReturnOp ret) {
      OpBuilder rb(ret);
      for (auto [operand, type] :
           llvm::zip(ret->getOpOperands(), func.getResultTypes())) {
        if (operand.get().getType() == type)
          continue;
        operand.set(nn::CastOp::create(rb, operand.get().getLoc(), type,
                                       operand.get()));
      }
    });
  }

  /// The constant's value with f32 elements rounded to `target`; other
  /// values unchanged. A weight is not read: it becomes a view converting
  /// its source (the artifact writer rounds the bytes as it streams them),
  /// under the weight's name.
  FailureOr<ElementsAttr> convertValue(nn::ConstantOp constant, Type target) {
    ElementsAttr value = constant.getValue();
    auto type = cast<RankedTensorType>(value.getType());
    if (!type.getElementType().isF32())
      return value;
    const llvm::fltSemantics &semantics =
        cast<FloatType>(target).getFloatSemantics();
    if (auto dense = dyn_cast<DenseElementsAttr>(value))
      return cast<ElementsAttr>(dense.mapValues(
          target, [&](const APFloat &x) { return roundTo(x, semantics); }));
    if (ElementsAttr view = nn::convertWeight(value, target))
      return view;
    constant.emitError() << "partita-convert-float: cannot convert a "
                            "constant held as "
                         << value;
    return failure();
  }
};

} // namespace
