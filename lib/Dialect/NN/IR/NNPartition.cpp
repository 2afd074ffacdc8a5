//===- NNPartition.cpp - the ops' own partitioning hooks ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// `ShardingRuleOpInterface::partition` for the ops whose shards combine in
// a way their sharding rule cannot say: a constant stays global and each
// device slices its block; attention planned as a ring passes its key and
// value blocks around the ring and merges the partial results by online
// softmax, and its backward likewise; otherwise attention's backward reads
// its operands whole over the factors its cotangents sum over. They reach the
// mesh and the collectives only through PartitionContext, which the dist
// partitioner implements.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include <limits>
#include <string>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;

// Anchors the vtable.
PartitionContext::~PartitionContext() = default;

ElementsAttr nn::getIndexConstant(MLIRContext *context, ArrayRef<int64_t> shape,
                                  ArrayRef<int64_t> values, StringRef name) {
  auto type = RankedTensorType::get(shape, IntegerType::get(context, 64));
  if (static_cast<int64_t>(values.size()) <= ConstantOp::kMaxInlineElements)
    return DenseElementsAttr::get(type, values);
  ArrayRef<char> bytes(reinterpret_cast<const char *>(values.data()),
                       values.size() * sizeof(int64_t));
  return DenseResourceElementsAttr::get(
      type, name,
      HeapAsmResourceBlob::allocateAndCopyWithAlign(bytes, alignof(int64_t)));
}

//===----------------------------------------------------------------------===//
// nn.constant
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::partition(PartitionContext &context) {
  // Constants stay global in the local program; each device keeps its
  // block. With ring attention's zigzag layout, a constant split over the
  // ring axis is indexed by sequence position: it is laid out likewise.
  Operation *whole;
  if (ElementsAttr laidOut = context.layOutSequence(0, getValue()))
    whole = ConstantOp::create(context.getBuilder(), getLoc(), laidOut);
  else
    whole = context.cloneWithoutPlan();
  context.setWholeResult(0, whole->getResult(0));
  return success();
}

//===----------------------------------------------------------------------===//
// nn.attention
//===----------------------------------------------------------------------===//

namespace {

/// Whether some dimension of `tensor` carries `factor`.
bool carriesFactor(const TensorFactors &tensor, unsigned factor) {
  return llvm::any_of(tensor, [&](const DimFactors &dim) {
    return llvm::is_contained(dim, factor);
  });
}

/// Attention as a ring over the axes that split its query sequence: each
/// device keeps its query rows and sees every key/value block in turn, one
/// `nn.attention_partial` per block, passing the block on to the next
/// device between steps and merging the partial results by online softmax.
constexpr float kInf = std::numeric_limits<float>::infinity();

class RingAttention {
public:
  /// `op` is nn.attention or nn.attention_grad: query, key, value and the
  /// optional `mask` first, then (attention_grad) `out` and `dout`.
  RingAttention(Operation *op, Value mask, bool causal, double scale,
                PartitionContext &context, const ShardingRule &rule,
                AxisList ring)
      : op(op), globalMask(mask), causal(causal), scaleValue(scale),
        context(context), rule(rule), ring(std::move(ring)),
        b(context.getBuilder()), loc(op->getLoc()),
        querySeq(rule.getOperands()[0][2].front()),
        keySeq(rule.getOperands()[1][2].front()) {}

  /// nn.attention: its result.
  LogicalResult build();
  /// nn.attention_grad: dq, and dk and dv split like k and v.
  LogicalResult buildBackward();

private:
  static constexpr unsigned kMaskOperand = 3;

  void start();
  void getLocalOperands();
  Value getRingIndex();
  Value getMaskColumns(int64_t t);
  void buildPositions();
  AttentionPartialOp buildStep(Value key, Value value, Value stepMask,
                               Value keyPos);
  void rotateBlocks(int64_t t);
  void rotateBlocks(const std::string &why);
  SmallVector<bool> findSeenSteps();
  void merge(AttentionPartialOp next);
  void mergeStats(Value max, Value sum);
  Value shiftOf(Value max);
  Value weigh(Value max, Value sum, Value shift);
  Value getStepMask(int64_t t);
  Value asColumn(Value x);
  Value scalar(float value);

