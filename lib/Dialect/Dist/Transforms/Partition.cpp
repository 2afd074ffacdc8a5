//===- Partition.cpp - global program to the program of every device ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Walks the function in order. Each value maps to its local value and the
// sharding that local value has. For each op, the factor assignment comes
// from its result shardings (propagation's choice); every operand is
// resharded to what that assignment needs, and the op is cloned with local
// result types. Reshards are built from collectives in a fixed order:
// partial axes first (reduce-scatter where the target splits a dimension
// over them, else all-reduce), then axes that move between dimensions
// (all-to-all), then axes a dimension loses (all-gather) and gains
// (all-slice).
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"

#include <cmath>
#include <limits>

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
  if (auto constant = dyn_cast<nn::ConstantOp>(op))
    if (StringRef name = nn::getWeightName(constant.getValue()); !name.empty())
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

class Partitioner {
public:
  explicit Partitioner(MeshOp mesh) : mesh(mesh) {}
  LogicalResult run(func::FuncOp func);

private:
  /// The local type of a global type under `sharding`.
  RankedTensorType localType(RankedTensorType global, ShardingAttr sharding) {
    return sharding.getLocalType(global, mesh);
  }
  /// Moves `value` (local, global type `global`) from sharding `from` to
  /// `to`. `reason` says who needs it, for `dist.reason`.
  Value reshard(OpBuilder &b, Location loc, Value value,
                RankedTensorType global, ShardingAttr from, ShardingAttr to,
                const std::string &reason);
  LogicalResult partitionOp(Operation *op);
  LogicalResult partitionLookup(Operation *op, const ShardingRule &rule,
                                const FactorAxes &assignment,
                                unsigned lookupFactor,
                                SmallVectorImpl<Value> &operands);
  LogicalResult partitionRing(nn::AttentionOp op, const ShardingRule &rule,
                              FactorAxes assignment);
  /// With ring attention's zigzag, a constant split over the ring axis is
  /// indexed by sequence position: lay it out in the ring's order.
  Operation *orderSequence(OpBuilder &b, nn::ConstantOp constant,
                           ShardingAttr sharding);
  /// The local value of global `value`, resharded to `to` for `user`.
  Value localOperand(OpBuilder &b, Operation *user, unsigned index,
                     ShardingAttr to);

  MeshOp mesh;
  llvm::DenseMap<Value, Value> local;
  llvm::DenseMap<Value, ShardingAttr> shardingOf;
  llvm::DenseMap<std::pair<Value, Attribute>, Value> resharded;
};

