//===- PipelineSplit.cpp - consecutive stages balanced by cost ------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A cut between two ops of the function body is possible where exactly one
// value computed by real work is live across it, besides values only the
// function returns (which travel with it to the last stage); the stages
// between the chosen cuts are built as dist.stage regions that receive
// those values, recompute what is cheap and input-derived, and send their
// boundary values on.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include <limits>
#include <map>

namespace mlir::partita {
#define GEN_PASS_DEF_PIPELINESPLITPASS
#define GEN_PASS_DEF_VERIFYPIPELINEPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

/// The most values one cut may carry: transfer tags are
/// (cut * 64 + value) * 1024 + microbatch.
constexpr int kMaxTransfersPerCut = 64;

/// Ops every stage may recompute: constants and their slices, the device's
/// position, and cheap ops on the function's inputs (mask and position
/// arithmetic). Real work (matmuls, attention, norms, lookups) and
/// communication are never copied.
bool isReplicable(Operation *op, const llvm::DenseSet<Operation *> &known) {
  if (isa<nn::ConstantOp, AxisIndexOp>(op))
    return true;
  if (op->getNumRegions() ||
      isa<nn::MatmulOp, nn::AttentionOp, nn::AttentionPartialOp,
          nn::AttentionGradOp, nn::EmbeddingOp, nn::LayerNormOp, nn::RmsNormOp,
          nn::SoftmaxOp, nn::LogSoftmaxOp>(op))
    return false;
  if (!isa<nn::NNDialect>(op->getDialect()) && !isa<AllSliceOp>(op))
    return false;
  return llvm::all_of(op->getOperands(), [&](Value v) {
    Operation *def = v.getDefiningOp();
    return !def || known.contains(def);
  });
}

/// Whether every device of a group spanned by `axis` holds the same
/// `value`: function inputs and constants not split over it, results of
/// collectives that combine over it, and nn ops (deterministic) of such
/// values.
bool isReplicatedOver(Value value, StringRef axis,
                      llvm::DenseMap<Value, bool> &memo, unsigned depth = 0) {
  if (auto it = memo.find(value); it != memo.end())
    return it->second;
  bool replicated = false;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    auto sharding = func ? func.getArgAttrOfType<ShardingAttr>(
                               arg.getArgNumber(), kShardingAttr)
                         : ShardingAttr();
    replicated = !sharding || !sharding.usesAxis(axis);
  } else if (Operation *def = value.getDefiningOp(); def && depth < 64) {
    if (isa<nn::ConstantOp>(def)) {
      replicated = true;
    } else if (isa<AllReduceOp, AllGatherOp>(def)) {
      replicated = llvm::is_contained(
          getStringRefs(def->getAttrOfType<ArrayAttr>("axes")), axis);
    } else if (isa<nn::NNDialect>(def->getDialect())) {
      replicated = llvm::all_of(def->getOperands(), [&](Value operand) {
        return isReplicatedOver(operand, axis, memo, depth + 1);
      });
    }
  }
  memo[value] = replicated;
  return replicated;
}

class Splitter {
public:
  Splitter(MeshOp mesh, StringRef stageAxis, int64_t microbatches,
           int64_t virtualStages)
      : mesh(mesh), stageAxis(stageAxis),
        tpAxis(mesh.getAxisWithRole(AxisRole::Tensor).value_or(StringRef())),
        stages(*mesh.getAxisSize(stageAxis)), microbatches(microbatches),
        virtualStages(virtualStages), chunks(stages * virtualStages),
        tp(mesh.getRoleSize(AxisRole::Tensor)),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())) {}
  LogicalResult run(func::FuncOp func);

