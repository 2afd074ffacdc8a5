//===- NNShardingRules.cpp - sharding rules of the nn ops -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The factor mapping of every nn op (ShardingRuleOpInterface). These rules
// are the only place where the sharding passes learn what an op does.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/NNOps.h"

#include <type_traits>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;

using TensorRef = ShardingRule::TensorRef;
using DimRef = std::pair<TensorRef, unsigned>;

static constexpr auto operand = ShardingRule::operand;
static constexpr auto result = ShardingRule::result;

static ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// One parallel factor per dimension, shared by operand 0 and result 0 (ops
/// that keep their input's shape).
static void addIdentityFactors(ShardingRule &rule, Operation *op,
                               ArrayRef<unsigned> exceptDims = {},
                               FactorKind exceptKind = FactorKind::Parallel) {
  for (auto [d, size] : llvm::enumerate(shapeOf(op->getOperand(0)))) {
    unsigned dim = d;
    FactorKind kind =
        llvm::is_contained(exceptDims, dim) ? exceptKind : FactorKind::Parallel;
    rule.addShared(size, kind, {{operand(0), dim}, {result(0), dim}});
  }
}

/// Factors of an op that is elementwise on one operand and one result except
/// along `otherDims`, where each side gets opaque factors of its own (slice,
/// concat and split dimensions).
static void addOpaqueAlong(ShardingRule &rule, ArrayRef<TensorRef> tensors,
                           ArrayRef<ArrayRef<int64_t>> shapes, unsigned dim) {
  for (auto [ref, shape] : llvm::zip(tensors, shapes))
    if (shape[dim] != 1)
      rule.append(ref, dim, rule.addFactor(shape[dim], FactorKind::Opaque));
}

//===----------------------------------------------------------------------===//
// Constants and elementwise ops
//===----------------------------------------------------------------------===//

ShardingRule ConstantOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  for (auto [d, size] : llvm::enumerate(getType().getShape()))
    rule.addShared(size, FactorKind::Parallel,
                   {{result(0), static_cast<unsigned>(d)}});
  return rule;
}

#define NN_BROADCAST_RULE(OP)                                                  \
  ShardingRule OP::getShardingRule() {                                         \
    ShardingRule rule = ShardingRule::forOp(*this);                            \
    addBroadcastFactors(rule, *this);                                          \
    return rule;                                                               \
  }
NN_BROADCAST_RULE(AddOp)
NN_BROADCAST_RULE(SubOp)
NN_BROADCAST_RULE(MulOp)
NN_BROADCAST_RULE(DivOp)
NN_BROADCAST_RULE(PowOp)
NN_BROADCAST_RULE(MaxOp)
NN_BROADCAST_RULE(MinOp)
NN_BROADCAST_RULE(AndOp)
NN_BROADCAST_RULE(OrOp)
NN_BROADCAST_RULE(XorOp)
NN_BROADCAST_RULE(CompareOp)
NN_BROADCAST_RULE(WhereOp)
#undef NN_BROADCAST_RULE

#define NN_IDENTITY_RULE(OP)                                                   \
  ShardingRule OP::getShardingRule() {                                         \
    ShardingRule rule = ShardingRule::forOp(*this);                            \
    addIdentityFactors(rule, *this);                                           \
    return rule;                                                               \
  }
NN_IDENTITY_RULE(NegOp)
NN_IDENTITY_RULE(AbsOp)
NN_IDENTITY_RULE(ExpOp)
NN_IDENTITY_RULE(LogOp)
NN_IDENTITY_RULE(SqrtOp)
NN_IDENTITY_RULE(RsqrtOp)
NN_IDENTITY_RULE(ReciprocalOp)
NN_IDENTITY_RULE(TanhOp)
NN_IDENTITY_RULE(ErfOp)
NN_IDENTITY_RULE(SinOp)
NN_IDENTITY_RULE(CosOp)
NN_IDENTITY_RULE(SigmoidOp)
NN_IDENTITY_RULE(ReluOp)
NN_IDENTITY_RULE(SiluOp)
NN_IDENTITY_RULE(NotOp)
NN_IDENTITY_RULE(GeluOp)
NN_IDENTITY_RULE(CastOp)
#undef NN_IDENTITY_RULE

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