/// The constant of the ring's sequence order (or its inverse) that `gather`
/// reads its indices from, if it is one of the annotation pass's
/// permutations.
bool isSequencePermutation(nn::GatherOp gather) {
  auto indices = gather.getIndices().getDefiningOp<nn::ConstantOp>();
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
/// these would give a wrong answer. Returns the first such op and why, or
/// an empty string.
std::string checkSequenceOrder(func::FuncOp func, MeshOp mesh, StringRef axis,
                               int64_t length) {
  // Per value, which of its dimensions are the permuted sequence.
  llvm::DenseMap<Value, SmallVector<bool>> permuted;
  auto isPermuted = [&](Value value, int64_t dim) {
    auto it = permuted.find(value);
    return it != permuted.end() && it->second[dim];
  };
  auto anyPermuted = [&](Value value) {
    auto it = permuted.find(value);
    return it != permuted.end() && llvm::is_contained(it->second, true);
  };
  auto rankOf = [](Value value) -> int64_t {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    return type ? type.getRank() : 0;
  };
  for (Operation &op : func.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
        auto gather = value.getDefiningOp<nn::GatherOp>();
        if (anyPermuted(value) && !(gather && isSequencePermutation(gather)))
          return "result " + std::to_string(i) +
                 " would be returned in the ring's order";
      }
      continue;
    }
    if (auto gather = dyn_cast<nn::GatherOp>(op);
        gather && isSequencePermutation(gather)) {
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
      continue;
    }
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      if (constant->hasAttr(kSequenceOrderAttr))
        continue;
      auto type = cast<RankedTensorType>(constant.getType());
      ShardingAttr sharding = getValueSharding(constant.getResult(), mesh);
      SmallVector<bool> dims(type.getRank(), false);
      for (int64_t d = 0; d < type.getRank(); ++d)
        dims[d] = type.getDimSize(d) == length &&
                  llvm::is_contained(sharding.getAxesOfDim(d), axis);
      permuted[constant.getResult()] = dims;
      continue;
    }
    if (isa<AnnotateOp, ReshardOp>(op)) {
      if (auto it = permuted.find(op.getOperand(0)); it != permuted.end()) {
        SmallVector<bool> dims = it->second;
        permuted[op.getResult(0)] = dims;
      }
      continue;
    }
    if (llvm::none_of(op.getOperands(), anyPermuted))
      continue;
    auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
    if (!ruleOp)
      return describe(&op) + " reads the sequence";
    ShardingRule rule = ruleOp.getShardingRule();
    // The factors that are the sequence: those of the permuted dimensions.
    llvm::SmallDenseSet<unsigned> sequence;
    for (auto [i, operand] : llvm::enumerate(op.getOperands()))
      for (int64_t d = 0; d < rankOf(operand); ++d) {
        if (!isPermuted(operand, d))
          continue;
        SmallVector<unsigned> candidates;
        for (unsigned f : rule.getOperands()[i][d])
          if (rule.getFactor(f).size == length)
            candidates.push_back(f);
        if (candidates.size() != 1)
          return describe(&op) + " merges the sequence into another dimension";
        sequence.insert(candidates.front());
      }
    for (unsigned f : sequence) {
      FactorKind kind = rule.getFactor(f).kind;
      if (kind == FactorKind::Lookup || kind == FactorKind::Opaque)
        return describe(&op) + " reads the sequence in order (" +
               stringifyFactorKind(kind).str() + " factor)";
    }
    for (auto [i, operand] : llvm::enumerate(op.getOperands()))
      for (int64_t d = 0; d < rankOf(operand); ++d)
        if (!isPermuted(operand, d) &&
            llvm::any_of(rule.getOperands()[i][d],
                         [&](unsigned f) { return sequence.contains(f); }))
          return describe(&op) + " combines the permuted sequence with " +
                 (operand.getDefiningOp<nn::ConstantOp>()
                      ? "a constant that is not split over " + axis.str()
                      : "a value that is not permuted") +
                 " (operand " + std::to_string(i) + ")";
    if (auto attention = dyn_cast<nn::AttentionOp>(op);
        attention && attention.getCausal()) {
      unsigned querySeq = rule.getOperands()[0][2].front();
      unsigned keySeq = rule.getOperands()[1][2].front();
      bool ring = false;
      if (attention->hasAttr(kRingAttr)) {
        SmallVector<ShardingAttr> operands, results;
        for (Value operand : op.getOperands())
          operands.push_back(getValueSharding(operand, mesh));
        results.push_back(getValueSharding(attention.getResult(), mesh));
        ring =
            !inferAssignment(rule, operands, results, mesh)[querySeq].empty();
      }
      if (!ring || !sequence.contains(querySeq) || !sequence.contains(keySeq))
        return describe(&op) +
               " is causal but does not run as ring attention over the "
               "permuted sequence (its query sequence is not split over " +
               axis.str() + ")";
    }
    for (auto [i, result] : llvm::enumerate(op.getResults())) {
      SmallVector<bool> dims(rankOf(result), false);
      for (int64_t d = 0; d < rankOf(result); ++d)
        dims[d] = llvm::any_of(rule.getResults()[i][d], [&](unsigned f) {
          return sequence.contains(f);
        });
      permuted[result] = dims;
    }
  }
  return "";
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