private:
  /// One dist.stage under construction: chunk `index` running the
  /// microbatches of group `group`.
  struct Chunk {
    int64_t index, group;
    /// Its work ops are work[begin, end).
    unsigned begin, end;
    /// The function results it returns, in order.
    SmallVector<unsigned> returned;
    /// The values received before it and sent after it.
    SmallVector<Value> in, out;
    /// The replicable values it recomputes whole.
    IRMapping whole;
    /// Each microbatch's values (only this group's are filled).
    SmallVector<IRMapping> perMicrobatch;
  };

  // Planning: which ops are work, where the cuts go, what the batch is.
  void collectWork();
  LogicalResult findBounds();
  void findResidentCaches();
  LogicalResult findBatchDims();
  LogicalResult checkBatchDivides();

  // Building: one stage per (chunk, group), then the function's results.
  LogicalResult buildStages();
  LogicalResult buildChunk(OpBuilder &b, int64_t index, int64_t group);
  LogicalResult findTransfers(Chunk &chunk);
  void recomputeReplicable(OpBuilder &inner, Chunk &chunk);
  void receiveMicrobatch(OpBuilder &inner, Chunk &chunk, int64_t m);
  LogicalResult computeMicrobatch(OpBuilder &inner, Chunk &chunk, int64_t m);
  void sendMicrobatch(OpBuilder &inner, Chunk &chunk, int64_t m);
  SmallVector<Value> joinMicrobatches(OpBuilder &inner, Chunk &chunk);
  void joinGroups(OpBuilder &b);
  void recordPlan();

  // Questions about one value.
  int64_t chunkOf(Value v);
  std::optional<int64_t> scatterDim(Value v);
  RankedTensorType microType(Value v);
  RankedTensorType groupType(Value v);
  SmallVector<Value> crossing(unsigned at);
  Value microbatchRows(OpBuilder &inner, Chunk &chunk, Value v, int64_t m);

  MeshOp mesh;
  /// The axes of the pipeline and tensor roles (tpAxis empty if none).
  StringRef stageAxis, tpAxis;
  int64_t stages, microbatches, virtualStages;
  /// Each rank holds `virtualStages` chunks: chunk c runs on rank c % P.
  int64_t chunks;
  int64_t tp;
  FlatSymbolRefAttr meshRef;
  /// Microbatches run in `groups` groups of `groupSize` (set by
  /// buildStages).
  int64_t groupSize = 1, groups = 1;

  func::FuncOp func;
  func::ReturnOp ret;
  /// The body's ops in order; the replicable ones; the others (work), with
  /// their position in `work`.
  SmallVector<Operation *> ops, work;
  llvm::DenseSet<Operation *> replicable;
  llvm::DenseMap<Operation *, unsigned> index;
  /// prefix[j]: the estimated cost of the work ops before j.
  SmallVector<double> prefix;
  /// The KV caches, returned by the stage that writes them.
  llvm::DenseSet<Value> resident;
  /// Chunk c runs work[bounds[c], bounds[c + 1]).
  SmallVector<unsigned> bounds;
  /// The batch dimension of each value that has one.
  llvm::DenseMap<Value, int64_t> batchDim;
  /// isReplicatedOver's memo, for scatterDim.
  llvm::DenseMap<Value, bool> replicatedOverTp;
  /// Each function result, from the stage that returns it.
  SmallVector<Value> returnedBy;
  /// The last chunk's results per group, to put together at the end.
  SmallVector<SmallVector<Value>> groupResults;
};

/// The dimensions a collective splits, gathers, slices or exchanges (whose
/// sizes it changes): none, one, or an all-to-all's two.
SmallVector<int64_t, 2> resizedDims(Operation *op) {
  SmallVector<int64_t, 2> dims;
  for (StringRef name :
       {"gather_dim", "scatter_dim", "slice_dim", "split_dim", "concat_dim"})
    if (auto attr = op->getAttrOfType<IntegerAttr>(name))
      dims.push_back(attr.getInt());
  return dims;
}

/// Marks `v`'s batch dimension as `dim` unless it has one; returns whether
/// it marked.
bool markBatchDim(llvm::DenseMap<Value, int64_t> &batchDim, Value v,
                  int64_t dim) {
  return batchDim.try_emplace(v, dim).second;
}

/// Through `op`'s sharding rule: a dimension whose major factor is the
/// major factor of an operand's or result's batch dimension is a batch
/// dimension. Returns whether it marked one.
bool markBatchDimsByRule(Operation *op, const ShardingRule &rule,
                         llvm::DenseMap<Value, int64_t> &batchDim) {
  SmallVector<std::pair<ShardingRule::TensorRef, Value>> tensors;
  unsigned i = 0;
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()))
      tensors.push_back({ShardingRule::operand(i++), v});
  i = 0;
  for (Value v : op->getResults())
    if (isa<RankedTensorType>(v.getType()))
      tensors.push_back({ShardingRule::result(i++), v});
  llvm::SmallDenseSet<unsigned> factors;
  for (auto [ref, v] : tensors)
    if (auto it = batchDim.find(v); it != batchDim.end()) {
      const DimFactors &dim = rule.getTensor(ref)[it->second];
      if (!dim.empty())
        factors.insert(dim.front());
    }
  bool changed = false;
  for (auto [ref, v] : tensors)
    for (auto [d, dim] : llvm::enumerate(rule.getTensor(ref)))
      if (!dim.empty() && factors.contains(dim.front()))
        changed |= markBatchDim(batchDim, v, d);
  return changed;
}