ShardingRule ReduceOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  FactorCombiner combiner = FactorCombiner::Sum;
  if (getKind() == ReduceKind::Mean)
    combiner = FactorCombiner::Mean;
  else if (getKind() == ReduceKind::Max)
    combiner = FactorCombiner::Max;
  else if (getKind() == ReduceKind::Min)
    combiner = FactorCombiner::Min;
  unsigned resultDim = 0;
  for (auto [d, size] : llvm::enumerate(getInput().getType().getShape())) {
    unsigned dim = d;
    if (llvm::is_contained(getAxes(), static_cast<int64_t>(d))) {
      // A reduced dimension survives as size 1 with keepdims; it maps to no
      // factor there.
      rule.addShared(size, FactorKind::Reduction, {{operand(0), dim}},
                     combiner);
      if (getKeepdims())
        ++resultDim;
      continue;
    }
    rule.addShared(size, FactorKind::Parallel,
                   {{operand(0), dim}, {result(0), resultDim++}});
  }
  return rule;
}

ShardingRule SoftmaxOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  addIdentityFactors(rule, *this, {static_cast<unsigned>(getAxis())},
                     FactorKind::Normalization);
  return rule;
}

ShardingRule LogSoftmaxOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  addIdentityFactors(rule, *this, {static_cast<unsigned>(getAxis())},
                     FactorKind::Normalization);
  return rule;
}

/// Each result element depends on every input element before it along the
/// axis, so the scanned dimension cannot be split: it stays replicated.
/// Every other dimension passes through.
ShardingRule CumsumOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  addIdentityFactors(rule, *this, {static_cast<unsigned>(getAxis())},
                     FactorKind::Opaque);
  return rule;
}

/// Normalized dimensions are shared by the input, the result and the affine
/// parameters (operands 1..n), whose dimension `d - axis` they are.
static ShardingRule normalizationRule(Operation *op, int64_t axis) {
  ShardingRule rule = ShardingRule::forOp(op);
  ArrayRef<int64_t> shape = shapeOf(op->getOperand(0));
  for (auto [d, size] : llvm::enumerate(shape)) {
    unsigned dim = d;
    SmallVector<DimRef> dims = {{operand(0), dim}, {result(0), dim}};
    if (static_cast<int64_t>(d) < axis) {
      rule.addShared(size, FactorKind::Parallel, dims);
      continue;
    }
    for (unsigned i = 1; i < op->getNumOperands(); ++i)
      dims.push_back({operand(i), static_cast<unsigned>(d - axis)});
    // Split, each device sums its block's statistics and an all-reduce
    // completes them (a distributed norm): OLMo2's q/k norms over a
    // column-parallel projection stay split.
    if (std::optional<unsigned> f =
            rule.addShared(size, FactorKind::Normalization, dims))
      rule.setSplitStatistics(*f);
  }
  return rule;
}

ShardingRule LayerNormOp::getShardingRule() {
  return normalizationRule(*this, getAxis());
}