/// An nn.constant of a scalar.
Value scalarConstant(OpBuilder &b, Location loc, Type element, double value) {
  auto type = RankedTensorType::get({}, element);
  Attribute attr;
  if (auto floatType = dyn_cast<FloatType>(element))
    attr = DenseElementsAttr::get(type, b.getFloatAttr(floatType, value));
  else
    attr = DenseElementsAttr::get(
        type, b.getIntegerAttr(element, static_cast<int64_t>(value)));
  return nn::ConstantOp::create(b, loc, cast<ElementsAttr>(attr));
}

Value Partitioner::reshard(OpBuilder &b, Location loc, Value value,
                           RankedTensorType global, ShardingAttr from,
                           ShardingAttr to, const std::string &reason) {
  if (from == to)
    return value;
  MLIRContext *context = b.getContext();
  FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  SmallVector<SmallVector<StringRef>> dims;
  for (int64_t d = 0; d < from.getRank(); ++d)
    dims.push_back(from.getAxesOfDim(d));
  SmallVector<StringRef> partial = from.getPartialAxisNames();
  auto currentType = [&] {
    return localType(
        global, ShardingAttr::get(context, mesh.getSymName(), dims, partial));
  };
  auto axesAttr = [&](ArrayRef<StringRef> axes) {
    return b.getStrArrayAttr(axes);
  };
  std::string why = reason + ": it has " + formatSharding(from) + ", needs " +
                    formatSharding(to);
  auto sum = ReductionKindAttr::get(context, ReductionKind::Sum);
  auto tag = [&](Operation *op) {
    op->setAttr(kReasonAttr, b.getStringAttr(why));
    return op->getResult(0);
  };

  // 0. Partial sums the target wants and the value lacks: every device of
  // the group but the first contributes zero (a bias entering a partial
  // matmul result is added once).
  SmallVector<StringRef> add;
  for (StringRef axis : to.getPartialAxisNames())
    if (!llvm::is_contained(partial, axis))
      add.push_back(axis);
  if (!add.empty()) {
    Value position =
        AxisIndexOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()),
                            meshRef, axesAttr(add));
    Value first =
        nn::CompareOp::create(b, loc, RankedTensorType::get({}, b.getI1Type()),
                              nn::CompareDirection::EQ, position,
                              scalarConstant(b, loc, b.getI64Type(), 0));
    auto type = cast<RankedTensorType>(value.getType());
    value =
        nn::WhereOp::create(b, loc, type, first, value,
                            scalarConstant(b, loc, type.getElementType(), 0));
    partial.append(add.begin(), add.end());
  }

  // 1. Partial sums the target does not keep.
  SmallVector<StringRef> keep = to.getPartialAxisNames();
  SmallVector<StringRef> reduce;
  for (StringRef axis : partial)
    if (!llvm::is_contained(keep, axis))
      reduce.push_back(axis);
  if (!reduce.empty()) {
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

  // 2. What each dimension loses (a suffix of its axes) and gains.
  int64_t rank = to.getRank();
  SmallVector<SmallVector<StringRef>> lose(rank), gain(rank);
  for (int64_t d = 0; d < rank; ++d) {
    SmallVector<StringRef> want = to.getAxesOfDim(d);
    size_t common = 0;
    while (common < dims[d].size() && common < want.size() &&
           dims[d][common] == want[common])
      ++common;
    lose[d].assign(dims[d].begin() + common, dims[d].end());
    gain[d].assign(want.begin() + common, want.end());
  }
  // Axes that leave one dimension for the end of another's gains: slice
  // what the other gains first, then one all-to-all moves the rest.
  auto held = [&](StringRef axis) {
    return llvm::any_of(dims, [&](const SmallVector<StringRef> &dim) {
      return llvm::is_contained(dim, axis);
    });
  };
  for (int64_t d = 0; d < rank; ++d) {
    if (lose[d].empty())
      continue;
    for (int64_t e = 0; e < rank; ++e) {
      if (e == d || gain[e].size() < lose[d].size() ||
          !llvm::equal(ArrayRef(gain[e]).take_back(lose[d].size()), lose[d]))
        continue;
      SmallVector<StringRef> first(ArrayRef(gain[e]).drop_back(lose[d].size()));
      if (llvm::any_of(first, held))
        continue; // Another dimension holds it until it is gathered.
      if (!first.empty()) {
        dims[e].append(first.begin(), first.end());
        value =
            tag(AllSliceOp::create(b, loc, currentType(), value, meshRef,
                                   axesAttr(first), b.getI64IntegerAttr(e)));
      }
      dims[d].resize(dims[d].size() - lose[d].size());
      dims[e].append(lose[d].begin(), lose[d].end());
      value = tag(AllToAllOp::create(b, loc, currentType(), value, meshRef,
                                     axesAttr(lose[d]), b.getI64IntegerAttr(e),
                                     b.getI64IntegerAttr(d)));
      lose[d].clear();
      gain[e].clear();
      break;
    }
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (lose[d].empty())
      continue;
    dims[d].resize(dims[d].size() - lose[d].size());
    value = tag(AllGatherOp::create(b, loc, currentType(), value, meshRef,
                                    axesAttr(lose[d]), b.getI64IntegerAttr(d)));
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (gain[d].empty())
      continue;
    dims[d].append(gain[d].begin(), gain[d].end());
    value = tag(AllSliceOp::create(b, loc, currentType(), value, meshRef,
                                   axesAttr(gain[d]), b.getI64IntegerAttr(d)));
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

LogicalResult Partitioner::partitionLookup(Operation *op,
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
  Value indices = operands[indexOperand];
  auto indexType = cast<RankedTensorType>(indices.getType());
  auto tableType = cast<RankedTensorType>(operands[*table].getType());
  OpBuilder b(op);
  Location loc = op->getLoc();
  Type indexElement = indexType.getElementType();
  int64_t rows = tableType.getDimSize(*tableDim);

  // The lookup keeps the unsharded op's index semantics on every device: a
  // negative index counts from the end of the whole table, and an index
  // outside [-total, total) reaches each device's kernel unchanged, where it
  // is out of range of the local block too, so every device refuses the
  // input as the unsharded kernel does. Valid indices are shifted by this
  // device's first row, and the rows it does not hold are masked.
  std::optional<int64_t> groupSize =
      mesh.getGroupSize(assignment[lookupFactor]);
  if (!groupSize)
    return op->emitError() << "the lookup's axes are not axes of the mesh";
  int64_t total = rows * *groupSize;
  auto boolType = indexType.clone(b.getI1Type());
  auto compare = [&](nn::CompareDirection direction, Value lhs,
                     int64_t bound) -> Value {
    return nn::CompareOp::create(
        b, loc, boolType, direction, lhs,
        scalarConstant(b, loc, indexElement, double(bound)));
  };
  // Operands are built one statement at a time: argument evaluation order
  // is unspecified, and the IR must not depend on the host compiler.
  auto inRange = [&](Value x, int64_t size) -> Value {
    Value atLeast = compare(nn::CompareDirection::GE, x, 0);
    Value below = compare(nn::CompareDirection::LT, x, size);
    return nn::AndOp::create(b, loc, atLeast, below);
  };
  Value negative = compare(nn::CompareDirection::LT, indices, 0);
  Value fromEnd = nn::AddOp::create(
      b, loc, indices, scalarConstant(b, loc, indexElement, double(total)));
  Value wrapped =
      nn::WhereOp::create(b, loc, indexType, negative, fromEnd, indices);
  Value position =
      AxisIndexOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()),
                          FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                          b.getStrArrayAttr(assignment[lookupFactor]));
  if (!indexElement.isInteger(64))
    position = nn::CastOp::create(
        b, loc, RankedTensorType::get({}, indexElement), position);
  Value offset = nn::MulOp::create(
      b, loc, position, scalarConstant(b, loc, indexElement, double(rows)));
  Value shifted = nn::SubOp::create(b, loc, wrapped, offset);
  Value held = inRange(shifted, rows);
  Value valid = inRange(wrapped, total);
  Value notHeld =
      nn::WhereOp::create(b, loc, indexType, valid,
                          scalarConstant(b, loc, indexElement, 0), indices);
  Value safe = nn::WhereOp::create(b, loc, indexType, held, shifted, notHeld);
  operands[indexOperand] = safe;

  IRMapping mapping;
  for (auto [old, now] : llvm::zip(op->getOperands(), operands))
    mapping.map(old, now);
  Operation *lookup = b.clone(*op, mapping);
  lookup->removeAttr(kResultShardingsAttr);
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
  local[op->getResult(0)] = zeroed;
  shardingOf[op->getResult(0)] = resultSharding;
  return success();
}