/// Through a collective: it keeps every dimension but those it resizes
/// (Ulysses' all-to-alls exchange heads for sequence and keep the batch).
/// Returns whether it marked one.
bool markBatchDimsByCollective(Operation *op,
                               llvm::DenseMap<Value, int64_t> &batchDim) {
  SmallVector<int64_t, 2> resized = resizedDims(op);
  Value in = op->getOperand(0), out = op->getResult(0);
  bool changed = false;
  for (auto [from, to] : {std::pair(in, out), std::pair(out, in)})
    if (auto it = batchDim.find(from);
        it != batchDim.end() && !llvm::is_contained(resized, it->second))
      changed |= markBatchDim(batchDim, to, it->second);
  return changed;
}

LogicalResult Splitter::findBatchDims() {
  // The cache slot (partita-kv-cache) is one for the whole batch.
  for (BlockArgument arg : func.getArguments())
    if (auto type = dyn_cast<RankedTensorType>(arg.getType());
        type && type.getRank() > 0 &&
        !func.getArgAttr(arg.getArgNumber(),
                         nn::NNDialect::kCachePositionAttrName))
      batchDim[arg] = 0;
  // Through every op, forward and backward, until nothing changes.
  bool changed = true;
  while (changed) {
    changed = false;
    func.walk([&](Operation *op) {
      if (auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op))
        changed |= markBatchDimsByRule(op, ruleOp.getShardingRule(), batchDim);
      else if ((isGroupCollective(op) && !isAsyncStart(op) &&
                !isa<DispatchOp, DispatchReturnOp>(op)) ||
               isa<AllSliceOp>(op))
        changed |= markBatchDimsByCollective(op, batchDim);
    });
  }
  return checkBatchDivides();
}

LogicalResult Splitter::checkBatchDivides() {
  // Inputs first, so the error names what the user controls.
  for (BlockArgument arg : func.getArguments()) {
    auto it = batchDim.find(arg);
    if (it == batchDim.end())
      continue;
    int64_t size = cast<RankedTensorType>(arg.getType()).getDimSize(0);
    if (size % microbatches == 0)
      continue;
    auto name =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "onnx.name");
    return func.emitError()
           << "--microbatches " << microbatches << " does not divide the batch "
           << size << " of input '" << (name ? name.getValue() : StringRef("?"))
           << "' (per data-parallel replica)";
  }
  for (auto [value, dim] : batchDim) {
    int64_t size = cast<RankedTensorType>(value.getType()).getDimSize(dim);
    if (size % microbatches != 0)
      return emitError(value.getLoc())
             << "--microbatches " << microbatches
             << " does not divide the batch of this value (" << size
             << " along dimension " << dim << ")";
  }
  return success();
}

/// The work-op indices j (0 < j < n) before which the program may be cut:
/// exactly one value defined before work op j is used at or after it, and
/// with the values only returned from there on (a decoder's present keys
/// and values, carried along to the last stage) at most
/// kMaxTransfersPerCut cross.
SmallVector<unsigned>
findCutPoints(ArrayRef<Operation *> work,
              const llvm::DenseMap<Operation *, unsigned> &index,
              const llvm::DenseSet<Operation *> &replicable, func::ReturnOp ret,
              const llvm::DenseSet<Value> &resident) {
  unsigned n = work.size();
  // live[j]: work values defined before work op j that a work op at or
  // after it uses; carried[j]: those only the function returns from there
  // on. (Difference arrays, summed below.)
  SmallVector<int> live(n + 2, 0), carried(n + 2, 0);
  for (unsigned i = 0; i < n; ++i)
    for (Value result : work[i]->getResults()) {
      unsigned last = i;
      bool returned = false;
      for (Operation *user : result.getUsers()) {
        if (user == ret) {
          // A KV cache is returned by the stage that writes it.
          returned |= !resident.contains(result);
          continue;
        }
        // A replicable user makes every stage that uses it need the value;
        // treat such values as crossing everything after them.
        if (replicable.contains(user)) {
          last = n;
          break;
        }
        last = std::max(last, index.lookup(user));
      }
      if (last > i) {
        ++live[i + 1];
        --live[std::min(last, n) + 1];
      }
      if (returned && last < n) {
        ++carried[last + 1];
        --carried[n + 1];
      }
    }
  for (unsigned j = 1; j <= n; ++j) {
    live[j] += live[j - 1];
    carried[j] += carried[j - 1];
  }
  SmallVector<unsigned> candidates;
  for (unsigned j = 1; j < n; ++j)
    if (live[j] == 1 && live[j] + carried[j] <= kMaxTransfersPerCut)
      candidates.push_back(j);
  return candidates;
}

