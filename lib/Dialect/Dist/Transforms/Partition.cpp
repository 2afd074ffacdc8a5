//===- Partition.cpp - global program to the program of every device ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Walks the function in order. Each value maps to its local value and the
// sharding that local value has. For each op, the factor assignment comes
// from its result shardings (propagation's choice), and the op's
// `partition` hook (ShardingRuleOpInterface) builds its local form through
// a PartitionContext that this file implements. The default hook reshards
// every operand to what that assignment needs and clones the op with local
// result types; nn.attention (as a ring) and nn.constant build their own.
// Reshards are built from collectives in a fixed order: partial axes first
// (reduce-scatter where the target splits a dimension over them, else
// all-reduce), then axes that move between dimensions (all-to-all), then
// axes a dimension loses (all-gather) and gains (all-slice).
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::partita {
#define GEN_PASS_DEF_PARTITIONPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

/// How a person would name `op` in a message: its op name and the ONNX
/// node it came from, if any.
std::string describe(Operation *op) {
  // The strategy's annotation of a function result.
  if (isa<AnnotateOp>(op) && op->hasOneUse())
    if (auto ret = dyn_cast<func::ReturnOp>(*op->user_begin())) {
      unsigned i = op->use_begin()->getOperandNumber();
      auto func = cast<func::FuncOp>(ret->getParentOp());
      if (auto name = func.getResultAttrOfType<StringAttr>(i, "onnx.name"))
        return "output '" + name.str() + "'";
      return "result " + std::to_string(i);
    }
  ElementsAttr value;
  if (matchPattern(op, m_Constant(&value)))
    if (StringRef name = nn::getWeightName(value); !name.empty())
      return "weight '" + name.str() + "'";
  std::string text = op->getName().getStringRef().str();
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      loc = fused.getLocations().front();
  if (auto name = dyn_cast<NameLoc>(loc))
    text += " '" + name.getName().str() + "'";
  return text;
}

/// Removes the plan's attributes from a local op: they describe the global
/// one.
void dropPlan(Operation *op) {
  op->removeAttr(kResultShardingsAttr);
  op->removeAttr(kRingAttr);
  op->removeAttr(kSplitCostsAttr);
}

/// The constant of the ring's sequence order (or its inverse) that `gather`
/// reads its indices from, if it is one of the annotation pass's
/// permutations.
bool isSequencePermutation(nn::GatherOp gather) {
  Operation *indices = gather.getIndices().getDefiningOp();
  return indices && indices->hasAttr(kSequenceOrderAttr);
}

/// With ring attention's zigzag layout (`dist.sequence_order`), the
/// annotation pass permutes the sequence of the inputs on entry and puts
/// the outputs back in order on exit. The program in between must then
/// compute on the permuted rows what it computed on the rows in order:
/// every value indexed by sequence position must be permuted alike. That
/// holds where each op treats the sequence position by position (a
/// parallel, reduction, normalization or key/value factor), every operand
/// on the sequence is itself permuted (a constant only if it is split over
/// the ring axis, which partitioning then lays out in the ring's order),
/// and causal attention runs as ring attention (which compares the global
/// positions of the layout). A sequence merged into another dimension, a
/// gather or an opaque op along it, a constant or a computed value on it
/// that is not permuted (a position embedding the propagation left
/// replicated), causal attention over the whole permuted sequence: any of
/// these would give a wrong answer. `run` returns the first such op and
/// why, or an empty string.
class SequenceOrderCheck {
public:
  SequenceOrderCheck(MeshOp mesh, StringRef axis, int64_t length)
      : mesh(mesh), axis(axis), length(length) {}
  std::string run(func::FuncOp func);

private:
  std::string checkReturn(func::ReturnOp ret);
  std::string visitPermutation(nn::GatherOp gather);
  void visitConstant(Operation *constant);
  void visitAnnotation(Operation *op);
  std::string visitOp(Operation *op);
  std::string findSequenceFactors(Operation *op, const ShardingRule &rule,
                                  llvm::SmallDenseSet<unsigned> &sequence);
  std::string checkOperandsPermuted(Operation *op, const ShardingRule &rule,
                                    const llvm::SmallDenseSet<unsigned> &seq);
  std::string checkOrdered(nn::ShardingRuleOpInterface op,
                           const ShardingRule &rule,
                           const llvm::SmallDenseSet<unsigned> &sequence);
  void markResults(Operation *op, const ShardingRule &rule,
                   const llvm::SmallDenseSet<unsigned> &sequence);

  bool isPermuted(Value value, int64_t dim) {
    auto it = permuted.find(value);
    return it != permuted.end() && it->second[dim];
  }
  bool anyPermuted(Value value) {
    auto it = permuted.find(value);
    return it != permuted.end() && llvm::is_contained(it->second, true);
  }
  static int64_t rankOf(Value value) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    return type ? type.getRank() : 0;
  }

  MeshOp mesh;
  StringRef axis;
  int64_t length;
  /// Per value, which of its dimensions are the permuted sequence.
  llvm::DenseMap<Value, SmallVector<bool>> permuted;
};

std::string SequenceOrderCheck::run(func::FuncOp func) {
  for (Operation &op : func.getBody().front()) {
    std::string why;
    auto gather = dyn_cast<nn::GatherOp>(op);
    if (auto ret = dyn_cast<func::ReturnOp>(op))
      why = checkReturn(ret);
    else if (gather && isSequencePermutation(gather))
      why = visitPermutation(gather);
    else if (op.hasTrait<OpTrait::ConstantLike>())
      visitConstant(&op);
    else if (isa<AnnotateOp, ReshardOp>(op))
      visitAnnotation(&op);
    else if (llvm::any_of(op.getOperands(),
                          [&](Value v) { return anyPermuted(v); }))
      why = visitOp(&op);
    if (!why.empty())
      return why;
  }
  return "";
}

std::string SequenceOrderCheck::checkReturn(func::ReturnOp ret) {
  for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
    auto gather = value.getDefiningOp<nn::GatherOp>();
    if (anyPermuted(value) && !(gather && isSequencePermutation(gather)))
      return "result " + std::to_string(i) +
             " would be returned in the ring's order";
  }
  return "";
}

/// The annotation pass's permutation of an input, or the one that puts an
/// output back in order.
std::string SequenceOrderCheck::visitPermutation(nn::GatherOp gather) {
  int64_t dim = gather.getAxis();
  if (isa<BlockArgument>(gather.getData())) {
    SmallVector<bool> dims(rankOf(gather.getResult()), false);
    dims[dim] = true;
    permuted[gather.getResult()] = dims;
  } else if (!isPermuted(gather.getData(), dim)) {
    return describe(gather.getData().getDefiningOp()
                        ? gather.getData().getDefiningOp()
                        : gather.getOperation()) +
           " gives an output whose sequence is not in the ring's order";
  }
  return "";
}

