//===- AsyncCollectives.cpp - collectives started early, waited late ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"

namespace mlir::partita {
#define GEN_PASS_DEF_ASYNCCOLLECTIVESPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

/// A collective with an asynchronous form (a dispatch has none: what it
/// receives decides how much it moves, and its two results are one step).
bool isSyncCollective(Operation *op) {
  return isGroupCollective(op) && !isAsyncStart(op) &&
         !isa<DispatchOp, DispatchReturnOp>(op);
}

/// One started collective: its start, its wait and the bytes it holds.
struct InFlight {
  Operation *start;
  Operation *wait;
  int64_t bytes;
};

class Asynchronizer {
public:
  explicit Asynchronizer(int64_t limit) : limit(limit) {}
  void run(Block &block);

private:
  /// The bytes of the collectives placed so far that are in flight at some
  /// point of [from, to].
  int64_t loadBetween(Operation *from, Operation *to) const;

  int64_t limit;
  SmallVector<InFlight> placed;
};

int64_t Asynchronizer::loadBetween(Operation *from, Operation *to) const {
  int64_t load = 0;
  for (const InFlight &f : placed)
    if (!f.wait->isBeforeInBlock(from) && !to->isBeforeInBlock(f.start))
      load += f.bytes;
  return load;
}

void Asynchronizer::run(Block &block) {
  SmallVector<Operation *> collectives;
  for (Operation &op : block)
    if (isSyncCollective(&op))
      collectives.push_back(&op);
  Operation *lastStart = nullptr;
  for (Operation *op : collectives) {
    Value input = op->getOperand(0);
    Value result = op->getResult(0);
    // The earliest point: after the operand is computed in this block, and
    // after the previous start (collectives keep their order).
    Operation *after = input.getDefiningOp();
    if (after)
      after = block.findAncestorOpInBlock(*after);
    if (lastStart && (!after || after->isBeforeInBlock(lastStart)))
      after = lastStart;
    // The latest point: right before the first user in this block.
    Operation *firstUse = nullptr;
    for (Operation *user : result.getUsers()) {
      Operation *top = block.findAncestorOpInBlock(*user);
      if (top && (!firstUse || top->isBeforeInBlock(firstUse)))
        firstUse = top;
    }
    if (!firstUse)
      firstUse = block.getTerminator();

    OpBuilder b(op);
    if (after)
      b.setInsertionPointAfter(after);
    else
      b.setInsertionPointToStart(&block);
    Operation *hoistedAt = &*b.getInsertionPoint();
    int64_t bytes = tensorBytes(result.getType());
    if (loadBetween(hoistedAt, firstUse) + bytes > limit)
      b.setInsertionPoint(op); // Too much in flight: start in place.

    OperationState state(op->getLoc(),
                         op->getName().getStringRef().str() + "_start");
    state.addOperands(op->getOperands());
    state.addAttributes(op->getAttrs());
    state.addTypes(TokenType::get(op->getContext(), result.getType()));
    Operation *start = b.create(state);
    b.setInsertionPoint(firstUse);
    auto wait = WaitOp::create(b, op->getLoc(), start->getResult(0));
    result.replaceAllUsesWith(wait.getResult());
    op->erase();
    placed.push_back({start, wait, bytes});
    lastStart = start;
  }
}

struct AsyncCollectivesPass
    : mlir::partita::impl::AsyncCollectivesPassBase<AsyncCollectivesPass> {
  using AsyncCollectivesPassBase::AsyncCollectivesPassBase;

  void runOnOperation() override {
    getOperation().walk([&](Operation *op) {
      if (isa<func::FuncOp, StageOp>(op) && op->getNumRegions() == 1 &&
          !op->getRegion(0).empty())
        Asynchronizer(maxBytesInFlight).run(op->getRegion(0).front());
    });
  }
};

} // namespace