/// The `chunks - 1` cut points among `candidates` (at least that many) that
/// make the most expensive chunk cheapest, in order; `prefix[j]` is the cost
/// of the work ops before j.
SmallVector<unsigned> chooseCuts(ArrayRef<double> prefix,
                                 ArrayRef<unsigned> candidates,
                                 int64_t chunks) {
  unsigned n = prefix.size() - 1;
  // best[k][c]: the least possible most-expensive stage when the first k
  // cuts end at candidate c.
  unsigned m = candidates.size();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  SmallVector<SmallVector<double>> best(chunks, SmallVector<double>(m, kInf));
  SmallVector<SmallVector<int>> from(chunks, SmallVector<int>(m, -1));
  for (unsigned c = 0; c < m; ++c)
    best[1][c] = prefix[candidates[c]];
  for (int64_t k = 2; k < chunks; ++k)
    for (unsigned c = 0; c < m; ++c)
      for (unsigned p = 0; p < c; ++p) {
        double cost = std::max(best[k - 1][p],
                               prefix[candidates[c]] - prefix[candidates[p]]);
        if (cost < best[k][c]) {
          best[k][c] = cost;
          from[k][c] = p;
        }
      }
  double bestCost = kInf;
  int last = -1;
  for (unsigned c = 0; c < m; ++c) {
    double cost =
        std::max(best[chunks - 1][c], prefix[n] - prefix[candidates[c]]);
    if (cost < bestCost) {
      bestCost = cost;
      last = c;
    }
  }
  SmallVector<unsigned> cuts(chunks - 1);
  for (int64_t k = chunks - 1, c = last; k >= 1; --k) {
    cuts[k - 1] = candidates[c];
    c = from[k][c];
  }
  return cuts;
}

void Splitter::collectWork() {
  for (Operation &op : func.getBody().front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : ops)
    if (isReplicable(op, replicable))
      replicable.insert(op);
  for (Operation *op : ops)
    if (!replicable.contains(op)) {
      index[op] = work.size();
      work.push_back(op);
    }
}

void Splitter::findResidentCaches() {
  // The KV caches (partita.kv_cache results) stay on the stage that writes
  // them: that stage returns them, nothing carries them to the last.
  for (OpOperand &operand : ret->getOpOperands())
    if (func.getResultAttr(operand.getOperandNumber(),
                           nn::NNDialect::kKvCacheAttrName) &&
        index.contains(operand.get().getDefiningOp()))
      resident.insert(operand.get());
}

