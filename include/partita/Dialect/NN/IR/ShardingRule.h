//===- ShardingRule.h - Factor-based sharding rules -------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A sharding rule describes an op to the sharding passes as an einsum-like
// mapping: every dimension of every operand and result is a list of factors
// (major to minor), and each factor has a size and a kind. Propagation
// reads rules only; partitioning reads them and, for the few ops whose
// shards combine in a way no factor says, the op's own `partition` hook
// (PartitionContext.h). This is the representation Shardy calls
// OpShardingRule.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_SHARDINGRULE_H
#define PARTITA_DIALECT_NN_IR_SHARDINGRULE_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace mlir::partita {

/// How the op treats a factor when its tensors are split along it.
enum class FactorKind : uint8_t {
  /// Each shard computes its own part; no communication.
  Parallel,
  /// Each shard computes a partial result, combined with `combiner`.
  Reduction,
  /// A softmax or normalization axis: shards need whole-axis statistics.
  Normalization,
  /// Attention's key/value sequence: shards merge with an online softmax.
  KeyValueSequence,
  /// Rows an embedding or gather looks up, or the experts (and each
  /// expert's features) a mixture of experts computes: shards compute from
  /// the rows they hold and the whole of the other operands (never partial
  /// sums of them), and the partial results are summed.
  Lookup,
  /// The op cannot run on a shard of this factor; it stays replicated.
  Opaque,
};

/// How partial results of a reduction factor combine. Shards of a mean are
/// means of equal-size blocks, so they combine by averaging.
enum class FactorCombiner : uint8_t { Sum, Mean, Max, Min };

llvm::StringRef stringifyFactorKind(FactorKind kind);
llvm::StringRef stringifyFactorCombiner(FactorCombiner combiner);

struct ShardingFactor {
  int64_t size;
  FactorKind kind;
  FactorCombiner combiner = FactorCombiner::Sum;
  /// A normalization factor whose statistics are sums the op completes
  /// itself when the factor is split (rms_norm's sum of squares, layer
  /// norm's sum and sum of squared deviations: an all-reduce of one value
  /// per row), instead of gathering its input (softmax's).
  bool splitStatistics = false;
};

/// Factors of one dimension, major to minor. Empty for a dimension of size 1.
using DimFactors = llvm::SmallVector<unsigned, 2>;
/// Factors of every dimension of one tensor.
using TensorFactors = llvm::SmallVector<DimFactors, 4>;
/// Mesh axes, major first.
using AxisList = llvm::SmallVector<llvm::StringRef, 2>;
/// A factor assignment: the axes that split each factor of a rule, indexed
/// by factor.
using FactorAxes = llvm::SmallVector<AxisList>;

class ShardingRule {
public:
  /// A rule with no factors yet for tensors of the given ranks.
  ShardingRule(llvm::ArrayRef<unsigned> operandRanks,
               llvm::ArrayRef<unsigned> resultRanks);

  /// Builds a rule for `op`, with one empty factor list per dimension of
  /// every ranked tensor operand and result.
  static ShardingRule forOp(Operation *op);

  /// Adds a factor and returns its index.
  unsigned addFactor(int64_t size, FactorKind kind,
                     FactorCombiner combiner = FactorCombiner::Sum);

  /// A reference to a tensor of the op: operand `i` or result `i`.
  struct TensorRef {
    bool isResult;
    unsigned index;
  };
  static TensorRef operand(unsigned i) { return {false, i}; }
  static TensorRef result(unsigned i) { return {true, i}; }

  /// Appends `factor` as the next (more minor) factor of `ref`'s dimension
  /// `dim`.
  void append(TensorRef ref, unsigned dim, unsigned factor);

  /// Adds a factor of `size` shared by the given (tensor, dim) pairs. Does
  /// nothing when `size` is 1: such a dimension cannot be split.
  std::optional<unsigned>
  addShared(int64_t size, FactorKind kind,
            llvm::ArrayRef<std::pair<TensorRef, unsigned>> dims,
            FactorCombiner combiner = FactorCombiner::Sum);

  /// Marks normalization factor `factor` as splitStatistics.
  void setSplitStatistics(unsigned factor) {
    factors[factor].splitStatistics = true;
  }

  unsigned getNumFactors() const { return factors.size(); }
  const ShardingFactor &getFactor(unsigned i) const { return factors[i]; }
  llvm::ArrayRef<ShardingFactor> getFactors() const { return factors; }
  llvm::ArrayRef<TensorFactors> getOperands() const { return operands; }
  llvm::ArrayRef<TensorFactors> getResults() const { return results; }
  const TensorFactors &getTensor(TensorRef ref) const {
    return ref.isResult ? results[ref.index] : operands[ref.index];
  }

  /// Checks the rule against the op's types: every dimension's factor sizes
  /// multiply to its size, and no tensor uses a factor twice.
  LogicalResult verify(Operation *op) const;

  /// Prints e.g. `([i, k], [k, j]) -> ([i, j]) {i=8, j=16, k=32 reduction}`.
  /// Factors are named i, j, k, ... z, then f18, f19, ...; a dimension with
  /// several factors prints them concatenated (`jk`), one without as `1`.
  void print(llvm::raw_ostream &os) const;
  std::string str() const;

private:
  TensorFactors &getMutableTensor(TensorRef ref) {
    return ref.isResult ? results[ref.index] : operands[ref.index];
  }

  llvm::SmallVector<ShardingFactor> factors;
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;
};

/// Maps the dimensions of `from` and `to` (shapes with the same number of
/// elements) onto common factors, as a reshape between them needs: a
/// dimension that a reshape merges or splits maps to several factors, so
/// `[b, s, h*d] -> [b, s, h, d]` shares `h` and `d`. Where two runs of
/// dimensions have no common factorization (e.g. `[2, 3] -> [3, 2]`), each
/// side gets opaque factors of its own.
void addReshapeFactors(ShardingRule &rule, ShardingRule::TensorRef from,
                       llvm::ArrayRef<int64_t> fromShape,
                       ShardingRule::TensorRef to,
                       llvm::ArrayRef<int64_t> toShape);

/// Adds one factor per result dimension of a numpy-broadcasting op and maps
/// every operand dimension that is not broadcast (size equal to the
/// result's) to it.
void addBroadcastFactors(ShardingRule &rule, Operation *op);

} // namespace mlir::partita

#endif // PARTITA_DIALECT_NN_IR_SHARDINGRULE_H