/// A constant is laid out in the ring's order along the dimensions split
/// over the ring axis (ConstantOp's partition hook).
void SequenceOrderCheck::visitConstant(Operation *constant) {
  if (constant->hasAttr(kSequenceOrderAttr))
    return;
  Value result = constant->getResult(0);
  auto type = cast<RankedTensorType>(result.getType());
  ShardingAttr sharding = getValueSharding(result, mesh);
  SmallVector<bool> dims(type.getRank(), false);
  for (int64_t d = 0; d < type.getRank(); ++d)
    dims[d] = type.getDimSize(d) == length &&
              llvm::is_contained(sharding.getAxesOfDim(d), axis);
  permuted[result] = dims;
}

void SequenceOrderCheck::visitAnnotation(Operation *op) {
  if (auto it = permuted.find(op->getOperand(0)); it != permuted.end()) {
    SmallVector<bool> dims = it->second;
    permuted[op->getResult(0)] = dims;
  }
}

std::string SequenceOrderCheck::visitOp(Operation *op) {
  auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return describe(op) + " reads the sequence";
  ShardingRule rule = ruleOp.getShardingRule();
  // The factors that are the sequence: those of the permuted dimensions.
  llvm::SmallDenseSet<unsigned> sequence;
  if (std::string why = findSequenceFactors(op, rule, sequence); !why.empty())
    return why;
  for (unsigned f : sequence) {
    FactorKind kind = rule.getFactor(f).kind;
    if (kind == FactorKind::Lookup || kind == FactorKind::Opaque)
      return describe(op) + " reads the sequence in order (" +
             stringifyFactorKind(kind).str() + " factor)";
  }
  if (std::string why = checkOperandsPermuted(op, rule, sequence); !why.empty())
    return why;
  if (std::string why = checkOrdered(ruleOp, rule, sequence); !why.empty())
    return why;
  markResults(op, rule, sequence);
  return "";
}

std::string
SequenceOrderCheck::findSequenceFactors(Operation *op, const ShardingRule &rule,
                                        llvm::SmallDenseSet<unsigned> &seq) {
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    for (int64_t d = 0; d < rankOf(operand); ++d) {
      if (!isPermuted(operand, d))
        continue;
      SmallVector<unsigned> candidates;
      for (unsigned f : rule.getOperands()[i][d])
        if (rule.getFactor(f).size == length)
          candidates.push_back(f);
      if (candidates.size() != 1)
        return describe(op) + " merges the sequence into another dimension";
      seq.insert(candidates.front());
    }
  return "";
}

std::string SequenceOrderCheck::checkOperandsPermuted(
    Operation *op, const ShardingRule &rule,
    const llvm::SmallDenseSet<unsigned> &sequence) {
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    for (int64_t d = 0; d < rankOf(operand); ++d)
      if (!isPermuted(operand, d) &&
          llvm::any_of(rule.getOperands()[i][d],
                       [&](unsigned f) { return sequence.contains(f); }))
        return describe(op) + " combines the permuted sequence with " +
               (matchPattern(operand, m_Constant())
                    ? "a constant that is not split over " + axis.str()
                    : "a value that is not permuted") +
               " (operand " + std::to_string(i) + ")";
  return "";
}

/// An op that compares positions along the sequence (causal attention)
/// is right on permuted rows only when its partition hook compares the
/// layout's global positions: as ring attention, its first ordered factor
/// (the query sequence) split over the ring.
std::string SequenceOrderCheck::checkOrdered(
    nn::ShardingRuleOpInterface op, const ShardingRule &rule,
    const llvm::SmallDenseSet<unsigned> &sequence) {
  SmallVector<unsigned> ordered = op.getOrderedFactors(rule);
  if (ordered.empty())
    return "";
  bool ring = false;
  if (op->hasAttr(kRingAttr)) {
    SmallVector<ShardingAttr> operands, results;
    for (Value operand : op->getOperands())
      operands.push_back(getValueSharding(operand, mesh));
    for (Value result : op->getResults())
      results.push_back(getValueSharding(result, mesh));
    ring = !inferAssignment(rule, operands, results, mesh)[ordered.front()]
                .empty();
  }
  if (!ring ||
      !llvm::all_of(ordered, [&](unsigned f) { return sequence.contains(f); }))
    return describe(op) +
           " is causal but does not run as ring attention over the "
           "permuted sequence (its query sequence is not split over " +
           axis.str() + ")";
  return "";
}

void SequenceOrderCheck::markResults(
    Operation *op, const ShardingRule &rule,
    const llvm::SmallDenseSet<unsigned> &sequence) {
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    SmallVector<bool> dims(rankOf(result), false);
    for (int64_t d = 0; d < rankOf(result); ++d)
      dims[d] = llvm::any_of(rule.getResults()[i][d],
                             [&](unsigned f) { return sequence.contains(f); });
    permuted[result] = dims;
  }
}

/// Undoes the annotation pass's zigzag layout: the inputs keep their order,
/// and the plan says why the layout is contiguous.
void dropSequenceOrder(ModuleOp module, const std::string &why) {
  SmallVector<nn::GatherOp> gathers;
  module.walk([&](nn::GatherOp gather) {
    if (isSequencePermutation(gather))
      gathers.push_back(gather);
  });
  for (nn::GatherOp gather : gathers) {
    Operation *indices = gather.getIndices().getDefiningOp();
    gather.getResult().replaceAllUsesWith(gather.getData());
    gather.erase();
    if (indices->use_empty())
      indices->erase();
  }
  module->removeAttr(kSequenceOrderAttr);
  MLIRContext *context = module.getContext();
  Builder b(context);
  if (auto plan =
          module->getAttrOfType<SequenceParallelAttr>(kSequenceParallelAttr)) {
    FloatAttr contiguous = plan.getContiguousImbalance();
    module->setAttr(kSequenceParallelAttr,
                    SequenceParallelAttr::get(
                        context, plan.getMode(), plan.getAxis(),
                        plan.getRanks(), plan.getCausal(), b.getBoolAttr(false),
                        contiguous ? contiguous : plan.getImbalance(),
                        contiguous));
  }
  SmallVector<Attribute> remarks;
  if (auto list = module->getAttrOfType<ArrayAttr>(kRemarksAttr))
    remarks.append(list.begin(), list.end());
  remarks.push_back(b.getStringAttr(
      "--sp-mode ring keeps the sequence contiguous instead of zigzag, "
      "which balances causal work across ranks: " +
      why));
  module->setAttr(kRemarksAttr, b.getArrayAttr(remarks));
}

/// `sharding` with `axes` added to its partial axes.
ShardingAttr withPartialAxes(ShardingAttr sharding, ArrayRef<StringRef> axes) {
  SmallVector<SmallVector<StringRef>> dims;
  for (int64_t d = 0; d < sharding.getRank(); ++d)
    dims.push_back(sharding.getAxesOfDim(d));
  SmallVector<StringRef> partial = sharding.getPartialAxisNames();
  for (StringRef axis : axes)
    if (!llvm::is_contained(partial, axis))
      partial.push_back(axis);
  return ShardingAttr::get(sharding.getContext(), sharding.getMesh().getValue(),
                           dims, partial);
}

