//===- Optimizer.cpp - a training step's parameter updates ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// SGD and AdamW as torch.optim computes them, built of nn ops on global
// values after the backward, so that each update is sharded like its
// parameter and a data-parallel gradient is reduced where the update reads
// it (docs/training.md).
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/Transforms/Training.h"

#include <cmath>
#include <numeric>

namespace mlir::partita {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

/// torch.nn.utils.clip_grad_norm_'s guard against a zero norm.
constexpr double kClipEpsilon = 1e-6;

class UpdateBuilder {
public:
  UpdateBuilder(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  /// A rank-0 f32 constant.
  Value scalar(double value) {
    auto type = RankedTensorType::get({}, b.getF32Type());
    return nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            type, b.getFloatAttr(b.getF32Type(), value))));
  }
  /// Elementwise, numpy-broadcast; the result has `like`'s type.
  Value add(Value x, Value y) { return binary<nn::AddOp>(x, y); }
  Value sub(Value x, Value y) { return binary<nn::SubOp>(x, y); }
  Value mul(Value x, Value y) { return binary<nn::MulOp>(x, y); }
  Value div(Value x, Value y) { return binary<nn::DivOp>(x, y); }
  Value min(Value x, Value y) { return binary<nn::MinOp>(x, y); }
  Value sqrt(Value x) { return nn::SqrtOp::create(b, loc, x.getType(), x); }
  /// The sum of every element of `x`, rank 0.
  Value sumAll(Value x) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> axes(type.getRank());
    std::iota(axes.begin(), axes.end(), 0);
    return nn::ReduceOp::create(b, loc, type.clone(ArrayRef<int64_t>{}),
                                nn::ReduceKind::Sum, x, axes);
  }

private:
  template <typename Op> Value binary(Value x, Value y) {
    auto tx = cast<RankedTensorType>(x.getType());
    auto ty = cast<RankedTensorType>(y.getType());
    Type type = tx.getRank() >= ty.getRank() ? tx : ty;
    return Op::create(b, loc, type, x, y);
  }

  OpBuilder &b;
  Location loc;
};