Operation *Partitioner::orderSequence(OpBuilder &b, nn::ConstantOp constant,
                                      ShardingAttr sharding) {
  auto module = constant->getParentOfType<ModuleOp>();
  auto layout = module->getAttrOfType<SequenceOrderAttr>(kSequenceOrderAttr);
  if (!layout || constant->hasAttr(kSequenceOrderAttr))
    return b.clone(*constant);
  StringAttr axis = layout.getAxis();
  DenseI64ArrayAttr order = layout.getOrder();
  ElementsAttr value = constant.getValue();
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
  return nn::ConstantOp::create(b, constant.getLoc(), value);
}

LogicalResult Partitioner::partitionRing(nn::AttentionOp op,
                                         const ShardingRule &rule,
                                         FactorAxes assignment) {
  // The query sequence's axes are the ring; keys, values and the key side
  // of the mask are split the same way and travel around it.
  unsigned querySeq = rule.getOperands()[0][2].front();
  unsigned keySeq = rule.getOperands()[1][2].front();
  AxisList ring = assignment[querySeq];
  if (ring.empty()) {
    op->removeAttr(kRingAttr);
    return partitionOp(op);
  }
  // A mask with a row per query and a column per key (a causal or
  // relative-position bias folded into the mask) stays with its query rows:
  // each device keeps its rows whole and, at every step, reads the columns
  // of the key block visiting it. A mask with one row for all queries is
  // split on keys and travels with them.
  constexpr unsigned kMaskOperand = 3;
  bool maskPerQuery =
      op.getMask() &&
      usesFactor(rule, ShardingRule::operand(kMaskOperand), querySeq) &&
      usesFactor(rule, ShardingRule::operand(kMaskOperand), keySeq);
  FactorAxes maskAssignment = assignment;
  assignment[keySeq] = ring;
  if (!maskPerQuery)
    maskAssignment[keySeq] = ring;
  OpBuilder b(op);
  Location loc = op.getLoc();
  SmallVector<Value> operands;
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    ShardingAttr need =
        getTensorSharding(rule, ShardingRule::operand(i),
                          i == kMaskOperand ? maskAssignment : assignment, mesh,
                          /*withPartial=*/false);
    operands.push_back(localOperand(b, op, i, need));
  }
  Value q = operands[0], k = operands[1], v = operands[2];
  Value mask = op.getMask() ? operands[kMaskOperand] : Value();
  // The mask travels only if it is split on the key dimension.
  bool maskTravels =
      mask && !maskPerQuery &&
      cast<RankedTensorType>(mask.getType()).getShape().back() !=
          cast<RankedTensorType>(op.getMask().getType()).getShape().back();
  FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  ArrayAttr axes = b.getStrArrayAttr(ring);
  int64_t ranks = *mesh.getGroupSize(ring);
  auto qType = cast<RankedTensorType>(q.getType());
  int64_t rows = qType.getDimSize(2);

  // After `t` steps a device at ring position `i` holds the key block of
  // position (i - t) mod ranks; a per-query mask gives it those columns.
  Value ringIndexValue;
  auto ringIndex = [&]() -> Value {
    if (!ringIndexValue)
      ringIndexValue = AxisIndexOp::create(
          b, loc, RankedTensorType::get({}, b.getI64Type()), meshRef, axes);
    return ringIndexValue;
  };
  auto maskColumns = [&](int64_t t) -> Value {
    if (!maskPerQuery)
      return mask;
    auto maskType = cast<RankedTensorType>(mask.getType());
    SmallVector<int64_t> blocks(maskType.getShape());
    int64_t columns = blocks.back() / ranks;
    blocks.back() = ranks;
    blocks.push_back(columns);
    Value split = nn::ReshapeOp::create(b, loc, maskType.clone(blocks), mask);
    SmallVector<int64_t> visiting(ranks);
    for (int64_t i = 0; i < ranks; ++i)
      visiting[i] = (i - t + ranks) % ranks;
    Value table = nn::ConstantOp::create(
        b, loc,
        getIndexConstant(b.getContext(), {ranks}, visiting, "ring_blocks"));
    Value block =
        nn::GatherOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()),
                             table, ringIndex(), static_cast<int64_t>(0));
    SmallVector<int64_t> shape(maskType.getShape());
    shape.back() = columns;
    return nn::GatherOp::create(b, loc, maskType.clone(shape), split, block,
                                static_cast<int64_t>(maskType.getRank() - 1));
  };

  // Causal attention compares global positions: this device's rows are
  // row block `axis_index` of the ring's sequence order.
  Value qpos, kpos;
  if (op.getCausal()) {
    int64_t length = rows * ranks;
    SmallVector<int64_t> order(length);
    for (int64_t i = 0; i < length; ++i)
      order[i] = i;
    auto module = op->getParentOfType<ModuleOp>();
    if (auto layout =
            module->getAttrOfType<SequenceOrderAttr>(kSequenceOrderAttr)) {
      ArrayRef<int64_t> given = layout.getOrder().asArrayRef();
      order.assign(given.begin(), given.end());
    }
    Value table =
        nn::ConstantOp::create(b, loc,
                               getIndexConstant(b.getContext(), {ranks, rows},
                                                order, "ring_positions"));
    qpos = nn::GatherOp::create(b, loc,
                                RankedTensorType::get({rows}, b.getI64Type()),
                                table, ringIndex(), static_cast<int64_t>(0));
    kpos = qpos;
  }
  FloatAttr scale = b.getF32FloatAttr(op.getEffectiveScale());
  auto lseType = RankedTensorType::get(
      {qType.getDimSize(0), qType.getDimSize(1), rows}, b.getF32Type());
  auto outType =
      RankedTensorType::get({qType.getDimSize(0), qType.getDimSize(1), rows,
                             cast<RankedTensorType>(v.getType()).getDimSize(3)},
                            qType.getElementType());
  auto step = [&](Value key, Value value, Value stepMask, Value keyPos) {
    return nn::AttentionPartialOp::create(b, loc, TypeRange{outType, lseType},
                                          q, key, value, stepMask, qpos, keyPos,
                                          scale);
  };
  auto first = step(k, v, maskColumns(0), kpos);
  Value out = first.getResult(), lse = first.getLse();
  Type element = outType.getElementType();
  SmallVector<int64_t> column(lseType.getShape());
  column.push_back(1);
  auto columnType = RankedTensorType::get(column, b.getF32Type());
  auto asColumn = [&](Value x) -> Value {
    Value c = nn::ReshapeOp::create(b, loc, columnType, x);
    if (element != b.getF32Type())
      c = nn::CastOp::create(b, loc, RankedTensorType::get(column, element), c);
    return c;
  };
  auto scalar = [&](float value) -> Value {
    return nn::ConstantOp::create(b, loc,
                                  cast<ElementsAttr>(DenseElementsAttr::get(
                                      RankedTensorType::get({}, b.getF32Type()),
                                      b.getF32FloatAttr(value))));
  };
  auto boolLike = lseType.clone(b.getI1Type());
  for (int64_t t = 1; t < ranks; ++t) {
    // Pass the block on to the next device; receive the previous one's.
    auto rotate = [&](Value x) -> Value {
      auto permute = CollectivePermuteOp::create(
          b, loc, x.getType(), x, meshRef, axes, b.getI64IntegerAttr(1));
      permute->setAttr(kReasonAttr,
                       b.getStringAttr(describe(op) + ": ring attention step " +
                                       std::to_string(t)));
      return permute;
    };
    k = rotate(k);
    v = rotate(v);
    if (maskTravels)
      mask = rotate(mask);
    if (kpos)
      kpos = rotate(kpos);
    auto next = step(k, v, maskColumns(t), kpos);
    // Online-softmax merge of the two partial results; a row that has seen
    // no key yet (lse = -inf) takes weight 0, and 0/0 becomes 0.
    Value most = nn::MaxOp::create(b, loc, lse, next.getLse());
    Value none =
        nn::CompareOp::create(b, loc, boolLike, nn::CompareDirection::EQ, most,
                              scalar(-std::numeric_limits<float>::infinity()));
    Value shift = nn::WhereOp::create(b, loc, lseType, none, scalar(0), most);
    Value w1 = nn::ExpOp::create(b, loc, nn::SubOp::create(b, loc, lse, shift));
    Value w2 = nn::ExpOp::create(
        b, loc, nn::SubOp::create(b, loc, next.getLse(), shift));
    Value total = nn::AddOp::create(b, loc, w1, w2);
    Value empty = nn::CompareOp::create(
        b, loc, boolLike, nn::CompareDirection::EQ, total, scalar(0));
    Value safe = nn::WhereOp::create(b, loc, lseType, empty, scalar(1), total);
    Value sum = nn::AddOp::create(
        b, loc, nn::MulOp::create(b, loc, out, asColumn(w1)),
        nn::MulOp::create(b, loc, next.getResult(), asColumn(w2)));
    out = nn::DivOp::create(b, loc, sum, asColumn(safe));
    lse = nn::AddOp::create(b, loc, shift, nn::LogOp::create(b, loc, total));
  }
  ShardingAttr resultSharding = getValueSharding(op.getResult(), mesh);
  if (out.getType() !=
      resultSharding.getLocalType(cast<RankedTensorType>(op.getType()), mesh))
    return op.emitError() << "ring attention produced " << out.getType()
                          << " where the plan expects the result split as "
                          << formatSharding(resultSharding);
  local[op.getResult()] = out;
  shardingOf[op.getResult()] = resultSharding;
  return success();
}