/// Builds the collectives that move a local value from one sharding to
/// another, in the fixed order of the file comment. `dims` and `partial`
/// track the value's sharding after each step.
class ReshardBuilder {
public:
  ReshardBuilder(OpBuilder &b, Location loc, MeshOp mesh,
                 RankedTensorType global, ShardingAttr from, ShardingAttr to,
                 const std::string &reason)
      : b(b), loc(loc), mesh(mesh),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())), global(global),
        to(to), why(reason + ": it has " + formatSharding(from) + ", needs " +
                    formatSharding(to)),
        partial(from.getPartialAxisNames()) {
    for (int64_t d = 0; d < from.getRank(); ++d)
      dims.push_back(from.getAxesOfDim(d));
  }

  Value build(Value value);

private:
  void addPartial();
  void reducePartial();
  void findMoves();
  bool tryMoveToDim(int64_t d, int64_t e);
  void gatherLost();
  void sliceGained();

  /// The local type under the sharding built so far.
  RankedTensorType currentType() {
    return ShardingAttr::get(b.getContext(), mesh.getSymName(), dims, partial)
        .getLocalType(global, mesh);
  }
  ArrayAttr axesAttr(ArrayRef<StringRef> axes) {
    return b.getStrArrayAttr(axes);
  }
  /// Marks a collective with why it is there; returns its result.
  Value tag(Operation *op) {
    op->setAttr(kReasonAttr, b.getStringAttr(why));
    return op->getResult(0);
  }
  /// Whether some dimension is still split over `axis`.
  bool isHeld(StringRef axis) {
    return llvm::any_of(dims, [&](const SmallVector<StringRef> &dim) {
      return llvm::is_contained(dim, axis);
    });
  }

  OpBuilder &b;
  Location loc;
  MeshOp mesh;
  FlatSymbolRefAttr meshRef;
  RankedTensorType global;
  ShardingAttr to;
  std::string why;
  Value value;
  SmallVector<SmallVector<StringRef>> dims;
  SmallVector<StringRef> partial;
  /// Per dimension, the axes it loses (a suffix of its axes) and gains.
  SmallVector<SmallVector<StringRef>> lose, gain;
};

Value ReshardBuilder::build(Value input) {
  value = input;
  addPartial();
  reducePartial();
  findMoves();
  for (int64_t d = 0; d < to.getRank(); ++d) {
    if (lose[d].empty())
      continue;
    for (int64_t e = 0; e < to.getRank(); ++e)
      if (tryMoveToDim(d, e))
        break;
  }
  gatherLost();
  sliceGained();
  return value;
}

/// 0. Partial sums the target wants and the value lacks: every device of
/// the group but the first contributes zero (a bias entering a partial
/// matmul result is added once).
void ReshardBuilder::addPartial() {
  SmallVector<StringRef> add;
  for (StringRef axis : to.getPartialAxisNames())
    if (!llvm::is_contained(partial, axis))
      add.push_back(axis);
  if (add.empty())
    return;
  Value position =
      AxisIndexOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()),
                          meshRef, axesAttr(add));
  Value first =
      nn::CompareOp::create(b, loc, RankedTensorType::get({}, b.getI1Type()),
                            nn::CompareDirection::EQ, position,
                            scalarConstant(b, loc, b.getI64Type(), 0));
  auto type = cast<RankedTensorType>(value.getType());
  value = nn::WhereOp::create(b, loc, type, first, value,
                              scalarConstant(b, loc, type.getElementType(), 0));
  partial.append(add.begin(), add.end());
}

/// 1. Partial sums the target does not keep: a reduce-scatter where the
/// target splits a dimension over exactly those axes after the ones it
/// has, else an all-reduce.
void ReshardBuilder::reducePartial() {
  SmallVector<StringRef> keep = to.getPartialAxisNames();
  SmallVector<StringRef> reduce;
  for (StringRef axis : partial)
    if (!llvm::is_contained(keep, axis))
      reduce.push_back(axis);
  if (reduce.empty())
    return;
  std::optional<int64_t> scatterDim;
  for (int64_t d = 0; d < to.getRank() && !scatterDim; ++d) {
    SmallVector<StringRef> want = to.getAxesOfDim(d);
    SmallVector<StringRef> have = dims[d];
    have.append(reduce.begin(), reduce.end());
    if (want == have)
      scatterDim = d;
  }
  llvm::erase_if(partial,
                 [&](StringRef a) { return llvm::is_contained(reduce, a); });
  auto sum = ReductionKindAttr::get(b.getContext(), ReductionKind::Sum);
  if (scatterDim) {
    dims[*scatterDim].append(reduce.begin(), reduce.end());
    value = tag(ReduceScatterOp::create(b, loc, currentType(), value, meshRef,
                                        axesAttr(reduce), sum,
                                        b.getI64IntegerAttr(*scatterDim)));
  } else {
    value = tag(AllReduceOp::create(b, loc, value.getType(), value, meshRef,
                                    axesAttr(reduce), sum));
  }
}

/// 2. What each dimension loses (a suffix of its axes) and gains.
void ReshardBuilder::findMoves() {
  int64_t rank = to.getRank();
  lose.assign(rank, {});
  gain.assign(rank, {});
  for (int64_t d = 0; d < rank; ++d) {
    SmallVector<StringRef> want = to.getAxesOfDim(d);
    size_t common = 0;
    while (common < dims[d].size() && common < want.size() &&
           dims[d][common] == want[common])
      ++common;
    lose[d].assign(dims[d].begin() + common, dims[d].end());
    gain[d].assign(want.begin() + common, want.end());
  }
}

/// Axes that leave dimension `d` for the end of dimension `e`'s gains:
/// slice what `e` gains first, then one all-to-all moves the rest. Returns
/// whether it moved them.
bool ReshardBuilder::tryMoveToDim(int64_t d, int64_t e) {
  if (e == d || gain[e].size() < lose[d].size() ||
      !llvm::equal(ArrayRef(gain[e]).take_back(lose[d].size()), lose[d]))
    return false;
  SmallVector<StringRef> first(ArrayRef(gain[e]).drop_back(lose[d].size()));
  if (llvm::any_of(first, [&](StringRef axis) { return isHeld(axis); }))
    return false; // Another dimension holds it until it is gathered.
  if (!first.empty()) {
    dims[e].append(first.begin(), first.end());
    value = tag(AllSliceOp::create(b, loc, currentType(), value, meshRef,
                                   axesAttr(first), b.getI64IntegerAttr(e)));
  }
  dims[d].resize(dims[d].size() - lose[d].size());
  dims[e].append(lose[d].begin(), lose[d].end());
  value = tag(AllToAllOp::create(b, loc, currentType(), value, meshRef,
                                 axesAttr(lose[d]), b.getI64IntegerAttr(e),
                                 b.getI64IntegerAttr(d)));
  lose[d].clear();
  gain[e].clear();
  return true;
}

/// 3. Axes a dimension loses: all-gather.
void ReshardBuilder::gatherLost() {
  for (int64_t d = 0; d < to.getRank(); ++d) {
    if (lose[d].empty())
      continue;
    dims[d].resize(dims[d].size() - lose[d].size());
    value = tag(AllGatherOp::create(b, loc, currentType(), value, meshRef,
                                    axesAttr(lose[d]), b.getI64IntegerAttr(d)));
  }
}

