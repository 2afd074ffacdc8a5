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
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/IRMapping.h"
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
  if (auto constant = dyn_cast<nn::ConstantOp>(op))
    if (auto resource =
            dyn_cast<DenseResourceElementsAttr>(constant.getValue()))
      return "weight '" + resource.getRawHandle().getKey().str() + "'";
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
  /// The local value of global `value`, resharded to `to` for `user`.
  Value localOperand(OpBuilder &b, Operation *user, unsigned index,
                     ShardingAttr to);

  MeshOp mesh;
  llvm::DenseMap<Value, Value> local;
  llvm::DenseMap<Value, ShardingAttr> shardingOf;
  llvm::DenseMap<Value, RankedTensorType> globalArgType;
  llvm::DenseMap<std::pair<Value, Attribute>, Value> resharded;

  RankedTensorType globalType(Value value) {
    if (auto it = globalArgType.find(value); it != globalArgType.end())
      return it->second;
    return cast<RankedTensorType>(value.getType());
  }
};

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
    cached =
        reshard(b, user->getLoc(), local.lookup(global), globalType(global),
                shardingOf.lookup(global), to,
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

  // Shift the indices by this device's first row and mask the rows it does
  // not hold.
  Value position =
      AxisIndexOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()),
                          FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                          b.getStrArrayAttr(assignment[lookupFactor]));
  if (!indexElement.isInteger(64))
    position = nn::CastOp::create(
        b, loc, RankedTensorType::get({}, indexElement), position);
  Value offset = nn::MulOp::create(
      b, loc, position, scalarConstant(b, loc, indexElement, double(rows)));
  Value shifted = nn::SubOp::create(b, loc, indices, offset);
  auto boolType = indexType.clone(b.getI1Type());
  Value atLeast =
      nn::CompareOp::create(b, loc, boolType, nn::CompareDirection::GE, shifted,
                            scalarConstant(b, loc, indexElement, 0));
  Value below =
      nn::CompareOp::create(b, loc, boolType, nn::CompareDirection::LT, shifted,
                            scalarConstant(b, loc, indexElement, double(rows)));
  Value held = nn::AndOp::create(b, loc, atLeast, below);
  Value safe = nn::WhereOp::create(b, loc, indexType, held, shifted,
                                   scalarConstant(b, loc, indexElement, 0));
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
    Operation *clone = b.clone(*op);
    clone->removeAttr(kResultShardingsAttr);
    ShardingAttr to = getValueSharding(constant.getResult(), mesh);
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
  // Attributes that spell out a shape: a slice's limits on dimensions it
  // keeps whole (the only ones that can be split).
  if (auto slice = dyn_cast<nn::SliceOp>(clone)) {
    SmallVector<int64_t> limit(slice.getLimit());
    auto in = cast<RankedTensorType>(slice.getInput().getType());
    auto globalIn = cast<RankedTensorType>(op->getOperand(0).getType());
    for (int64_t d = 0; d < in.getRank(); ++d)
      if (in.getDimSize(d) != globalIn.getDimSize(d))
        limit[d] = in.getDimSize(d);
    slice.setLimit(limit);
  }
  if (failed(mlir::verify(clone)))
    return op->emitError() << "partitioning produced an invalid local op "
                              "(a compiler bug)";
  return success();
}

LogicalResult Partitioner::run(func::FuncOp func) {
  Block &body = func.getBody().front();
  SmallVector<Type> argTypes;
  for (BlockArgument arg : body.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type) {
      argTypes.push_back(arg.getType());
      continue;
    }
    ShardingAttr sharding = getValueSharding(arg, mesh);
    globalArgType[arg] = type;
    shardingOf[arg] = sharding;
    local[arg] = arg;
    auto localArg = localType(type, sharding);
    arg.setType(localArg);
    argTypes.push_back(localArg);
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
    auto type = cast<RankedTensorType>(globalType(value));
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
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() && failed(Partitioner(*mesh).run(func)))
        return signalPassFailure();
  }
};

} // namespace