  Operation *op;
  Value globalMask;
  bool causal;
  double scaleValue;
  PartitionContext &context;
  const ShardingRule &rule;
  /// The axes of the ring: those of the query sequence.
  AxisList ring;
  OpBuilder &b;
  Location loc;
  unsigned querySeq, keySeq;
  int64_t ranks = 1, rows = 0;
  /// Whether the mask has a row per query (it stays with its rows) or one
  /// row for all queries (it is split on keys and may travel with them).
  bool maskPerQuery = false, maskTravels = false;
  /// The local operands; the blocks of `k`, `v`, `mask` and `kpos` move
  /// around the ring (and, in the backward, `dk` and `dv` with them).
  Value q, k, v, mask;
  /// The global positions of this device's query rows and of the visiting
  /// key block (causal attention only).
  Value qpos, kpos;
  /// This device's position in the ring, built on first use.
  Value ringIndex;
  RankedTensorType outType, statsType, columnType, boolLike;
  FloatAttr scale;
  /// The op's softcap (null without one), which every step keeps.
  FloatAttr softcap;
  /// The op's sliding window (null without one): a step's positions keep
  /// it, the backward's step masks apply it.
  IntegerAttr window;
  /// The program's sequence order (row block p of the ring holds positions
  /// order[p * rows ...]), causal attention only.
  SmallVector<int64_t> order;
  /// The merged result so far, its rows' largest score and the sum of
  /// exp(score - rowMax) (nn.attention_partial's results).
  Value out, rowMax, rowSum;
};

} // namespace

SmallVector<unsigned> AttentionOp::getOrderedFactors(const ShardingRule &rule) {
  // Query i attends to keys j <= i + (skv - sq): it compares positions.
  if (!getCausal())
    return {};
  return {rule.getOperands()[0][2].front(), rule.getOperands()[1][2].front()};
}

/// The axes that split the query sequence of attention (forward or
/// backward) under `assignment`; none where the sequence is 1 long (a
/// decode step: the dimension has no factor).
static AxisList getQuerySequenceAxes(const ShardingRule &rule,
                                     const FactorAxes &assignment) {
  const DimFactors &factors = rule.getOperands()[0][2];
  return factors.empty() ? AxisList() : assignment[factors.front()];
}

/// `seen` (i1 [..., rows, keys]: which keys each row sees) combined with
/// attention's mask (null for none): a boolean mask and `seen`, or an
/// additive one with -inf where a key is not seen. The result broadcasts
/// both, its last two dimensions `seen`'s.
static Value hideUnseen(OpBuilder &b, Location loc, Value seen, Value mask) {
  if (!mask)
    return seen;
  auto seenType = cast<RankedTensorType>(seen.getType());
  auto maskType = cast<RankedTensorType>(mask.getType());
  SmallVector<int64_t> shape(maskType.getShape());
  while (shape.size() < static_cast<size_t>(seenType.getRank()))
    shape.insert(shape.begin(), 1);
  shape[shape.size() - 2] = seenType.getShape().drop_back().back();
  shape.back() = seenType.getShape().back();
  if (maskType.getElementType().isInteger(1))
    return AndOp::create(b, loc, RankedTensorType::get(shape, b.getI1Type()),
                         seen, mask);
  Type element = maskType.getElementType();
  Value hidden = ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(
          RankedTensorType::get({}, element),
          b.getFloatAttr(element, -std::numeric_limits<double>::infinity()))));
  return WhereOp::create(b, loc, RankedTensorType::get(shape, element), seen,
                         mask, hidden);
}

/// Where key positions `keys` ([1, n] or [r, n]) lie within `window` of
/// query positions `queries` ([r, 1]): `queries - keys < window`, i1
/// [r, n].
static Value withinWindow(OpBuilder &b, Location loc, Value keys, Value queries,
                          int64_t window) {
  auto keyType = cast<RankedTensorType>(keys.getType());
  auto queryType = cast<RankedTensorType>(queries.getType());
  auto type = RankedTensorType::get(
      {queryType.getDimSize(0), keyType.getDimSize(1)}, b.getI64Type());
  Value distance = SubOp::create(b, loc, type, queries, keys);
  Value bound = ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(
          RankedTensorType::get({}, b.getI64Type()), window)));
  return CompareOp::create(b, loc, type.clone(b.getI1Type()),
                           CompareDirection::LT, distance, bound);
}

/// Causal attention whose queries are split over `axes` but whose keys are
/// whole on every device (no ring): nn.attention's `causal` aligns the
/// local queries with the last keys, which is right for the last block of
/// queries only. The local op instead takes the causal mask as a mask of
/// global positions, query `i` of block `p` (position p * rows + i, or the
/// program's sequence order) seeing key `j` where
/// `j <= position + keys - queries`, combined with the model's local mask
/// (`mask`, null for none).
static Value causalBlockMask(PartitionContext &context, Location loc,
                             ArrayRef<StringRef> axes, int64_t rows,
                             int64_t keys, Value mask, IntegerAttr window) {
  OpBuilder &b = context.getBuilder();
  int64_t ranks = context.getGroupSize(axes), queries = rows * ranks;
  SmallVector<int64_t> order(queries);
  for (int64_t i = 0; i < queries; ++i)
    order[i] = i;
  if (ArrayRef<int64_t> given = context.getSequenceOrder();
      static_cast<int64_t>(given.size()) == queries)
    order.assign(given.begin(), given.end());
  // The last key each row sees: its position shifted by keys - queries.
  for (int64_t &position : order)
    position += keys - queries;
  auto i64 = b.getI64Type();
  Value table =
      ConstantOp::create(b, loc,
                         getIndexConstant(b.getContext(), {ranks, rows}, order,
                                          "causal_block_positions"));
  Value last =
      GatherOp::create(b, loc, RankedTensorType::get({rows}, i64), table,
                       context.getPosition(axes), static_cast<int64_t>(0));
  last = ReshapeOp::create(b, loc, RankedTensorType::get({rows, 1}, i64), last);
  SmallVector<int64_t> keyOrder(keys);
  for (int64_t j = 0; j < keys; ++j)
    keyOrder[j] = j;
  Value keyPositions =
      ConstantOp::create(b, loc,
                         getIndexConstant(b.getContext(), {1, keys}, keyOrder,
                                          "causal_key_positions"));
  auto seenType = RankedTensorType::get({1, 1, rows, keys}, b.getI1Type());
  Value seen = CompareOp::create(b, loc, seenType.clone({rows, keys}),
                                 CompareDirection::LE, keyPositions, last);
  if (window)
    seen = AndOp::create(
        b, loc, seen,
        withinWindow(b, loc, keyPositions, last, window.getInt()));
  seen = ReshapeOp::create(b, loc, seenType, seen);
  return hideUnseen(b, loc, seen, mask);
}