/// 4. Axes a dimension gains: all-slice (no communication).
void ReshardBuilder::sliceGained() {
  for (int64_t d = 0; d < to.getRank(); ++d) {
    if (gain[d].empty())
      continue;
    dims[d].append(gain[d].begin(), gain[d].end());
    value = tag(AllSliceOp::create(b, loc, currentType(), value, meshRef,
                                   axesAttr(gain[d]), b.getI64IntegerAttr(d)));
  }
}

/// The sets of operands `op` is jointly linear in, its other operands held
/// fixed: f(sum_j a_j) = sum_j f(a_j) over the set's operands. Partial sums
/// over the same axes in every operand of a set may pass through the op
/// unreduced (Partitioner::findPassThrough).
SmallVector<SmallVector<unsigned>> getLinearOperandSets(Operation *op) {
  auto all = [&] {
    return llvm::to_vector(llvm::seq<unsigned>(0, op->getNumOperands()));
  };
  if (isa<nn::AddOp, nn::SubOp, nn::ConcatOp>(op))
    return {all()};
  if (isa<nn::NegOp, nn::ReshapeOp, nn::TransposeOp, nn::BroadcastToOp,
          nn::SliceOp, nn::SplitOp, nn::CumsumOp, nn::RopeOp>(op))
    return {{0}};
  if (auto reduce = dyn_cast<nn::ReduceOp>(op))
    if (reduce.getKind() == nn::ReduceKind::Sum ||
        reduce.getKind() == nn::ReduceKind::Mean)
      return {{0}};
  if (isa<nn::WhereOp>(op))
    return {{1, 2}};
  if (isa<nn::MulOp>(op))
    return {{0}, {1}};
  if (isa<nn::DivOp>(op))
    return {{0}};
  // A bias is added to the product once: it is partial with the product.
  if (auto matmul = dyn_cast<nn::MatmulOp>(op))
    return matmul.getBias() ? SmallVector<SmallVector<unsigned>>{{0, 2}, {1, 2}}
                            : SmallVector<SmallVector<unsigned>>{{0}, {1}};
  return {};
}

class OpContext;

/// Rewrites one function into the program of every device: local values
/// and their shardings, op by op, through each op's partition hook.
class Partitioner {
public:
  explicit Partitioner(MeshOp mesh) : mesh(mesh) {}
  LogicalResult run(func::FuncOp func);

private:
  friend class OpContext;

  /// The local type of a global type under `sharding`.
  RankedTensorType localType(RankedTensorType global, ShardingAttr sharding) {
    return sharding.getLocalType(global, mesh);
  }
  /// Moves `value` (local, global type `global`) from sharding `from` to
  /// `to`. `reason` says who needs it, for `dist.reason`.
  Value reshard(OpBuilder &b, Location loc, Value value,
                RankedTensorType global, ShardingAttr from, ShardingAttr to,
                const std::string &reason) {
    if (from == to)
      return value;
    return ReshardBuilder(b, loc, mesh, global, from, to, reason).build(value);
  }
  /// The local value of global `value`, resharded to `to` for `user`.
  Value localOperand(OpBuilder &b, Operation *user, unsigned index,
                     ShardingAttr to);
  /// Records `localValue` with `sharding` as the local form of `global`.
  void setLocal(Value global, Value localValue, ShardingAttr sharding) {
    local[global] = localValue;
    shardingOf[global] = sharding;
  }

  SmallVector<Type> localizeArguments(Block &body);
  LogicalResult partitionOp(Operation *op);
  LogicalResult partitionAnnotation(Operation *op);
  LogicalResult
  partitionByRule(OpBuilder &b, Operation *op, const ShardingRule &rule,
                  const FactorAxes &assignment,
                  nn::PartitionContext::LocalOperandsFn adjust = nullptr);
  /// Partial sums that flow through `op` unreduced: the operands that
  /// keep them and their axes.
  struct PassThrough {
    SmallVector<unsigned> operands;
    SmallVector<StringRef> axes;
    /// The op's assignment without those axes.
    FactorAxes assignment;
  };
  std::optional<PassThrough> findPassThrough(Operation *op,
                                             const ShardingRule &rule,
                                             const FactorAxes &assignment);
  /// The op on its local operands; each result's local sharding is
  /// `computed[i]` (what the op computes), or the recorded one.
  LogicalResult cloneLocal(OpBuilder &b, Operation *op,
                           ArrayRef<Value> operands,
                           ArrayRef<ShardingAttr> computed = {});
  LogicalResult partitionLookup(OpBuilder &b, Operation *op,
                                const ShardingRule &rule,
                                const FactorAxes &assignment,
                                unsigned lookupFactor,
                                SmallVectorImpl<Value> &operands);
  void partitionNormalization(OpBuilder &b, Operation *op,
                              ArrayRef<StringRef> axes,
                              ArrayRef<Value> operands, ShardingAttr computed);
  Value maskLookupIndices(OpBuilder &b, Location loc, Value indices,
                          int64_t rows, int64_t groups,
                          ArrayRef<StringRef> axes, Value &held);
  SmallVector<Type> localizeResults(func::FuncOp func, func::ReturnOp ret);

  MeshOp mesh;
  llvm::DenseMap<Value, Value> local;
  llvm::DenseMap<Value, ShardingAttr> shardingOf;
  llvm::DenseMap<std::pair<Value, Attribute>, Value> resharded;
};

/// The partitioner as the partitioning hook of one op sees it.
class OpContext final : public nn::PartitionContext {
public:
  OpContext(Partitioner &partitioner, Operation *op, const ShardingRule &rule,
            const FactorAxes &assignment)
      : p(partitioner), op(op), rule(rule), assignment(assignment), b(op) {}

  OpBuilder &getBuilder() override { return b; }
  const FactorAxes &getAssignment() override { return assignment; }
  LogicalResult partitionByRule() override {
    return p.partitionByRule(b, op, rule, assignment);
  }
  LogicalResult partitionByRule(LocalOperandsFn adjust) override {
    return p.partitionByRule(b, op, rule, assignment, adjust);
  }
  Value getOperand(unsigned index, const FactorAxes &assign) override {
    ShardingAttr need =
        getTensorSharding(rule, ShardingRule::operand(index), assign, p.mesh,
                          /*withPartial=*/false);
    return p.localOperand(b, op, index, need);
  }
  LogicalResult setResult(unsigned index, Value value) override;
  LogicalResult setResult(unsigned index, Value value,
                          const FactorAxes &assign) override;
  void setWholeResult(unsigned index, Value whole) override;
  /// Records `value` as result `index` split as `sharding` (`how` names
  /// the split in the error when its type is not that split's local type).
  LogicalResult recordResult(unsigned index, Value value, ShardingAttr sharding,
                             StringRef how);
  Operation *cloneWithoutPlan() override {
    Operation *clone = b.clone(*op);
    dropPlan(clone);
    return clone;
  }
  int64_t getGroupSize(ArrayRef<StringRef> axes) override {
    return *p.mesh.getGroupSize(axes);
  }
  Value getPosition(ArrayRef<StringRef> axes) override {
    return AxisIndexOp::create(b, op->getLoc(),
                               RankedTensorType::get({}, b.getI64Type()),
                               getMeshRef(), b.getStrArrayAttr(axes));
  }
  Value shiftAlongRing(Value value, ArrayRef<StringRef> axes,
                       const Twine &why) override;
  SmallVector<StringRef> getOperandAxes(unsigned index, int64_t dim) override {
    ShardingAttr sharding = getValueSharding(op->getOperand(index), p.mesh);
    if (!sharding || dim >= sharding.getRank())
      return {};
    return llvm::to_vector(sharding.getAxesOfDim(dim));
  }
  std::pair<Value, Value> dispatchRows(Value rows, Value destinations,
                                       ArrayRef<StringRef> axes, int64_t bound,
                                       const Twine &why) override;
  Value returnRows(Value rows, Value counts, Value destinations,
                   ArrayRef<StringRef> axes, const Twine &why) override;
  Value sumOver(Value value, ArrayRef<StringRef> axes,
                const Twine &why) override;
  bool hasRingPlan() override { return op->hasAttr(kRingAttr); }
  ArrayRef<int64_t> getSequenceOrder() override {
    if (SequenceOrderAttr layout = getSequenceLayout())
      return layout.getOrder().asArrayRef();
    return {};
  }
  ElementsAttr layOutSequence(unsigned index, ElementsAttr value) override;

private:
  FlatSymbolRefAttr getMeshRef() {
    return FlatSymbolRefAttr::get(p.mesh.getSymNameAttr());
  }
  /// Marks communication `created` for the op with `why` (dist.reason).
  void giveReason(Operation *created, const Twine &why) {
    created->setAttr(kReasonAttr,
                     b.getStringAttr(describe(op) + ": " + why.str()));
  }
  SequenceOrderAttr getSequenceLayout() {
    return op->getParentOfType<ModuleOp>()->getAttrOfType<SequenceOrderAttr>(
        kSequenceOrderAttr);
  }

