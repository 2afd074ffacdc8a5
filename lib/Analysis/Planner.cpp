//===- Planner.cpp - Choosing the mesh for a cluster ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Analysis/Planner.h"

#include "partita/Analysis/CostModel.h"
#include "partita/Analysis/ModelRoles.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace mlir;
using namespace mlir::partita;

//===----------------------------------------------------------------------===//
// The model's shape
//===----------------------------------------------------------------------===//

namespace {

bool isColumnParallel(ModelRole role) {
  switch (role) {
  case ModelRole::AttentionQuery:
  case ModelRole::AttentionKey:
  case ModelRole::AttentionValue:
  case ModelRole::AttentionFusedProjection:
  case ModelRole::MlpUp:
  case ModelRole::MlpGate:
  case ModelRole::MlpFusedGateUp:
    return true;
  default:
    return false;
  }
}

double valueBytes(Value value) {
  return static_cast<double>(tensorBytes(value.getType()));
}

/// The weights `op` reads: its constant operands, and the packed
/// constants of a weight it reads dequantized (an int4 matmul's weight is
/// the nn.dequantize of its packed bytes, which is what a rank holds).
SmallVector<Value> weightsOf(Operation *op) {
  SmallVector<Value> weights;
  for (Value operand : op->getOperands()) {
    // Stacked int4 experts reach nn.moe transposed.
    if (auto transpose = operand.getDefiningOp<nn::TransposeOp>();
        transpose && transpose.getInput().getDefiningOp<nn::DequantizeOp>())
      operand = transpose.getInput();
    if (operand.getDefiningOp<nn::ConstantOp>())
      weights.push_back(operand);
    else if (auto dequantize = operand.getDefiningOp<nn::DequantizeOp>())
      for (Value packed : dequantize->getOperands())
        if (packed.getDefiningOp<nn::ConstantOp>())
          weights.push_back(packed);
  }
  return weights;
}

/// The bytes of the weights of `op` not counted yet: a tied embedding and
/// LM head count once.
double weightBytesOf(Operation *op, llvm::DenseSet<Operation *> &counted) {
  double bytes = 0;
  for (Value weight : weightsOf(op))
    if (counted.insert(weight.getDefiningOp()).second)
      bytes += valueBytes(weight);
  return bytes;
}

/// The result of `main` that `value` (an attention's keys or values) is a
/// view of (through a GQA head repeat, a transpose, a reshape), if any: a
/// decoder's present keys or values.
Value returnedSource(Value value, const llvm::DenseSet<Value> &returned) {
  while (value) {
    if (returned.contains(value))
      return value;
    Operation *op = value.getDefiningOp();
    if (!isa_and_nonnull<nn::ReshapeOp, nn::TransposeOp, nn::BroadcastToOp>(op))
      return {};
    value = op->getOperand(0);
  }
  return {};
}

} // namespace

bool ModelShape::Op::operator==(const Op &other) const {
  return flops == other.flops && bytes == other.bytes &&
         weightBytes == other.weightBytes && tensorSplit == other.tensorSplit &&
         attention == other.attention && collective == other.collective &&
         collectiveBytes == other.collectiveBytes &&
         keyValueBytes == other.keyValueBytes && liveBytes == other.liveBytes &&
         gathered == other.gathered && keyValueSplit == other.keyValueSplit &&
         decomposable == other.decomposable && experts == other.experts &&
         outside == other.outside && nextFlops == other.nextFlops &&
         nextBytes == other.nextBytes;
}

ModelShape ModelShape::folded() const {
  ModelShape result = *this;
  result.ops.clear();
  for (const Op &op : ops) {
    auto same = llvm::find(result.ops, op);
    if (same == result.ops.end())
      result.ops.push_back(op);
    else
      same->count += op.count;
  }
  return result;
}

ModelShape ModelShape::withBatch(int64_t newBatch) const {
  ModelShape result = *this;
  double scale = double(newBatch) / double(std::max<int64_t>(batch, 1));
  for (Op &op : result.ops) {
    op.flops *= scale;
    op.bytes = op.weightBytes + (op.bytes - op.weightBytes) * scale;
    op.collectiveBytes *= scale;
    op.keyValueBytes *= scale;
    op.liveBytes *= scale;
    // The next ops' weights scale too here (a slight overestimate of what
    // collective matmul hides; a decode step, one token per sequence, has
    // no Megatron-SP to hide behind).
    op.nextFlops *= scale;
    op.nextBytes *= scale;
  }
  result.keyValueCacheBytes *= scale;
  result.outputBytes *= scale;
  result.batch = newBatch;
  return result;
}

