//===- SplitFusedParameters.cpp - a fused projection's segments -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "partita/Dialect/NN/IR/NNOps.h"

namespace mlir::partita {
#define GEN_PASS_DEF_SPLITFUSEDPARAMETERSPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

/// `value`, an ElementsAttr, seen with `type`: the same elements in the
/// same order under another shape, without copying them. Null for a kind
/// of attribute that cannot be reinterpreted so.
ElementsAttr reinterpret(ElementsAttr value, RankedTensorType type) {
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(value))
    return DenseResourceElementsAttr::get(type, resource.getRawHandle());
  if (auto dense = dyn_cast<DenseElementsAttr>(value))
    return dense.reshape(type);
  return {};
}

/// The parameter argument `value` is, with its initial value; null when it
/// is not one or its initial value cannot be reinterpreted.
BlockArgument parameterOf(func::FuncOp func, Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg || arg.getOwner() != &func.getBody().front() ||
      !func.getArgAttr(arg.getArgNumber(), nn::NNDialect::kParameterAttrName))
    return {};
  auto initial = func.getArgAttrOfType<ElementsAttr>(
      arg.getArgNumber(), nn::NNDialect::kInitialValueAttrName);
  if (!initial ||
      !reinterpret(initial, cast<RankedTensorType>(initial.getType())))
    return {};
  return arg;
}

/// Holds parameter `arg` as `shape` (the same elements), recording its
/// ONNX shape.
void reshapeParameter(func::FuncOp func, BlockArgument arg,
                      ArrayRef<int64_t> shape) {
  unsigned i = arg.getArgNumber();
  auto type = cast<RankedTensorType>(arg.getType());
  auto held = type.clone(shape);
  auto initial = func.getArgAttrOfType<ElementsAttr>(
      i, nn::NNDialect::kInitialValueAttrName);
  func.setArgAttr(i, nn::NNDialect::kInitialValueAttrName,
                  reinterpret(initial, held));
  func.setArgAttr(i, nn::NNDialect::kParameterShapeAttrName,
                  DenseI64ArrayAttr::get(func.getContext(), type.getShape()));
  arg.setType(held);
}

/// Splits `value` into `segments` equal pieces along `axis`, each read as
/// `pieceType` (the split keeps `axis` as a dimension of 1 when the value
/// was given one by reshapeParameter).
SmallVector<Value> segmentsOf(OpBuilder &b, Location loc, Value value,
                              int64_t segments, int64_t axis,
                              RankedTensorType pieceType) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[axis] /= segments;
  SmallVector<Type> types(segments, type.clone(shape));
  auto split = nn::SplitOp::create(b, loc, types, value, axis);
  SmallVector<Value> pieces;
  for (Value piece : split.getResults())
    pieces.push_back(
        piece.getType() == pieceType
            ? piece
            : nn::ReshapeOp::create(b, loc, pieceType, piece).getResult());
  return pieces;
}

struct SplitFusedParametersPass
    : mlir::partita::impl::SplitFusedParametersPassBase<
          SplitFusedParametersPass> {
  using Base::Base;

  /// Rewrites `split` of a matmul by a parameter into one matmul per
  /// segment; false when it is not one.
  bool rewrite(func::FuncOp func, nn::SplitOp split) {
    auto matmul = split.getInput().getDefiningOp<nn::MatmulOp>();
    if (!matmul || !matmul->hasOneUse())
      return false;
    auto resultType = cast<RankedTensorType>(matmul.getType());
    int64_t segments = split.getNumResults();
    if (segments < 2 ||
        static_cast<int64_t>(split.getAxis()) != resultType.getRank() - 1)
      return false;
    int64_t total = resultType.getShape().back();
    int64_t piece = total / segments;
    for (Value result : split.getResults())
      if (cast<RankedTensorType>(result.getType()).getShape().back() != piece)
        return false;
    BlockArgument weight = parameterOf(func, matmul.getRhs());
    auto weightType = cast<RankedTensorType>(matmul.getRhs().getType());
    if (!weight || !weight.hasOneUse() || weightType.getRank() != 2)
      return false;
    // A bias that is a parameter read only here is held by segments too;
    // any other bias is split where it is.
    Value bias = matmul.getBias();
    auto biasType =
        bias ? cast<RankedTensorType>(bias.getType()) : RankedTensorType();
    if (bias && (biasType.getRank() != 1 || biasType.getDimSize(0) != total))
      return false;
    BlockArgument biasParameter = bias ? parameterOf(func, bias) : nullptr;
    if (biasParameter && !biasParameter.hasOneUse())
      biasParameter = nullptr;

    int64_t rows = weightType.getDimSize(0);
    reshapeParameter(func, weight, {rows, segments, piece});
    if (biasParameter)
      reshapeParameter(func, biasParameter, {segments, piece});

    OpBuilder b(matmul);
    Location loc = matmul.getLoc();
    SmallVector<Value> weights = segmentsOf(b, loc, weight, segments, 1,
                                            weightType.clone({rows, piece}));
    SmallVector<Value> biases;
    if (bias)
      biases = segmentsOf(b, loc, bias, segments, 0,
                          biasType.clone(ArrayRef<int64_t>{piece}));
    for (auto [i, result] : llvm::enumerate(split.getResults())) {
      auto segment =
          nn::MatmulOp::create(b, loc, result.getType(), matmul.getLhs(),
                               weights[i], bias ? biases[i] : Value());
      result.replaceAllUsesWith(segment.getResult());
    }
    split.erase();
    matmul.erase();
    return true;
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    SmallVector<nn::SplitOp> splits;
    func.walk([&](nn::SplitOp split) { splits.push_back(split); });
    bool changed = false;
    for (nn::SplitOp split : splits)
      changed |= rewrite(func, split);
    if (!changed)
      return;
    func.setFunctionType(FunctionType::get(
        func.getContext(), func.getBody().front().getArgumentTypes(),
        func.getFunctionType().getResults()));
  }
};

} // namespace