  Partitioner &p;
  Operation *op;
  const ShardingRule &rule;
  const FactorAxes &assignment;
  OpBuilder b;
};

LogicalResult OpContext::recordResult(unsigned index, Value value,
                                      ShardingAttr sharding, StringRef how) {
  Value result = op->getResult(index);
  if (value.getType() !=
      p.localType(cast<RankedTensorType>(result.getType()), sharding))
    return op->emitError() << "partitioning produced " << value.getType()
                           << " for result " << index << " where " << how << " "
                           << formatSharding(sharding);
  p.setLocal(result, value, sharding);
  return success();
}

LogicalResult OpContext::setResult(unsigned index, Value value) {
  return recordResult(index, value,
                      getValueSharding(op->getResult(index), p.mesh),
                      "the plan expects it split as");
}

LogicalResult OpContext::setResult(unsigned index, Value value,
                                   const FactorAxes &assign) {
  return recordResult(index, value,
                      getTensorSharding(rule, ShardingRule::result(index),
                                        assign, p.mesh,
                                        /*withPartial=*/false),
                      "it is split as");
}

void OpContext::setWholeResult(unsigned index, Value whole) {
  Value result = op->getResult(index);
  ShardingAttr to = getValueSharding(result, p.mesh);
  auto type = cast<RankedTensorType>(result.getType());
  ShardingAttr replicated = ShardingAttr::getReplicated(
      op->getContext(), p.mesh.getSymName(), type.getRank());
  p.setLocal(
      result,
      p.reshard(b, op->getLoc(), whole, type, replicated, to, describe(op)),
      to);
}

Value OpContext::shiftAlongRing(Value value, ArrayRef<StringRef> axes,
                                const Twine &why) {
  auto permute = CollectivePermuteOp::create(
      b, op->getLoc(), value.getType(), value, getMeshRef(),
      b.getStrArrayAttr(axes), b.getI64IntegerAttr(1));
  giveReason(permute, why);
  return permute;
}