LogicalResult Splitter::findBounds() {
  unsigned n = work.size();
  if (n < static_cast<unsigned>(chunks))
    return func.emitError() << "cannot cut " << n << " ops into " << chunks
                            << " pipeline stages";
  prefix.assign(n + 1, 0);
  for (unsigned i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + estimateSeconds(estimateCost(work[i]));
  findResidentCaches();
  if (!resident.empty() && virtualStages > 1)
    return func.emitError() << "--virtual-stages does not combine with a KV "
                               "cache (--max-seq) yet";
  SmallVector<unsigned> candidates =
      findCutPoints(work, index, replicable, ret, resident);
  if (candidates.size() < static_cast<size_t>(chunks - 1))
    return func.emitError()
           << "cannot cut the program into " << chunks
           << (virtualStages > 1 ? " pipeline chunks" : " pipeline stages")
           << ": only " << candidates.size()
           << " points carry a single activation between two ops";
  if (chunks == 1)
    return success();
  SmallVector<unsigned> cuts = chooseCuts(prefix, candidates, chunks);
  bounds = {0};
  bounds.append(cuts.begin(), cuts.end());
  bounds.push_back(n);
  return success();
}

LogicalResult Splitter::run(func::FuncOp funcOp) {
  func = funcOp;
  ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  collectWork();
  if (failed(findBounds()))
    return failure();
  if (chunks == 1)
    return success();
  // Microbatches divide the batch: dimension 0 of the inputs and every
  // dimension that shares its factor through the ops' sharding rules.
  if (microbatches > 1 && failed(findBatchDims()))
    return failure();
  if (failed(buildStages()))
    return failure();
  recordPlan();
  for (Operation *op : llvm::reverse(ops)) {
    op->dropAllUses();
    op->erase();
  }
  return success();
}

/// The chunk that returns `v`: the last, or a cache's writer.
int64_t Splitter::chunkOf(Value v) {
  if (!resident.contains(v))
    return chunks - 1;
  unsigned at = index.lookup(v.getDefiningOp());
  return std::upper_bound(bounds.begin(), bounds.end(), at) - bounds.begin() -
         1;
}

/// Whether `v` crosses a cut split over tp, and along which dimension: a
/// value every tp rank holds whole travels as 1/tp of it, along its last
/// dimension tp divides.
std::optional<int64_t> Splitter::scatterDim(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (tp == 1 || !type || !isReplicatedOver(v, tpAxis, replicatedOverTp))
    return std::nullopt;
  for (int64_t d = type.getRank() - 1; d >= 0; --d)
    if (type.getDimSize(d) % tp == 0)
      return d;
  return std::nullopt;
}

/// `v`'s type for one microbatch.
RankedTensorType Splitter::microType(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  auto it = batchDim.find(v);
  if (microbatches == 1 || it == batchDim.end())
    return type;
  SmallVector<int64_t> shape(type.getShape());
  shape[it->second] /= microbatches;
  return type.clone(shape);
}

/// `v`'s type for one group of microbatches.
RankedTensorType Splitter::groupType(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[batchDim.lookup(v)] =
      shape[batchDim.lookup(v)] / microbatches * groupSize;
  return type.clone(shape);
}

/// The values defined before work op `at` that a work op at or after it,
/// or the function's return, uses.
SmallVector<Value> Splitter::crossing(unsigned at) {
  SmallVector<Value> values;
  for (unsigned i = 0; i < at; ++i)
    for (Value v : work[i]->getResults())
      if (llvm::any_of(v.getUsers(), [&](Operation *u) {
            return u == ret ? !resident.contains(v) : index.lookup(u) >= at;
          }))
        values.push_back(v);
  return values;
}

/// The transfer tag of the `value`th value across cut `cut` for microbatch
/// `m`.
int64_t transferTag(int64_t cut, size_t value, int64_t m) {
  return (cut * kMaxTransfersPerCut + static_cast<int64_t>(value)) * 1024 + m;
}

LogicalResult Splitter::buildStages() {
  // The regions in an order whose restriction to each rank is its
  // schedule: GPipe runs every microbatch through a chunk in turn; with
  // virtual stages, Megatron's interleaved order takes microbatches in
  // groups of P, chunk by chunk within a group.
  groupSize = virtualStages > 1 ? stages : microbatches;
  groups = microbatches / groupSize;
  returnedBy.assign(ret.getNumOperands(), Value());
  OpBuilder b(ret);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t v = 0; v < virtualStages; ++v)
      for (int64_t r = 0; r < stages; ++r)
        if (failed(buildChunk(b, v * stages + r, g)))
          return failure();
  joinGroups(b);
  return success();
}

/// Builds one stage: it receives, computes and sends each microbatch of
/// its group in turn (GPipe within the group).
LogicalResult Splitter::buildChunk(OpBuilder &b, int64_t s, int64_t g) {
  Chunk chunk{s, g, bounds[s], bounds[s + 1]};
  SmallVector<Type> resultTypes;
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (chunkOf(v) == s) {
      chunk.returned.push_back(i);
      resultTypes.push_back(groups == 1 ? v.getType() : Type(groupType(v)));
    }
  auto stage = StageOp::create(b, ret.getLoc(), resultTypes,
                               b.getI64IntegerAttr(s % stages), meshRef,
                               b.getStringAttr(stageAxis));
  OpBuilder inner = OpBuilder::atBlockEnd(b.createBlock(&stage.getRegion()));
  recomputeReplicable(inner, chunk);
  if (failed(findTransfers(chunk)))
    return failure();
  chunk.perMicrobatch.resize(microbatches);
  int64_t first = g * groupSize, last = (g + 1) * groupSize;
  for (int64_t m = first; m < last; ++m) {
    // The next microbatch's input is received before this one's output is
    // sent, so neighbours that both send (interleaved chunks) meet in a
    // rendezvous instead of waiting on each other.
    if (m == first)
      receiveMicrobatch(inner, chunk, m);
    if (failed(computeMicrobatch(inner, chunk, m)))
      return failure();
    if (m + 1 < last)
      receiveMicrobatch(inner, chunk, m + 1);
    sendMicrobatch(inner, chunk, m);
  }
  YieldOp::create(inner, ret.getLoc(), joinMicrobatches(inner, chunk));
  for (auto [i, result] : llvm::zip(chunk.returned, stage.getResults()))
    returnedBy[i] = result;
  if (s == chunks - 1)
    groupResults.push_back(SmallVector<Value>(stage.getResults()));
  b.setInsertionPoint(ret);
  return success();
}

