//===- Sharding.h - What the sharding passes share --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The sharding passes talk about an op through its sharding rule only: a
// tensor sharding is projected onto the rule's factors (which mesh axes
// split each factor), and a factor assignment is turned back into the
// sharding each operand needs and each result gets. Everything here is
// written against factors, never against a particular op.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_TRANSFORMS_SHARDING_H
#define PARTITA_DIALECT_DIST_TRANSFORMS_SHARDING_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "partita/Analysis/Cluster.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/IR/ShardingRule.h"

#include <string>
#include <utility>

namespace mlir::partita::dist {

/// Propagation priorities: lower wins. A strategy pins weights at
/// kStrategyPriority and activations (sequence parallelism's residual
/// stream) at kActivationPriority, so a weight's split wins where the two
/// meet at a matmul and the activation is gathered.
/// The strategy's batch split of function arguments and results comes last:
/// nothing competes with it for the batch, and the dimensions it leaves
/// whole must not outrank a sequence split.
constexpr int kUserPriority = 0;
constexpr int kStrategyPriority = 1;
constexpr int kActivationPriority = 2;
constexpr int kEdgePriority = 3;

/// The priority of a dist.annotate: its `dist.priority`, else 1 for a
/// strategy's and 0 for a person's.
int getAnnotationPriority(AnnotateOp op);

/// The module's one `dist.mesh`; null when it has none. Emits an error and
/// returns failure when it has several.
FailureOr<MeshOp> getModuleMesh(ModuleOp module);

// A factor assignment (ShardingRule.h): which axes split each factor.
using ::mlir::partita::AxisList;
using ::mlir::partita::FactorAxes;

/// Whether shards of `factor` can be computed independently: parallel
/// factors, lookups, reductions that combine by sum (which leave partial
/// sums) and by max or min, and a norm's normalized axes (isSelfReduced).
/// Softmax axes, key/value sequences, means and opaque factors must be
/// whole on every device.
bool isShardable(const ShardingFactor &factor);

/// A max or min reduction, or a norm's normalized axis (splitStatistics):
/// split, each device reduces its block and the op's partition all-reduces
/// the blocks' results (max or min) or statistics (sums) at once, so its
/// results never hold partial values (a sharding's partial axes are sums).
bool isSelfReduced(const ShardingFactor &factor);

/// Splits `axes` (the axes of one dimension, major first) over the
/// dimension's factors, major first: an axis goes to the current factor if
/// its size divides what of the factor is still unsplit; a factor split
/// whole passes on to the next. Stops at the first axis that does not fit.
/// Returns one axis list per entry of `factors`.
SmallVector<AxisList> projectDim(const ShardingRule &rule,
                                 const DimFactors &factors,
                                 ArrayRef<StringRef> axes, MeshOp mesh);

/// The axes of a dimension under an assignment: those of its factors,
/// major first, up to the first factor that is not split whole.
AxisList getDimAxes(const ShardingRule &rule, const DimFactors &factors,
                    const FactorAxes &assignment, MeshOp mesh);

/// Whether some dimension of tensor `ref` of the rule carries `factor`.
bool usesFactor(const ShardingRule &rule, ShardingRule::TensorRef ref,
                unsigned factor);

/// The sharding of tensor `ref` of the rule under `assignment`. With
/// `withPartial`, the axes of shardable reduction and lookup factors that
/// the tensor does not have become its partial axes (a result's).
ShardingAttr getTensorSharding(const ShardingRule &rule,
                               ShardingRule::TensorRef ref,
                               const FactorAxes &assignment, MeshOp mesh,
                               bool withPartial);

/// The sharding operand `index` of an op with `rule` needs under
/// `assignment`. Split sum-reduction factors make the results partial sums;
/// an operand without such a factor (a matmul's bias) enters that sum once,
/// so it must be partial over the factor's axes too.
ShardingAttr getOperandNeed(const ShardingRule &rule, unsigned index,
                            const FactorAxes &assignment, MeshOp mesh);

/// The assignment an op with these operand and result shardings computes
/// with: parallel factors take the axes the results give them; reduction and
/// lookup factors take the axes an operand gives them that are partial in
/// the results. Null shardings count as replicated.
FactorAxes inferAssignment(const ShardingRule &rule,
                           ArrayRef<ShardingAttr> operands,
                           ArrayRef<ShardingAttr> results, MeshOp mesh);

/// The sharding `value` has after propagation: a function argument's
/// `dist.sharding`, a result's entry of its op's `dist.shardings`, a
/// dist.annotate's or dist.reshard's own; replicated when none is recorded.
ShardingAttr getValueSharding(Value value, MeshOp mesh);

/// The weight constant `value` reads through the strategy's annotations,
/// transposes and reshapes (and, with `throughDequantize`, a packed
/// weight's dequantization), or null.
nn::ConstantOp getWeightConstant(Value value, bool throughDequantize = true);

/// Propagates the shardings `func`'s annotations give to every value and
/// records them (`dist.sharding` on arguments and results, `dist.shardings`
/// on ops), as the partita-propagate-sharding pass does.
void propagateShardings(func::FuncOp func, MeshOp mesh);

/// Removes what propagateShardings recorded.
void clearShardings(func::FuncOp func);

/// What running `func` as propagation recorded it costs one device of
/// `mesh`, by the cost model: each op's compute divided by the devices that
/// split its work, and each collective its operands need to arrive as the
/// op computes with them (an all-reduce or reduce-scatter of partial sums,
/// an all-gather of a split the op needs whole, an all-to-all of a split
/// that moves to another dimension) by the cluster's alpha-beta model.
/// Weights split at load cost nothing to split.
struct ShardedCost {
  double computeSeconds = 0;
  double communicationSeconds = 0;
  int64_t collectives = 0;
  double seconds() const { return computeSeconds + communicationSeconds; }
};
ShardedCost estimateShardedCost(func::FuncOp func, MeshOp mesh,
                                const ClusterModel &cluster);

/// `value` with dimension `dim` permuted: index `i` of the result is index
/// `sourceOf[i]` of `value`. A splat is returned as it is; a weight (a
/// resource or a view of one) becomes a view named `name`, its bytes
/// untouched; an inline value is permuted.
ElementsAttr permuteAlongDim(ElementsAttr value, int64_t dim,
                             ArrayRef<int64_t> sourceOf, StringRef name);

/// `value` with dimension `dim` extended to `size` by zeros at its end. A
/// weight becomes a view named `name` whose last run along `dim` reads
/// zeros, its bytes untouched; an inline value is padded. Null for a value
/// of neither kind.
ElementsAttr padAlongDim(ElementsAttr value, int64_t dim, int64_t size,
                         StringRef name);

/// An nn.constant of a scalar of `element` (a float or an integer type).
Value scalarConstant(OpBuilder &b, Location loc, Type element, double value);

/// Where integer `indices` lie in [low, high): i1 of their shape.
Value indicesWithin(OpBuilder &b, Location loc, Value indices, int64_t low,
                    int64_t high);

/// After `clone` of `original` got smaller operand and result types (a
/// split or a microbatch of them), fixes the attributes that spell out a
/// shape: a slice's limits on the dimensions it keeps whole (the only ones
/// that can shrink). Fails if the clone does not verify (a compiler bug).
LogicalResult fitShapeAttributes(Operation *clone, Operation *original);

/// `sharding` printed compactly, e.g. `[{dp}, {}, {tp}] partial [tp]`.
std::string formatSharding(ShardingAttr sharding);

} // namespace mlir::partita::dist

#endif // PARTITA_DIALECT_DIST_TRANSFORMS_SHARDING_H