std::pair<Value, Value> OpContext::dispatchRows(Value rows, Value destinations,
                                                ArrayRef<StringRef> axes,
                                                int64_t bound,
                                                const Twine &why) {
  auto type = cast<RankedTensorType>(rows.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = bound;
  auto counts = RankedTensorType::get({getGroupSize(axes)}, b.getI64Type());
  auto dispatch =
      DispatchOp::create(b, op->getLoc(), type.clone(shape), counts, rows,
                         getMeshRef(), b.getStrArrayAttr(axes), destinations);
  giveReason(dispatch, why);
  return {dispatch.getResult(), dispatch.getCounts()};
}

Value OpContext::returnRows(Value rows, Value counts, Value destinations,
                            ArrayRef<StringRef> axes, const Twine &why) {
  auto type = cast<RankedTensorType>(rows.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = cast<RankedTensorType>(destinations.getType()).getDimSize(0);
  auto back = DispatchReturnOp::create(b, op->getLoc(), type.clone(shape), rows,
                                       getMeshRef(), b.getStrArrayAttr(axes),
                                       counts, destinations);
  giveReason(back, why);
  return back;
}

Value OpContext::sumOver(Value value, ArrayRef<StringRef> axes,
                         const Twine &why) {
  auto sum = AllReduceOp::create(
      b, op->getLoc(), value.getType(), value, getMeshRef(),
      b.getStrArrayAttr(axes),
      ReductionKindAttr::get(b.getContext(), ReductionKind::Sum));
  giveReason(sum, why);
  return sum;
}

ElementsAttr OpContext::layOutSequence(unsigned index, ElementsAttr value) {
  SequenceOrderAttr layout = getSequenceLayout();
  if (!layout || op->hasAttr(kSequenceOrderAttr))
    return nullptr;
  StringAttr axis = layout.getAxis();
  DenseI64ArrayAttr order = layout.getOrder();
  ShardingAttr sharding = getValueSharding(op->getResult(index), p.mesh);
  auto type = cast<RankedTensorType>(value.getType());
  for (int64_t d = 0; d < sharding.getRank(); ++d) {
    if (!llvm::is_contained(sharding.getAxesOfDim(d), axis.getValue()) ||
        type.getDimSize(d) != static_cast<int64_t>(order.size()))
      continue;
    std::string name = nn::getWeightName(value).str();
    if (name.empty())
      name = "constant";
    value = permuteAlongDim(value, d, order.asArrayRef(), name + ".ring");
  }
  return value;
}

Value Partitioner::localOperand(OpBuilder &b, Operation *user, unsigned index,
                                ShardingAttr to) {
  Value global = user->getOperand(index);
  // Users that need the same sharding share one reshard (an all-reduced
  // embedding feeds both the norm and the residual add).
  Value &cached = resharded[{global, to}];
  if (!cached)
    cached = reshard(
        b, user->getLoc(), local.lookup(global),
        cast<RankedTensorType>(global.getType()), shardingOf.lookup(global), to,
        isa<AnnotateOp, ReshardOp>(user)
            ? describe(user)
            : describe(user) + " operand " + std::to_string(index));
  return cached;
}

LogicalResult Partitioner::partitionOp(Operation *op) {
  if (isa<AnnotateOp, ReshardOp>(op))
    return partitionAnnotation(op);
  auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return op->emitError() << "partitioning does not handle this op";
  ShardingRule rule = ruleOp.getShardingRule();
  SmallVector<ShardingAttr> operandShardings, resultShardings;
  for (Value operand : op->getOperands())
    operandShardings.push_back(shardingOf.lookup(operand));
  for (Value result : op->getResults())
    resultShardings.push_back(getValueSharding(result, mesh));
  FactorAxes assignment =
      inferAssignment(rule, operandShardings, resultShardings, mesh);
  // The op builds its local form; the default hook calls partitionByRule.
  OpContext context(*this, op, rule, assignment);
  return ruleOp.partition(context);
}

LogicalResult Partitioner::partitionAnnotation(Operation *op) {
  OpBuilder b(op);
  ShardingAttr to = getValueSharding(op->getResult(0), mesh);
  setLocal(op->getResult(0), localOperand(b, op, 0, to), to);
  return success();
}

LogicalResult Partitioner::partitionByRule(
    OpBuilder &b, Operation *op, const ShardingRule &rule,
    const FactorAxes &planned, nn::PartitionContext::LocalOperandsFn adjust) {
  std::optional<PassThrough> pass = findPassThrough(op, rule, planned);
  const FactorAxes &assignment = pass ? pass->assignment : planned;
  SmallVector<Value> operands;
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    ShardingAttr need = getOperandNeed(rule, i, assignment, mesh);
    if (pass && llvm::is_contained(pass->operands, i))
      need = withPartialAxes(need, pass->axes);
    operands.push_back(localOperand(b, op, i, need));
  }
  // An op that adjusts its local operands (nn.moe) has placed its
  // lookups itself; the others look up as partitionLookup says.
  if (adjust) {
    if (failed(adjust(b, operands)))
      return failure();
  } else {
    for (unsigned f = 0; f < rule.getNumFactors(); ++f)
      if (rule.getFactor(f).kind == FactorKind::Lookup &&
          !assignment[f].empty())
        return partitionLookup(b, op, rule, assignment, f, operands);
  }
  // The results hold what the assignment computes: the sharding
  // propagation recorded, unless an operand arrived without the split its
  // partial sums come from (a partial operand reduced, or gathered, for
  // the op to read whole), in which case the result is whole too and the
  // users must not reduce it again.
  SmallVector<ShardingAttr> computed;
  for (unsigned i = 0; i < op->getNumResults(); ++i) {
    computed.push_back(getTensorSharding(rule, ShardingRule::result(i),
                                         assignment, mesh,
                                         /*withPartial=*/true));
    if (pass)
      computed.back() = withPartialAxes(computed.back(), pass->axes);
  }
  // A norm over split dimensions: its statistics are all-reduced.
  SmallVector<StringRef> normalizationAxes;
  for (unsigned f = 0; f < rule.getNumFactors(); ++f)
    if (rule.getFactor(f).kind == FactorKind::Normalization)
      normalizationAxes.append(assignment[f].begin(), assignment[f].end());
  if (!normalizationAxes.empty()) {
    partitionNormalization(b, op, normalizationAxes, operands, computed[0]);
    return success();
  }
  if (failed(cloneLocal(b, op, operands, computed)))
    return failure();
  // A split max or min: each device reduced its block; the blocks' results
  // combine by the same reduction, at once.
  for (unsigned f = 0; f < rule.getNumFactors(); ++f) {
    const ShardingFactor &factor = rule.getFactor(f);
    if (factor.kind != FactorKind::Reduction || !isSelfReduced(factor) ||
        assignment[f].empty())
      continue;
    auto kind = ReductionKindAttr::get(b.getContext(),
                                       factor.combiner == FactorCombiner::Max
                                           ? ReductionKind::Max
                                           : ReductionKind::Min);
    SmallVector<StringRef> axes(assignment[f].begin(), assignment[f].end());
    for (auto [i, result] : llvm::enumerate(op->getResults())) {
      Value blockwise = local.lookup(result);
      auto reduced =
          AllReduceOp::create(b, op->getLoc(), blockwise.getType(), blockwise,
                              FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                              b.getStrArrayAttr(axes), kind);
      reduced->setAttr(kReasonAttr, b.getStringAttr(describe(op) + ": its " +
                                                    stringifyFactorCombiner(
                                                        factor.combiner) +
                                                    " over a split dimension"));
      setLocal(result, reduced.getResult(), computed[i]);
    }
  }
  return success();
}

/// A partial sum is reduced where it is read by an op that is not linear
/// in it; an op that is (getLinearOperandSets) computes on the partial
/// values, and its result is the partial sum, reduced later. That pays
/// where sums meet: the cotangents of a value used several times (a tied
/// weight's two uses over dp, the query, key and value projections' input
/// gradients over tp) are added before one reduction, not each reduced.
/// It is taken only where it moves fewer bytes, or as many through a
/// reshape or transpose (on the way to a sum) or a concat of several:
/// - every operand of the set is partial over the same axes;
/// - each is read only here (another reader would reduce it anyway, and
///   the result a second time);
/// - the results are smaller than those operands (a broadcast reduces
///   first).
/// Where the plan splits a dimension of the op over those axes (Megatron-SP
/// splits the residual stream's sequence over tp), the op computes whole
/// instead and its result is reduce-scattered later. The op's other
/// operands are read as without partial sums.
std::optional<Partitioner::PassThrough>
Partitioner::findPassThrough(Operation *op, const ShardingRule &rule,
                             const FactorAxes &assignment) {
  auto partialAxes = [&](Value v) {
    ShardingAttr s = shardingOf.lookup(v);
    return s ? s.getPartialAxisNames() : SmallVector<StringRef>();
  };
  if (llvm::all_of(op->getOperands(),
                   [&](Value v) { return partialAxes(v).empty(); }))
    return std::nullopt;
  auto localCount = [&](Value global) {
    return localType(cast<RankedTensorType>(global.getType()),
                     shardingOf.lookup(global))
        .getNumElements();
  };
  for (ArrayRef<unsigned> set : getLinearOperandSets(op)) {
    SmallVector<StringRef> axes = partialAxes(op->getOperand(set.front()));
    if (axes.empty())
      continue;
    llvm::sort(axes);
    auto sameAxes = [&](unsigned i) {
      SmallVector<StringRef> other = partialAxes(op->getOperand(i));
      llvm::sort(other);
      return other == axes;
    };
    bool othersWhole = llvm::all_of(
        llvm::seq<unsigned>(0, op->getNumOperands()), [&](unsigned i) {
          return llvm::is_contained(set, i) ||
                 partialAxes(op->getOperand(i)).empty();
        });
    bool readOnce = llvm::all_of(
        set, [&](unsigned i) { return op->getOperand(i).hasOneUse(); });
    if (!othersWhole || !readOnce || !llvm::all_of(set, sameAxes))
      continue;
    // Each factor keeps its axes up to the first partial one.
    FactorAxes unsplit = assignment;
    bool dropped = false;
    for (AxisList &used : unsplit) {
      auto first = llvm::find_if(
          used, [&](StringRef a) { return llvm::is_contained(axes, a); });
      dropped |= first != used.end();
      used.erase(first, used.end());
    }
    int64_t in = 0, out = 0;
    for (unsigned i : set)
      in += localCount(op->getOperand(i));
    for (auto [i, result] : llvm::enumerate(op->getResults()))
      out += localType(cast<RankedTensorType>(result.getType()),
                       getTensorSharding(rule, ShardingRule::result(i), unsplit,
                                         mesh,
                                         /*withPartial=*/false))
                 .getNumElements();
    // Moving a reduction later for the same bytes pays only where an op
    // merges reductions: a concat of several (a fused parameter's segment
    // gradients, partita-split-fused-parameters) reduces once, and through
    // a reshape or a transpose it may reach a sum of two cotangents.
    // Through arithmetic it would not, and would start later: a gradient
    // scaled by the learning rate in the optimizer would be reduced there,
    // not where the backward computes it, and overlap nothing.
    bool merges = (isa<nn::ReshapeOp, nn::TransposeOp>(op) ||
                   (isa<nn::ConcatOp>(op) && set.size() > 1)) &&
                  !dropped;
    if (out > in || (out == in && !merges))
      continue;
    return PassThrough{SmallVector<unsigned>(set),
                       partialAxes(op->getOperand(set.front())),
                       std::move(unsplit)};
  }
  return std::nullopt;
}

/// The op cloned onto its local operands, with local result types.
LogicalResult Partitioner::cloneLocal(OpBuilder &b, Operation *op,
                                      ArrayRef<Value> operands,
                                      ArrayRef<ShardingAttr> computed) {
  IRMapping mapping;
  for (auto [old, now] : llvm::zip(op->getOperands(), operands))
    mapping.map(old, now);
  Operation *clone = b.clone(*op, mapping);
  dropPlan(clone);
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    ShardingAttr sharding =
        i < computed.size() ? computed[i] : getValueSharding(result, mesh);
    auto global = cast<RankedTensorType>(result.getType());
    clone->getResult(i).setType(localType(global, sharding));
    setLocal(result, clone->getResult(i), sharding);
  }
  if (failed(fitShapeAttributes(clone, op)))
    return op->emitError() << "partitioning produced an invalid local op "
                              "(a compiler bug)";
  return success();
}