ModelShape mlir::partita::readModelShape(func::FuncOp main) {
  ModelShape shape;
  ModelRoles roles(main);
  llvm::DenseSet<Value> returned;
  for (Block &block : main.getBody())
    if (auto ret = dyn_cast<func::ReturnOp>(block.getTerminator()))
      returned.insert(ret.getOperands().begin(), ret.getOperands().end());
  llvm::DenseSet<Value> cached, gathered;
  // The key and value projections' results until attention reads them:
  // split over at most kvHeads tp ranks.
  llvm::DenseSet<Value> keyValuePath;
  // Values computed on each tp rank's slice: the column-parallel
  // projections' results and what follows from them until a row-parallel
  // projection sums the slices.
  llvm::DenseSet<Value> split;
  llvm::DenseSet<Operation *> countedWeights, placedWeights;
  double weightBytes = 0, splitWeights = 0;
  struct Placement {
    int64_t op;
    double split, replicated;
    bool experts;
  };
  std::vector<Placement> placements;
  int64_t firstLayerOp = -1, lastLayerOp = -1, lastReduce = -1;
  // nn ops have static shapes (their verifier says so).
  main.walk([&](Operation *op) {
    if (isa<nn::ConstantOp>(op)) {
      weightBytes += valueBytes(op->getResult(0));
      return;
    }
    if (op->getDialect() == nullptr || op->getDialect()->getNamespace() != "nn")
      return;
    // A packed weight is dequantized inside the matmul that reads it
    // (partita-fuse-dequantize): the matmul's entry counts its bytes.
    if (isa<nn::DequantizeOp>(op))
      return;
    ModelShape::Op entry;
    OpCost cost = estimateCost(op);
    entry.flops = cost.flops;
    entry.bytes = cost.bytes;
    // Weights are counted apart; the tensors computed around the op are
    // its live set.
    for (Value v : op->getOperands())
      if (!v.getDefiningOp<nn::ConstantOp>() &&
          !v.getDefiningOp<nn::DequantizeOp>())
        entry.liveBytes += valueBytes(v);
    for (Value weight : weightsOf(op))
      entry.weightBytes += valueBytes(weight);
    // A lookup reads rows of its table, not all of it.
    entry.weightBytes = std::min(entry.weightBytes, entry.bytes);
    for (Value v : op->getResults())
      entry.liveBytes += valueBytes(v);
    std::optional<ModelRole> role = roles.getRole(op);
    // The LM head's logits are gathered whole onto every tp rank, and so is
    // what is computed from them (a cast to the output's type).
    bool whole = (role && *role == ModelRole::LmHead) ||
                 llvm::any_of(op->getOperands(),
                              [&](Value v) { return gathered.contains(v); });
    if (whole) {
      entry.gathered = true;
      for (Value v : op->getResults())
        gathered.insert(v);
    }
    bool splitInput = llvm::any_of(op->getOperands(),
                                   [&](Value v) { return split.contains(v); });
    bool splitResult = false;
    double splitHere = 0;
    bool onKeyValuePath = !isa<nn::AttentionOp>(op) &&
                          ((role && (*role == ModelRole::AttentionKey ||
                                     *role == ModelRole::AttentionValue)) ||
                           llvm::any_of(op->getOperands(), [&](Value v) {
                             return keyValuePath.contains(v);
                           }));
    if (onKeyValuePath) {
      entry.keyValueSplit = true;
      for (Value v : op->getResults())
        keyValuePath.insert(v);
    }
    // The MLP widths tp splits, which must divide (the partitioner's
    // pin); heads and key/value heads have rules of their own.
    if (role &&
        (*role == ModelRole::MlpUp || *role == ModelRole::MlpGate ||
         *role == ModelRole::MlpFusedGateUp || *role == ModelRole::MlpDown)) {
      auto rhs = cast<RankedTensorType>(op->getOperand(1).getType());
      int64_t width =
          rhs.getDimSize(rhs.getRank() - (*role == ModelRole::MlpDown ? 2 : 1));
      if (*role == ModelRole::MlpFusedGateUp)
        width /= 2;
      if (!llvm::is_contained(shape.splitWidths, width))
        shape.splitWidths.push_back(width);
    }
    if (role && isColumnParallel(*role)) {
      entry.tensorSplit = splitResult = true;
      splitHere = weightBytesOf(op, countedWeights);
      if (*role == ModelRole::AttentionKey ||
          *role == ModelRole::AttentionValue)
        shape.keyValueWeightBytes += splitHere;
    } else if (role && (*role == ModelRole::AttentionOutput ||
                        *role == ModelRole::MlpDown)) {
      entry.tensorSplit = true;
      entry.decomposable = true;
      entry.collective = ModelShape::Op::Collective::AllReduce;
      entry.collectiveBytes = valueBytes(op->getResult(0));
      splitHere = weightBytesOf(op, countedWeights);
    } else if (role && *role == ModelRole::Embedding) {
      entry.tensorSplit = true;
      entry.collective = ModelShape::Op::Collective::AllReduce;
      entry.collectiveBytes = valueBytes(op->getResult(0));
      splitHere = weightBytesOf(op, countedWeights);
    } else if (role && *role == ModelRole::LmHead) {
      entry.tensorSplit = true;
      entry.collective = ModelShape::Op::Collective::AllGather;
      entry.collectiveBytes = valueBytes(op->getResult(0));
      splitHere = weightBytesOf(op, countedWeights);
    } else if (auto attention = dyn_cast<nn::AttentionOp>(op)) {
      entry.tensorSplit = splitResult = true;
      entry.attention = true;
      entry.collectiveBytes =
          valueBytes(attention.getQuery()) + valueBytes(attention.getKey()) +
          valueBytes(attention.getValue()) + valueBytes(attention.getResult());
      entry.keyValueBytes =
          valueBytes(attention.getKey()) + valueBytes(attention.getValue());
      for (Value operand : {attention.getKey(), attention.getValue()})
        if (Value present = returnedSource(operand, returned))
          if (cached.insert(present).second)
            shape.keyValueCacheBytes += valueBytes(present);
      auto query = attention.getQuery().getType();
      ++shape.layers;
      shape.batch = query.getDimSize(0);
      shape.heads = query.getDimSize(1);
      shape.sequence = query.getDimSize(2);
      shape.kvHeads = attention.getKey().getType().getDimSize(1);
      shape.tokenBytes =
          static_cast<double>(shape.heads * query.getDimSize(3)) *
          std::max<int64_t>(1, query.getElementTypeBitWidth() / 8);
    } else if (auto moe = dyn_cast<nn::MoeOp>(op)) {
      // Its experts: over ep (they stay whole over tp here), its result
      // all-reduced over ep.
      entry.experts = true;
      entry.topK = moe.getTopK();
      entry.collectiveBytes = valueBytes(moe.getResult());
      shape.expertWeightBytes += weightBytesOf(op, countedWeights);
      shape.expertCounts.push_back(moe.getNumExperts());
    } else if (splitInput) {
      entry.tensorSplit = splitResult = true;
    }
    if (splitResult)
      for (Value v : op->getResults())
        split.insert(v);
    // Where the op's weights sit: in a transformer layer (from its first
    // column-parallel projection to its last row-parallel one) or outside
    // (embeddings, the final norm, the LM head).
    int64_t index = static_cast<int64_t>(shape.ops.size());
    splitWeights += splitHere;
    double here = weightBytesOf(op, placedWeights);
    placements.push_back(
        {index, splitHere, std::max(0.0, here - splitHere), entry.experts});
    if (role && isColumnParallel(*role) && firstLayerOp < 0)
      firstLayerOp = index;
    // A column-parallel projection is fed by the all-gather of the last
    // all-reduce before it (under Megatron-SP).
    if (role && isColumnParallel(*role) && lastReduce >= 0) {
      shape.ops[size_t(lastReduce)].nextFlops += entry.flops;
      shape.ops[size_t(lastReduce)].nextBytes += entry.bytes;
    }
    if (entry.collective == ModelShape::Op::Collective::AllReduce)
      lastReduce = index;
    if ((role && (*role == ModelRole::AttentionOutput ||
                  *role == ModelRole::MlpDown)) ||
        entry.experts)
      lastLayerOp = index;
    shape.ops.push_back(entry);
  });
  // A resident cache (partita-kv-cache) is the cache at --max-seq, whether
  // attention reads it (decode) or the new keys (prefill).
  auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());
  for (OpOperand &operand : ret->getOpOperands())
    if (main.getResultAttr(operand.getOperandNumber(),
                           nn::NNDialect::kKvCacheAttrName) &&
        cached.insert(operand.get()).second)
      shape.keyValueCacheBytes += valueBytes(operand.get());
  for (Value result : returned)
    if (!cached.contains(result))
      shape.outputBytes += valueBytes(result);
  for (auto [index, entry] : llvm::enumerate(shape.ops))
    entry.outside = firstLayerOp >= 0 && (int64_t(index) < firstLayerOp ||
                                          int64_t(index) > lastLayerOp);
  shape.splitWeightBytes = splitWeights;
  shape.replicatedWeightBytes = std::max(0.0, weightBytes - splitWeights);
  for (const Placement &p : placements)
    if (firstLayerOp < 0 || p.op < firstLayerOp || p.op > lastLayerOp) {
      shape.splitOutsideWeightBytes += p.split;
      shape.replicatedOutsideWeightBytes += p.replicated;
      if (p.experts)
        shape.expertOutsideWeightBytes += p.replicated;
    }
  return shape;
}