LogicalResult AttentionOp::partition(PartitionContext &context) {
  ShardingRule rule = getShardingRule();
  // The query sequence's axes: a ring, or with --sp-mode ring absent (or
  // the keys whole), a block of queries per device.
  AxisList split = getQuerySequenceAxes(rule, context.getAssignment());
  if (getCausal() && !split.empty() && !context.hasRingPlan()) {
    const FactorAxes &assignment = context.getAssignment();
    SmallVector<Value> operands;
    for (unsigned i = 0; i < getNumOperands(); ++i)
      operands.push_back(context.getOperand(i, assignment));
    auto qType = cast<RankedTensorType>(operands[0].getType());
    int64_t keys = cast<RankedTensorType>(operands[1].getType()).getDimSize(2);
    if (keys != getKey().getType().getDimSize(2))
      return emitOpError() << "causal attention with split keys and no ring "
                              "(a compiler bug)";
    Value mask =
        causalBlockMask(context, getLoc(), split, qType.getDimSize(2), keys,
                        getMask() ? operands[3] : Value(), getWindowAttr());
    auto local = AttentionOp::create(
        context.getBuilder(), getLoc(),
        qType.clone(
            {qType.getDimSize(0), qType.getDimSize(1), qType.getDimSize(2),
             cast<RankedTensorType>(operands[2].getType()).getDimSize(3)}),
        operands[0], operands[1], operands[2], mask, UnitAttr(), getScaleAttr(),
        getSoftcapAttr(), IntegerAttr());
    return context.setResult(0, local);
  }
  if (!context.hasRingPlan())
    return context.partitionByRule();
  AxisList ring = split;
  if (ring.empty())
    return context.partitionByRule();
  return RingAttention(*this, getMask(), getCausal(), getEffectiveScale(),
                       context, rule, ring)
      .build();
}

/// The local operands, positions and types both directions share.
void RingAttention::start() {
  getLocalOperands();
  ranks = context.getGroupSize(ring);
  auto qType = cast<RankedTensorType>(q.getType());
  rows = qType.getDimSize(2);
  buildPositions();
  scale = b.getF32FloatAttr(scaleValue);
  softcap = op->getAttrOfType<FloatAttr>("softcap");
  window = op->getAttrOfType<IntegerAttr>("window");
  statsType = RankedTensorType::get(
      {qType.getDimSize(0), qType.getDimSize(1), rows}, b.getF32Type());
  outType =
      RankedTensorType::get({qType.getDimSize(0), qType.getDimSize(1), rows,
                             cast<RankedTensorType>(v.getType()).getDimSize(3)},
                            qType.getElementType());
  SmallVector<int64_t> column(statsType.getShape());
  column.push_back(1);
  columnType = RankedTensorType::get(column, b.getF32Type());
  boolLike = statsType.clone(b.getI1Type());
}

LogicalResult RingAttention::build() {
  start();
  auto first = buildStep(k, v, getMaskColumns(0), kpos);
  out = first.getResult();
  rowMax = first.getRowMax();
  rowSum = first.getRowSum();
  // A step no device's rows see a key of (with a sliding window, a key
  // block behind every row's window) is skipped, and after the last step
  // that is seen the blocks stop travelling.
  SmallVector<bool> seen = findSeenSteps();
  int64_t last = ranks - 1;
  while (last > 0 && !seen[last])
    --last;
  for (int64_t t = 1; t <= last; ++t) {
    rotateBlocks(t);
    if (seen[t])
      merge(buildStep(k, v, getMaskColumns(t), kpos));
  }
  return context.setResult(0, out);
}