/// A split lookup factor: each device looks up the rows it holds, with the
/// indices shifted by its first row, and zeroes the rows it does not hold
/// (a partial sum, reduced by the user's reshard).
LogicalResult Partitioner::partitionLookup(OpBuilder &b, Operation *op,
                                           const ShardingRule &rule,
                                           const FactorAxes &assignment,
                                           unsigned lookupFactor,
                                           SmallVectorImpl<Value> &operands) {
  // The table is the operand holding the lookup factor; the indices are
  // the other one, and appear in the result where the looked-up dimension
  // was.
  std::optional<unsigned> table, tableDim;
  for (auto [i, tensor] : llvm::enumerate(rule.getOperands()))
    for (auto [d, factors] : llvm::enumerate(tensor))
      if (llvm::is_contained(factors, lookupFactor)) {
        table = i;
        tableDim = d;
      }
  if (!table || op->getNumOperands() != 2 || op->getNumResults() != 1)
    return op->emitError() << "partitioning supports a split lookup only on "
                              "an op with a table and an index operand";
  unsigned indexOperand = 1 - *table;
  auto indexType = cast<RankedTensorType>(operands[indexOperand].getType());
  auto tableType = cast<RankedTensorType>(operands[*table].getType());
  Location loc = op->getLoc();
  std::optional<int64_t> groupSize =
      mesh.getGroupSize(assignment[lookupFactor]);
  if (!groupSize)
    return op->emitError() << "the lookup's axes are not axes of the mesh";
  Value held;
  operands[indexOperand] = maskLookupIndices(
      b, loc, operands[indexOperand], tableType.getDimSize(*tableDim),
      *groupSize, assignment[lookupFactor], held);

  IRMapping mapping;
  for (auto [old, now] : llvm::zip(op->getOperands(), operands))
    mapping.map(old, now);
  Operation *lookup = b.clone(*op, mapping);
  dropPlan(lookup);
  ShardingAttr resultSharding = getValueSharding(op->getResult(0), mesh);
  auto resultType = localType(
      cast<RankedTensorType>(op->getResult(0).getType()), resultSharding);
  lookup->getResult(0).setType(resultType);

  // The indices' dimensions sit in the result where the table's looked-up
  // dimension was.
  SmallVector<int64_t> heldShape(*tableDim, 1);
  heldShape.append(indexType.getShape().begin(), indexType.getShape().end());
  heldShape.resize(resultType.getRank(), 1);
  Value heldView = nn::ReshapeOp::create(
      b, loc, RankedTensorType::get(heldShape, b.getI1Type()), held);
  Value zeroed = nn::WhereOp::create(
      b, loc, resultType, heldView, lookup->getResult(0),
      scalarConstant(b, loc, resultType.getElementType(), 0));
  setLocal(op->getResult(0), zeroed, resultSharding);
  return success();
}

/// A norm (nn.rms_norm, nn.layer_norm) whose normalized dimensions are
/// split over `axes`: each device sums its block's statistics and an
/// all-reduce completes them, one value per row, instead of gathering the
/// rows (Megatron's distributed norms of a split projection, such as
/// OLMo2's q/k norms). RMS: x * rsqrt(sum(x^2) / n + eps); layer norm: the
/// mean first, then the mean squared deviation from it (two passes, as the
/// kernel computes it). Statistics are computed in f32 whatever the storage
/// type, as the kernels accumulate.
void Partitioner::partitionNormalization(OpBuilder &b, Operation *op,
                                         ArrayRef<StringRef> axes,
                                         ArrayRef<Value> operands,
                                         ShardingAttr computed) {
  Location loc = op->getLoc();
  auto globalType = cast<RankedTensorType>(op->getResult(0).getType());
  int64_t axis = op->getAttrOfType<IntegerAttr>("axis").getInt();
  float epsilon =
      op->getAttrOfType<FloatAttr>("epsilon").getValue().convertToFloat();
  int64_t count = 1;
  for (int64_t d = axis; d < globalType.getRank(); ++d)
    count *= globalType.getDimSize(d);
  SmallVector<int64_t> reduced;
  for (int64_t d = axis; d < globalType.getRank(); ++d)
    reduced.push_back(d);
  Type f32 = b.getF32Type();
  auto inF32 = [&](Value value) -> Value {
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getElementType() == f32)
      return value;
    return nn::CastOp::create(b, loc, type.clone(f32), value);
  };
  Value x = inF32(operands[0]);
  auto localType = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> rowShape(localType.getShape());
  for (int64_t d : reduced)
    rowShape[d] = 1;
  auto rowType = RankedTensorType::get(rowShape, f32);
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  std::string reason = describe(op) + ": its statistics over a split "
                                      "normalized dimension";
  // The mean over the whole normalized dimensions of `value` (local).
  auto mean = [&](Value value) -> Value {
    Value sum = nn::ReduceOp::create(b, loc, rowType, nn::ReduceKind::Sum,
                                     value, ArrayRef<int64_t>(reduced),
                                     /*keepdims=*/true);
    auto all = AllReduceOp::create(
        b, loc, rowType, sum, meshRef, b.getStrArrayAttr(axes),
        ReductionKindAttr::get(b.getContext(), ReductionKind::Sum));
    all->setAttr(kReasonAttr, b.getStringAttr(reason));
    return nn::MulOp::create(b, loc, all,
                             scalarConstant(b, loc, f32, 1.0 / double(count)));
  };
  Value centered = x;
  if (isa<nn::LayerNormOp>(op))
    centered = nn::SubOp::create(b, loc, x, mean(x));
  Value variance =
      mean(nn::MulOp::create(b, loc, centered, centered).getResult());
  Value inverse = nn::RsqrtOp::create(
      b, loc,
      nn::AddOp::create(b, loc, variance,
                        scalarConstant(b, loc, f32, double(epsilon))));
  Value y = nn::MulOp::create(b, loc, centered, inverse);
  // The scale and (a layer norm's) bias, as the op's operands 1 and 2.
  for (auto [i, operand] : llvm::enumerate(operands.drop_front())) {
    Value term = inF32(operand);
    y = i == 0 ? nn::MulOp::create(b, loc, y, term).getResult()
               : nn::AddOp::create(b, loc, y, term).getResult();
  }
  auto resultType = cast<RankedTensorType>(operands[0].getType());
  if (resultType.getElementType() != f32)
    y = nn::CastOp::create(b, loc, resultType, y);
  setLocal(op->getResult(0), y, computed);
}