//===----------------------------------------------------------------------===//
// Candidates
//===----------------------------------------------------------------------===//

std::string PlanCandidate::meshString() const {
  std::string text;
  for (auto [name, size] :
       {std::pair{"dp", dp}, std::pair{"pp", pp}, std::pair{"ep", ep},
        std::pair{"sp", sp}, std::pair{"tp", tp}})
    if (size > 1)
      text += (text.empty() ? "" : ",") + std::string(name) + "=" +
              std::to_string(size);
  return text.empty() ? "1" : text;
}

std::string PlanCandidate::flags() const {
  std::string text = "--mesh " + meshString();
  if (spMode != SequenceMode::None)
    text += std::string(" --sp-mode ") + ::partita::optionName(spMode);
  if (microbatches > 1)
    text += " --microbatches " + std::to_string(microbatches);
  if (virtualStages > 1)
    text += " --virtual-stages " + std::to_string(virtualStages);
  if (tp > 1)
    text += collectiveMatmul ? " --collective-matmul always"
                             : " --collective-matmul never";
  return text;
}

std::string PlanCandidate::family() const {
  std::string text;
  for (auto [name, size] :
       {std::pair{"dp", dp}, std::pair{"pp", pp}, std::pair{"ep", ep},
        std::pair{"sp", sp}, std::pair{"tp", tp}})
    if (size > 1)
      text += (text.empty() ? "" : "+") + std::string(name);
  if (text.empty())
    text = "one device";
  if (spMode != SequenceMode::None)
    text += std::string(":") + ::partita::optionName(spMode);
  return text;
}

const PlanCandidate *Plan::best() const {
  if (candidates.empty() || !candidates.front().feasible)
    return nullptr;
  return &candidates.front();
}

