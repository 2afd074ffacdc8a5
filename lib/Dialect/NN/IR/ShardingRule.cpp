//===- ShardingRule.cpp - Factor-based sharding rules ---------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"

#include <numeric>

using namespace mlir;
using namespace mlir::partita;

StringRef mlir::partita::stringifyFactorKind(FactorKind kind) {
  switch (kind) {
  case FactorKind::Parallel:
    return "parallel";
  case FactorKind::Reduction:
    return "reduction";
  case FactorKind::Normalization:
    return "normalization";
  case FactorKind::KeyValueSequence:
    return "kv_sequence";
  case FactorKind::Lookup:
    return "lookup";
  case FactorKind::Opaque:
    return "opaque";
  }
  llvm_unreachable("unknown factor kind");
}

StringRef mlir::partita::stringifyFactorCombiner(FactorCombiner combiner) {
  switch (combiner) {
  case FactorCombiner::Sum:
    return "sum";
  case FactorCombiner::Mean:
    return "mean";
  case FactorCombiner::Max:
    return "max";
  case FactorCombiner::Min:
    return "min";
  }
  llvm_unreachable("unknown factor combiner");
}

ShardingRule::ShardingRule(ArrayRef<unsigned> operandRanks,
                           ArrayRef<unsigned> resultRanks) {
  for (unsigned rank : operandRanks)
    operands.emplace_back(rank);
  for (unsigned rank : resultRanks)
    results.emplace_back(rank);
}

static unsigned rankOf(Type type) {
  if (auto shaped = dyn_cast<RankedTensorType>(type))
    return shaped.getRank();
  return 0;
}

ShardingRule ShardingRule::forOp(Operation *op) {
  SmallVector<unsigned> operandRanks, resultRanks;
  for (Value operand : op->getOperands())
    operandRanks.push_back(rankOf(operand.getType()));
  for (Value result : op->getResults())
    resultRanks.push_back(rankOf(result.getType()));
  return ShardingRule(operandRanks, resultRanks);
}

unsigned ShardingRule::addFactor(int64_t size, FactorKind kind,
                                 FactorCombiner combiner) {
  factors.push_back({size, kind, combiner});
  return factors.size() - 1;
}

void ShardingRule::append(TensorRef ref, unsigned dim, unsigned factor) {
  getMutableTensor(ref)[dim].push_back(factor);
}

std::optional<unsigned>
ShardingRule::addShared(int64_t size, FactorKind kind,
                        ArrayRef<std::pair<TensorRef, unsigned>> dims,
                        FactorCombiner combiner) {
  if (size == 1)
    return std::nullopt;
  unsigned factor = addFactor(size, kind, combiner);
  for (auto [ref, dim] : dims)
    append(ref, dim, factor);
  return factor;
}

LogicalResult ShardingRule::verify(Operation *op) const {
  auto check = [&](Type type, const TensorFactors &dims, StringRef what,
                   unsigned index) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    unsigned rank = tensor ? tensor.getRank() : 0;
    if (dims.size() != rank)
      return op->emitError()
             << "sharding rule: " << what << " #" << index << " has "
             << dims.size() << " factor lists for rank " << rank;
    llvm::SmallSet<unsigned, 8> seen;
    for (auto [d, list] : llvm::enumerate(dims)) {
      int64_t product = 1;
      for (unsigned f : list) {
        if (f >= factors.size())
          return op->emitError() << "sharding rule: unknown factor " << f;
        if (!seen.insert(f).second)
          return op->emitError() << "sharding rule: " << what << " #" << index
                                 << " uses factor " << f << " twice";
        product *= factors[f].size;
      }
      if (product != tensor.getDimSize(d))
        return op->emitError()
               << "sharding rule: " << what << " #" << index << " dim " << d
               << " has size " << tensor.getDimSize(d)
               << " but its factors multiply to " << product;
    }
    return success();
  };
  if (operands.size() != op->getNumOperands() ||
      results.size() != op->getNumResults())
    return op->emitError() << "sharding rule: wrong number of tensors";
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    if (failed(check(operand.getType(), operands[i], "operand", i)))
      return failure();
  for (auto [i, result] : llvm::enumerate(op->getResults()))
    if (failed(check(result.getType(), results[i], "result", i)))
      return failure();
  return success();
}

static std::string factorName(unsigned index) {
  // i..z first, as einsum readers expect; then f18, f19, ...
  if (index < 18)
    return std::string(1, static_cast<char>('i' + index));
  return "f" + std::to_string(index);
}

