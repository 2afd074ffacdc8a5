//===- MoeCapacity.cpp - experts that take a bounded number of tokens -----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// --moe-capacity-factor F: each expert of a mixture takes at most
// C = ceil(F * T * k / E) of the (token, expert) pairs routed to it, the
// first ones in token order (Megatron-Core's "position" drop policy); the
// others select no expert and add nothing to their token (no renormalizing,
// as Megatron and GShard drop). The bound is over the op's T tokens, the
// whole batch, so that a sharded program drops what the unsharded one does:
// the rewrite is nn ops on the expert ids, written before sharding, and
// partitioning gathers what the running counts need.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "partita/Dialect/NN/IR/NNOps.h"

#include <cmath>

namespace mlir::partita {
#define GEN_PASS_DEF_MOECAPACITYPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

/// Rewrites `op`'s expert ids so that each expert keeps its first
/// `capacity` pairs; the ids of the others become -1.
void bound(nn::MoeOp op, int64_t capacity) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value ids = op.getExpertIds();
  auto idType = cast<RankedTensorType>(ids.getType());
  int64_t tokens = idType.getDimSize(0), k = idType.getDimSize(1);
  int64_t experts = op.getNumExperts(), pairs = tokens * k;
  Type i64 = b.getI64Type();
  auto constant = [&](RankedTensorType type, ArrayRef<int64_t> values) {
    SmallVector<APInt> numbers;
    for (int64_t v : values)
      numbers.push_back(APInt(64, v, /*isSigned=*/true));
    return nn::ConstantOp::create(
        b, loc, cast<ElementsAttr>(DenseElementsAttr::get(type, numbers)));
  };
  // One row per pair, in token-major order: which expert it goes to.
  Value flat = ids;
  if (!idType.getElementType().isInteger(64))
    flat = nn::CastOp::create(b, loc, idType.clone(i64), flat);
  flat = nn::ReshapeOp::create(b, loc, RankedTensorType::get({pairs, 1}, i64),
                               flat);
  SmallVector<int64_t> numbers(experts);
  for (int64_t e = 0; e < experts; ++e)
    numbers[e] = e;
  Value iota = constant(RankedTensorType::get({1, experts}, i64), numbers);
  auto gridType = RankedTensorType::get({pairs, experts}, i64);
  Value hit = nn::CastOp::create(
      b, loc, gridType,
      nn::CompareOp::create(b, loc, gridType.clone(b.getI1Type()),
                            nn::CompareDirection::EQ, flat, iota));
  // Each pair's place among its expert's pairs, counted from 1 (0 for an
  // id outside the experts, which selects none anyway).
  Value running = nn::CumsumOp::create(b, loc, hit, 0);
  Value place = nn::ReduceOp::create(
      b, loc, RankedTensorType::get({pairs}, i64), nn::ReduceKind::Sum,
      nn::MulOp::create(b, loc, running, hit), ArrayRef<int64_t>{1});
  auto keptType = RankedTensorType::get({pairs}, b.getI1Type());
  Value kept = nn::CompareOp::create(
      b, loc, keptType, nn::CompareDirection::LE, place,
      constant(RankedTensorType::get({}, i64), {capacity}));
  kept = nn::ReshapeOp::create(b, loc, idType.clone(b.getI1Type()), kept);
  Value none = nn::ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(
          RankedTensorType::get({}, idType.getElementType()),
          b.getIntegerAttr(idType.getElementType(), -1))));
  op.getExpertIdsMutable().assign(
      nn::WhereOp::create(b, loc, idType, kept, ids, none));
}

struct MoeCapacityPass
    : mlir::partita::impl::MoeCapacityPassBase<MoeCapacityPass> {
  using Base::Base;

  void runOnOperation() override {
    if (!(factor >= 0) || !std::isfinite(factor)) {
      getOperation().emitError()
          << "--moe-capacity-factor must be 0 (no bound) or more, not "
          << factor;
      return signalPassFailure();
    }
    if (factor == 0)
      return;
    getOperation().walk([&](nn::MoeOp op) {
      auto ids = op.getExpertIds().getType();
      int64_t tokens = ids.getDimSize(0), k = ids.getDimSize(1);
      double capacity = std::ceil(factor * double(tokens) * double(k) /
                                  double(op.getNumExperts()));
      // A token chooses an expert once at most: a capacity of every token
      // drops nothing (compared as a double: a huge factor overflows
      // int64).
      if (capacity >= double(tokens))
        return;
      bound(op, static_cast<int64_t>(capacity));
      ++numBounded;
    });
  }
};

} // namespace