namespace {

std::string gigabytes(double bytes) {
  return llvm::formatv("{0:f1} GB", bytes / 1e9).str();
}

/// The link a group of `size` devices, `stride` ranks apart, uses: within
/// a node when the group's span fits in one.
const LinkModel &linkOf(const ClusterModel &cluster, int64_t stride,
                        int64_t size) {
  return stride * size <= cluster.devicesPerNode ? cluster.intraNode
                                                 : cluster.interNode;
}

/// The ring algorithm over `n` devices: seconds for an all-gather (or a
/// reduce-scatter, the same bytes and steps) of `bytes` per rank; an
/// all-reduce is one of each.
double gatherSeconds(const LinkModel &link, int64_t n, double bytes) {
  if (n <= 1)
    return 0;
  return (n - 1) * link.latencySeconds +
         1.0 * (n - 1) / n * bytes / link.bytesPerSecond;
}

/// Why ep does not divide a mixture of experts' experts, or "".
std::string expertDivisibility(const PlanCandidate &c,
                               const ModelShape &shape) {
  for (int64_t experts : shape.expertCounts)
    if (experts % c.ep != 0)
      return "divisibility: " + std::to_string(experts) +
             " experts over ep=" + std::to_string(c.ep);
  return "";
}

/// The first divisibility the candidate breaks, or "".
std::string divisibility(const PlanCandidate &c, const ModelShape &shape) {
  auto refuse = [](const std::string &what) { return "divisibility: " + what; };
  if (std::string why = expertDivisibility(c, shape); !why.empty())
    return why;
  if (shape.heads % c.tp != 0)
    return refuse(std::to_string(shape.heads) +
                  " heads over tp=" + std::to_string(c.tp));
  for (int64_t width : shape.splitWidths)
    if (width % c.tp != 0)
      return refuse("an MLP width of " + std::to_string(width) +
                    " over tp=" + std::to_string(c.tp));
  // Fewer key/value heads than tp ranks: each group of tp / kvHeads ranks
  // holds one key/value head (GQA replication), under plain Megatron tp.
  bool replicated = shape.kvHeads > 0 && shape.kvHeads < c.tp;
  if (replicated ? c.tp % shape.kvHeads != 0 : shape.kvHeads % c.tp != 0)
    return refuse(std::to_string(shape.kvHeads) +
                  " key/value heads over tp=" + std::to_string(c.tp));
  if (replicated && c.spMode != SequenceMode::None)
    return refuse(std::to_string(shape.kvHeads) +
                  " key/value heads replicated over tp=" +
                  std::to_string(c.tp) + " with sequence parallelism");
  // A dispatching ep splits the batch as dp does, before the
  // microbatches split each replica's share.
  int64_t replicas = c.dp * (c.dispatch ? c.ep : 1);
  if (shape.batch % (replicas * c.microbatches) != 0)
    return refuse("batch " + std::to_string(shape.batch) +
                  " over dp=" + std::to_string(c.dp) +
                  (c.dispatch ? " x ep=" + std::to_string(c.ep) : "") +
                  (c.microbatches > 1 ? " x " + std::to_string(c.microbatches) +
                                            " microbatches"
                                      : std::string()));
  if (shape.layers % (c.pp * c.virtualStages) != 0)
    return refuse(
        std::to_string(shape.layers) +
        " layers over pp=" + std::to_string(c.pp) +
        (c.virtualStages > 1
             ? " x " + std::to_string(c.virtualStages) + " virtual stages"
             : std::string()));
  if (c.virtualStages > 1 && c.microbatches % c.pp != 0)
    return refuse(std::to_string(c.microbatches) +
                  " microbatches in groups of pp=" + std::to_string(c.pp) +
                  " (virtual stages)");
  if (shape.sequence % c.sp != 0)
    return refuse("sequence " + std::to_string(shape.sequence) +
                  " over sp=" + std::to_string(c.sp));
  if (c.spMode == SequenceMode::Megatron && shape.sequence % c.tp != 0)
    return refuse("sequence " + std::to_string(shape.sequence) +
                  " over tp=" + std::to_string(c.tp) + " (Megatron-SP)");
  if (c.spMode == SequenceMode::Ulysses &&
      ((shape.heads / c.tp) % c.sp != 0 || (shape.kvHeads / c.tp) % c.sp != 0))
    return refuse("heads per tp rank over sp=" + std::to_string(c.sp) +
                  " (Ulysses)");
  return "";
}

} // namespace