ShardingRule RmsNormOp::getShardingRule() {
  return normalizationRule(*this, getAxis());
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

ShardingRule MatmulOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> lhs = getLhs().getType().getShape();
  ArrayRef<int64_t> rhs = getRhs().getType().getShape();
  ArrayRef<int64_t> out = getType().getShape();
  int64_t batchRank = out.size() - 2;
  // Batch dimensions broadcast: an operand's dimension of size 1 under a
  // larger result dimension maps to no factor.
  ArrayRef<int64_t> operandShapes[] = {lhs, rhs};
  for (int64_t d = 0; d < batchRank; ++d) {
    SmallVector<DimRef> dims = {{result(0), static_cast<unsigned>(d)}};
    for (auto [i, shape] : llvm::enumerate(operandShapes)) {
      int64_t od = d - (batchRank - static_cast<int64_t>(shape.size() - 2));
      if (od >= 0 && shape[od] == out[d])
        dims.push_back({operand(i), static_cast<unsigned>(od)});
    }
    rule.addShared(out[d], FactorKind::Parallel, dims);
  }
  unsigned lhsRank = lhs.size(), rhsRank = rhs.size(), outRank = out.size();
  rule.addShared(out[outRank - 2], FactorKind::Parallel,
                 {{operand(0), lhsRank - 2}, {result(0), outRank - 2}});
  SmallVector<DimRef> n = {{operand(1), rhsRank - 1}, {result(0), outRank - 1}};
  if (getBias())
    n.push_back({operand(2), 0});
  rule.addShared(out[outRank - 1], FactorKind::Parallel, n);
  rule.addShared(lhs.back(), FactorKind::Reduction,
                 {{operand(0), lhsRank - 1}, {operand(1), rhsRank - 2}});
  return rule;
}

/// The factors of a packed weight `[k, n]`: operands `first` (packed),
/// `first + 1` (scales) and `first + 2` (zero points, when given), as
/// nn.dequantize and nn.quantized_matmul take them. `columns` and `rows`
/// are the op's other dimensions of size n and k. Columns split freely;
/// rows split by whole blocks (by pairs of blocks where four-bit zero
/// points pack two to a byte), never inside one, since a kernel reads a
/// block's scale and zero point for all its rows. `rowKind` is Parallel
/// for the weight itself, Reduction for a product that contracts it.
static void addPackedWeightFactors(ShardingRule &rule, unsigned first,
                                   Value packed, Value zeroPoints, int64_t bits,
                                   int64_t blockSize, int64_t k,
                                   SmallVector<DimRef> columns,
                                   ArrayRef<DimRef> rows, FactorKind rowKind,
                                   unsigned batch = 0) {
  ArrayRef<int64_t> shape = shapeOf(packed).drop_front(batch);
  int64_t n = shape[0], blocks = shape[1];
  columns.append({{operand(first), batch}, {operand(first + 1), batch}});
  if (zeroPoints)
    columns.push_back({operand(first + 2), batch});
  rule.addShared(n, FactorKind::Parallel, columns);
  rule.addShared(shape[2], FactorKind::Opaque, {{operand(first), batch + 2}});
  int64_t perByte = zeroPoints ? 8 / bits : 1;
  if (k != blocks * blockSize || blocks % perByte != 0) {
    // A short last block (or an odd block count under packed zero points):
    // the rows stay whole.
    rule.addShared(blocks, FactorKind::Opaque, {{operand(first), batch + 1}});
    rule.addShared(blocks, FactorKind::Opaque,
                   {{operand(first + 1), batch + 1}});
    if (zeroPoints)
      rule.addShared(shapeOf(zeroPoints)[batch + 1], FactorKind::Opaque,
                     {{operand(first + 2), batch + 1}});
    for (DimRef row : rows)
      rule.addShared(k, FactorKind::Opaque, {row});
    return;
  }
  SmallVector<DimRef> blockRows = {{operand(first), batch + 1},
                                   {operand(first + 1), batch + 1}};
  llvm::append_range(blockRows, rows);
  SmallVector<DimRef> pairs(blockRows);
  if (zeroPoints)
    pairs.push_back({operand(first + 2), batch + 1});
  rule.addShared(blocks / perByte, rowKind, pairs);
  rule.addShared(perByte, FactorKind::Opaque, blockRows);
  rule.addShared(blockSize, FactorKind::Opaque, rows);
}