static void printTensors(raw_ostream &os, ArrayRef<TensorFactors> tensors) {
  os << "(";
  llvm::interleaveComma(tensors, os, [&](const TensorFactors &dims) {
    os << "[";
    llvm::interleaveComma(dims, os, [&](const DimFactors &list) {
      if (list.empty()) {
        os << "1";
        return;
      }
      for (unsigned f : list)
        os << factorName(f);
    });
    os << "]";
  });
  os << ")";
}

void ShardingRule::print(raw_ostream &os) const {
  printTensors(os, operands);
  os << " -> ";
  printTensors(os, results);
  os << " {";
  llvm::interleaveComma(llvm::enumerate(factors), os, [&](auto it) {
    const ShardingFactor &factor = it.value();
    os << factorName(it.index()) << "=" << factor.size;
    if (factor.kind == FactorKind::Parallel)
      return;
    os << " " << stringifyFactorKind(factor.kind);
    if (factor.kind == FactorKind::Reduction &&
        factor.combiner != FactorCombiner::Sum)
      os << "(" << stringifyFactorCombiner(factor.combiner) << ")";
    if (factor.splitStatistics)
      os << "(sums)";
  });
  os << "}";
}

std::string ShardingRule::str() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  print(os);
  return text;
}

void mlir::partita::addReshapeFactors(ShardingRule &rule,
                                      ShardingRule::TensorRef from,
                                      ArrayRef<int64_t> fromShape,
                                      ShardingRule::TensorRef to,
                                      ArrayRef<int64_t> toShape) {
  // Walk both shapes with the part of the current dimension not yet covered
  // by factors. Whenever one remainder divides the other, the smaller is a
  // factor common to both sides. Otherwise their gcd is (when it is not 1);
  // with a gcd of 1 the two runs of dimensions up to the next point where the
  // running products agree share no factorization and each side gets opaque
  // factors.
  size_t i = 0, j = 0;
  auto skipOnes = [](ArrayRef<int64_t> shape, size_t &k) {
    while (k < shape.size() && shape[k] == 1)
      ++k;
  };
  skipOnes(fromShape, i);
  skipOnes(toShape, j);
  int64_t restFrom = i < fromShape.size() ? fromShape[i] : 1;
  int64_t restTo = j < toShape.size() ? toShape[j] : 1;
  while (i < fromShape.size() && j < toShape.size()) {
    int64_t common = std::gcd(restFrom, restTo);
    if (restFrom % restTo == 0)
      common = restTo;
    else if (restTo % restFrom == 0)
      common = restFrom;
    if (common == 1) {
      // No common factor: advance both sides until the element counts they
      // cover agree, giving each covered piece an opaque factor.
      int64_t coveredFrom = restFrom, coveredTo = restTo;
      unsigned f = rule.addFactor(restFrom, FactorKind::Opaque);
      rule.append(from, i, f);
      unsigned g = rule.addFactor(restTo, FactorKind::Opaque);
      rule.append(to, j, g);
      ++i;
      ++j;
      while (coveredFrom != coveredTo) {
        if (coveredFrom < coveredTo) {
          skipOnes(fromShape, i);
          coveredFrom *= fromShape[i];
          rule.append(from, i,
                      rule.addFactor(fromShape[i], FactorKind::Opaque));
          ++i;
        } else {
          skipOnes(toShape, j);
          coveredTo *= toShape[j];
          rule.append(to, j, rule.addFactor(toShape[j], FactorKind::Opaque));
          ++j;
        }
      }
      skipOnes(fromShape, i);
      skipOnes(toShape, j);
      restFrom = i < fromShape.size() ? fromShape[i] : 1;
      restTo = j < toShape.size() ? toShape[j] : 1;
      continue;
    }
    unsigned f = rule.addFactor(common, FactorKind::Parallel);
    rule.append(from, i, f);
    rule.append(to, j, f);
    restFrom /= common;
    restTo /= common;
    if (restFrom == 1) {
      ++i;
      skipOnes(fromShape, i);
      restFrom = i < fromShape.size() ? fromShape[i] : 1;
    }
    if (restTo == 1) {
      ++j;
      skipOnes(toShape, j);
      restTo = j < toShape.size() ? toShape[j] : 1;
    }
  }
}

void mlir::partita::addBroadcastFactors(ShardingRule &rule, Operation *op) {
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  int64_t rank = resultType.getRank();
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = resultType.getDimSize(d);
    SmallVector<std::pair<ShardingRule::TensorRef, unsigned>> dims;
    dims.push_back({ShardingRule::result(0), static_cast<unsigned>(d)});
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      auto type = cast<RankedTensorType>(operand.getType());
      int64_t od = d - (rank - type.getRank());
      if (od >= 0 && type.getDimSize(od) == size)
        dims.push_back({ShardingRule::operand(i), static_cast<unsigned>(od)});
    }
    rule.addShared(size, FactorKind::Parallel, dims);
  }
}
