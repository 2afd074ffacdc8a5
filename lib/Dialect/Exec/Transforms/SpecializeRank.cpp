//===- SpecializeRank.cpp - one rank's program of an SPMD function --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Everything of the exec stage that depends on which rank runs the program
// happens here, so that the later passes and the translation see one fixed
// program: the rank's pipeline stages inlined, its axis indices and block
// indices constant, its groups and peers global ranks.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Exec/Transforms/Passes.h"

#include "mlir/IR/Matchers.h"
#include "partita/Dialect/Dist/IR/DistDialect.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Exec/IR/ExecOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <functional>

namespace mlir::partita {
#define GEN_PASS_DEF_SPECIALIZERANKPASS
#include "partita/Dialect/Exec/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

/// Where a rank sits in the mesh of a partitioned function.
class RankPlace {
public:
  RankPlace() = default;
  RankPlace(dist::MeshOp mesh, int64_t rank) : mesh(mesh) {
    sizes.assign(mesh.getAxisSizes().begin(), mesh.getAxisSizes().end());
    coords.resize(sizes.size());
    for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
      coords[i] = rank % sizes[i];
      rank /= sizes[i];
    }
  }

  /// The rank's coordinate on `axis`; 0 when the mesh has no such axis.
  int64_t coordinate(StringRef axis) const {
    if (!mesh)
      return 0;
    std::optional<unsigned> i = mesh.getAxisIndex(axis);
    return i ? coords[*i] : 0;
  }

  /// The global rank whose coordinate on `axis` is `value`, the others
  /// equal this rank's.
  int32_t peer(StringRef axis, int64_t value) const {
    SmallVector<int64_t> c(coords);
    c[*mesh.getAxisIndex(axis)] = value;
    return linear(c);
  }

  /// The rank's position in the group spanned by `axes`.
  int64_t position(ArrayRef<StringRef> axes) const {
    int64_t p = 0;
    for (StringRef axis : axes) {
      unsigned i = *mesh.getAxisIndex(axis);
      p = p * sizes[i] + coords[i];
    }
    return p;
  }

  /// The ranks in the group spanned by `axes`.
  int64_t groupSize(ArrayRef<StringRef> axes) const {
    int64_t size = 1;
    for (StringRef axis : axes)
      size *= sizes[*mesh.getAxisIndex(axis)];
    return size;
  }

  /// The global ranks of the rank's group spanned by `axes`, in group order.
  SmallVector<int32_t> group(ArrayRef<StringRef> axes) const {
    SmallVector<int64_t> c(coords);
    SmallVector<int32_t> ranks;
    std::function<void(unsigned)> visit = [&](unsigned k) {
      if (k == axes.size()) {
        ranks.push_back(linear(c));
        return;
      }
      unsigned i = *mesh.getAxisIndex(axes[k]);
      for (int64_t v = 0; v < sizes[i]; ++v) {
        c[i] = v;
        visit(k + 1);
      }
    };
    visit(0);
    return ranks;
  }

private:
  int32_t linear(ArrayRef<int64_t> c) const {
    int64_t r = 0;
    for (size_t i = 0; i < sizes.size(); ++i)
      r = r * sizes[i] + c[i];
    return static_cast<int32_t>(r);
  }

  // Op accessors are not const; the handle itself is.
  mutable dist::MeshOp mesh;
  SmallVector<int64_t> sizes, coords;
};

bool hasPeer(Operation *op) {
  return isa<dist::SendOp, dist::RecvOp, dist::SendStartOp, dist::RecvStartOp>(
      op);
}

class Specializer {
public:
  Specializer(func::FuncOp func, const RankPlace &place, int64_t rank)
      : func(func), place(place), rank(rank) {}

  LogicalResult run();

private:
  void recordBindings();
  void recordInitialBlocks();
  LogicalResult selectStages();
  void foldRankDependent();

  func::FuncOp func;
  const RankPlace &place;
  int64_t rank;
};

/// A training step's parameter holds the rank's block of its initial
/// value: each dimension's (parts, block), which the translator cuts from
/// the initializer.
void Specializer::recordInitialBlocks() {
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    if (!func.getArgAttr(i, nn::NNDialect::kInitialValueAttrName))
      continue;
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    auto sharding =
        func.getArgAttrOfType<dist::ShardingAttr>(i, dist::kShardingAttr);
    SmallVector<int64_t> blocks;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      SmallVector<StringRef> axes;
      if (sharding)
        axes = llvm::to_vector(sharding.getAxesOfDim(d));
      blocks.push_back(axes.empty() ? 1 : place.groupSize(axes));
      blocks.push_back(axes.empty() ? 0 : place.position(axes));
    }
    func.setArgAttr(i, exec::ExecDialect::kInitialBlocksAttr,
                    DenseI64ArrayAttr::get(func.getContext(), blocks));
  }
}