/// Whether some device's query rows see some key of the block visiting it
/// at each step: always without causal attention; with it, some key
/// position at or before a row's, and within its window. After `t` steps
/// ring position `i` holds the keys of position (i - t) mod ranks.
SmallVector<bool> RingAttention::findSeenSteps() {
  SmallVector<bool> seen(ranks, true);
  if (!causal)
    return seen;
  int64_t width = window ? window.getInt() : rows * ranks;
  // Each block's positions, sorted: a row sees the block iff some key lies
  // in (position - width, position].
  SmallVector<SmallVector<int64_t>> blocks(ranks);
  for (int64_t p = 0; p < ranks; ++p) {
    blocks[p].assign(order.begin() + p * rows, order.begin() + (p + 1) * rows);
    llvm::sort(blocks[p]);
  }
  for (int64_t t = 1; t < ranks; ++t) {
    seen[t] = false;
    for (int64_t i = 0; i < ranks && !seen[t]; ++i) {
      ArrayRef<int64_t> keys = blocks[(i - t + ranks) % ranks];
      for (int64_t position : blocks[i]) {
        const int64_t *first = llvm::lower_bound(keys, position - width + 1);
        if (first != keys.end() && *first <= position) {
          seen[t] = true;
          break;
        }
      }
    }
  }
  return seen;
}

/// Ring attention's backward. Block j's share of the softmax of row i is
/// P_ij = P^j_ij * w_ij, P^j the block's own softmax (what nn.attention_grad
/// computes over the block alone) and w_ij = l_ij exp(m_ij - M_i) / L_i its
/// weight in the row (m, l the block's maximum and sum, M, L the row's).
/// nn.attention_grad over the block with dout scaled by w gives exactly
/// the block's terms: D = rowsum(w dout * out) = w D_i and dP = w dP, so
/// dS = P^j (w dP - w D) = P (dP - D), and P^j^T (w dout) = P^T dout. So a
/// first walk around the ring gathers each block's (m, l) and the rows'
/// (M, L) (nn.attention_partial, as the forward), and a second computes
/// each block's cotangents: dq stays with its rows, dk and dv travel with
/// their key/value block and reach its device after a last step. The
/// sequence is never gathered; k and v go around the ring twice, dk and
/// dv once. Causal attention compares global positions: a mask built from
/// them (and the model's mask) is the step's mask.
LogicalResult RingAttention::buildBackward() {
  start();
  unsigned next = globalMask ? 4 : 3;
  Value out0 = context.getOperand(next, context.getAssignment());
  Value dout = context.getOperand(next + 1, context.getAssignment());
  // 1. Each block's statistics, and the rows'.
  SmallVector<std::pair<Value, Value>> blocks;
  for (int64_t t = 0; t < ranks; ++t) {
    if (t)
      rotateBlocks(t);
    auto step = buildStep(k, v, getMaskColumns(t), kpos);
    blocks.push_back({step.getRowMax(), step.getRowSum()});
    if (t) {
      mergeStats(step.getRowMax(), step.getRowSum());
    } else {
      rowMax = step.getRowMax();
      rowSum = step.getRowSum();
    }
  }
  rotateBlocks("ring attention backward: the key/value blocks home");
  Value shift = shiftOf(rowMax);
  Value empty = CompareOp::create(b, loc, boolLike, CompareDirection::EQ,
                                  rowSum, scalar(0));
  Value total = WhereOp::create(b, loc, statsType, empty, scalar(1), rowSum);

  // 2. Each block's cotangents.
  Value dq, dk, dv;
  for (int64_t t = 0; t < ranks; ++t) {
    std::string why = "ring attention backward step " + std::to_string(t);
    if (t) {
      rotateBlocks(t);
      dk = context.shiftAlongRing(dk, ring, why);
      dv = context.shiftAlongRing(dv, ring, why);
    }
    auto [max, sum] = blocks[t];
    Value weight = DivOp::create(b, loc, weigh(max, sum, shift), total);
    Value scaled = MulOp::create(b, loc, dout, asColumn(weight));
    auto step = AttentionGradOp::create(
        b, loc, TypeRange{q.getType(), k.getType(), v.getType()}, q, k, v,
        getStepMask(t), out0, scaled, /*causal=*/nullptr, scale, softcap,
        /*window=*/nullptr);
    dq = t ? AddOp::create(b, loc, dq, step.getDq()).getResult() : step.getDq();
    dk = t ? AddOp::create(b, loc, dk, step.getDk()).getResult() : step.getDk();
    dv = t ? AddOp::create(b, loc, dv, step.getDv()).getResult() : step.getDv();
  }
  std::string why = "ring attention backward: the key/value gradients home";
  dk = context.shiftAlongRing(dk, ring, why);
  dv = context.shiftAlongRing(dv, ring, why);
  FactorAxes split = context.getAssignment();
  split[keySeq] = ring;
  if (failed(context.setResult(0, dq)) ||
      failed(context.setResult(1, dk, split)) ||
      failed(context.setResult(2, dv, split)))
    return failure();
  return success();
}