ShardingRule DequantizeOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  // Batch dimensions (stacked experts) split freely.
  ArrayRef<int64_t> shape = getType().getShape();
  unsigned batch = shape.size() - 2;
  for (unsigned d = 0; d < batch; ++d) {
    SmallVector<DimRef> refs = {
        {operand(0), d}, {operand(1), d}, {result(0), d}};
    if (getZeroPoints())
      refs.push_back({operand(2), d});
    rule.addShared(shape[d], FactorKind::Parallel, refs);
  }
  addPackedWeightFactors(rule, 0, getPacked(), getZeroPoints(), getBits(),
                         getBlockSize(), shape[batch], {{result(0), batch + 1}},
                         {{result(0), batch}}, FactorKind::Parallel, batch);
  return rule;
}

ShardingRule QuantizedMatmulOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> lhs = getLhs().getType().getShape();
  unsigned last = lhs.size() - 1;
  for (unsigned d = 0; d < last; ++d)
    rule.addShared(lhs[d], FactorKind::Parallel,
                   {{operand(0), d}, {result(0), d}});
  SmallVector<DimRef> columns = {{result(0), last}};
  if (getBias())
    columns.push_back({operand(getZeroPoints() ? 4 : 3), 0});
  addPackedWeightFactors(rule, 1, getPacked(), getZeroPoints(), getBits(),
                         getBlockSize(), lhs[last], columns,
                         {{operand(0), last}}, FactorKind::Reduction);
  return rule;
}

/// The rule of nn.attention and nn.attention_partial: batch, kv heads and
/// their query groups, the query sequence and the value features are
/// parallel; the key/value sequence merges by online softmax; the head size
/// is contracted inside the softmax. Positions follow their sequence, and
/// the partial op's row maxima and sums are indexed like the output's rows.
template <typename OpTy> ShardingRule attentionRule(OpTy op) {
  ShardingRule rule = ShardingRule::forOp(op);
  ArrayRef<int64_t> q = op.getQuery().getType().getShape();
  ArrayRef<int64_t> k = op.getKey().getType().getShape();
  ArrayRef<int64_t> v = op.getValue().getType().getShape();
  TensorRef query = operand(0), key = operand(1), value = operand(2),
            out = result(0);
  std::optional<TensorRef> mask;
  ArrayRef<int64_t> maskShape;
  if (op.getMask()) {
    mask = operand(3);
    maskShape = shapeOf(op.getMask());
  }
  // The partial op's extra tensors: positions after the mask, and the row
  // statistics.
  std::optional<TensorRef> qpos, kpos, rowMax, rowSum;
  if constexpr (std::is_same_v<OpTy, AttentionPartialOp>) {
    unsigned next = op.getMask() ? 4 : 3;
    if (op.getQueryPositions()) {
      qpos = operand(next);
      kpos = operand(next + 1);
    }
    rowMax = result(1);
    rowSum = result(2);
  }
  // The mask broadcasts to [b, hq, sq, skv]: dimension `d` of the scores is
  // the mask's `d - (4 - rank)` when that one is not broadcast.
  auto maskDim = [&](unsigned d, int64_t size) -> std::optional<DimRef> {
    if (!mask)
      return std::nullopt;
    int64_t md =
        static_cast<int64_t>(d) - (4 - static_cast<int64_t>(maskShape.size()));
    if (md < 0 || maskShape[md] != size)
      return std::nullopt;
    return DimRef{*mask, static_cast<unsigned>(md)};
  };
  auto withMask = [&](SmallVector<DimRef> dims, unsigned d, int64_t size) {
    if (std::optional<DimRef> m = maskDim(d, size))
      dims.push_back(*m);
    return dims;
  };

  auto withPartial = [&](SmallVector<DimRef> dims,
                         std::optional<TensorRef> extra, unsigned dim) {
    if (extra)
      dims.push_back({*extra, dim});
    return dims;
  };
  auto withStats = [&](SmallVector<DimRef> dims, unsigned dim) {
    return withPartial(withPartial(std::move(dims), rowMax, dim), rowSum, dim);
  };
  rule.addShared(
      q[0], FactorKind::Parallel,
      withStats(withMask({{query, 0}, {key, 0}, {value, 0}, {out, 0}}, 0, q[0]),
                0));
  // Query heads are [kv head, group]: a split of the kv heads splits the
  // query heads that read them, so grouped-query attention shards by kv head.
  int64_t hkv = k[1], group = q[1] / k[1];
  std::optional<unsigned> kvHeads =
      rule.addShared(hkv, FactorKind::Parallel, {{key, 1}, {value, 1}});
  std::optional<unsigned> groups =
      group == 1 ? std::nullopt
                 : std::optional<unsigned>(
                       rule.addFactor(group, FactorKind::Parallel));
  std::optional<DimRef> maskHeads = maskDim(1, q[1]);
  for (std::optional<unsigned> f : {kvHeads, groups}) {
    if (!f)
      continue;
    rule.append(query, 1, *f);
    rule.append(out, 1, *f);
    for (std::optional<TensorRef> stats : {rowMax, rowSum})
      if (stats)
        rule.append(*stats, 1, *f);
    if (maskHeads)
      rule.append(maskHeads->first, maskHeads->second, *f);
  }
  rule.addShared(
      q[2], FactorKind::Parallel,
      withPartial(withStats(withMask({{query, 2}, {out, 2}}, 2, q[2]), 2), qpos,
                  0));
  rule.addShared(
      k[2], FactorKind::KeyValueSequence,
      withPartial(withMask({{key, 2}, {value, 2}}, 3, k[2]), kpos, 0));
  // The head size is contracted before the softmax, so a split of it cannot
  // be summed afterwards.
  rule.addShared(q[3], FactorKind::Opaque, {{query, 3}, {key, 3}});
  rule.addShared(v[3], FactorKind::Parallel, {{value, 3}, {out, 3}});
  return rule;
}

