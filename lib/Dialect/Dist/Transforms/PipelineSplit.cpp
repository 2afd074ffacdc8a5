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

#include <limits>

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
          nn::EmbeddingOp, nn::LayerNormOp, nn::RmsNormOp, nn::SoftmaxOp,
          nn::LogSoftmaxOp>(op))
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
        virtualStages(virtualStages) {}
  LogicalResult run(func::FuncOp func);

private:
  LogicalResult findBatchDims(func::FuncOp func,
                              llvm::DenseMap<Value, int64_t> &batchDim);

  MeshOp mesh;
  /// The axes of the pipeline and tensor roles (tpAxis empty if none).
  StringRef stageAxis, tpAxis;
  int64_t stages, microbatches, virtualStages;
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

LogicalResult
Splitter::findBatchDims(func::FuncOp func,
                        llvm::DenseMap<Value, int64_t> &batchDim) {
  // The cache slot (partita-kv-cache) is one for the whole batch.
  for (BlockArgument arg : func.getArguments())
    if (auto type = dyn_cast<RankedTensorType>(arg.getType());
        type && type.getRank() > 0 &&
        !func.getArgAttr(arg.getArgNumber(),
                         nn::NNDialect::kCachePositionAttrName))
      batchDim[arg] = 0;
  // Through every op, forward and backward, until nothing changes: a
  // dimension whose major factor is the batch's is a batch dimension.
  bool changed = true;
  while (changed) {
    changed = false;
    auto mark = [&](Value v, int64_t dim) {
      if (batchDim.count(v))
        return;
      batchDim[v] = dim;
      changed = true;
    };
    func.walk([&](Operation *op) {
      if (auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op)) {
        ShardingRule rule = ruleOp.getShardingRule();
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
        for (auto [ref, v] : tensors)
          for (auto [d, dim] : llvm::enumerate(rule.getTensor(ref)))
            if (!dim.empty() && factors.contains(dim.front()))
              mark(v, d);
        return;
      }
      // Collectives keep every dimension but those they resize (Ulysses'
      // all-to-alls exchange heads for sequence and keep the batch).
      if ((isGroupCollective(op) && !isAsyncStart(op)) || isa<AllSliceOp>(op)) {
        SmallVector<int64_t, 2> resized = resizedDims(op);
        Value in = op->getOperand(0), out = op->getResult(0);
        for (auto [from, to] : {std::pair(in, out), std::pair(out, in)})
          if (auto it = batchDim.find(from);
              it != batchDim.end() && !llvm::is_contained(resized, it->second))
            mark(to, it->second);
      }
    });
  }
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