/// Keys, values and the key side of the mask are split like the query
/// sequence and travel around the ring. A mask with a row per query and a
/// column per key (a causal or relative-position bias folded into the
/// mask) stays with its query rows: each device keeps its rows whole and,
/// at every step, reads the columns of the key block visiting it. A mask
/// with one row for all queries is split on keys and travels with them.
void RingAttention::getLocalOperands() {
  maskPerQuery = globalMask &&
                 carriesFactor(rule.getOperands()[kMaskOperand], querySeq) &&
                 carriesFactor(rule.getOperands()[kMaskOperand], keySeq);
  FactorAxes assignment = context.getAssignment();
  FactorAxes maskAssignment = assignment;
  assignment[keySeq] = ring;
  if (!maskPerQuery)
    maskAssignment[keySeq] = ring;
  q = context.getOperand(0, assignment);
  k = context.getOperand(1, assignment);
  v = context.getOperand(2, assignment);
  mask =
      globalMask ? context.getOperand(kMaskOperand, maskAssignment) : Value();
  // The mask travels only if it is split on the key dimension.
  maskTravels =
      mask && !maskPerQuery &&
      cast<RankedTensorType>(mask.getType()).getShape().back() !=
          cast<RankedTensorType>(globalMask.getType()).getShape().back();
}

Value RingAttention::getRingIndex() {
  if (!ringIndex)
    ringIndex = context.getPosition(ring);
  return ringIndex;
}

/// The mask of step `t`. After `t` steps a device at ring position `i`
/// holds the key block of position (i - t) mod ranks; a per-query mask
/// gives it those columns.
Value RingAttention::getMaskColumns(int64_t t) {
  if (!maskPerQuery)
    return mask;
  auto maskType = cast<RankedTensorType>(mask.getType());
  SmallVector<int64_t> blocks(maskType.getShape());
  int64_t columns = blocks.back() / ranks;
  blocks.back() = ranks;
  blocks.push_back(columns);
  Value split = ReshapeOp::create(b, loc, maskType.clone(blocks), mask);
  SmallVector<int64_t> visiting(ranks);
  for (int64_t i = 0; i < ranks; ++i)
    visiting[i] = (i - t + ranks) % ranks;
  Value table = ConstantOp::create(
      b, loc,
      getIndexConstant(b.getContext(), {ranks}, visiting, "ring_blocks"));
  Value block =
      GatherOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()), table,
                       getRingIndex(), static_cast<int64_t>(0));
  SmallVector<int64_t> shape(maskType.getShape());
  shape.back() = columns;
  return GatherOp::create(b, loc, maskType.clone(shape), split, block,
                          static_cast<int64_t>(maskType.getRank() - 1));
}

/// Causal attention compares global positions: this device's rows are row
/// block `axis_index` of the program's sequence order.
void RingAttention::buildPositions() {
  if (!causal)
    return;
  int64_t length = rows * ranks;
  order.resize(length);
  for (int64_t i = 0; i < length; ++i)
    order[i] = i;
  if (ArrayRef<int64_t> given = context.getSequenceOrder(); !given.empty())
    order.assign(given.begin(), given.end());
  Value table = ConstantOp::create(
      b, loc,
      getIndexConstant(b.getContext(), {ranks, rows}, order, "ring_positions"));
  qpos = GatherOp::create(b, loc, RankedTensorType::get({rows}, b.getI64Type()),
                          table, getRingIndex(), static_cast<int64_t>(0));
  kpos = qpos;
}

AttentionPartialOp RingAttention::buildStep(Value key, Value value,
                                            Value stepMask, Value keyPos) {
  return AttentionPartialOp::create(
      b, loc, TypeRange{outType, statsType, statsType}, q, key, value, stepMask,
      qpos, keyPos, scale, softcap, window);
}

/// Passes the key/value block (and what travels with it) on to the next
/// device and receives the previous one's.
void RingAttention::rotateBlocks(int64_t t) {
  rotateBlocks("ring attention step " + std::to_string(t));
}

void RingAttention::rotateBlocks(const std::string &why) {
  k = context.shiftAlongRing(k, ring, why);
  v = context.shiftAlongRing(v, ring, why);
  if (maskTravels)
    mask = context.shiftAlongRing(mask, ring, why);
  if (kpos)
    kpos = context.shiftAlongRing(kpos, ring, why);
}

Value RingAttention::asColumn(Value x) {
  Value c = ReshapeOp::create(b, loc, columnType, x);
  Type element = outType.getElementType();
  if (element != b.getF32Type())
    c = CastOp::create(
        b, loc, RankedTensorType::get(columnType.getShape(), element), c);
  return c;
}

Value RingAttention::scalar(float value) {
  return ConstantOp::create(b, loc,
                            cast<ElementsAttr>(DenseElementsAttr::get(
                                RankedTensorType::get({}, b.getF32Type()),
                                b.getF32FloatAttr(value))));
}