void Specializer::recordBindings() {
  MLIRContext *context = func.getContext();
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, "onnx.name");
    func.setArgAttr(i, exec::ExecDialect::kBindingAttr,
                    name ? name : StringAttr::get(context, "input" + Twine(i)));
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto name = func.getResultAttrOfType<StringAttr>(i, "onnx.name");
    func.setResultAttr(i, exec::ExecDialect::kBindingAttr,
                       name ? name
                            : StringAttr::get(context, "output" + Twine(i)));
  }
}

LogicalResult Specializer::selectStages() {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  // A stage runs on the ranks whose coordinate on its axis is its index.
  auto runsHere = [&](dist::StageOp stageOp) {
    return static_cast<int64_t>(stageOp.getIndex()) ==
           place.coordinate(stageOp.getAxis());
  };
  llvm::BitVector elsewhere(func.getNumResults());
  SmallVector<Attribute> elsewhereNames;
  for (auto stageOp :
       llvm::make_early_inc_range(body.getOps<dist::StageOp>())) {
    if (runsHere(stageOp)) {
      // This rank runs the body where the stage stood.
      Block &inner = stageOp.getBody();
      Operation *yield = inner.getTerminator();
      stageOp->replaceAllUsesWith(yield->getOperands());
      yield->erase();
      body.getOperations().splice(stageOp->getIterator(),
                                  inner.getOperations());
      stageOp.erase();
      continue;
    }
    for (OpOperand &use : stageOp->getUses()) {
      Operation *owner = use.getOwner();
      if (owner == ret) {
        elsewhere.set(use.getOperandNumber());
        continue;
      }
      // Another stage of the other ranks (an interleaved chunk) may read it.
      auto ownerStage = owner->getParentOfType<dist::StageOp>();
      if (!ownerStage || runsHere(ownerStage))
        return owner->emitError()
               << "uses a value of pipeline stage " << stageOp.getIndex()
               << ", which rank " << rank << " does not run";
    }
  }
  for (unsigned i : elsewhere.set_bits())
    elsewhereNames.push_back(
        func.getResultAttr(i, exec::ExecDialect::kBindingAttr));
  // Results other ranks compute leave the function; their bindings are
  // listed so the program's outputs stay explained.
  for (int i = static_cast<int>(elsewhere.size()) - 1; i >= 0; --i)
    if (elsewhere.test(i))
      ret->eraseOperand(i);
  if (failed(func.eraseResults(elsewhere)))
    return failure();
  // Last first: a later stage may read an earlier one's results.
  SmallVector<dist::StageOp> others(body.getOps<dist::StageOp>());
  for (dist::StageOp stageOp : llvm::reverse(others))
    stageOp.erase();
  if (!elsewhereNames.empty())
    func->setAttr(exec::ExecDialect::kOutputsElsewhereAttr,
                  ArrayAttr::get(func.getContext(), elsewhereNames));
  return success();
}