void mlir::partita::evaluatePlan(PlanCandidate &c, const ModelShape &shape,
                                 const ClusterModel &cluster,
                                 const PlanRequest &request) {
  c.feasible = false;
  c.reason.clear();
  // With dispatch, ep is one more data-parallel axis outside the experts
  // (Annotate's batchOverExperts), and splits the experts' tokens too.
  c.dispatch =
      request.expertDispatch && c.ep > 1 && shape.batch % (c.dp * c.ep) == 0;
  if (shape.layers == 0 && c.tp * c.pp * c.sp > 1) {
    c.reason = "divisibility: no attention layer (tp, pp and sp split "
               "transformer layers)";
    return;
  }
  if (shape.layers == 0 && shape.batch % c.dp != 0) {
    c.reason = "divisibility: batch " + std::to_string(shape.batch) +
               " over dp=" + std::to_string(c.dp);
    return;
  }
  if (shape.layers == 0) {
    if (std::string why = expertDivisibility(c, shape); !why.empty()) {
      c.reason = why;
      return;
    }
  }
  if (shape.layers > 0) {
    if (std::string why = divisibility(c, shape); !why.empty()) {
      c.reason = why;
      return;
    }
  }
  if (cluster.nodes > 1 && c.tp * c.sp * c.ep > cluster.devicesPerNode) {
    c.reason =
        "placement: tp x sp x ep = " + std::to_string(c.tp * c.sp * c.ep) +
        " would cross nodes of " + std::to_string(cluster.devicesPerNode) +
        " devices";
    return;
  }
  c.reason.clear();

  // Work per rank, per microbatch and stage: every op on its shard, 1/pp of
  // the layers. The nn IR's types are already the storage type
  // (--dtype converts them in the nn stage).
  const DeviceModel &device = cluster.device;
  double compute = 0, attention = 0;
  double a2aBytes = 0, ringBytes = 0;
  double peakLive = 0;
  bool megatronSp = c.spMode == SequenceMode::Megatron;
  // The tp ranks a key/value head is split over (fewer when replicated).
  double kvShare = shape.kvHeads > 0
                       ? double(std::min<int64_t>(c.tp, shape.kvHeads))
                       : double(c.tp);
  double dp = double(c.dp) * (c.dispatch ? c.ep : 1);
  for (const ModelShape::Op &op : shape.ops) {
    double factor = dp * c.sp;
    double tpShare = op.keyValueSplit ? kvShare : c.tp;
    if (op.tensorSplit || megatronSp)
      factor *= tpShare;
    // One microbatch's share of the tensors, and the weights whole (split
    // by tp where the op is, by ep a mixture of experts'): each
    // microbatch reads them again.
    double weights = op.weightBytes / (op.tensorSplit ? tpShare : 1.0);
    if (op.experts) {
      if (!c.dispatch)
        factor *= c.ep;
      weights /= c.ep;
    }
    OpCost cost{op.flops / (factor * c.microbatches),
                (op.bytes - op.weightBytes) / (factor * c.microbatches) +
                    weights};
    double seconds =
        op.count * estimateSeconds(cost, device) / (op.outside ? 1 : c.pp);
    compute += seconds;
    if (op.attention) {
      attention += seconds;
      double local = op.collectiveBytes / (dp * c.tp * c.sp);
      a2aBytes += op.count * local;
      ringBytes +=
          op.count * op.keyValueBytes / (dp * kvShare * c.sp) * (c.sp - 1);
    }
    double split = op.gathered ? dp * c.sp : factor;
    peakLive = std::max(peakLive, op.liveBytes / split);
  }

  // Per microbatch and stage: a pipeline stage holds layers / pp of the
  // model and runs each microbatch's share of the batch.
  double perStage = 1.0 / (double(c.pp) * c.microbatches);
  const LinkModel &tpLink = linkOf(cluster, 1, c.tp);
  const LinkModel &spLink = linkOf(cluster, c.tp, c.sp);
  const LinkModel &epLink = linkOf(cluster, c.tp * c.sp, c.ep);
  const LinkModel &ppLink = linkOf(cluster, c.tp * c.sp * c.ep, c.pp);
  // A stage runs count / pp of the model's `count` collectives per
  // microbatch, each of the microbatch's share of its bytes: the latency is
  // paid per microbatch.
  auto scaled = [&](double bytes, int64_t count, auto seconds,
                    const LinkModel &link, int64_t n) {
    if (count == 0 || n <= 1)
      return 0.0;
    return double(count) / c.pp *
           seconds(link, n, bytes / (double(count) * c.microbatches));
  };
  // Tensor parallelism's collectives, per microbatch and stage: an
  // all-reduce (a reduce-scatter and an all-gather under Megatron-SP) after
  // each row-parallel op and the embedding, an all-gather of the logits.
  // Collective matmul decomposes a reduce-scatter into tp - 1 sends of a
  // block, each beside a block of the matmul before it and chained by the
  // add of the running sum; an all-gather into tp - 1 sends beside blocks
  // of the column-parallel matmuls it feeds. A collective is hidden only
  // behind its own matmul: what it moves beyond that is exposed.
  double tpComm = 0, tpExposed = 0, decomposition = 0;
  for (const ModelShape::Op &op : shape.ops) {
    if (op.collective == ModelShape::Op::Collective::None || c.tp <= 1)
      continue;
    double calls = double(op.count) / c.pp;
    double perCall = op.collectiveBytes / (dp * c.sp * c.microbatches);
    double half = gatherSeconds(tpLink, c.tp, perCall);
    if (op.collective == ModelShape::Op::Collective::AllGather) {
      tpComm += calls * half;
      tpExposed += calls * half;
      continue;
    }
    tpComm += calls * 2 * half;
    if (!c.collectiveMatmul) {
      tpExposed += calls * 2 * half;
      continue;
    }
    double shard = dp * c.sp * c.tp * c.microbatches;
    double block = perCall / c.tp;
    double send = tpLink.latencySeconds + block / tpLink.bytesPerSecond;
    double add = estimateSeconds({0, 3 * block}, device);
    double own = estimateSeconds({op.flops / shard, op.bytes / shard}, device);
    double next =
        estimateSeconds({op.nextFlops / shard, op.nextBytes / shard}, device);
    double scatter = op.decomposable
                         ? (c.tp - 1) * std::max(0.0, send + add - own / c.tp)
                         : half;
    double gather = op.nextFlops > 0
                        ? (c.tp - 1) * std::max(0.0, send - next / c.tp)
                        : half;
    tpExposed += calls * (scatter + gather);
    if (op.decomposable)
      decomposition += calls * (c.tp - 1) * add;
  }
  // Expert parallelism, not hidden: each mixture of experts' tokens sent
  // to their experts and back, a row per chosen expert, (ep - 1) / ep of
  // them leaving the rank when routing is balanced (dist.dispatch, then
  // dist.dispatch_return); or its partial sums all-reduced over ep.
  double epComm = 0;
  for (const ModelShape::Op &op : shape.ops) {
    if (!op.experts || c.ep <= 1)
      continue;
    double perCall = op.collectiveBytes / (dp * c.sp * c.microbatches);
    double calls = double(op.count) / (op.outside ? 1 : c.pp);
    epComm += c.dispatch
                  ? calls * 2 * gatherSeconds(epLink, c.ep, perCall * op.topK)
                  : calls * 2 * gatherSeconds(epLink, c.ep, perCall);
  }
  tpComm += epComm;
  tpExposed += epComm;
  double spComm = 0, spHidden = 0;
  if (c.spMode == SequenceMode::Ulysses)
    spComm = scaled(a2aBytes, 4 * shape.layers, gatherSeconds, spLink, c.sp);
  if (c.spMode == SequenceMode::Ring) {
    // sp - 1 permutes of keys and values, each beside a block of attention.
    double steps = double(shape.layers) * (c.sp - 1);
    spComm = (steps * spLink.latencySeconds / c.pp +
              ringBytes * perStage / spLink.bytesPerSecond);
    spHidden = attention;
  }
  double stageCompute = compute + decomposition;
  double spExposed = std::max(0.0, spComm - spHidden);
  double transfer = 0;
  if (c.pp > 1)
    transfer = ppLink.latencySeconds +
               shape.tokenBytes * shape.batch * shape.sequence /
                   (dp * c.sp * c.microbatches) / ppLink.bytesPerSecond;
  // A slot is one microbatch through one chunk of layers (a stage holds
  // `virtualStages` chunks) and its send to the next: one batch fills
  // microbatches x virtualStages slots per device, and the latency
  // objective waits pp - 1 more for the pipeline to fill.
  int64_t v = c.virtualStages;
  double slot = (stageCompute + tpExposed + spExposed) / v + transfer;
  int64_t busy = c.microbatches * v;
  // Decode steps of one batch depend on each other (a token feeds the
  // next step): a microbatch's next step waits for it to leave the last
  // stage, so a stream of steps keeps the pipeline full only with as many
  // microbatches as stages.
  int64_t slots = busy;
  if (request.objective == PlanObjective::Latency ||
      request.objective == PlanObjective::DecodeLatency)
    slots = busy + c.pp - 1;
  else if (request.objective == PlanObjective::DecodeThroughput)
    slots = std::max<int64_t>(busy, c.pp * v);
  c.stepSeconds = slots * slot;
  c.computeSeconds = c.microbatches * stageCompute;
  c.communicationSeconds = c.microbatches * (tpComm + spComm) + busy * transfer;
  c.exposedCommunicationSeconds =
      c.microbatches * (tpExposed + spExposed) + busy * transfer;
  c.bubbleSeconds = (slots - busy) * slot;
  c.batch = shape.batch;
  c.tokensPerSecond = c.stepSeconds > 0
                          ? double(shape.batch) * shape.sequence / c.stepSeconds
                          : 0;

  // Memory per device: its stage's weights (tp splits the projections'; a
  // pipeline spreads the layers' over its stages, and counts those outside
  // them, embeddings and the LM head, whole on the worst stage), the
  // activations of one microbatch (the largest live set around an op, plus
  // the residual stream waiting beside it), the outputs (whole on a rank of
  // each data-parallel replica) and its share of a decoder's KV cache (its
  // layers, heads, batch and sequence).
  // Expert weights are replicated weights that ep splits.
  double epSaves = 1 - 1.0 / double(c.ep);
  double outside = shape.splitOutsideWeightBytes / c.tp +
                   shape.replicatedOutsideWeightBytes -
                   shape.expertOutsideWeightBytes * epSaves;
  double layers =
      (shape.splitWeightBytes - shape.splitOutsideWeightBytes -
       shape.keyValueWeightBytes) /
          c.tp +
      shape.keyValueWeightBytes / kvShare + shape.replicatedWeightBytes -
      shape.replicatedOutsideWeightBytes -
      (shape.expertWeightBytes - shape.expertOutsideWeightBytes) * epSaves;
  c.weightBytes = layers / c.pp + outside;
  double residual = shape.tokenBytes * shape.batch * shape.sequence /
                    (dp * c.sp * (megatronSp ? c.tp : 1));
  c.activationBytes = (peakLive + residual) / c.microbatches;
  c.outputBytes = shape.outputBytes / dp;
  c.keyValueCacheBytes =
      shape.keyValueCacheBytes / (dp * kvShare * c.pp * c.sp);
  c.memoryBytes =
      c.weightBytes + c.activationBytes + c.outputBytes + c.keyValueCacheBytes;
  double budget = request.deviceMemoryBytes.value_or(cluster.deviceMemoryBytes);
  double reserve = std::max(1e9, 0.05 * budget);
  if (c.memoryBytes + reserve > budget) {
    c.reason = "memory: needs " + gigabytes(c.memoryBytes) + " + " +
               gigabytes(reserve) + " reserve per device, has " +
               gigabytes(budget) + " (short by " +
               gigabytes(c.memoryBytes + reserve - budget) + ")";
    return;
  }
  c.feasible = true;
}