/// The backward's mask of step `t`: the model's mask's columns, and with
/// causal attention the global positions' order (query i sees key j where
/// kpos[j] <= qpos[i]), as nn.attention_partial applies them.
Value RingAttention::getStepMask(int64_t t) {
  Value columns = getMaskColumns(t);
  if (!causal)
    return columns;
  auto posType = [&](int64_t r, int64_t c) {
    return RankedTensorType::get({r, c}, b.getI64Type());
  };
  Value qrow = ReshapeOp::create(b, loc, posType(rows, 1), qpos);
  Value krow = ReshapeOp::create(b, loc, posType(1, rows), kpos);
  auto seenType = RankedTensorType::get({rows, rows}, b.getI1Type());
  Value seen =
      CompareOp::create(b, loc, seenType, CompareDirection::LE, krow, qrow);
  if (window)
    seen = AndOp::create(b, loc, seen,
                         withinWindow(b, loc, krow, qrow, window.getInt()));
  return hideUnseen(b, loc, seen, columns);
}

/// `max` where it is finite, else 0: what a row's scores are shifted by, so
/// that a row that has seen no key (max = -inf) weighs exp(-inf) = 0 and
/// never exp(-inf - -inf).
Value RingAttention::shiftOf(Value max) {
  Value none = CompareOp::create(b, loc, boolLike, CompareDirection::EQ, max,
                                 scalar(-kInf));
  return WhereOp::create(b, loc, statsType, none, scalar(0), max);
}

/// exp(max - shift) * sum: a block's (or the rows') weight.
Value RingAttention::weigh(Value max, Value sum, Value shift) {
  return MulOp::create(
      b, loc, ExpOp::create(b, loc, SubOp::create(b, loc, max, shift)), sum);
}

/// Merges a block's row statistics into the rows' (rowMax, rowSum), as
/// `merge` weighs them, without an output.
void RingAttention::mergeStats(Value max, Value sum) {
  Value most = MaxOp::create(b, loc, rowMax, max);
  Value shift = shiftOf(most);
  rowSum = AddOp::create(b, loc, weigh(rowMax, rowSum, shift),
                         weigh(max, sum, shift));
  rowMax = most;
}

/// Online-softmax merge of the result so far with step `next`. Each side
/// weighs exp(rowMax - most) * rowSum, an exact difference of two scores
/// times a sum in [1, keys]: never a log-sum-exp, whose log would be lost
/// beside a fully masked row's scores of -10000 or the float minimum. A
/// row that has seen no key yet (rowMax = -inf, rowSum = 0) takes weight
/// 0, and 0/0 becomes 0.
void RingAttention::merge(AttentionPartialOp next) {
  Value most = MaxOp::create(b, loc, rowMax, next.getRowMax());
  Value shift = shiftOf(most);
  Value w1 = weigh(rowMax, rowSum, shift);
  Value w2 = weigh(next.getRowMax(), next.getRowSum(), shift);
  Value total = AddOp::create(b, loc, w1, w2);
  Value empty = CompareOp::create(b, loc, boolLike, CompareDirection::EQ, total,
                                  scalar(0));
  Value safe = WhereOp::create(b, loc, statsType, empty, scalar(1), total);
  Value sum =
      AddOp::create(b, loc, MulOp::create(b, loc, out, asColumn(w1)),
                    MulOp::create(b, loc, next.getResult(), asColumn(w2)));
  out = DivOp::create(b, loc, sum, asColumn(safe));
  rowMax = most;
  rowSum = total;
}

//===----------------------------------------------------------------------===//
// nn.attention_grad
//===----------------------------------------------------------------------===//