/// The indices into this device's `rows` rows of a table split `groups`
/// ways along `axes`; `held` is set to which indices it holds.
///
/// The lookup keeps the unsharded op's index semantics on every device: a
/// negative index counts from the end of the whole table, and an index
/// outside [-total, total) reaches each device's kernel unchanged, where it
/// is out of range of the local block too, so every device refuses the
/// input as the unsharded kernel does. Valid indices are shifted by this
/// device's first row, and the rows it does not hold are masked.
Value Partitioner::maskLookupIndices(OpBuilder &b, Location loc, Value indices,
                                     int64_t rows, int64_t groups,
                                     ArrayRef<StringRef> axes, Value &held) {
  auto indexType = cast<RankedTensorType>(indices.getType());
  Type indexElement = indexType.getElementType();
  int64_t total = rows * groups;
  Value negative = nn::CompareOp::create(
      b, loc, indexType.clone(b.getI1Type()), nn::CompareDirection::LT, indices,
      scalarConstant(b, loc, indexElement, 0));
  Value fromEnd = nn::AddOp::create(
      b, loc, indices, scalarConstant(b, loc, indexElement, double(total)));
  Value wrapped =
      nn::WhereOp::create(b, loc, indexType, negative, fromEnd, indices);
  Value position = AxisIndexOp::create(
      b, loc, RankedTensorType::get({}, b.getI64Type()),
      FlatSymbolRefAttr::get(mesh.getSymNameAttr()), b.getStrArrayAttr(axes));
  if (!indexElement.isInteger(64))
    position = nn::CastOp::create(
        b, loc, RankedTensorType::get({}, indexElement), position);
  Value offset = nn::MulOp::create(
      b, loc, position, scalarConstant(b, loc, indexElement, double(rows)));
  Value shifted = nn::SubOp::create(b, loc, wrapped, offset);
  held = indicesWithin(b, loc, shifted, 0, rows);
  Value valid = indicesWithin(b, loc, wrapped, 0, total);
  Value notHeld =
      nn::WhereOp::create(b, loc, indexType, valid,
                          scalarConstant(b, loc, indexElement, 0), indices);
  return nn::WhereOp::create(b, loc, indexType, held, shifted, notHeld);
}

/// Adds a local argument for each global one, at the end. The global ops
/// keep reading the global arguments, so that their sharding rules see
/// global shapes (a rule built from a local operand shape, such as a
/// concat of a sharded past key/value input, splits nothing). Returns the
/// local argument types.
SmallVector<Type> Partitioner::localizeArguments(Block &body) {
  SmallVector<Type> argTypes;
  for (BlockArgument arg : SmallVector<BlockArgument>(body.getArguments())) {
    Type type = arg.getType();
    if (auto tensor = dyn_cast<RankedTensorType>(type)) {
      ShardingAttr sharding = getValueSharding(arg, mesh);
      shardingOf[arg] = sharding;
      type = localType(tensor, sharding);
    }
    local[arg] = body.addArgument(type, arg.getLoc());
    argTypes.push_back(type);
  }
  return argTypes;
}

/// Replaces the return with one of local values, each resharded to the
/// result's `dist.sharding` (or what it has, partial sums reduced); returns
/// the local result types.
SmallVector<Type> Partitioner::localizeResults(func::FuncOp func,
                                               func::ReturnOp ret) {
  OpBuilder b(ret);
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
    auto type = cast<RankedTensorType>(value.getType());
    ShardingAttr want =
        func.getResultAttrOfType<ShardingAttr>(i, kShardingAttr);
    if (!want)
      want = shardingOf.lookup(value);
    if (want.isPartial()) {
      SmallVector<SmallVector<StringRef>> dims;
      for (int64_t d = 0; d < want.getRank(); ++d)
        dims.push_back(want.getAxesOfDim(d));
      want = ShardingAttr::get(func.getContext(), mesh.getSymName(), dims, {});
    }
    func.setResultAttr(i, kShardingAttr, want);
    Value localValue = reshard(b, ret.getLoc(), local.lookup(value), type,
                               shardingOf.lookup(value), want,
                               "function result " + std::to_string(i));
    results.push_back(localValue);
    resultTypes.push_back(localValue.getType());
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  return resultTypes;
}

LogicalResult Partitioner::run(func::FuncOp func) {
  Block &body = func.getBody().front();
  unsigned numGlobalArgs = body.getNumArguments();
  SmallVector<Type> argTypes = localizeArguments(body);
  SmallVector<Operation *> old;
  for (Operation &op : body.without_terminator())
    old.push_back(&op);
  for (Operation *op : old)
    if (failed(partitionOp(op)))
      return failure();
  SmallVector<Type> resultTypes =
      localizeResults(func, cast<func::ReturnOp>(body.getTerminator()));
  for (Operation *op : llvm::reverse(old)) {
    op->dropAllUses();
    op->erase();
  }
  for (BlockArgument arg : body.getArguments().take_front(numGlobalArgs))
    arg.replaceAllUsesWith(local.lookup(arg));
  body.eraseArguments(0, numGlobalArgs);
  func.setType(FunctionType::get(func.getContext(), argTypes, resultTypes));
  return success();
}

struct PartitionPass : mlir::partita::impl::PartitionPassBase<PartitionPass> {
  void runOnOperation() override {
    FailureOr<MeshOp> mesh = getModuleMesh(getOperation());
    if (failed(mesh))
      return signalPassFailure();
    if (!*mesh)
      return;
    ModuleOp module = getOperation();
    if (auto layout =
            module->getAttrOfType<SequenceOrderAttr>(kSequenceOrderAttr)) {
      StringRef axis = layout.getAxis().getValue();
      int64_t length = static_cast<int64_t>(layout.getOrder().size());
      for (auto func : module.getOps<func::FuncOp>()) {
        if (func.isExternal())
          continue;
        std::string why = SequenceOrderCheck(*mesh, axis, length).run(func);
        if (!why.empty()) {
          dropSequenceOrder(module, why);
          break;
        }
      }
    }
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() && failed(Partitioner(*mesh).run(func)))
        return signalPassFailure();
  }
};

} // namespace