namespace {

/// decode-throughput: evaluates `c` at the largest batch its memory holds,
/// in steps of dp x microbatches (so that its shards and microbatches stay
/// whole) up to kMaxServingBatch; left at the model's batch when none
/// fits. Memory grows with the batch, so the batches that fit are a
/// prefix: a binary search finds the last.
void servingBatch(PlanCandidate &c, const ModelShape &shape,
                  const ClusterModel &cluster, const PlanRequest &request) {
  if (!c.feasible && !llvm::StringRef(c.reason).starts_with("memory:"))
    return;
  int64_t unit = c.dp * c.microbatches;
  auto at = [&](int64_t steps) {
    PlanCandidate trial = c;
    evaluatePlan(trial, shape.withBatch(steps * unit), cluster, request);
    return trial;
  };
  int64_t lo = 0, hi = kMaxServingBatch / unit + 1;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (at(mid).feasible ? lo : hi) = mid;
  }
  if (lo > 0)
    c = at(lo);
}

} // namespace

std::vector<PlanCandidate>
mlir::partita::enumeratePlans(const ModelShape &shape,
                              const ClusterModel &cluster,
                              const PlanRequest &request) {
  std::vector<PlanCandidate> all;
  int64_t n = request.devices;
  // Every factorization of the devices over tp, sp, pp and, where the
  // model has experts, ep; dp takes the rest.
  struct Axes {
    int64_t tp, sp, pp, ep, dp;
  };
  std::vector<Axes> meshes;
  int64_t maxEp = shape.expertCounts.empty() ? 1 : n;
  for (int64_t tp = 1; tp <= n; ++tp) {
    if (n % tp != 0)
      continue;
    for (int64_t sp = 1; sp <= n / tp; ++sp) {
      if ((n / tp) % sp != 0)
        continue;
      for (int64_t pp = 1; pp <= n / (tp * sp); ++pp) {
        int64_t rest = n / (tp * sp);
        if (rest % pp != 0)
          continue;
        for (int64_t ep = 1; ep <= std::min(maxEp, rest / pp); ++ep)
          if ((rest / pp) % ep == 0)
            meshes.push_back({tp, sp, pp, ep, rest / pp / ep});
      }
    }
  }
  for (auto [tp, sp, pp, ep, dp] : meshes) {
    std::vector<SequenceMode> modes;
    if (sp > 1)
      modes = {SequenceMode::Ulysses, SequenceMode::Ring};
    else if (tp > 1)
      modes = {SequenceMode::None, SequenceMode::Megatron};
    else
      modes = {SequenceMode::None};
    // A pipeline's schedules: the microbatches a data-parallel shard
    // of the batch divides into, and the chunks per stage its layers
    // divide into (the interleaved schedule takes microbatches in
    // groups of pp).
    std::vector<int64_t> microbatches = {1}, chunks = {1};
    if (pp > 1) {
      int64_t shard = shape.batch % dp == 0 ? shape.batch / dp : 1;
      for (int64_t m = 2; m <= shard; ++m)
        if (shard % m == 0)
          microbatches.push_back(m);
      int64_t perStage =
          shape.layers % pp == 0 ? shape.layers / pp : int64_t(1);
      for (int64_t v = 2; v <= perStage; ++v)
        if (perStage % v == 0)
          chunks.push_back(v);
    }
    for (SequenceMode mode : modes)
      for (int64_t m : microbatches)
        for (int64_t v : chunks)
          for (bool cmm : {false, true}) {
            // Collective matmul needs Megatron-SP's gathers and
            // scatters; virtual stages need groups of pp microbatches.
            if ((cmm && mode != SequenceMode::Megatron) ||
                (v > 1 && m % pp != 0))
              continue;
            PlanCandidate c;
            c.dp = dp;
            c.tp = tp;
            c.pp = pp;
            c.sp = sp;
            c.ep = ep;
            c.spMode = mode;
            c.microbatches = m;
            c.virtualStages = v;
            c.collectiveMatmul = cmm;
            evaluatePlan(c, shape, cluster, request);
            if (request.objective == PlanObjective::DecodeThroughput)
              servingBatch(c, shape, cluster, request);
            all.push_back(std::move(c));
          }
  }
  return all;
}