/// The cotangents of a shard are partial sums over the split reduction
/// factors (query rows, the query heads of a kv group, value features),
/// but the operands are the softmax's inputs, not terms of those sums:
/// each device takes its block of every operand, none of them partial
/// (what the default would ask of k and v, which lack the factors), and
/// its results are the partial sums the plan records.
LogicalResult AttentionGradOp::partition(PartitionContext &context) {
  const FactorAxes &assignment = context.getAssignment();
  // As the forward: a ring over the axes of the query sequence.
  ShardingRule rule = getShardingRule();
  AxisList ring = getQuerySequenceAxes(rule, assignment);
  if (context.hasRingPlan() && !ring.empty())
    return RingAttention(*this, getMask(), getCausal(), getEffectiveScale(),
                         context, rule, ring)
        .buildBackward();
  SmallVector<Value> operands;
  for (unsigned i = 0; i < getNumOperands(); ++i)
    operands.push_back(context.getOperand(i, assignment));
  unsigned next = getMask() ? 4 : 3;
  // Causal attention over a block of the queries: the causal mask by
  // global positions, as the forward.
  Value mask = getMask() ? operands[3] : Value();
  UnitAttr causal = getCausalAttr();
  IntegerAttr window = getWindowAttr();
  if (causal && !ring.empty()) {
    int64_t keys = cast<RankedTensorType>(operands[1].getType()).getDimSize(2);
    if (keys != getKey().getType().getDimSize(2))
      return emitOpError() << "causal attention with split keys and no ring "
                              "(a compiler bug)";
    mask = causalBlockMask(
        context, getLoc(), ring,
        cast<RankedTensorType>(operands[0].getType()).getDimSize(2), keys, mask,
        getWindowAttr());
    causal = UnitAttr();
    window = IntegerAttr();
  }
  // dq, dk and dv are split as q, k and v are (the same factors).
  auto local = AttentionGradOp::create(
      context.getBuilder(), getLoc(),
      TypeRange{operands[0].getType(), operands[1].getType(),
                operands[2].getType()},
      operands[0], operands[1], operands[2], mask, operands[next],
      operands[next + 1], causal, getScaleAttr(), getSoftcapAttr(), window);
  for (unsigned i = 0; i < 3; ++i)
    if (failed(context.setResult(i, local->getResult(i))))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// nn.moe
//===----------------------------------------------------------------------===//

/// nn.moe whose tokens and experts are split over the same `axes` (expert
/// parallelism over ranks that hold different tokens, Megatron's
/// all-to-all token dispatcher): each device sends one row per (token,
/// chosen expert) to the device holding that expert (`dist.dispatch`), runs
/// its block of experts on the rows it receives, one expert each, and gets
/// their outputs back (`dist.dispatch_return`), which it weights by the
/// routing weights and sums per token. Dropless: a device may receive every
/// row of the group, so that is the bound of what it receives.
static LogicalResult partitionByDispatch(MoeOp op, PartitionContext &context,
                                         ArrayRef<StringRef> axes,
                                         unsigned expertFactor) {
  OpBuilder &b = context.getBuilder();
  Location loc = op.getLoc();
  const FactorAxes &assignment = context.getAssignment();
  // The weights hold this device's experts, and their features as the plan
  // splits them (expert tensor parallelism): those partial sums are summed
  // once the outputs are back and combined.
  ShardingRule rule = op.getShardingRule();
  FactorAxes experts = assignment;
  experts[expertFactor] = AxisList(axes.begin(), axes.end());
  SmallVector<StringRef> partial;
  for (unsigned i = 3; i < op->getNumOperands(); ++i)
    for (ArrayRef<unsigned> dim : rule.getTensor(ShardingRule::operand(i)))
      for (unsigned f : dim)
        if (f != expertFactor)
          for (StringRef axis : assignment[f])
            if (!llvm::is_contained(partial, axis))
              partial.push_back(axis);

  Value x = context.getOperand(0, assignment);
  Value ids = context.getOperand(1, assignment);
  Value weights = context.getOperand(2, assignment);
  SmallVector<Value> operands;
  for (unsigned i = 0; i < op->getNumOperands(); ++i)
    operands.push_back(i < 3 ? Value() : context.getOperand(i, experts));

  auto xType = cast<RankedTensorType>(x.getType());
  int64_t tokens = xType.getDimSize(0), hidden = xType.getDimSize(1);
  int64_t k = op.getTopK(), numExperts = op.getNumExperts();
  int64_t n = context.getGroupSize(axes);
  int64_t held = numExperts / n;
  int64_t rows = tokens * k;
  Type i64 = b.getI64Type();
  auto scalar = [&](int64_t value) -> Value {
    auto type = RankedTensorType::get({}, i64);
    return ConstantOp::create(
        b, loc, cast<ElementsAttr>(DenseElementsAttr::get(type, value)));
  };
  auto reshape = [&](Value value, ArrayRef<int64_t> shape) -> Value {
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getShape() == shape)
      return value;
    return ReshapeOp::create(b, loc, type.clone(shape), value);
  };

  // Each (token, slot) pair's device and its expert there, counted from 1
  // so that the rows a dispatch pads with zeros name no expert.
  auto idType = cast<RankedTensorType>(ids.getType()).clone(i64);
  if (!cast<RankedTensorType>(ids.getType()).getElementType().isInteger(64))
    ids = CastOp::create(b, loc, idType, ids);
  auto maskType = idType.clone(b.getI1Type());
  Value valid = AndOp::create(
      b, loc, maskType,
      CompareOp::create(b, loc, maskType, CompareDirection::GE, ids, scalar(0)),
      CompareOp::create(b, loc, maskType, CompareDirection::LT, ids,
                        scalar(numExperts)));
  Value device = DivOp::create(b, loc, ids, scalar(held));
  Value destinations = reshape(
      WhereOp::create(b, loc, idType, valid, device, scalar(-1)), {rows});
  Value local = AddOp::create(
      b, loc,
      SubOp::create(b, loc, ids, MulOp::create(b, loc, device, scalar(held))),
      scalar(1));
  local =
      reshape(WhereOp::create(b, loc, idType, valid, local, scalar(0)), {rows});
  // One row per pair: the token's hidden state, once per chosen expert.
  Value sent = x;
  if (k > 1)
    sent =
        reshape(BroadcastToOp::create(b, loc, xType.clone({tokens, k, hidden}),
                                      reshape(x, {tokens, 1, hidden})),
                {rows, hidden});

  int64_t bound = rows * n;
  auto [received, counts] = context.dispatchRows(
      sent, destinations, axes, bound, "token rows to their experts' devices");
  Value receivedIds = context
                          .dispatchRows(local, destinations, axes, bound,
                                        "which expert each row is for")
                          .first;
  operands[0] = received;
  operands[1] =
      reshape(SubOp::create(b, loc, receivedIds, scalar(1)), {bound, 1});
  auto weightType = cast<RankedTensorType>(weights.getType());
  auto onesType = weightType.clone({bound, 1});
  operands[2] = ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(
          onesType, b.getFloatAttr(weightType.getElementType(), 1.0))));
  Operation *expertsOp = context.cloneWithoutPlan();
  expertsOp->setOperands(operands);
  expertsOp->getResult(0).setType(xType.clone({bound, hidden}));
  Value outputs = expertsOp->getResult(0);
  Value back = context.returnRows(outputs, counts, destinations, axes,
                                  "expert outputs back to their tokens");
  // Each token's outputs weighted by its routing weights and summed. A
  // slot that selects no expert adds nothing, whatever its weight (the
  // kernel skips it: an infinite weight times its zero row must not make
  // a NaN).
  weights = WhereOp::create(
      b, loc, weightType, reshape(valid, weightType.getShape()), weights,
      ConstantOp::create(
          b, loc,
          cast<ElementsAttr>(DenseElementsAttr::get(
              RankedTensorType::get({}, weightType.getElementType()),
              b.getFloatAttr(weightType.getElementType(), 0.0)))));
  Value combined;
  if (k == 1) {
    combined = MulOp::create(b, loc, back, weights);
  } else {
    Value weighted = MulOp::create(b, loc, reshape(back, {tokens, k, hidden}),
                                   reshape(weights, {tokens, k, 1}));
    combined = ReduceOp::create(b, loc, xType, ReduceKind::Sum, weighted,
                                ArrayRef<int64_t>{1});
  }
  // Summed last, on a row per token rather than per dispatched row: the
  // return and the combine are linear.
  if (!partial.empty())
    combined =
        context.sumOver(combined, partial, "the expert features' partial sums");
  return context.setResult(0, combined, assignment);
}

