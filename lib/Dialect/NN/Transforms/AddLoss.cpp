//===- AddLoss.cpp - a training step's loss -------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "partita/Dialect/NN/IR/NNOps.h"

#include <numeric>

namespace mlir::partita {
#define GEN_PASS_DEF_ADDLOSSPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

constexpr int64_t kIgnoreIndex = -100;

struct AddLossPass : mlir::partita::impl::AddLossPassBase<AddLossPass> {
  using Base::Base;

  Value scalar(OpBuilder &b, Location loc, Attribute value) {
    auto typed = cast<TypedAttr>(value);
    return nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            RankedTensorType::get({}, typed.getType()), value)));
  }

  /// The sum of every element of `x`, as a rank-0 tensor.
  Value sumAll(OpBuilder &b, Location loc, Value x) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> axes(type.getRank());
    std::iota(axes.begin(), axes.end(), 0);
    return nn::ReduceOp::create(b, loc, type.clone(ArrayRef<int64_t>{}),
                                nn::ReduceKind::Sum, x, axes);
  }

  /// mean over the positions whose label is not -100 of -logp[label].
  FailureOr<Value> crossEntropy(OpBuilder &b, Location loc, Value logits,
                                Value labels) {
    auto type = cast<RankedTensorType>(logits.getType());
    Type element = type.getElementType();
    int64_t classes = type.getShape().back();
    auto labelType = cast<RankedTensorType>(labels.getType());
    int64_t axis = type.getRank() - 1;
    // log_softmax spelled out, x - m - log(sum(exp(x - m))) with m the
    // row's largest logit, so that a vocabulary split over tp stays split:
    // the max and the sum are reductions whose partial results the
    // partitioner all-reduces (two scalars per position, Megatron's
    // vocabulary-parallel cross-entropy), where nn.log_softmax over a split
    // axis would gather the logits.
    SmallVector<int64_t> rowShape(type.getShape());
    rowShape.back() = 1;
    auto rowType = type.clone(rowShape);
    Value rowMax = nn::ReduceOp::create(b, loc, rowType, nn::ReduceKind::Max,
                                        logits, ArrayRef<int64_t>{axis},
                                        /*keepdims=*/true);
    Value shifted = nn::SubOp::create(b, loc, type, logits, rowMax);
    Value sumExp = nn::ReduceOp::create(
        b, loc, rowType, nn::ReduceKind::Sum,
        nn::ExpOp::create(b, loc, type, shifted), ArrayRef<int64_t>{axis},
        /*keepdims=*/true);
    Value logProbs = nn::SubOp::create(
        b, loc, type, shifted, nn::LogOp::create(b, loc, rowType, sumExp));
    // labels[..., None] == arange(classes): the one-hot of each position.
    SmallVector<int64_t> column(labelType.getShape());
    column.push_back(1);
    Value labelColumn =
        nn::ReshapeOp::create(b, loc, labelType.clone(column), labels);
    SmallVector<int64_t> indices(classes);
    std::iota(indices.begin(), indices.end(), 0);
    Value classIndex =
        nn::ConstantOp::create(b, loc,
                               nn::getIndexConstant(b.getContext(), {classes},
                                                    indices, "loss_classes"));
    auto boolType = type.clone(b.getI1Type());
    Value hit = nn::CompareOp::create(
        b, loc, boolType, nn::CompareDirection::EQ, labelColumn, classIndex);
    Value oneHot = nn::CastOp::create(b, loc, type, hit);
    Value picked =
        sumAll(b, loc, nn::MulOp::create(b, loc, type, logProbs, oneHot));
    Value valid = nn::CompareOp::create(
        b, loc, labelType.clone(b.getI1Type()), nn::CompareDirection::NE,
        labels, scalar(b, loc, b.getI64IntegerAttr(kIgnoreIndex)));
    Value count = sumAll(
        b, loc, nn::CastOp::create(b, loc, labelType.clone(element), valid));
    Value mean = nn::DivOp::create(b, loc, picked.getType(), picked, count);
    return static_cast<Value>(nn::NegOp::create(b, loc, mean.getType(), mean));
  }

  Value meanSquaredError(OpBuilder &b, Location loc, Value output,
                         Value target) {
    auto type = cast<RankedTensorType>(output.getType());
    Value diff = nn::SubOp::create(b, loc, type, output, target);
    Value total = sumAll(b, loc, nn::MulOp::create(b, loc, type, diff, diff));
    Value count =
        scalar(b, loc,
               b.getFloatAttr(type.getElementType(),
                              static_cast<double>(type.getNumElements())));
    return nn::DivOp::create(b, loc, total.getType(), total, count);
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    if (kind != "cross_entropy" && kind != "mse") {
      func.emitOpError("partita-add-loss: kind must be cross_entropy or "
                       "mse, got '")
          << kind << "'";
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    std::optional<unsigned> index;
    SmallVector<std::string> names;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (auto name = func.getResultAttrOfType<StringAttr>(i, "onnx.name")) {
        names.push_back(name.str());
        if (name.getValue() == output)
          index = i;
      }
    if (!index) {
      InFlightDiagnostic diag =
          func.emitOpError("partita-add-loss: the model has no output '")
          << output << "'; its outputs are:";
      for (const std::string &name : names)
        diag << " " << name;
      return signalPassFailure();
    }
    Value value = ret.getOperand(*index);
    auto type = cast<RankedTensorType>(value.getType());
    if (!isa<FloatType>(type.getElementType()) ||
        (kind == "cross_entropy" && type.getRank() < 1)) {
      func.emitOpError("partita-add-loss: output '")
          << output << "' is " << type << ": " << kind
          << (kind == "cross_entropy" ? " needs float logits [..., classes]"
                                      : " needs a float tensor");
      return signalPassFailure();
    }

    // The new argument: the labels or the target.
    Block &body = func.getBody().front();
    Type argumentType =
        kind == "cross_entropy"
            ? Type(RankedTensorType::get(type.getShape().drop_back(),
                                         IntegerType::get(&getContext(), 64)))
            : Type(type);
    StringRef argumentName = kind == "cross_entropy" ? "labels" : "target";
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto name = func.getArgAttrOfType<StringAttr>(i, "onnx.name");
          name && name.getValue() == argumentName) {
        func.emitOpError("partita-add-loss: the model already has an input "
                         "named '")
            << argumentName << "'";
        return signalPassFailure();
      }
    unsigned position = func.getNumArguments();
    if (failed(func.insertArgument(
            position, argumentType,
            DictionaryAttr::get(
                &getContext(),
                {NamedAttribute(StringAttr::get(&getContext(), "onnx.name"),
                                StringAttr::get(&getContext(), argumentName))}),
            func.getLoc())))
      return signalPassFailure();
    Value argument = body.getArgument(position);

    OpBuilder b(ret);
    Location loc = value.getLoc();
    Value loss;
    if (kind == "cross_entropy") {
      FailureOr<Value> ce = crossEntropy(b, loc, value, argument);
      if (failed(ce))
        return signalPassFailure();
      loss = *ce;
    } else {
      loss = meanSquaredError(b, loc, value, argument);
    }

    if (kind == "cross_entropy")
      func->setAttr(
          nn::NNDialect::kLossClassesAttrName,
          IntegerAttr::get(
              IntegerType::get(&getContext(), 64),
              cast<RankedTensorType>(value.getType()).getShape().back()));
    // The loss is the step's one output.
    ret->setOperands(loss);
    func.setType(FunctionType::get(&getContext(), func.getArgumentTypes(),
                                   {loss.getType()}));
    func.setAllResultAttrs(ArrayRef<DictionaryAttr>{DictionaryAttr::get(
        &getContext(),
        {NamedAttribute(StringAttr::get(&getContext(), "onnx.name"),
                        StringAttr::get(&getContext(), "loss")),
         NamedAttribute(
             StringAttr::get(&getContext(), nn::NNDialect::kLossAttrName),
             UnitAttr::get(&getContext()))})});
    // What fed only the outputs that went, goes.
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(body.without_terminator())))
      if (isOpTriviallyDead(&op))
        op.erase();
  }
};

} // namespace