/// Folds the compares and wheres that read a rank constant, and what they
/// fold to, with their folders; constants a fold makes are placed at the
/// folded op (not hoisted), so the program keeps its order.
void Specializer::foldRankDependent() {
  // An op may come back once another of its operands folded.
  SmallVector<Operation *> worklist;
  llvm::SmallPtrSet<Operation *, 8> erased;
  llvm::SetVector<Operation *> made;
  auto addUsers = [&](Value value) {
    for (Operation *user : value.getUsers())
      if (isa<nn::CompareOp, nn::WhereOp>(user))
        worklist.push_back(user);
  };
  OpBuilder builder(func.getContext());
  auto *nnDialect = func.getContext()->getLoadedDialect<nn::NNDialect>();
  func.walk([&](dist::AxisIndexOp index) {
    builder.setInsertionPoint(index);
    auto type = cast<RankedTensorType>(index.getType());
    int64_t position = place.position(index.getGroupAxes());
    auto value = DenseElementsAttr::get(type, ArrayRef<int64_t>(position));
    auto constant = nn::ConstantOp::create(builder, index.getLoc(), value);
    index.replaceAllUsesWith(constant.getResult());
    index.erase();
    addUsers(constant.getResult());
  });
  for (size_t next = 0; next < worklist.size(); ++next) {
    Operation *op = worklist[next];
    if (erased.contains(op))
      continue;
    SmallVector<Attribute> operands;
    for (Value operand : op->getOperands()) {
      Attribute attr;
      matchPattern(operand, m_Constant(&attr));
      operands.push_back(attr);
    }
    SmallVector<OpFoldResult> folded;
    if (failed(op->fold(operands, folded)) || folded.empty())
      continue;
    builder.setInsertionPoint(op);
    SmallVector<Value> replacements;
    for (auto [result, fold] : llvm::zip(op->getResults(), folded)) {
      if (auto value = dyn_cast<Value>(fold)) {
        replacements.push_back(value);
        continue;
      }
      Operation *constant = nnDialect->materializeConstant(
          builder, cast<Attribute>(fold), result.getType(), op->getLoc());
      if (!constant)
        return;
      made.insert(constant);
      replacements.push_back(constant->getResult(0));
    }
    op->replaceAllUsesWith(replacements);
    for (Value value : replacements)
      addUsers(value);
    erased.insert(op);
    op->erase();
  }
  for (Operation *constant : made)
    if (constant->use_empty())
      constant->erase();
}

LogicalResult Specializer::run() {
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "the exec lowering needs a single-block function";
  recordBindings();
  recordInitialBlocks();
  if (failed(selectStages()))
    return failure();
  // A KV cache stays with the stage that writes it: the other stages' ranks
  // do not bind it.
  llvm::BitVector otherCaches(func.getNumArguments());
  for (BlockArgument arg : func.getArguments())
    if (arg.use_empty() &&
        func.getArgAttr(arg.getArgNumber(), nn::NNDialect::kKvCacheAttrName))
      otherCaches.set(arg.getArgNumber());
  if (failed(func.eraseArguments(otherCaches)))
    return failure();
  foldRankDependent();
  func.walk([&](Operation *op) {
    if (auto slice = dyn_cast<dist::AllSliceOp>(op)) {
      OpBuilder builder(slice);
      int64_t parts = *slice.getGroupSize();
      auto block = exec::SliceBlockOp::create(
          builder, slice.getLoc(), slice.getType(), slice.getInput(),
          slice.getSliceDim(), place.position(slice.getGroupAxes()), parts);
      slice.replaceAllUsesWith(block.getResult());
      slice.erase();
      return;
    }
    Builder builder(op->getContext());
    if (dist::isGroupCollective(op)) {
      auto axes = dist::getStringRefs(op->getAttrOfType<ArrayAttr>("axes"));
      op->setAttr(exec::ExecDialect::kGroupAttr,
                  builder.getDenseI32ArrayAttr(place.group(axes)));
    } else if (hasPeer(op)) {
      StringRef axis = op->getAttrOfType<StringAttr>("axis").getValue();
      int64_t peer = op->getAttrOfType<IntegerAttr>("peer").getInt();
      op->setAttr(exec::ExecDialect::kPeerAttr,
                  builder.getI32IntegerAttr(place.peer(axis, peer)));
    }
  });
  return success();
}

struct SpecializeRankPass
    : public mlir::partita::impl::SpecializeRankPassBase<SpecializeRankPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    dist::MeshOp mesh;
    auto meshes = module.getOps<dist::MeshOp>();
    if (!meshes.empty())
      mesh = *meshes.begin();
    int64_t worldSize = mesh ? mesh.getNumDevices() : 1;
    if (static_cast<int64_t>(rank) < 0 || rank >= worldSize) {
      module.emitError() << "rank " << static_cast<int64_t>(rank)
                         << " is not one of the " << worldSize
                         << " ranks of the mesh";
      return signalPassFailure();
    }
    RankPlace place = mesh ? RankPlace(mesh, rank) : RankPlace();
    Builder builder(module.getContext());
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (failed(Specializer(func, place, rank).run()))
        return signalPassFailure();
      func->setAttr(exec::ExecDialect::kRankAttr,
                    builder.getI64IntegerAttr(rank));
      func->setAttr(exec::ExecDialect::kWorldSizeAttr,
                    builder.getI64IntegerAttr(worldSize));
    }
  }
};

} // namespace