LogicalResult Partitioner::partitionOp(Operation *op) {
  OpBuilder b(op);
  if (isa<AnnotateOp, ReshardOp>(op)) {
    ShardingAttr to = getValueSharding(op->getResult(0), mesh);
    local[op->getResult(0)] = localOperand(b, op, 0, to);
    shardingOf[op->getResult(0)] = to;
    return success();
  }
  if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
    // Constants stay global; each device keeps its block.
    ShardingAttr to = getValueSharding(constant.getResult(), mesh);
    Operation *clone = orderSequence(b, constant, to);
    clone->removeAttr(kResultShardingsAttr);
    auto type = cast<RankedTensorType>(constant.getType());
    local[constant.getResult()] =
        reshard(b, op->getLoc(), clone->getResult(0), type,
                ShardingAttr::getReplicated(op->getContext(), mesh.getSymName(),
                                            type.getRank()),
                to, describe(op));
    shardingOf[constant.getResult()] = to;
    return success();
  }
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
  if (auto attention = dyn_cast<nn::AttentionOp>(op);
      attention && attention->hasAttr(kRingAttr))
    return partitionRing(attention, rule, assignment);

  // Split sum-reduction factors make the results partial sums; an operand
  // without such a factor (a matmul's bias) enters that sum once, so it must
  // be partial over the factor's axes too.
  SmallVector<std::pair<unsigned, StringRef>> reduced;
  for (unsigned f = 0; f < rule.getNumFactors(); ++f)
    if (rule.getFactor(f).kind == FactorKind::Reduction)
      for (StringRef axis : assignment[f])
        reduced.push_back({f, axis});
  SmallVector<Value> operands;
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    ShardingAttr need =
        getTensorSharding(rule, ShardingRule::operand(i), assignment, mesh,
                          /*withPartial=*/false);
    SmallVector<StringRef> partial;
    for (auto [factor, axis] : reduced)
      if (llvm::none_of(rule.getOperands()[i], [&](const DimFactors &dim) {
            return llvm::is_contained(dim, factor);
          }))
        partial.push_back(axis);
    if (!partial.empty()) {
      SmallVector<SmallVector<StringRef>> dims;
      for (int64_t d = 0; d < need.getRank(); ++d)
        dims.push_back(need.getAxesOfDim(d));
      need =
          ShardingAttr::get(op->getContext(), mesh.getSymName(), dims, partial);
    }
    operands.push_back(localOperand(b, op, i, need));
  }
  for (unsigned f = 0; f < rule.getNumFactors(); ++f)
    if (rule.getFactor(f).kind == FactorKind::Lookup && !assignment[f].empty())
      return partitionLookup(op, rule, assignment, f, operands);

  IRMapping mapping;
  for (auto [old, now] : llvm::zip(op->getOperands(), operands))
    mapping.map(old, now);
  Operation *clone = b.clone(*op, mapping);
  clone->removeAttr(kResultShardingsAttr);
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    auto global = cast<RankedTensorType>(result.getType());
    clone->getResult(i).setType(localType(global, resultShardings[i]));
    local[result] = clone->getResult(i);
    shardingOf[result] = resultShardings[i];
  }
  if (failed(fitShapeAttributes(clone, op)))
    return op->emitError() << "partitioning produced an invalid local op "
                              "(a compiler bug)";
  return success();
}