/// Recomputes the replicable values the chunk's ops use, once, whole.
void Splitter::recomputeReplicable(OpBuilder &inner, Chunk &chunk) {
  llvm::SetVector<Operation *> needed;
  std::function<void(Value)> need = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def || !replicable.contains(def) || needed.contains(def))
      return;
    for (Value operand : def->getOperands())
      need(operand);
    needed.insert(def);
  };
  for (unsigned i = chunk.begin; i < chunk.end; ++i)
    for (Value operand : work[i]->getOperands())
      need(operand);
  for (unsigned i : chunk.returned)
    need(ret.getOperand(i));
  for (Operation *op : ops)
    if (needed.contains(op))
      inner.clone(*op, chunk.whole);
}

/// What crosses the cuts before and after the chunk, checked against what
/// the transfer tags can number.
LogicalResult Splitter::findTransfers(Chunk &chunk) {
  if (chunk.index > 0)
    chunk.in = crossing(chunk.begin);
  if (chunk.in.size() > static_cast<size_t>(kMaxTransfersPerCut) ||
      microbatches > 1024)
    return func.emitError()
           << "pipeline transfers are tagged for at most "
           << kMaxTransfersPerCut
           << " values per cut and 1024 microbatches; this plan has "
           << chunk.in.size() << " and " << microbatches;
  if (chunk.index != chunks - 1)
    chunk.out = crossing(chunk.end);
  return success();
}

/// Receives what crosses the cut before the chunk for microbatch `m`.
void Splitter::receiveMicrobatch(OpBuilder &inner, Chunk &chunk, int64_t m) {
  int64_t s = chunk.index;
  for (auto [t, v] : llvm::enumerate(chunk.in)) {
    RankedTensorType type = microType(v);
    std::optional<int64_t> dim = scatterDim(v);
    Type wire = type;
    if (dim) {
      SmallVector<int64_t> shape(type.getShape());
      shape[*dim] /= tp;
      wire = type.clone(shape);
    }
    Value received = RecvOp::create(
        inner, v.getLoc(), wire, meshRef, inner.getStringAttr(stageAxis),
        inner.getI64IntegerAttr((s - 1) % stages),
        inner.getI64IntegerAttr(transferTag(s - 1, t, m)));
    if (dim) {
      auto gather = AllGatherOp::create(
          inner, v.getLoc(), type, received, meshRef,
          inner.getStrArrayAttr({tpAxis}), inner.getI64IntegerAttr(*dim));
      gather->setAttr(
          kReasonAttr,
          inner.getStringAttr("pipeline stage " + std::to_string(s) +
                              ": each " + tpAxis.str() + " rank received 1/" +
                              std::to_string(tp) + " of the activation"));
      received = gather;
    }
    chunk.perMicrobatch[m].map(v, received);
  }
}

/// Microbatch `m`'s rows of `v`, a value the stage holds whole (an input or
/// a recomputed one); sliced once per microbatch.
Value Splitter::microbatchRows(OpBuilder &inner, Chunk &chunk, Value v,
                               int64_t m) {
  IRMapping &map = chunk.perMicrobatch[m];
  if (Value mapped = map.lookupOrNull(v))
    return mapped;
  Value full = chunk.whole.lookupOrDefault(v);
  auto it = batchDim.find(v);
  if (microbatches == 1 || it == batchDim.end())
    return full;
  RankedTensorType type = microType(v);
  int64_t dim = it->second, size = type.getDimSize(dim);
  SmallVector<int64_t> start(type.getRank(), 0),
      limit(cast<RankedTensorType>(v.getType()).getShape()),
      stride(type.getRank(), 1);
  start[dim] = m * size;
  limit[dim] = (m + 1) * size;
  Value slice =
      nn::SliceOp::create(inner, v.getLoc(), type, full, start, limit, stride);
  map.map(v, slice);
  return slice;
}