/// A device holding a block of the experts (the expert factor split over
/// some axes) computes the slots routed to them: its ids are shifted by
/// its block's first expert, and the ids of the other blocks become -1,
/// which selects no expert. Each device's result is its part of the
/// tokens' sums (the rule's lookup factors), which its users reduce.
/// Where the tokens are split over the experts' axes too, they are
/// dispatched instead (partitionByDispatch).
LogicalResult MoeOp::partition(PartitionContext &context) {
  ShardingRule rule = getShardingRule();
  unsigned expertFactor = rule.getTensor(ShardingRule::operand(3))[0][0];
  unsigned tokenFactor = rule.getTensor(ShardingRule::operand(0))[0][0];
  // Experts arriving split over axes that also split the tokens: the
  // tokens travel to the experts.
  SmallVector<StringRef> dispatch;
  for (StringRef axis : context.getOperandAxes(3, 0))
    if (llvm::is_contained(context.getAssignment()[tokenFactor], axis))
      dispatch.push_back(axis);
  if (!dispatch.empty() &&
      getNumExperts() % context.getGroupSize(dispatch) == 0)
    return partitionByDispatch(*this, context, dispatch, expertFactor);
  AxisList axes = context.getAssignment()[expertFactor];
  int64_t held = axes.empty() ? getNumExperts()
                              : getNumExperts() / context.getGroupSize(axes);
  // Split features need nothing more: every device computes its features
  // of the same routed experts.
  return context.partitionByRule([&](OpBuilder &b,
                                     MutableArrayRef<Value> operands) {
    if (axes.empty())
      return success();
    Location loc = getLoc();
    Value ids = operands[1];
    auto idType = cast<RankedTensorType>(ids.getType());
    Type element = idType.getElementType();
    auto scalar = [&](int64_t value) -> Value {
      return ConstantOp::create(b, loc,
                                cast<ElementsAttr>(DenseElementsAttr::get(
                                    RankedTensorType::get({}, element),
                                    b.getIntegerAttr(element, value))));
    };
    Value position = context.getPosition(axes);
    if (!element.isInteger(64))
      position =
          CastOp::create(b, loc, RankedTensorType::get({}, element), position);
    Value first = MulOp::create(b, loc, position, scalar(held));
    Value shifted = SubOp::create(b, loc, ids, first);
    auto maskType = idType.clone(b.getI1Type());
    Value inBlock =
        AndOp::create(b, loc, maskType,
                      CompareOp::create(b, loc, maskType, CompareDirection::GE,
                                        shifted, scalar(0)),
                      CompareOp::create(b, loc, maskType, CompareDirection::LT,
                                        shifted, scalar(held)));
    operands[1] = WhereOp::create(b, loc, idType, inBlock, shifted, scalar(-1));
    return success();
  });
}