LogicalResult Splitter::run(func::FuncOp func) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  llvm::DenseSet<Operation *> replicable;
  for (Operation *op : ops)
    if (isReplicable(op, replicable))
      replicable.insert(op);

  // The work ops in order, their costs, and where each value is last used.
  SmallVector<Operation *> work;
  llvm::DenseMap<Operation *, unsigned> index;
  for (Operation *op : ops)
    if (!replicable.contains(op)) {
      index[op] = work.size();
      work.push_back(op);
    }
  unsigned n = work.size();
  // Each rank holds `virtualStages` chunks: chunk c runs on rank c % P.
  int64_t chunks = stages * virtualStages;
  if (n < static_cast<unsigned>(chunks))
    return func.emitError() << "cannot cut " << n << " ops into " << chunks
                            << " pipeline stages";
  SmallVector<double> prefix(n + 1, 0);
  for (unsigned i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + estimateSeconds(estimateCost(work[i]));
  // The KV caches (partita.kv_cache results) stay on the stage that writes
  // them: that stage returns them, nothing carries them to the last.
  llvm::DenseSet<Value> resident;
  for (OpOperand &operand : ret->getOpOperands())
    if (func.getResultAttr(operand.getOperandNumber(),
                           nn::NNDialect::kKvCacheAttrName) &&
        index.contains(operand.get().getDefiningOp()))
      resident.insert(operand.get());
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
  SmallVector<unsigned> bounds = {0};
  bounds.append(cuts.begin(), cuts.end());
  bounds.push_back(n);
  // The chunk that returns each result: the last, or a cache's writer.
  auto chunkOf = [&](Value v) -> int64_t {
    if (!resident.contains(v))
      return chunks - 1;
    unsigned at = index.lookup(v.getDefiningOp());
    return std::upper_bound(bounds.begin(), bounds.end(), at) - bounds.begin() -
           1;
  };
  // Which crossing values travel split over tp: those every tp rank holds
  // whole, along their last dimension tp divides.
  int64_t tp = mesh.getRoleSize(AxisRole::Tensor);
  llvm::DenseMap<Value, bool> memo;
  auto scatterDim = [&](Value v) -> std::optional<int64_t> {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (tp == 1 || !type || !isReplicatedOver(v, tpAxis, memo))
      return std::nullopt;
    for (int64_t d = type.getRank() - 1; d >= 0; --d)
      if (type.getDimSize(d) % tp == 0)
        return d;
    return std::nullopt;
  };

  // Microbatches divide the batch: dimension 0 of the inputs and every
  // dimension that shares its factor through the ops' sharding rules.
  llvm::DenseMap<Value, int64_t> batchDim;
  if (microbatches > 1 && failed(findBatchDims(func, batchDim)))
    return failure();
  auto microType = [&](Value v) {
    auto type = cast<RankedTensorType>(v.getType());
    auto it = batchDim.find(v);
    if (microbatches == 1 || it == batchDim.end())
      return type;
    SmallVector<int64_t> shape(type.getShape());
    shape[it->second] /= microbatches;
    return type.clone(shape);
  };

  auto groupType = [&](Value v, int64_t size) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[batchDim.lookup(v)] = shape[batchDim.lookup(v)] / microbatches * size;
    return type.clone(shape);
  };

  // Build the stages. Each runs its microbatches one after the other
  // (GPipe): receive, compute, send.
  OpBuilder b(ret);
  FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  SmallVector<StageOp> stageOps;
  auto crossing = [&](unsigned at) {
    SmallVector<Value> values;
    for (unsigned i = 0; i < at; ++i)
      for (Value v : work[i]->getResults())
        if (llvm::any_of(v.getUsers(), [&](Operation *u) {
              return u == ret ? !resident.contains(v) : index.lookup(u) >= at;
            }))
          values.push_back(v);
    return values;
  };
  // The regions in an order whose restriction to each rank is its
  // schedule: GPipe runs every microbatch through a chunk in turn; with
  // virtual stages, Megatron's interleaved order takes microbatches in
  // groups of P, chunk by chunk within a group.
  int64_t groupSize = virtualStages > 1 ? stages : microbatches;
  int64_t groups = microbatches / groupSize;
  SmallVector<std::pair<int64_t, int64_t>> items; // (chunk, group)
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t v = 0; v < virtualStages; ++v)
      for (int64_t r = 0; r < stages; ++r)
        items.push_back({v * stages + r, g});
  // The last chunk's result per group, to put together at the end.
  SmallVector<SmallVector<Value>> groupResults;
  // Each function result, from the stage that returns it.
  SmallVector<Value> returnedBy(ret.getNumOperands());
  for (auto [s, g] : items) {
    SmallVector<Type> resultTypes;
    bool lastChunk = s == chunks - 1;
    // The function results this chunk returns, in order.
    SmallVector<unsigned> returned;
    for (auto [i, v] : llvm::enumerate(ret.getOperands()))
      if (chunkOf(v) == s) {
        returned.push_back(i);
        resultTypes.push_back(groups == 1 ? v.getType()
                                          : Type(groupType(v, groupSize)));
      }
    auto stage = StageOp::create(b, ret.getLoc(), resultTypes,
                                 b.getI64IntegerAttr(s % stages), meshRef,
                                 b.getStringAttr(stageAxis));
    Block *block = b.createBlock(&stage.getRegion());
    OpBuilder inner = OpBuilder::atBlockEnd(block);
    unsigned begin = bounds[s], end = bounds[s + 1];

    // Recompute the replicable values this stage's ops use, once, whole.
    IRMapping whole;
    llvm::SetVector<Operation *> needed;
    std::function<void(Value)> need = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (!def || !replicable.contains(def) || needed.contains(def))
        return;
      for (Value operand : def->getOperands())
        need(operand);
      needed.insert(def);
    };
    for (unsigned i = begin; i < end; ++i)
      for (Value operand : work[i]->getOperands())
        need(operand);
    for (unsigned i : returned)
      need(ret.getOperand(i));
    for (Operation *op : ops)
      if (needed.contains(op))
        inner.clone(*op, whole);

    SmallVector<Value> in = s > 0 ? crossing(begin) : SmallVector<Value>();
    // Tags are (cut * 64 + value) * 1024 + microbatch.
    if (in.size() > static_cast<size_t>(kMaxTransfersPerCut) ||
        microbatches > 1024)
      return func.emitError()
             << "pipeline transfers are tagged for at most "
             << kMaxTransfersPerCut
             << " values per cut and 1024 microbatches; this plan has "
             << in.size() << " and " << microbatches;
    SmallVector<Value> out = !lastChunk ? crossing(end) : SmallVector<Value>();
    SmallVector<IRMapping> perMicrobatch(microbatches);
    // Receive what crosses the cut before this stage for microbatch m. The
    // next microbatch's input is received before this one's output is sent,
    // so neighbours that both send (interleaved chunks) meet in a
    // rendezvous instead of waiting on each other.
    auto receive = [&](int64_t m) {
      IRMapping &map = perMicrobatch[m];
      for (auto [t, v] : llvm::enumerate(in)) {
        RankedTensorType type = microType(v);
        std::optional<int64_t> dim = scatterDim(v);
        Type wire = type;
        if (dim) {
          SmallVector<int64_t> shape(type.getShape());
          shape[*dim] /= tp;
          wire = type.clone(shape);
        }
        int64_t tag = ((s - 1) * 64 + static_cast<int64_t>(t)) * 1024 + m;
        Value received = RecvOp::create(
            inner, v.getLoc(), wire, meshRef, inner.getStringAttr(stageAxis),
            inner.getI64IntegerAttr((s - 1) % stages),
            inner.getI64IntegerAttr(tag));
        if (dim) {
          auto gather = AllGatherOp::create(
              inner, v.getLoc(), type, received, meshRef,
              inner.getStrArrayAttr({tpAxis}), inner.getI64IntegerAttr(*dim));
          gather->setAttr(kReasonAttr,
                          inner.getStringAttr(
                              "pipeline stage " + std::to_string(s) +
                              ": each " + tpAxis.str() + " rank received 1/" +
                              std::to_string(tp) + " of the activation"));
          received = gather;
        }
        map.map(v, received);
      }
    };
    for (int64_t m = g * groupSize; m < (g + 1) * groupSize; ++m) {
      IRMapping &map = perMicrobatch[m];
      if (m == g * groupSize)
        receive(m);
      // This microbatch's rows of whole values (inputs, recomputed ones).
      auto rows = [&](Value v) -> Value {
        if (Value mapped = map.lookupOrNull(v))
          return mapped;
        Value full = whole.lookupOrDefault(v);
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
        Value slice = nn::SliceOp::create(inner, v.getLoc(), type, full, start,
                                          limit, stride);
        map.map(v, slice);
        return slice;
      };
      for (unsigned i = begin; i < end; ++i) {
        Operation *op = work[i];
        for (Value operand : op->getOperands())
          if (!map.contains(operand))
            map.map(operand, rows(operand));
        Operation *clone = inner.clone(*op, map);
        if (microbatches == 1)
          continue;
        for (auto [old, now] : llvm::zip(op->getResults(), clone->getResults()))
          now.setType(microType(old));
        if (failed(fitShapeAttributes(clone, op)))
          return op->emitError() << "splitting this op into " << microbatches
                                 << " microbatches failed (a compiler bug)";
      }
      if (m + 1 < (g + 1) * groupSize)
        receive(m + 1);
      // Send what crosses the cut after this stage.
      for (auto [t, v] : llvm::enumerate(out)) {
        Value sent = map.contains(v) ? map.lookup(v) : rows(v);
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
        int64_t tag = (s * 64 + static_cast<int64_t>(t)) * 1024 + m;
        SendOp::create(inner, v.getLoc(), sent, meshRef,
                       inner.getStringAttr(stageAxis),
                       inner.getI64IntegerAttr((s + 1) % stages),
                       inner.getI64IntegerAttr(tag));
      }
    }
    // The chunk puts its microbatches' results back together.
    SmallVector<Value> yielded;
    for (unsigned i : returned) {
      Value v = ret.getOperand(i);
      auto it = batchDim.find(v);
      if (microbatches == 1 || it == batchDim.end()) {
        Value only = perMicrobatch[g * groupSize].lookupOrNull(v);
        yielded.push_back(only ? only : whole.lookupOrDefault(v));
        continue;
      }
      SmallVector<Value> pieces;
      for (int64_t m = g * groupSize; m < (g + 1) * groupSize; ++m)
        pieces.push_back(perMicrobatch[m].lookup(v));
      yielded.push_back(nn::ConcatOp::create(
          inner, v.getLoc(),
          groups == 1 ? v.getType() : groupType(v, groupSize), pieces,
          it->second));
    }
    YieldOp::create(inner, ret.getLoc(), yielded);
    stageOps.push_back(stage);
    for (auto [i, result] : llvm::zip(returned, stage.getResults()))
      returnedBy[i] = result;
    if (lastChunk)
      groupResults.push_back(SmallVector<Value>(stage.getResults()));
    b.setInsertionPoint(ret);
  }
  if (groups == 1) {
    ret->setOperands(returnedBy);
  } else {
    // The last rank concatenates the groups.
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
                            : nn::ConcatOp::create(inner, v.getLoc(),
                                                   v.getType(), pieces,
                                                   it->second)
                                  .getResult());
    }
    YieldOp::create(inner, ret.getLoc(), results);
    b.setInsertionPoint(ret);
    ret->setOperands(final.getResults());
  }
  // The plan for the report: each stage's estimated time.
  Builder attrs(func.getContext());
  SmallVector<double> seconds;
  seconds.assign(stages, 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    seconds[c % stages] += prefix[bounds[c + 1]] - prefix[bounds[c]];
  func->getParentOfType<ModuleOp>()->setAttr(
      kPipelineAttr,
      PipelineAttr::get(func.getContext(), stages, microbatches,
                        virtualStages > 1 ? PipelineSchedule::Interleaved
                                          : PipelineSchedule::GPipe,
                        virtualStages, attrs.getDenseF64ArrayAttr(seconds)));
  for (Operation *op : llvm::reverse(ops)) {
    op->dropAllUses();
    op->erase();
  }
  return success();
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
            << "--microbatches " << static_cast<int64_t>(microbatches)
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

struct VerifyPipelinePass
    : mlir::partita::impl::VerifyPipelinePassBase<VerifyPipelinePass> {
  void runOnOperation() override {
    // Per stage index, its transfers in program order (all stage ops with
    // that index, in order).
    std::map<int64_t, SmallVector<Transfer>> stages;
    getOperation().walk([&](StageOp stage) {
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
    std::map<int64_t, size_t> next;
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
        if (peer == stages.end()) {
          t.op->emitError() << "stage " << s << " transfers with stage "
                            << t.peer << ", which does not exist";
          return signalPassFailure();
        }
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