ShardingRule AttentionOp::getShardingRule() { return attentionRule(*this); }

ShardingRule AttentionPartialOp::getShardingRule() {
  return attentionRule(*this);
}

/// The rule of nn.attention_grad: attention's factors, with those that
/// some cotangent sums over declared as reductions (each device then holds
/// a partial sum of it, which the partitioner reduces where a user needs it
/// whole). Batch and kv heads are parallel. The query rows, and the query
/// heads of a kv group, are summed over by dk and dv; the value features
/// by dq and dk (dS is linear in dP - D, both sums over them). The
/// partition hook (NNPartition.cpp) keeps the operands whole over these:
/// they are inputs of the softmax, not terms of the sum.
///
/// Not split: the key/value sequence (a block of keys would need the
/// softmax statistics over all of them; the ring backward is to come), the
/// head size (contracted inside the softmax), and the query rows of causal
/// attention, which compare a row's global position with the keys'.
ShardingRule AttentionGradOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> q = getQuery().getType().getShape();
  ArrayRef<int64_t> k = getKey().getType().getShape();
  ArrayRef<int64_t> v = getValue().getType().getShape();
  unsigned next = 3;
  std::optional<TensorRef> mask;
  ArrayRef<int64_t> maskShape;
  if (getMask()) {
    mask = operand(next++);
    maskShape = shapeOf(getMask());
  }
  TensorRef query = operand(0), key = operand(1), value = operand(2),
            out = operand(next), dout = operand(next + 1), dq = result(0),
            dk = result(1), dv = result(2);
  // The mask broadcasts to [b, hq, sq, skv], as attention's.
  auto withMask = [&](SmallVector<DimRef> dims, unsigned d, int64_t size) {
    if (mask) {
      int64_t md = static_cast<int64_t>(d) -
                   (4 - static_cast<int64_t>(maskShape.size()));
      if (md >= 0 && maskShape[md] == size)
        dims.push_back({*mask, static_cast<unsigned>(md)});
    }
    return dims;
  };
  rule.addShared(q[0], FactorKind::Parallel,
                 withMask({{query, 0},
                           {key, 0},
                           {value, 0},
                           {out, 0},
                           {dout, 0},
                           {dq, 0},
                           {dk, 0},
                           {dv, 0}},
                          0, q[0]));
  // Query heads are [kv head, group], as for attention.
  int64_t hkv = k[1], group = q[1] / k[1];
  std::optional<unsigned> kvHeads = rule.addShared(
      hkv, FactorKind::Parallel, {{key, 1}, {value, 1}, {dk, 1}, {dv, 1}});
  std::optional<unsigned> groups =
      group == 1 ? std::nullopt
                 : std::optional<unsigned>(
                       rule.addFactor(group, FactorKind::Reduction));
  SmallVector<DimRef> maskHeads = withMask({}, 1, q[1]);
  for (std::optional<unsigned> f : {kvHeads, groups}) {
    if (!f)
      continue;
    for (TensorRef ref : {query, out, dout, dq})
      rule.append(ref, 1, *f);
    for (DimRef m : maskHeads)
      rule.append(m.first, m.second, *f);
  }
  rule.addShared(q[2], getCausal() ? FactorKind::Opaque : FactorKind::Reduction,
                 withMask({{query, 2}, {out, 2}, {dout, 2}, {dq, 2}}, 2, q[2]));
  rule.addShared(k[2], FactorKind::Opaque,
                 withMask({{key, 2}, {value, 2}, {dk, 2}, {dv, 2}}, 3, k[2]));
  rule.addShared(q[3], FactorKind::Opaque,
                 {{query, 3}, {key, 3}, {dq, 3}, {dk, 3}});
  rule.addShared(v[3], FactorKind::Reduction,
                 {{value, 3}, {out, 3}, {dout, 3}, {dv, 3}});
  return rule;
}

