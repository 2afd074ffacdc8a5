//===- ShardedCost.cpp - What a propagated plan costs one device ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The estimate walks the function once, as the partitioner will: each op
// computes with the assignment its recorded shardings imply, and each
// operand that does not arrive as that assignment needs it is moved by the
// collectives the partitioner would build (ReshardBuilder's order: partial
// sums reduced, splits gathered or moved to another dimension, new splits
// sliced for free). Bytes are the report's ring convention.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Sharding.h"

#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

class Costing {
public:
  Costing(MeshOp mesh, const ClusterModel &cluster)
      : mesh(mesh), cluster(cluster) {}

  /// The op's compute on one device, and what its operands need moved.
  void visit(Operation *op);
  ShardedCost cost;

private:
  int64_t groupSize(ArrayRef<StringRef> axes) {
    int64_t size = 1;
    for (StringRef axis : axes)
      size *= mesh.getAxisSize(axis).value_or(1);
    return size;
  }
  /// One collective of `kind` over `axes` sending `bytes` per device.
  void collective(StringRef kind, ArrayRef<StringRef> axes, double bytes);
  /// The collectives that take `value` from `from` to `to`.
  void reshard(Value value, ShardingAttr from, ShardingAttr to);

  MeshOp mesh;
  const ClusterModel &cluster;
};

void Costing::collective(StringRef kind, ArrayRef<StringRef> axes,
                         double bytes) {
  int64_t n = groupSize(axes);
  if (n <= 1)
    return;
  SmallVector<std::string> names;
  for (StringRef axis : axes)
    names.push_back(axis.str());
  cost.communicationSeconds += cluster.collectiveSeconds(
      kind, n, static_cast<int64_t>(bytes), names, mesh);
  ++cost.collectives;
}

void Costing::reshard(Value value, ShardingAttr from, ShardingAttr to) {
  if (from == to)
    return;
  auto type = cast<RankedTensorType>(value.getType());
  double local = static_cast<double>(tensorBytes(type));
  for (int64_t d = 0; d < from.getRank(); ++d)
    local /= static_cast<double>(groupSize(from.getAxesOfDim(d)));
  auto splitsElsewhere = [](ShardingAttr s, int64_t except, StringRef axis) {
    for (int64_t d = 0; d < s.getRank(); ++d)
      if (d != except && llvm::is_contained(s.getAxesOfDim(d), axis))
        return true;
    return false;
  };
  // Partial sums the target does not keep: scattered onto a dimension the
  // target splits over them, else all-reduced.
  SmallVector<StringRef> reduce;
  for (StringRef axis : from.getPartialAxisNames())
    if (!llvm::is_contained(to.getPartialAxisNames(), axis))
      reduce.push_back(axis);
  llvm::StringSet<> scattered;
  if (!reduce.empty()) {
    double n = static_cast<double>(groupSize(reduce));
    bool scatter = llvm::all_of(reduce, [&](StringRef axis) {
      return splitsElsewhere(to, -1, axis) && !splitsElsewhere(from, -1, axis);
    });
    if (scatter) {
      collective("reduce_scatter", reduce, local * (n - 1) / n);
      local /= n;
      for (StringRef axis : reduce)
        scattered.insert(axis);
    } else {
      collective("all_reduce", reduce, 2 * local * (n - 1) / n);
    }
  }
  // Splits the target does not have on the same dimension: moved to the
  // dimension it has them on, or gathered.
  for (int64_t d = 0; d < from.getRank(); ++d)
    for (StringRef axis : from.getAxesOfDim(d)) {
      if (d < to.getRank() && llvm::is_contained(to.getAxesOfDim(d), axis))
        continue;
      double n = static_cast<double>(groupSize({axis}));
      if (splitsElsewhere(to, d, axis)) {
        collective("all_to_all", {axis}, local * (n - 1) / n);
        continue;
      }
      collective("all_gather", {axis}, local * (n - 1));
      local *= n;
    }
}

void Costing::visit(Operation *op) {
  if (isa<AnnotateOp, ReshardOp>(op)) {
    Value input = op->getOperand(0);
    reshard(input, getValueSharding(input, mesh),
            getValueSharding(op->getResult(0), mesh));
    return;
  }
  auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return;
  ShardingRule rule = ruleOp.getShardingRule();
  SmallVector<Value> operands;
  SmallVector<ShardingAttr> operandShardings, resultShardings;
  for (Value operand : op->getOperands())
    if (isa<RankedTensorType>(operand.getType())) {
      operands.push_back(operand);
      operandShardings.push_back(getValueSharding(operand, mesh));
    }
  for (Value result : op->getResults())
    if (isa<RankedTensorType>(result.getType()))
      resultShardings.push_back(getValueSharding(result, mesh));
  FactorAxes assignment =
      inferAssignment(rule, operandShardings, resultShardings, mesh);
  // The work divides among the devices of every axis that splits a factor.
  llvm::StringSet<> splitting;
  for (const AxisList &axes : assignment)
    for (StringRef axis : axes)
      splitting.insert(axis);
  double shards = 1;
  for (const auto &axis : splitting)
    shards *= static_cast<double>(mesh.getAxisSize(axis.getKey()).value_or(1));
  cost.computeSeconds +=
      estimateSeconds(estimateCost(op), cluster.device) / shards;
  // A split norm all-reduces one f32 statistic per row (layer norm's two
  // passes, two); a split max or min all-reduces its block results.
  for (unsigned f = 0; f < rule.getNumFactors(); ++f) {
    const ShardingFactor &factor = rule.getFactor(f);
    if (assignment[f].empty() || !isSelfReduced(factor) ||
        op->getNumResults() == 0)
      continue;
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    double n = static_cast<double>(groupSize(assignment[f]));
    double rows = static_cast<double>(type.getNumElements()) /
                  static_cast<double>(std::max<int64_t>(factor.size, 1));
    double bytes = factor.kind == FactorKind::Normalization
                       ? rows * 4 * (isa<nn::LayerNormOp>(op) ? 2 : 1)
                       : static_cast<double>(tensorBytes(type));
    // One device's share: the split of every other factor.
    double local = bytes / (shards / n);
    collective("all_reduce", assignment[f], 2 * local * (n - 1) / n);
  }
  for (auto [index, operand] : llvm::enumerate(operands))
    reshard(operand, operandShardings[index],
            getOperandNeed(rule, index, assignment, mesh));
}

} // namespace

ShardedCost dist::estimateShardedCost(func::FuncOp func, MeshOp mesh,
                                      const ClusterModel &cluster) {
  Costing costing(mesh, cluster);
  func.walk([&](Operation *op) { costing.visit(op); });
  return costing.cost;
}