Plan mlir::partita::planParallelism(const ModelShape &shape,
                                    const ClusterModel &cluster,
                                    const PlanRequest &request) {
  Plan plan;
  plan.shape = shape.folded();
  plan.request = request;
  plan.deviceMemoryBytes =
      request.deviceMemoryBytes.value_or(cluster.deviceMemoryBytes);
  plan.reserveBytes = std::max(1e9, 0.05 * plan.deviceMemoryBytes);
  // One layer's ops stand for every layer's: the search costs each
  // candidate in time proportional to a layer, not to the model.
  plan.candidates = enumeratePlans(plan.shape, cluster, request);
  // Best first; ties go to the plan that communicates least (the one the
  // cost model's errors hurt least), then to the simpler plan (fewer
  // microbatches and chunks, no collective matmul), then to the
  // enumeration order.
  // decode-throughput ranks by tokens per second (each candidate at the
  // batch it serves).
  bool byTokens = request.objective == PlanObjective::DecodeThroughput;
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [&](const PlanCandidate &a, const PlanCandidate &b) {
                     if (a.feasible != b.feasible)
                       return a.feasible;
                     if (!a.feasible)
                       return false;
                     if (byTokens && a.tokensPerSecond != b.tokensPerSecond)
                       return a.tokensPerSecond > b.tokensPerSecond;
                     if (a.stepSeconds != b.stepSeconds)
                       return a.stepSeconds < b.stepSeconds;
                     if (a.communicationSeconds != b.communicationSeconds)
                       return a.communicationSeconds < b.communicationSeconds;
                     if (a.microbatches != b.microbatches)
                       return a.microbatches < b.microbatches;
                     if (a.virtualStages != b.virtualStages)
                       return a.virtualStages < b.virtualStages;
                     return !a.collectiveMatmul && b.collectiveMatmul;
                   });

  // Each family's fate: its best feasible candidate against the chosen
  // one, or the reason its candidates were refused.
  std::map<std::string, std::vector<const PlanCandidate *>> families;
  for (const PlanCandidate &c : plan.candidates)
    families[c.family()].push_back(&c);
  const PlanCandidate *best = plan.best();
  for (const auto &[family, members] : families) {
    const PlanCandidate *first = members.front();
    if (best && first == best)
      continue;
    if (first->feasible) {
      double comm = first->exposedCommunicationSeconds;
      double bubble = first->bubbleSeconds;
      std::string cause = comm + bubble <= best->exposedCommunicationSeconds +
                                               best->bubbleSeconds
                              ? "compute"
                          : comm >= bubble ? "communication"
                                           : "pipeline bubble";
      if (byTokens) {
        plan.rejected.push_back(llvm::formatv(
            "{0}: best {1} at {2:f0} tokens/s (batch {3}, {4:f3} ms a step), "
            "{5:f1}% fewer ({6}: {7:f3} ms exposed communication, {8:f3} ms "
            "bubble)",
            family, first->meshString(), first->tokensPerSecond, first->batch,
            first->stepSeconds * 1e3,
            100 * (1 - first->tokensPerSecond / best->tokensPerSecond), cause,
            comm * 1e3, bubble * 1e3));
        continue;
      }
      plan.rejected.push_back(llvm::formatv(
          "{0}: best {1} at {2:f3} ms, {3:f1}% slower ({4}: {5:f3} ms "
          "exposed communication, {6:f3} ms bubble)",
          family, first->meshString(), first->stepSeconds * 1e3,
          100 * (first->stepSeconds / best->stepSeconds - 1), cause, comm * 1e3,
          bubble * 1e3));
      continue;
    }
    // The reason most of its candidates were refused.
    std::map<std::string, int> reasons;
    for (const PlanCandidate *c : members)
      ++reasons[c->reason];
    auto common = std::max_element(
        reasons.begin(), reasons.end(),
        [](const auto &a, const auto &b) { return a.second < b.second; });
    plan.rejected.push_back(family + ": " + common->first);
  }
  return plan;
}

