//===- Fuse.cpp - elementwise chains into their producer's epilogue -------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Exec/Transforms/Passes.h"

#include "partita/Dialect/Exec/IR/ExecOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::partita {
#define GEN_PASS_DEF_FUSEPASS
#include "partita/Dialect/Exec/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

bool mlir::partita::isFusibleElementwise(Operation *op) {
  // The op vocabulary's epilogue steps that keep the element type.
  return nn::isEpilogueFusible(op);
}

bool mlir::partita::isKernel(Operation *op) {
  return !isa<nn::ConstantOp, nn::ReshapeOp>(op) &&
         isa_and_nonnull<nn::NNDialect>(op->getDialect());
}

namespace {

struct FusePass : public mlir::partita::impl::FusePassBase<FusePass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    Block &body = func.getBody().front();
    llvm::DenseMap<Operation *, unsigned> position;
    for (Operation &op : body)
      position[&op] = position.size();
    // The kernel whose epilogue holds each fused op, and each kernel's
    // steps in order.
    llvm::DenseMap<Operation *, Operation *> headOfStep;
    llvm::MapVector<Operation *, SmallVector<Operation *>> epilogueOf;
    // The kernel whose result currently holds `value`, if any.
    auto headOf = [&](Value value) -> Operation * {
      Operation *def = value.getDefiningOp();
      if (!def || def->getBlock() != &body)
        return nullptr;
      if (Operation *head = headOfStep.lookup(def))
        return head;
      if (!isKernel(def) || def->getNumResults() != 1)
        return nullptr;
      return def;
    };
    // Whether `value` exists before `head` runs (so the epilogue may read
    // it); a constant may be moved there.
    auto availableBefore = [&](Value value, Operation *head) {
      Operation *def = value.getDefiningOp();
      return !def || isa<nn::ConstantOp>(def) ||
             (def->getBlock() == &body && position[def] < position[head]);
    };
    for (Operation &op : body) {
      if (!isFusibleElementwise(&op))
        continue;
      Type resultType = op.getResult(0).getType();
      for (Value input : op.getOperands()) {
        Operation *head = headOf(input);
        if (!head || !input.hasOneUse() || input.getType() != resultType)
          continue;
        if (op.getNumOperands() == 2) {
          Value other =
              op.getOperand(0) == input ? op.getOperand(1) : op.getOperand(0);
          if (other == input || !availableBefore(other, head))
            continue;
        }
        headOfStep[&op] = head;
        epilogueOf[head].push_back(&op);
        ++numFused;
        break;
      }
    }
    OpBuilder builder(func.getContext());
    for (auto &[head, steps] : epilogueOf) {
      builder.setInsertionPoint(head);
      Value last = steps.back()->getResult(0);
      auto kernel =
          exec::KernelOp::create(builder, head->getLoc(), last.getType());
      last.replaceAllUsesWith(kernel.getResult());
      Block *inner = builder.createBlock(&kernel.getBody());
      head->moveBefore(inner, inner->end());
      for (Operation *step : steps) {
        // A constant operand defined after the kernel moves before it.
        for (Value operand : step->getOperands())
          if (Operation *def = operand.getDefiningOp();
              def && def->getBlock() == &body && kernel->isBeforeInBlock(def))
            def->moveBefore(kernel);
        step->moveBefore(inner, inner->end());
      }
      builder.setInsertionPointToEnd(inner);
      exec::YieldOp::create(builder, head->getLoc(), last);
    }
  }
};

} // namespace