ShardingRule RopeOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> x = getInput().getType().getShape();
  ArrayRef<int64_t> table = getCos().getType().getShape();
  TensorRef input = operand(0), cos = operand(1), sin = operand(2),
            out = result(0);
  SmallVector<DimRef> batch = {{input, 0}, {out, 0}};
  if (table[0] == x[0]) {
    batch.push_back({cos, 0});
    batch.push_back({sin, 0});
  }
  rule.addShared(x[0], FactorKind::Parallel, batch);
  rule.addShared(x[1], FactorKind::Parallel, {{input, 1}, {out, 1}});
  rule.addShared(x[2], FactorKind::Parallel,
                 {{input, 2}, {out, 2}, {cos, 1}, {sin, 1}});
  // A head's features rotate in pairs across the whole rotary width.
  rule.addShared(x[3], FactorKind::Opaque, {{input, 3}, {out, 3}});
  rule.addShared(table[2], FactorKind::Opaque, {{cos, 2}, {sin, 2}});
  return rule;
}

//===----------------------------------------------------------------------===//
// Mixtures of experts
//===----------------------------------------------------------------------===//

/// Tokens are parallel. The experts are looked up by the ids: a block of
/// experts computes its part of each token's sum from the whole input
/// (MoeOp::partition shifts the ids to the block), a partial sum, as a
/// lookup's. An expert's features likewise, where each block of them is a
/// whole part of the activation (not a fused swiglu's halves, whose gate
/// and up a block would not pair) and no fc2 bias is added per block: a
/// reduction factor would make the operands without it partial sums
/// (getOperandNeed), which the expert MLP, not linear in its input, cannot
/// read. The input's hidden size and the slots stay whole.
ShardingRule MoeOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> x = getInput().getType().getShape();
  TensorRef in = operand(0), ids = operand(1), weights = operand(2),
            fc1 = operand(3), fc2 = operand(4), out = result(0);
  // Optional operands follow the five required ones, in order.
  unsigned next = 5;
  auto optionalRef = [&](Value v) -> std::optional<TensorRef> {
    if (!v)
      return std::nullopt;
    return operand(next++);
  };
  std::optional<TensorRef> fc3 = optionalRef(getFc3()),
                           bias1 = optionalRef(getFc1Bias()),
                           bias2 = optionalRef(getFc2Bias()),
                           bias3 = optionalRef(getFc3Bias());
  rule.addShared(x[0], FactorKind::Parallel,
                 {{in, 0}, {ids, 0}, {weights, 0}, {out, 0}});
  rule.addShared(getTopK(), FactorKind::Opaque, {{ids, 1}, {weights, 1}});
  SmallVector<DimRef> experts = {{fc1, 0}, {fc2, 0}};
  for (std::optional<TensorRef> ref : {fc3, bias1, bias2, bias3})
    if (ref)
      experts.push_back({*ref, 0});
  rule.addShared(getNumExperts(), FactorKind::Lookup, experts);
  SmallVector<DimRef> hiddenIn = {{in, 1}, {fc1, 2}};
  if (fc3)
    hiddenIn.push_back({*fc3, 2});
  rule.addShared(x[1], FactorKind::Opaque, hiddenIn);
  SmallVector<DimRef> hiddenOut = {{out, 1}, {fc2, 1}};
  if (bias2)
    hiddenOut.push_back({*bias2, 1});
  rule.addShared(x[1], FactorKind::Parallel, hiddenOut);

  int64_t ffn = getFfnSize();
  bool halves = hasFusedGate() && !getInterleaved();
  FactorKind ffnKind =
      halves || getFc2Bias() ? FactorKind::Opaque : FactorKind::Lookup;
  // fc1's rows: F features, or a fused swiglu's gate and up per feature
  // (interleaved: feature-major pairs) or per half (halves: pair-major).
  SmallVector<TensorRef, 2> fc1Rows = {fc1};
  if (bias1)
    fc1Rows.push_back(*bias1);
  std::optional<unsigned> pair;
  if (halves) {
    pair = rule.addFactor(2, FactorKind::Opaque);
    for (TensorRef ref : fc1Rows)
      rule.append(ref, 1, *pair);
  }
  SmallVector<DimRef> features = {{fc2, 2}};
  for (TensorRef ref : fc1Rows)
    features.push_back({ref, 1});
  if (fc3)
    features.push_back({*fc3, 1});
  if (bias3)
    features.push_back({*bias3, 1});
  rule.addShared(ffn, ffnKind, features);
  if (hasFusedGate() && getInterleaved()) {
    pair = rule.addFactor(2, FactorKind::Opaque);
    for (TensorRef ref : fc1Rows)
      rule.append(ref, 1, *pair);
  }
  return rule;
}