/// Clones the chunk's work ops for microbatch `m`, with microbatch types.
LogicalResult Splitter::computeMicrobatch(OpBuilder &inner, Chunk &chunk,
                                          int64_t m) {
  IRMapping &map = chunk.perMicrobatch[m];
  for (unsigned i = chunk.begin; i < chunk.end; ++i) {
    Operation *op = work[i];
    for (Value operand : op->getOperands())
      if (!map.contains(operand))
        map.map(operand, microbatchRows(inner, chunk, operand, m));
    Operation *clone = inner.clone(*op, map);
    if (microbatches == 1)
      continue;
    for (auto [old, now] : llvm::zip(op->getResults(), clone->getResults()))
      now.setType(microType(old));
    if (failed(fitShapeAttributes(clone, op)))
      return op->emitError() << "splitting this op into " << microbatches
                             << " microbatches failed (a compiler bug)";
  }
  return success();
}

/// Sends what crosses the cut after the chunk for microbatch `m`.
void Splitter::sendMicrobatch(OpBuilder &inner, Chunk &chunk, int64_t m) {
  int64_t s = chunk.index;
  for (auto [t, v] : llvm::enumerate(chunk.out)) {
    Value sent = microbatchRows(inner, chunk, v, m);
    if (std::optional<int64_t> dim = scatterDim(v)) {
      // Megatron's scatter/gather: every tp rank holds the whole
      // activation, so each sends its 1/tp and the next stage's ranks
      // gather it over tp.
      auto type = cast<RankedTensorType>(sent.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[*dim] /= tp;
      sent = AllSliceOp::create(inner, v.getLoc(), type.clone(shape), sent,
                                meshRef, inner.getStrArrayAttr({tpAxis}),
                                inner.getI64IntegerAttr(*dim));
    }
    SendOp::create(inner, v.getLoc(), sent, meshRef,
                   inner.getStringAttr(stageAxis),
                   inner.getI64IntegerAttr((s + 1) % stages),
                   inner.getI64IntegerAttr(transferTag(s, t, m)));
  }
}

/// The chunk's results, its microbatches put back together.
SmallVector<Value> Splitter::joinMicrobatches(OpBuilder &inner, Chunk &chunk) {
  int64_t first = chunk.group * groupSize, last = first + groupSize;
  SmallVector<Value> yielded;
  for (unsigned i : chunk.returned) {
    Value v = ret.getOperand(i);
    auto it = batchDim.find(v);
    if (microbatches == 1 || it == batchDim.end()) {
      Value only = chunk.perMicrobatch[first].lookupOrNull(v);
      yielded.push_back(only ? only : chunk.whole.lookupOrDefault(v));
      continue;
    }
    SmallVector<Value> pieces;
    for (int64_t m = first; m < last; ++m)
      pieces.push_back(chunk.perMicrobatch[m].lookup(v));
    yielded.push_back(nn::ConcatOp::create(
        inner, v.getLoc(), groups == 1 ? v.getType() : groupType(v), pieces,
        it->second));
  }
  return yielded;
}

/// Returns each result from the stage that computes it; with several
/// groups, the last rank concatenates them first.
void Splitter::joinGroups(OpBuilder &b) {
  if (groups == 1) {
    ret->setOperands(returnedBy);
    return;
  }
  auto final = StageOp::create(b, ret.getLoc(), ret.getOperandTypes(),
                               b.getI64IntegerAttr((chunks - 1) % stages),
                               meshRef, b.getStringAttr(stageAxis));
  OpBuilder inner = OpBuilder::atBlockEnd(b.createBlock(&final.getRegion()));
  SmallVector<Value> results;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    SmallVector<Value> pieces;
    for (SmallVector<Value> &group : groupResults)
      pieces.push_back(group[i]);
    auto it = batchDim.find(v);
    results.push_back(it == batchDim.end()
                          ? pieces.front()
                          : nn::ConcatOp::create(inner, v.getLoc(), v.getType(),
                                                 pieces, it->second)
                                .getResult());
  }
  YieldOp::create(inner, ret.getLoc(), results);
  b.setInsertionPoint(ret);
  ret->setOperands(final.getResults());
}