std::string mlir::partita::describePlan(const Plan &plan,
                                        const ClusterModel &cluster) {
  const PlanRequest &request = plan.request;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv(
      "plan for {0} devices on {1} ({2} x {3}), objective {4}, {5} per "
      "device ({6} kept in reserve)\n",
      request.devices, cluster.name, cluster.nodes, cluster.devicesPerNode,
      ::partita::optionName(request.objective),
      gigabytes(plan.deviceMemoryBytes), gigabytes(plan.reserveBytes));
  // decode-throughput: each candidate's batch and tokens per second too.
  bool serving = request.objective == PlanObjective::DecodeThroughput;
  os << llvm::formatv("{0,-18} {1,-9} {2,3} {3,3} {4,4} {5,10} {6,10} {7,10} "
                      "{8,10} {9,10}",
                      "mesh", "sp-mode", "mb", "vs", "cmm", "step ms",
                      "compute", "exposed", "bubble", "memory");
  if (serving)
    os << llvm::formatv(" {0,6} {1,10}", "batch", "tokens/s");
  os << "\n";
  int shown = 0;
  for (const PlanCandidate &c : plan.candidates) {
    if (!c.feasible || shown++ == 10)
      break;
    os << llvm::formatv(
        "{0,-18} {1,-9} {2,3} {3,3} {4,4} {5,10:f3} {6,10:f3} {7,10:f3} "
        "{8,10:f3} {9,10}",
        c.meshString(), ::partita::optionName(c.spMode), c.microbatches,
        c.virtualStages, c.collectiveMatmul ? "on" : "off", c.stepSeconds * 1e3,
        c.computeSeconds * 1e3, c.exposedCommunicationSeconds * 1e3,
        c.bubbleSeconds * 1e3, gigabytes(c.memoryBytes));
    if (serving)
      os << llvm::formatv(" {0,6} {1,10:f0}", c.batch, c.tokensPerSecond);
    os << "\n";
  }
  if (shown == 0)
    os << "(no plan fits)\n";
  os << "rejected:\n";
  for (const std::string &line : plan.rejected)
    os << "  " << line << "\n";
  return text;
}

namespace {

llvm::json::Object candidateJson(const PlanCandidate &c) {
  llvm::json::Object mesh;
  for (auto [name, size] :
       {std::pair{"dp", c.dp}, std::pair{"pp", c.pp}, std::pair{"ep", c.ep},
        std::pair{"sp", c.sp}, std::pair{"tp", c.tp}})
    if (size > 1)
      mesh[name] = size;
  llvm::json::Object object{{"mesh", std::move(mesh)},
                            {"flags", c.flags()},
                            {"sp_mode", ::partita::optionName(c.spMode)},
                            {"microbatches", c.microbatches},
                            {"virtual_stages", c.virtualStages},
                            {"collective_matmul", c.collectiveMatmul},
                            {"feasible", c.feasible}};
  if (c.ep > 1)
    object["expert_dispatch"] = c.dispatch;
  if (!c.feasible)
    object["reason"] = c.reason;
  // A candidate refused before it was costed has no predictions; one
  // refused for memory has them all (the shortfall is among them).
  if (!c.feasible && !llvm::StringRef(c.reason).starts_with("memory:"))
    return object;
  for (auto [key, value] :
       {std::pair{"step_seconds", c.stepSeconds},
        std::pair{"compute_seconds", c.computeSeconds},
        std::pair{"communication_seconds", c.communicationSeconds},
        std::pair{"exposed_communication_seconds",
                  c.exposedCommunicationSeconds},
        std::pair{"bubble_seconds", c.bubbleSeconds},
        std::pair{"weight_bytes", c.weightBytes},
        std::pair{"activation_bytes", c.activationBytes},
        std::pair{"output_bytes", c.outputBytes},
        std::pair{"kv_cache_bytes", c.keyValueCacheBytes},
        std::pair{"memory_bytes", c.memoryBytes},
        std::pair{"tokens_per_second", c.tokensPerSecond}})
    object[key] = value;
  object["batch"] = c.batch;
  return object;
}

} // namespace

llvm::json::Object mlir::partita::planToJson(const Plan &plan,
                                             std::optional<size_t> limit) {
  llvm::json::Array listed, rejected;
  for (const PlanCandidate &c : plan.candidates) {
    if (limit && (!c.feasible || listed.size() == *limit))
      break;
    listed.push_back(candidateJson(c));
  }
  for (const std::string &line : plan.rejected)
    rejected.push_back(line);
  const ModelShape &shape = plan.shape;
  llvm::json::Object object{
      {"devices", plan.request.devices},
      {"objective", ::partita::optionName(plan.request.objective)},
      {"shape",
       llvm::json::Object{
           {"layers", shape.layers},
           {"heads", shape.heads},
           {"kv_heads", shape.kvHeads},
           {"batch", shape.batch},
           {"sequence", shape.sequence},
           {"tensor_split_weight_bytes", shape.splitWeightBytes},
           {"replicated_weight_bytes", shape.replicatedWeightBytes},
           {"outside_layers_weight_bytes",
            shape.splitOutsideWeightBytes + shape.replicatedOutsideWeightBytes},
           {"output_bytes", shape.outputBytes},
           {"kv_cache_bytes", shape.keyValueCacheBytes}}},
      {"device_memory_bytes", plan.deviceMemoryBytes},
      {"reserve_bytes", plan.reserveBytes},
      {"searched", static_cast<int64_t>(plan.candidates.size())},
      {"candidates", std::move(listed)},
      {"rejected", std::move(rejected)}};
  if (const PlanCandidate *chosen = plan.best())
    object["chosen"] = candidateJson(*chosen);
  if (plan.compiledWeightBytes && plan.compiledActivationBytes)
    object["compiled"] = llvm::json::Object{
        {"weight_bytes", *plan.compiledWeightBytes},
        {"peak_activation_bytes", *plan.compiledActivationBytes},
        {"output_bytes", plan.compiledOutputBytes.value_or(0)}};
  return object;
}