//===----------------------------------------------------------------------===//
// Lookups
//===----------------------------------------------------------------------===//

ShardingRule EmbeddingOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> table = getTable().getType().getShape();
  rule.addShared(table[0], FactorKind::Lookup, {{operand(0), 0}});
  for (auto [d, size] : llvm::enumerate(getIndices().getType().getShape()))
    rule.addShared(size, FactorKind::Parallel,
                   {{operand(1), static_cast<unsigned>(d)},
                    {result(0), static_cast<unsigned>(d)}});
  rule.addShared(table[1], FactorKind::Parallel,
                 {{operand(0), 1}, {result(0), getType().getRank() - 1}});
  return rule;
}

ShardingRule GatherOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> data = getData().getType().getShape();
  unsigned axis = getAxis();
  unsigned indexRank = getIndices().getType().getRank();
  for (auto [d, size] : llvm::enumerate(data)) {
    unsigned dim = d;
    if (dim == axis) {
      rule.addShared(size, FactorKind::Lookup, {{operand(0), dim}});
      for (auto [i, isize] : llvm::enumerate(getIndices().getType().getShape()))
        rule.addShared(isize, FactorKind::Parallel,
                       {{operand(1), static_cast<unsigned>(i)},
                        {result(0), static_cast<unsigned>(axis + i)}});
      continue;
    }
    unsigned resultDim = dim < axis ? dim : dim - 1 + indexRank;
    rule.addShared(size, FactorKind::Parallel,
                   {{operand(0), dim}, {result(0), resultDim}});
  }
  return rule;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