/// The plan for the report: each stage's estimated time.
void Splitter::recordPlan() {
  Builder attrs(func.getContext());
  SmallVector<double> seconds(stages, 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    seconds[c % stages] += prefix[bounds[c + 1]] - prefix[bounds[c]];
  func->getParentOfType<ModuleOp>()->setAttr(
      kPipelineAttr,
      PipelineAttr::get(func.getContext(), stages, microbatches,
                        virtualStages > 1 ? PipelineSchedule::Interleaved
                                          : PipelineSchedule::GPipe,
                        virtualStages, attrs.getDenseF64ArrayAttr(seconds)));
}

struct PipelineSplitPass
    : mlir::partita::impl::PipelineSplitPassBase<PipelineSplitPass> {
  using PipelineSplitPassBase::PipelineSplitPassBase;

  void runOnOperation() override {
    FailureOr<MeshOp> mesh = getModuleMesh(getOperation());
    if (failed(mesh))
      return signalPassFailure();
    if (!*mesh)
      return;
    std::optional<StringRef> stageAxis =
        mesh->getAxisWithRole(AxisRole::Pipeline);
    int64_t stages = mesh->getRoleSize(AxisRole::Pipeline);
    if (virtualStages > 1 && microbatches % stages != 0) {
      getOperation().emitError()
          << "--virtual-stages runs microbatches in groups of "
          << stageAxis.value_or("pp") << "=" << stages
          << ", but --microbatches " << static_cast<int64_t>(microbatches)
          << " is not a multiple of it";
      return signalPassFailure();
    }
    if (stages == 1) {
      if (microbatches > 1 || virtualStages > 1) {
        getOperation().emitError()
            << (microbatches > 1 ? "--microbatches " : "--virtual-stages ")
            << static_cast<int64_t>(microbatches > 1 ? microbatches
                                                     : virtualStages)
            << " needs pipeline stages: give the mesh a pp axis larger than 1";
        return signalPassFailure();
      }
      return;
    }
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() &&
          failed(Splitter(*mesh, *stageAxis, microbatches, virtualStages)
                     .run(func)))
        return signalPassFailure();
  }
};

/// One stage's transfers in program order.
struct Transfer {
  Operation *op;
  bool send;
  int64_t peer, tag;
  Type type;
};
/// Per stage index, its transfers in program order.
using StageTransfers = std::map<int64_t, SmallVector<Transfer>>;

/// Every stage op's sends and receives, those of the stage ops with the
/// same index concatenated in order.
StageTransfers collectTransfers(Operation *root) {
  StageTransfers stages;
  root->walk([&](StageOp stage) {
    SmallVector<Transfer> &list = stages[stage.getIndex()];
    stage.getBody().walk([&](Operation *op) {
      if (auto send = dyn_cast<SendOp>(op))
        list.push_back({op, true, static_cast<int64_t>(send.getPeer()),
                        static_cast<int64_t>(send.getTag()),
                        send.getInput().getType()});
      else if (auto recv = dyn_cast<RecvOp>(op))
        list.push_back({op, false, static_cast<int64_t>(recv.getPeer()),
                        static_cast<int64_t>(recv.getTag()),
                        recv.getResult().getType()});
    });
  });
  return stages;
}

/// Runs the stages' transfers against each other, a send completing with
/// the matching receive, until none can progress; `next[s]` is then the
/// first transfer of stage s that never completes. Fails on a transfer
/// with a stage that does not exist.
LogicalResult matchTransfers(const StageTransfers &stages,
                             std::map<int64_t, size_t> &next) {
  for (auto &[s, list] : stages)
    next[s] = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (auto &[s, list] : stages) {
      size_t &i = next[s];
      if (i >= list.size())
        continue;
      const Transfer &t = list[i];
      auto peer = stages.find(t.peer);
      if (peer == stages.end())
        return t.op->emitError() << "stage " << s << " transfers with stage "
                                 << t.peer << ", which does not exist";
      size_t &j = next[t.peer];
      if (j >= peer->second.size())
        continue;
      const Transfer &u = peer->second[j];
      if (u.send != t.send && u.peer == s && u.tag == t.tag &&
          u.type == t.type) {
        ++i;
        ++j;
        progress = true;
      }
    }
  }
  return success();
}

struct VerifyPipelinePass
    : mlir::partita::impl::VerifyPipelinePassBase<VerifyPipelinePass> {
  void runOnOperation() override {
    StageTransfers stages = collectTransfers(getOperation());
    std::map<int64_t, size_t> next;
    if (failed(matchTransfers(stages, next)))
      return signalPassFailure();
    bool stuck = false;
    for (auto &[s, list] : stages)
      if (next[s] < list.size()) {
        const Transfer &t = list[next[s]];
        t.op->emitError() << "pipeline deadlock: stage " << s
                          << " waits here to "
                          << (t.send ? "send to" : "receive from") << " stage "
                          << t.peer << " (tag " << t.tag
                          << "), which never reaches a matching "
                          << (t.send ? "receive" : "send");
        stuck = true;
      }
    if (stuck)
      signalPassFailure();
  }
};

} // namespace
