//===- Differentiate.cpp - reverse-mode differentiation of nn -------------===//
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
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::partita {
#define GEN_PASS_DEF_DIFFERENTIATEPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

bool isFloatTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa<FloatType>(type.getElementType());
}

} // namespace

llvm::DenseSet<Value> mlir::partita::getActiveValues(Block &body,
                                                     ArrayRef<Value> parameters,
                                                     Value loss) {
  // Forward: what depends on a parameter; backward: what reaches the loss.
  llvm::DenseSet<Value> varied(parameters.begin(), parameters.end());
  for (Operation &op : body.without_terminator())
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return varied.contains(v); }))
      for (Value result : op.getResults())
        if (isFloatTensor(result))
          varied.insert(result);
  llvm::DenseSet<Value> useful{loss};
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (llvm::any_of(op.getResults(),
                     [&](Value v) { return useful.contains(v); }))
      for (Value operand : op.getOperands())
        useful.insert(operand);
  llvm::DenseSet<Value> active;
  for (Value v : varied)
    if (useful.contains(v))
      active.insert(v);
  return active;
}

namespace {

/// Marks the forward values `backward` (the ops the pass built, less
/// `erased`) reads: each defining op gets the indices of those results,
/// the function their bytes in all. They are what the step keeps alive
/// from its forward to its backward: the rules decide it by what they
/// read (docs/training.md).
void recordSaved(func::FuncOp func, ArrayRef<Operation *> backward,
                 const llvm::SmallPtrSetImpl<Operation *> &erased) {
  llvm::SmallPtrSet<Operation *, 32> built(backward.begin(), backward.end());
  llvm::MapVector<Operation *, SmallVector<int64_t>> saved;
  int64_t bytes = 0;
  for (Operation *op : backward) {
    if (erased.contains(op))
      continue;
    for (Value operand : op->getOperands()) {
      auto result = dyn_cast<OpResult>(operand);
      if (!result || built.contains(result.getOwner()) ||
          result.getOwner()->hasTrait<OpTrait::ConstantLike>())
        continue;
      SmallVector<int64_t> &indices = saved[result.getOwner()];
      if (llvm::is_contained(indices, result.getResultNumber()))
        continue;
      indices.push_back(result.getResultNumber());
      auto type = cast<RankedTensorType>(result.getType());
      bytes += type.getNumElements() *
               llvm::divideCeil(type.getElementTypeBitWidth(), 8);
    }
  }
  Builder b(func.getContext());
  for (auto &[op, indices] : saved) {
    llvm::sort(indices);
    op->setAttr(nn::NNDialect::kSavedAttrName, b.getDenseI64ArrayAttr(indices));
  }
  func->setAttr(nn::NNDialect::kSavedBytesAttrName, b.getI64IntegerAttr(bytes));
}

struct DifferentiatePass
    : mlir::partita::impl::DifferentiatePassBase<DifferentiatePass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    if (!func.getBody().hasOneBlock()) {
      func.emitOpError("partita-differentiate: expects a function of one "
                       "block");
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());