struct OptimizerPass : mlir::partita::impl::OptimizerPassBase<OptimizerPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    std::string error;
    std::optional<OptimizerSpec> spec = parseOptimizerSpec(optimizer, error);
    if (!spec) {
      func.emitError("partita-optimizer: ") << error;
      return signalPassFailure();
    }
    if (!(clipGradNorm >= 0) || !std::isfinite(clipGradNorm)) {
      func.emitError("partita-optimizer: clip-grad-norm must be 0 or more");
      return signalPassFailure();
    }
    MLIRContext *context = &getContext();
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());

    // Each parameter with its gradient.
    struct Parameter {
      BlockArgument value;
      StringAttr name;
      unsigned gradientResult;
    };
    SmallVector<Parameter> parameters;
    llvm::StringMap<unsigned> gradientOf;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (auto name = func.getResultAttrOfType<StringAttr>(
              i, nn::NNDialect::kGradientAttrName))
        gradientOf[name.getValue()] = i;
    for (BlockArgument arg : body.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(
          arg.getArgNumber(), nn::NNDialect::kParameterAttrName);
      if (!name)
        continue;
      auto found = gradientOf.find(name.getValue());
      if (found == gradientOf.end()) {
        func.emitError("partita-optimizer: parameter '")
            << name.getValue()
            << "' has no gradient (run partita-differentiate first)";
        return signalPassFailure();
      }
      auto type = cast<RankedTensorType>(arg.getType());
      if (!type.getElementType().isF32()) {
        func.emitError("partita-optimizer: parameter '")
            << name.getValue() << "' is " << type.getElementType()
            << "; the optimizers update f32 parameters";
        return signalPassFailure();
      }
      parameters.push_back({arg, name, found->second});
    }

    // The step's scalars, then each parameter's state.
    auto scalarType = RankedTensorType::get({}, Float32Type::get(context));
    auto addArgument = [&](Type type, StringRef name,
                           ArrayRef<NamedAttribute> marks) -> BlockArgument {
      SmallVector<NamedAttribute> attrs(marks);
      attrs.push_back(NamedAttribute(StringAttr::get(context, "onnx.name"),
                                     StringAttr::get(context, name)));
      unsigned position = func.getNumArguments();
      (void)func.insertArgument(
          position, type, DictionaryAttr::get(context, attrs), func.getLoc());
      return body.getArgument(position);
    };
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto name = func.getArgAttrOfType<StringAttr>(i, "onnx.name");
          name && llvm::is_contained({kLearningRateInput.str(),
                                      kBiasCorrection1Input.str(),
                                      kBiasCorrection2Input.str()},
                                     name.getValue().str())) {
        func.emitError("partita-optimizer: the model already has an input "
                       "named '")
            << name.getValue() << "'";
        return signalPassFailure();
      }
    Value lr = addArgument(scalarType, kLearningRateInput, {});
    Value bias1, bias2;
    if (spec->kind == OptimizerKind::AdamW) {
      bias1 = addArgument(scalarType, kBiasCorrection1Input, {});
      bias2 = addArgument(scalarType, kBiasCorrection2Input, {});
    }
    llvm::DenseMap<Value, SmallVector<BlockArgument, 2>> stateOf;
    // A parameter held in another shape than its initializer's
    // (partita-split-fused-parameters): its state is held alike.
    auto parameterShape = [&](BlockArgument arg) {
      return func.getArgAttrOfType<DenseI64ArrayAttr>(
          arg.getArgNumber(), nn::NNDialect::kParameterShapeAttrName);
    };
    for (Parameter &p : parameters)
      for (StringRef suffix : spec->stateNames()) {
        std::string name = (p.name.getValue() + "/" + suffix).str();
        SmallVector<NamedAttribute, 2> marks = {NamedAttribute(
            StringAttr::get(context, nn::NNDialect::kOptimizerStateAttrName),
            StringAttr::get(context, name))};
        if (DenseI64ArrayAttr shape = parameterShape(p.value))
          marks.push_back(NamedAttribute(
              StringAttr::get(context, nn::NNDialect::kParameterShapeAttrName),
              shape));
        stateOf[p.value].push_back(addArgument(p.value.getType(), name, marks));
      }

    OpBuilder b(ret);
    UpdateBuilder u(b, func.getLoc());
    // The gradients, clipped by their global norm.
    SmallVector<Value> grads;
    for (Parameter &p : parameters)
      grads.push_back(ret.getOperand(p.gradientResult));
    SmallVector<Value> used(grads);
    if (clipGradNorm > 0 && !grads.empty()) {
      Value sumSquares;
      for (Value g : grads) {
        Value s = u.sumAll(u.mul(g, g));
        sumSquares = sumSquares ? u.add(sumSquares, s) : s;
      }
      Value norm = u.sqrt(sumSquares);
      Value coefficient = u.min(
          u.div(u.scalar(clipGradNorm), u.add(norm, u.scalar(kClipEpsilon))),
          u.scalar(1.0));
      for (Value &g : used)
        g = u.mul(g, coefficient);
    }

    // The updates, named like what they update.
    SmallVector<std::pair<Value, StringAttr>> updates;
    auto named = [&](BlockArgument arg) {
      return func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "onnx.name");
    };
    for (auto [p, g] : llvm::zip(parameters, used)) {
      Value param = p.value;
      ArrayRef<BlockArgument> state = stateOf.lookup(param);
      if (spec->kind == OptimizerKind::SGD) {
        Value d = g;
        if (spec->weightDecay != 0)
          d = u.add(d, u.mul(param, u.scalar(spec->weightDecay)));
        if (spec->momentum != 0) {
          Value buffer = u.add(u.mul(state[0], u.scalar(spec->momentum)), d);
          updates.push_back({buffer, named(state[0])});
          d = buffer;
        }
        updates.push_back({u.sub(param, u.mul(d, lr)), p.name});
        continue;
      }
      Value decayed = param;
      if (spec->weightDecay != 0)
        decayed = u.mul(param, u.sub(u.scalar(1.0),
                                     u.mul(lr, u.scalar(spec->weightDecay))));
      Value m = u.add(u.mul(state[0], u.scalar(spec->beta1)),
                      u.mul(g, u.scalar(1.0 - spec->beta1)));
      Value v = u.add(u.mul(state[1], u.scalar(spec->beta2)),
                      u.mul(u.mul(g, g), u.scalar(1.0 - spec->beta2)));
      Value stepSize = u.div(lr, bias1);
      Value denominator =
          u.add(u.div(u.sqrt(v), u.sqrt(bias2)), u.scalar(spec->eps));
      Value updated = u.sub(decayed, u.mul(u.div(m, denominator), stepSize));
      updates.push_back({m, named(state[0])});
      updates.push_back({v, named(state[1])});
      updates.push_back({updated, p.name});
    }

    // The results: the loss (and the gradients, when kept, each in its
    // initializer's shape), then every update.
    llvm::StringMap<DenseI64ArrayAttr> shapeOf;
    for (Parameter &p : parameters)
      if (DenseI64ArrayAttr shape = parameterShape(p.value))
        shapeOf[p.name.getValue()] = shape;
    SmallVector<Value> operands;
    SmallVector<Type> types;
    SmallVector<DictionaryAttr> attrs;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto gradient = func.getResultAttrOfType<StringAttr>(
          i, nn::NNDialect::kGradientAttrName);
      if (gradient && !outputGradients)
        continue;
      Value operand = ret.getOperand(i);
      if (DenseI64ArrayAttr shape =
              gradient ? shapeOf.lookup(gradient.getValue()) : nullptr)
        operand = nn::ReshapeOp::create(
            b, func.getLoc(),
            cast<RankedTensorType>(operand.getType()).clone(shape.asArrayRef()),
            operand);
      operands.push_back(operand);
      types.push_back(operand.getType());
      NamedAttrList list(func.getResultAttrDict(i));
      if (gradient)
        list.set("onnx.name",
                 StringAttr::get(context, gradient.getValue() + ".grad"));
      attrs.push_back(list.getDictionary(context));
    }
    for (auto &[value, name] : updates) {
      operands.push_back(value);
      types.push_back(value.getType());
      attrs.push_back(DictionaryAttr::get(
          context, {NamedAttribute(StringAttr::get(context, "onnx.name"), name),
                    NamedAttribute(StringAttr::get(
                                       context, nn::NNDialect::kUpdateAttrName),
                                   name)}));
    }
    ret->setOperands(operands);
    func.setType(FunctionType::get(context, func.getArgumentTypes(), types));
    func.setAllResultAttrs(attrs);
  }
};

} // namespace