ShardingRule ReshapeOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  addReshapeFactors(rule, operand(0), getInput().getType().getShape(),
                    result(0), getType().getShape());
  return rule;
}

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  for (auto [d, p] : llvm::enumerate(getPermutation()))
    rule.addShared(getType().getDimSize(d), FactorKind::Parallel,
                   {{operand(0), static_cast<unsigned>(p)},
                    {result(0), static_cast<unsigned>(d)}});
  return rule;
}

ShardingRule BroadcastToOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  addBroadcastFactors(rule, *this);
  return rule;
}

ShardingRule SliceOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> in = getInput().getType().getShape();
  ArrayRef<int64_t> out = getType().getShape();
  for (unsigned d = 0; d < in.size(); ++d) {
    if (in[d] == out[d]) {
      rule.addShared(in[d], FactorKind::Parallel,
                     {{operand(0), d}, {result(0), d}});
      continue;
    }
    addOpaqueAlong(rule, {operand(0), result(0)}, {in, out}, d);
  }
  return rule;
}

/// Concat and split: every dimension but `axis` is shared by all tensors;
/// each tensor's `axis` is a piece of its own.
static void addPiecewiseFactors(ShardingRule &rule, ArrayRef<TensorRef> tensors,
                                ArrayRef<ArrayRef<int64_t>> shapes,
                                unsigned axis) {
  for (unsigned d = 0; d < shapes.front().size(); ++d) {
    if (d == axis) {
      addOpaqueAlong(rule, tensors, shapes, d);
      continue;
    }
    SmallVector<DimRef> dims;
    for (TensorRef ref : tensors)
      dims.push_back({ref, d});
    rule.addShared(shapes.front()[d], FactorKind::Parallel, dims);
  }
}

ShardingRule ConcatOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  SmallVector<TensorRef> tensors;
  SmallVector<ArrayRef<int64_t>> shapes;
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    tensors.push_back(operand(i));
    shapes.push_back(shapeOf(input));
  }
  tensors.push_back(result(0));
  shapes.push_back(getType().getShape());
  addPiecewiseFactors(rule, tensors, shapes, getAxis());
  return rule;
}

/// Every dimension but `axis` is shared by the cache, the update and the
/// result (heads split over tp, the batch over dp); the slots along `axis`
/// stay whole. One position per row splits with the batch; a shared one
/// stays whole.
ShardingRule KvCacheWriteOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  ArrayRef<int64_t> cache = getCache().getType().getShape();
  ArrayRef<int64_t> update = getUpdate().getType().getShape();
  auto axis = static_cast<unsigned>(getAxis());
  bool perRow = getPosition().getType().getNumElements() != 1;
  for (auto [d, size] : llvm::enumerate(cache)) {
    unsigned dim = d;
    if (dim == axis) {
      rule.addShared(size, FactorKind::Opaque,
                     {{operand(0), dim}, {result(0), dim}});
      rule.addShared(update[dim], FactorKind::Opaque, {{operand(1), dim}});
      continue;
    }
    SmallVector<DimRef> tensors = {
        {operand(0), dim}, {operand(1), dim}, {result(0), dim}};
    if (dim == 0 && perRow)
      tensors.push_back({operand(2), 0});
    rule.addShared(size, FactorKind::Parallel, tensors);
  }
  return rule;
}

ShardingRule SplitOp::getShardingRule() {
  ShardingRule rule = ShardingRule::forOp(*this);
  SmallVector<TensorRef> tensors = {operand(0)};
  SmallVector<ArrayRef<int64_t>> shapes = {getInput().getType().getShape()};
  for (auto [i, res] : llvm::enumerate(getResults())) {
    tensors.push_back(result(i));
    shapes.push_back(shapeOf(res));
  }
  addPiecewiseFactors(rule, tensors, shapes, getAxis());
  return rule;
}
