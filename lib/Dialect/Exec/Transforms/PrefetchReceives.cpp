//===- PrefetchReceives.cpp - post pipeline receives one ahead ------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Exec/Transforms/Passes.h"

#include "partita/Dialect/Dist/IR/DistOps.h"

namespace mlir::partita {
#define GEN_PASS_DEF_PREFETCHRECEIVESPASS
#include "partita/Dialect/Exec/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

struct PrefetchReceivesPass
    : public mlir::partita::impl::PrefetchReceivesPassBase<
          PrefetchReceivesPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    SmallVector<dist::RecvOp> receives;
    SmallVector<bool> sendBefore; // A send lies between receive k-1 and k.
    bool sawSend = false;
    for (Operation &op : func.getBody().front()) {
      if (isa<dist::SendOp, dist::SendStartOp>(op))
        sawSend = true;
      if (auto recv = dyn_cast<dist::RecvOp>(op)) {
        receives.push_back(recv);
        sendBefore.push_back(sawSend);
        sawSend = false;
      }
    }
    OpBuilder builder(func.getContext());
    dist::WaitOp previous;
    for (auto [recv, send] : llvm::zip(receives, sendBefore)) {
      if (previous && !send)
        builder.setInsertionPointAfter(previous);
      else
        builder.setInsertionPoint(recv);
      auto token = dist::TokenType::get(func.getContext(), recv.getType());
      auto start = dist::RecvStartOp::create(
          builder, recv.getLoc(), token, recv.getMeshAttr(), recv.getAxisAttr(),
          recv.getPeerAttr(), recv.getTagAttr());
      // Discardable attributes (the peer's global rank) go along.
      for (NamedAttribute attr : recv->getDiscardableAttrs())
        start->setAttr(attr.getName(), attr.getValue());
      builder.setInsertionPoint(recv);
      previous = dist::WaitOp::create(builder, recv.getLoc(), start.getToken());
      recv.replaceAllUsesWith(previous.getResult());
      recv.erase();
    }
  }
};

} // namespace
