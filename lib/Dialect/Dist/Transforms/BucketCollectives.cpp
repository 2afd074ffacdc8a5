//===- BucketCollectives.cpp - independent sums reduced together ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A data-parallel training step all-reduces every gradient; one collective
// per gradient pays each one's latency. The pass groups the independent
// `dist.all_reduce sum`s of a block (same mesh, axes and element type)
// into buckets of at most `bucket-bytes`, in the order their operands are
// computed: a bucket is flattened into one tensor, reduced once right after
// its last operand is computed, and sliced back out before each member's
// first use. The async pass then overlaps each bucket with the rest of the
// backward, as DDP's buckets are.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::partita {
#define GEN_PASS_DEF_BUCKETCOLLECTIVESPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

/// One all-reduce of a block: where its operand is computed (null: at the
/// block's start) and where its result is first used.
struct Member {
  AllReduceOp op;
  Operation *ready;
  Operation *firstUse;
};

/// Whether `a` comes before `b` in their block, a null `a` being the
/// block's start.
bool precedes(Operation *a, Operation *b) {
  return !a || a->isBeforeInBlock(b);
}

class Bucketer {
public:
  Bucketer(Block &block, int64_t capacity) : block(block), capacity(capacity) {}
  void run();

private:
  void flush(MutableArrayRef<Member> bucket);

  Block &block;
  int64_t capacity;
};

void Bucketer::run() {
  // The candidates, grouped by what one collective can reduce together.
  llvm::MapVector<std::tuple<Attribute, Attribute, Type>, SmallVector<Member>>
      groups;
  for (Operation &op : block) {
    auto reduce = dyn_cast<AllReduceOp>(&op);
    if (!reduce || reduce.getReduction() != ReductionKind::Sum)
      continue;
    auto type = cast<RankedTensorType>(reduce.getType());
    if (!isa<FloatType>(type.getElementType()))
      continue;
    Operation *ready = reduce.getInput().getDefiningOp();
    if (ready)
      ready = block.findAncestorOpInBlock(*ready);
    Operation *firstUse = block.getTerminator();
    for (Operation *user : reduce->getUsers())
      if (Operation *top = block.findAncestorOpInBlock(*user))
        if (top->isBeforeInBlock(firstUse))
          firstUse = top;
    groups[{reduce.getMeshAttr(), reduce.getAxesAttr(), type.getElementType()}]
        .push_back({reduce, ready, firstUse});
  }
  for (auto &[key, members] : groups) {
    llvm::stable_sort(members, [](const Member &a, const Member &b) {
      return b.ready && a.ready != b.ready && precedes(a.ready, b.ready);
    });
    SmallVector<Member> bucket;
    int64_t bytes = 0;
    for (Member &m : members) {
      int64_t size = tensorBytes(m.op.getType());
      // A use of a member before this operand is computed would wait for
      // it: the bucket is reduced here.
      bool blocks = llvm::any_of(bucket, [&](const Member &earlier) {
        return !precedes(m.ready, earlier.firstUse);
      });
      if (!bucket.empty() && (blocks || bytes + size > capacity)) {
        flush(bucket);
        bucket.clear();
        bytes = 0;
      }
      bucket.push_back(m);
      bytes += size;
    }
    flush(bucket);
  }
}

void Bucketer::flush(MutableArrayRef<Member> bucket) {
  if (bucket.size() < 2)
    return;
  Operation *last = bucket.back().ready;
  OpBuilder b(&block, block.begin());
  if (last)
    b.setInsertionPointAfter(last);
  Location loc = bucket.back().op.getLoc();
  Type element = bucket.front().op.getType().getElementType();
  SmallVector<Value> flat;
  int64_t total = 0;
  for (Member &m : bucket) {
    auto type = cast<RankedTensorType>(m.op.getType());
    flat.push_back(nn::ReshapeOp::create(
        b, m.op.getLoc(),
        RankedTensorType::get({type.getNumElements()}, element),
        m.op.getInput()));
    total += type.getNumElements();
  }
  auto flatType = RankedTensorType::get({total}, element);
  Value joined = nn::ConcatOp::create(b, loc, flatType, flat, uint64_t(0));
  AllReduceOp first = bucket.front().op;
  auto reduced =
      AllReduceOp::create(b, loc, flatType, joined, first.getMeshAttr(),
                          first.getAxesAttr(), first.getReductionAttr());
  reduced->setAttr(
      kReasonAttr,
      b.getStringAttr(
          "a bucket of " + std::to_string(bucket.size()) + " sums (" +
          std::to_string(tensorBytes(flatType)) + " bytes), from " +
          first->getAttrOfType<StringAttr>(kReasonAttr).getValue().str()));
  int64_t offset = 0;
  for (Member &m : bucket) {
    auto type = cast<RankedTensorType>(m.op.getType());
    int64_t count = type.getNumElements();
    b.setInsertionPoint(m.firstUse);
    Value piece = nn::SliceOp::create(
        b, m.op.getLoc(), RankedTensorType::get({count}, element), reduced,
        ArrayRef<int64_t>{offset}, ArrayRef<int64_t>{offset + count},
        ArrayRef<int64_t>{1});
    m.op.getResult().replaceAllUsesWith(
        nn::ReshapeOp::create(b, m.op.getLoc(), type, piece));
    m.op.erase();
    offset += count;
  }
}

struct BucketCollectivesPass
    : mlir::partita::impl::BucketCollectivesPassBase<BucketCollectivesPass> {
  using BucketCollectivesPassBase::BucketCollectivesPassBase;

  void runOnOperation() override {
    if (bucketBytes <= 0)
      return;
    getOperation().walk([&](Operation *op) {
      if (isa<func::FuncOp, StageOp>(op) && op->getNumRegions() == 1 &&
          !op->getRegion(0).empty())
        Bucketer(op->getRegion(0).front(), bucketBytes).run();
    });
  }
};

} // namespace