LogicalResult Partitioner::run(func::FuncOp func) {
  Block &body = func.getBody().front();
  // The local arguments are new ones: the global ops keep reading the
  // global arguments, so that their sharding rules see global shapes (a
  // rule built from a local operand shape, such as a concat of a sharded
  // past key/value input, splits nothing). The global ones go at the end.
  SmallVector<BlockArgument> globalArgs(body.getArguments());
  SmallVector<Type> argTypes;
  for (BlockArgument arg : globalArgs) {
    Type type = arg.getType();
    if (auto tensor = dyn_cast<RankedTensorType>(type)) {
      ShardingAttr sharding = getValueSharding(arg, mesh);
      shardingOf[arg] = sharding;
      type = localType(tensor, sharding);
    }
    local[arg] = body.addArgument(type, arg.getLoc());
    argTypes.push_back(type);
  }
  SmallVector<Operation *> old;
  for (Operation &op : body.without_terminator())
    old.push_back(&op);
  for (Operation *op : old)
    if (failed(partitionOp(op)))
      return failure();

  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
    auto type = cast<RankedTensorType>(value.getType());
    ShardingAttr want =
        func.getResultAttrOfType<ShardingAttr>(i, kShardingAttr);
    if (!want)
      want = shardingOf.lookup(value);
    if (want.isPartial())
      want = ShardingAttr::get(func.getContext(), mesh.getSymName(),
                               [&] {
                                 SmallVector<SmallVector<StringRef>> dims;
                                 for (int64_t d = 0; d < want.getRank(); ++d)
                                   dims.push_back(want.getAxesOfDim(d));
                                 return dims;
                               }(),
                               {});
    func.setResultAttr(i, kShardingAttr, want);
    Value localValue = reshard(b, ret.getLoc(), local.lookup(value), type,
                               shardingOf.lookup(value), want,
                               "function result " + std::to_string(i));
    results.push_back(localValue);
    resultTypes.push_back(localValue.getType());
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  for (Operation *op : llvm::reverse(old)) {
    op->dropAllUses();
    op->erase();
  }
  for (BlockArgument arg : globalArgs)
    arg.replaceAllUsesWith(local.lookup(arg));
  body.eraseArguments(0, globalArgs.size());
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
        std::string why = checkSequenceOrder(func, *mesh, axis, length);
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
