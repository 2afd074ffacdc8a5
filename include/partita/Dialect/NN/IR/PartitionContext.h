//===- PartitionContext.h - What a partitioning hook may ask ----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The argument of `ShardingRuleOpInterface::partition`, the hook through
// which an op builds its own local form where its sharding rule alone
// cannot say how its shards combine (attention's ring, a constant that
// stays global). The nn dialect only declares it: the partitioner
// (lib/Dialect/Dist/Transforms/Partition.cpp) implements it with the mesh,
// the shardings and the collectives, so an op's special case lives with
// the op while nn does not depend on dist (the libraries stay acyclic:
// PartitaDistTransforms links PartitaNNDialect, never the reverse). This is
// the shape of upstream Shard's `ShardingInterface::partition`, whose
// arguments carry what an op needs from the partitioner.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_PARTITIONCONTEXT_H
#define PARTITA_DIALECT_NN_IR_PARTITIONCONTEXT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributeInterfaces.h"
#include "partita/Dialect/NN/IR/ShardingRule.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"

namespace mlir::partita::nn {

/// The partitioner as one op's partitioning hook sees it: the plan for the
/// op, its operands' local values, and the communication it may build. Each
/// call is about the op being partitioned.
class PartitionContext {
public:
  virtual ~PartitionContext();

  /// The builder, at the op's place in the local program.
  virtual OpBuilder &getBuilder() = 0;
  /// Which mesh axes split each factor of the op's sharding rule, as the
  /// plan (the shardings of its operands and results) has it.
  virtual const FactorAxes &getAssignment() = 0;

  /// Partitions the op from its sharding rule alone: operands resharded to
  /// the assignment, the op cloned with local types. The default hook.
  virtual LogicalResult partitionByRule() = 0;
  /// Local operands, as partitionByRule resharded them to the assignment
  /// (indexed like the op's operands), which a hook may replace.
  using LocalOperandsFn =
      llvm::function_ref<LogicalResult(OpBuilder &, MutableArrayRef<Value>)>;
  /// partitionByRule with `adjust` called on the local operands before the
  /// op is cloned onto them: for an op whose local form is its rule's but
  /// for values that depend on the device (nn.moe's expert ids, shifted to
  /// the block of experts a device holds).
  virtual LogicalResult partitionByRule(LocalOperandsFn adjust) = 0;
  /// The local value of operand `index` resharded to what `assignment`
  /// gives it (no partial axes).
  virtual Value getOperand(unsigned index, const FactorAxes &assignment) = 0;
  /// Records `value` as the local value of result `index`. Fails with an
  /// error on the op when its type is not the local type the plan gives
  /// the result.
  virtual LogicalResult setResult(unsigned index, Value value) = 0;
  /// Records `value` as the local value of result `index`, split as
  /// `assignment` gives it (no partial axes) rather than as planned: its
  /// users reshard it from there. Fails as setResult does on a type that
  /// is not that split's local type.
  virtual LogicalResult setResult(unsigned index, Value value,
                                  const FactorAxes &assignment) = 0;
  /// Records `whole`, the global value of result `index` that every device
  /// holds, as that result: each device keeps its block of the planned
  /// sharding.
  virtual void setWholeResult(unsigned index, Value whole) = 0;
  /// The op cloned at the builder without the plan's attributes (which
  /// describe the global op); for an op without operands, such as a
  /// constant.
  virtual Operation *cloneWithoutPlan() = 0;

  /// The number of devices in a group spanned by `axes`.
  virtual int64_t getGroupSize(ArrayRef<StringRef> axes) = 0;
  /// This device's position in its group along `axes`, a `tensor<i64>`.
  virtual Value getPosition(ArrayRef<StringRef> axes) = 0;
  /// `value` from the previous device of the ring along `axes`, this
  /// device's passed on to the next. `why` says what for (dist.reason).
  virtual Value shiftAlongRing(Value value, ArrayRef<StringRef> axes,
                               const Twine &why) = 0;

  /// The axes that split dimension `dim` of operand `index` where the op
  /// reads it (its plan's sharding), before any reshard.
  virtual SmallVector<StringRef> getOperandAxes(unsigned index,
                                                int64_t dim) = 0;
  /// Sends row `i` of `rows` to the device at group position
  /// `destinations[i]` along `axes` (`dist.dispatch`; an `i64` destination
  /// outside the group sends it nowhere), at most `bound` rows arriving.
  /// Returns the rows received, grouped by sender, and how many came from
  /// each (`tensor<n x i64>`).
  virtual std::pair<Value, Value> dispatchRows(Value rows, Value destinations,
                                               ArrayRef<StringRef> axes,
                                               int64_t bound,
                                               const Twine &why) = 0;
  /// Sends `rows`, laid out as `dispatchRows` returned them with `counts`,
  /// back to their senders, each into the row it left
  /// (`dist.dispatch_return`).
  virtual Value returnRows(Value rows, Value counts, Value destinations,
                           ArrayRef<StringRef> axes, const Twine &why) = 0;
  /// `value` summed over the devices of `axes` (`dist.all_reduce`).
  virtual Value sumOver(Value value, ArrayRef<StringRef> axes,
                        const Twine &why) = 0;

  /// Whether the plan asks the op to run as a ring over its split sequence
  /// (`--sp-mode ring`).
  virtual bool hasRingPlan() = 0;
  /// The program's sequence layout: entry `i` is the global position of
  /// row `i` (ring attention's zigzag order); empty when the sequence is in
  /// order.
  virtual ArrayRef<int64_t> getSequenceOrder() = 0;
  /// `value`, the global value of result `index`, laid out in the
  /// program's sequence layout along every dimension the plan splits over
  /// the layout's axis; null when the program has no layout or the op
  /// is the layout's own permutation.
  virtual ElementsAttr layOutSequence(unsigned index, ElementsAttr value) = 0;
};

} // namespace mlir::partita::nn

#endif // PARTITA_DIALECT_NN_IR_PARTITIONCONTEXT_H