    // The loss: the one result marked as it, a float tensor of one element.
    std::optional<unsigned> lossIndex;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, nn::NNDialect::kLossAttrName)) {
        if (lossIndex) {
          func.emitOpError("partita-differentiate: results ")
              << *lossIndex << " and " << i << " are both marked "
              << nn::NNDialect::kLossAttrName;
          return signalPassFailure();
        }
        lossIndex = i;
      }
    if (!lossIndex) {
      func.emitOpError("partita-differentiate: no result is marked ")
          << nn::NNDialect::kLossAttrName;
      return signalPassFailure();
    }
    Value loss = ret.getOperand(*lossIndex);
    auto lossType = dyn_cast<RankedTensorType>(loss.getType());
    if (!isFloatTensor(loss) || lossType.getNumElements() != 1) {
      func.emitOpError("partita-differentiate: the loss must be a float "
                       "tensor of one element, got ")
          << loss.getType();
      return signalPassFailure();
    }

    SmallVector<BlockArgument> parameters;
    SmallVector<StringAttr> names;
    for (BlockArgument arg : body.getArguments())
      if (auto name = func.getArgAttrOfType<StringAttr>(
              arg.getArgNumber(), nn::NNDialect::kParameterAttrName)) {
        if (!isFloatTensor(arg)) {
          func.emitOpError("partita-differentiate: parameter '")
              << name.getValue() << "' is " << arg.getType()
              << ", not a float tensor";
          return signalPassFailure();
        }
        parameters.push_back(arg);
        names.push_back(name);
      }
    if (parameters.empty()) {
      func.emitOpError("partita-differentiate: no argument is marked ")
          << nn::NNDialect::kParameterAttrName;
      return signalPassFailure();
    }

    llvm::DenseSet<Value> activeValues = getActiveValues(
        body, SmallVector<Value>(parameters.begin(), parameters.end()), loss);
    auto active = [&](Value v) { return activeValues.contains(v); };

    OpBuilder b(ret);
    // The backward's ops are those built before the return from here on.
    Operation *lastForward = ret->getPrevNode();
    llvm::DenseMap<Value, Value> grads;
    auto accumulate = [&](Value v, Value g, Location loc) {
      auto [it, inserted] = grads.try_emplace(v, g);
      if (!inserted)
        it->second = nn::AddOp::create(b, loc, g.getType(), it->second, g);
    };
    // The seed: d loss / d loss = 1.
    grads[loss] = nn::ConstantOp::create(
        b, loss.getLoc(),
        cast<ElementsAttr>(DenseElementsAttr::get(
            lossType, b.getFloatAttr(lossType.getElementType(), 1.0))));

    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(body.without_terminator()))) {
      if (op.getBlock() != &body || &op == ret)
        continue;
      if (llvm::none_of(op.getResults(), active))
        continue;
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value result : op.getResults()) {
        resultGrads.push_back(grads.lookup(result));
        any |= static_cast<bool>(resultGrads.back());
      }
      if (!any)
        continue;
      auto rule = dyn_cast<nn::DifferentiableOpInterface>(&op);
      if (!rule) {
        op.emitOpError("cannot be differentiated: it has no "
                       "vector-Jacobian product, and it lies between a "
                       "parameter and the loss");
        return signalPassFailure();
      }
      SmallVector<Value> operandGrads;
      if (failed(rule.buildVjp(b, resultGrads, operandGrads)))
        return signalPassFailure();
      for (auto [index, operand, g] :
           llvm::enumerate(op.getOperands(), operandGrads)) {
        if (!active(operand))
          continue;
        // An active operand without a cotangent would lose its gradient.
        if (!g) {
          op.emitOpError("cannot be differentiated by its operand #")
              << index << ", which depends on a parameter";
          return signalPassFailure();
        }
        accumulate(operand, g, op.getLoc());
      }
    }

    // One result per parameter, after the existing ones.
    SmallVector<Value> operands(ret.getOperands());
    SmallVector<Type> resultTypes(func.getResultTypes());
    for (BlockArgument parameter : parameters) {
      Value g = grads.lookup(parameter);
      if (!g) {
        auto type = cast<RankedTensorType>(parameter.getType());
        g = nn::ConstantOp::create(
            b, parameter.getLoc(),
            cast<ElementsAttr>(DenseElementsAttr::get(
                type, b.getFloatAttr(type.getElementType(), 0.0))));
      }
      operands.push_back(g);
      resultTypes.push_back(parameter.getType());
    }
    unsigned first = func.getNumResults();
    ret->setOperands(operands);
    // A rule builds every operand's cotangent; those of inactive operands
    // (a model input, a mask) are dead and go.
    SmallVector<Operation *> backward;
    for (Operation *op = lastForward ? lastForward->getNextNode()
                                     : &body.front();
         op != ret; op = op->getNextNode())
      backward.push_back(op);
    llvm::SmallPtrSet<Operation *, 32> erased;
    for (Operation *op : llvm::reverse(backward))
      if (isOpTriviallyDead(op)) {
        erased.insert(op);
        op->erase();
      }
    recordSaved(func, backward, erased);
    func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                   resultTypes));
    for (auto [i, name] : llvm::enumerate(names))
      func.setResultAttr(first + i, nn::NNDialect::kGradientAttrName, name);
  }
};

} // namespace
