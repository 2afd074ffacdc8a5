//===- Annotate.cpp - the shardings a strategy decides --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The Megatron strategy pins the weights of the roles the model-role
// analysis finds (projections into attention and an MLP's first matmuls
// column-parallel, the matmuls after them row-parallel, embedding and LM
// head vocab-parallel); the matmul weights no role places and propagation
// leaves whole are split as the cost model's estimate of the whole step
// prefers (searchSplits); every other sharding comes from propagation.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Analysis/ModelRoles.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>
#include <map>

namespace mlir::partita {
#define GEN_PASS_DEF_ANNOTATEPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

constexpr llvm::StringLiteral kMeshName = "mesh";

nn::ConstantOp getConstant(Value value) {
  return value ? value.getDefiningOp<nn::ConstantOp>() : nn::ConstantOp();
}

/// How a person would name a weight: its initializer's name.
std::string weightName(nn::ConstantOp constant) {
  if (StringRef name = nn::getWeightName(constant.getValue()); !name.empty())
    return name.str();
  if (auto name = dyn_cast<NameLoc>(constant.getLoc()))
    return name.getName().str();
  return "";
}

std::string opName(Operation *op) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return "'" + name.getName().str() + "'";
  return op->getName().getStringRef().str();
}

/// The name of the axis of `mesh` with `role`; empty when none has it.
StringRef axisWithRole(MeshOp mesh, AxisRole role) {
  return mesh.getAxisWithRole(role).value_or(StringRef());
}

/// How Megatron splits the weight of a matmul of a role over tp: on its
/// output features (dimension -1, column parallel) or its input features
/// (-2, row parallel), and what the role is called in diagnostics.
struct MatmulSplit {
  int64_t dim;
  StringRef what;
};

std::optional<MatmulSplit> getMegatronSplit(ModelRole role) {
  switch (role) {
  case ModelRole::AttentionQuery:
  case ModelRole::AttentionKey:
  case ModelRole::AttentionValue:
  case ModelRole::AttentionFusedProjection:
    return MatmulSplit{-1, "attention projection"};
  case ModelRole::AttentionOutput:
    return MatmulSplit{-2, "attention output projection"};
  case ModelRole::MlpUp:
  case ModelRole::MlpGate:
  case ModelRole::MlpFusedGateUp:
    return MatmulSplit{-1, "MLP up projection"};
  case ModelRole::MlpDown:
    return MatmulSplit{-2, "MLP down projection"};
  case ModelRole::LmHead:
    return MatmulSplit{-1, "LM head"};
  case ModelRole::Embedding:
  case ModelRole::Norm:
    return std::nullopt;
  }
  llvm_unreachable("unknown model role");
}

/// Whether argument `i` of `func` is a batch the strategy splits: not a
/// KV cache (it takes the sharding of what is written to it), a training
/// parameter or optimizer state (weights, which take their uses'
/// shardings), or the cache slot (one for the whole batch).
bool isBatchArgument(func::FuncOp func, unsigned i) {
  return !func.getArgAttr(i, nn::NNDialect::kKvCacheAttrName) &&
         !func.getArgAttr(i, nn::NNDialect::kParameterAttrName) &&
         !func.getArgAttr(i, nn::NNDialect::kOptimizerStateAttrName) &&
         !func.getArgAttr(i, nn::NNDialect::kCachePositionAttrName);
}

/// Whether result `i` of `func` is a batch the strategy splits: not a KV
/// cache, a parameter's update or a gradient.
bool isBatchResult(func::FuncOp func, unsigned i) {
  return !func.getResultAttr(i, nn::NNDialect::kKvCacheAttrName) &&
         !func.getResultAttr(i, nn::NNDialect::kUpdateAttrName) &&
         !func.getResultAttr(i, nn::NNDialect::kGradientAttrName);
}

class Megatron {
public:
  Megatron(MeshOp mesh, SequenceMode sequence, int64_t vocabDivisibleBy,
           bool expertDispatch, SmallVector<Attribute> &remarks)
      : mesh(mesh), tpAxis(axisWithRole(mesh, AxisRole::Tensor)),
        dpAxis(axisWithRole(mesh, AxisRole::Data)),
        spAxis(axisWithRole(mesh, AxisRole::Sequence)),
        epAxis(axisWithRole(mesh, AxisRole::Expert)),
        tp(mesh.getRoleSize(AxisRole::Tensor)),
        dp(mesh.getRoleSize(AxisRole::Data)),
        sp(mesh.getRoleSize(AxisRole::Sequence)), sequence(sequence),
        vocabMultiple(vocabDivisibleBy * tp), expertDispatch(expertDispatch),
        remarks(remarks) {
    if (dp > 1)
      batchAxes.push_back(dpAxis);
  }
  LogicalResult run(func::FuncOp func);

private:
  /// The axis and size that split the sequence, if any.
  StringRef sequenceAxis() const {
    return sequence == SequenceMode::Megatron ? tpAxis : spAxis;
  }
  /// How many ways attention heads are split: tp, times sp for Ulysses.
  int64_t headSplit() const {
    return tp * (sequence == SequenceMode::Ulysses ? sp : 1);
  }
  /// A sharding with the batch axes on dimension 0 and `axes` on `dim`.
  ShardingAttr batchAnd(RankedTensorType type, int64_t dim,
                        ArrayRef<StringRef> axes);
  LogicalResult annotateSequence(func::FuncOp func);
  LogicalResult ulyssesAttention(Operation *attention);
  LogicalResult planRing(func::FuncOp func);

  LogicalResult splitSegments(nn::SplitOp split);
  static void slicesAsSplit(nn::MatmulOp matmul);
  void groupKeyValueCaches(func::FuncOp func);
  void repeatKeyValueHeads(nn::AttentionOp attention);
  /// Pins operand `index` of `user` to the sharding that splits dimension
  /// `dim` over `axis`; fails with an error naming the value if the split
  /// is uneven.
  LogicalResult pin(Operation *user, unsigned index, int64_t dim,
                    StringRef axis, StringRef role);
  /// Why pin would refuse that split; empty when it would not.
  std::string splitRefusal(Operation *user, unsigned index, int64_t dim,
                           StringRef axis, StringRef role);
  /// Puts a strategy annotation splitting operand `index` of `user` on
  /// `dim` over `axis` (replicated without a `dim`) between it and its
  /// producer.
  AnnotateOp annotateOperand(Operation *user, unsigned index,
                             std::optional<int64_t> dim, StringRef axis);
  /// The same with the axes of every dimension given.
  AnnotateOp annotateOperand(Operation *user, unsigned index,
                             ArrayRef<SmallVector<StringRef>> dims);
  /// Splits, by the cost model, the matmul weights no role placed and
  /// propagation left whole (searchSplits' comment).
  LogicalResult searchSplits(func::FuncOp func);
  LogicalResult annotateTensorParallel(func::FuncOp func);
  LogicalResult annotateBatch(func::FuncOp func);
  /// Adds ep to the batch axes where the experts' tokens may travel
  /// (expert-dispatch) and dp times ep divides every batch; else remarks
  /// why not.
  void batchOverExperts(func::FuncOp func);
  /// Splits each mixture of experts' experts over ep, and with tp each
  /// expert's features where its activation allows (expert tensor
  /// parallelism).
  LogicalResult annotateExperts(func::FuncOp func);

  /// A vocabulary of `size` rounded up to a multiple of vocabMultiple.
  int64_t paddedVocab(int64_t size) const {
    return (size + vocabMultiple - 1) / vocabMultiple * vocabMultiple;
  }
  /// `constant` extended with zeros along `dim` to `size`: one new
  /// constant per weight, dimension and size, so that an embedding table
  /// and the LM head tied to it share their padded weight.
  Value padConstant(nn::ConstantOp constant, int64_t dim, int64_t size);
  /// Pads the LM head `matmul`'s columns to `padded` and slices its result
  /// back. Returns why it cannot (its weight or bias is not a constant);
  /// empty when done.
  std::string padLmHead(nn::MatmulOp matmul, int64_t padded);
  /// Pads `embedding`'s table to `padded` rows, its ids remapped so that
  /// the ids outside the vocabulary stay outside. Returns why it cannot;
  /// empty when done.
  std::string padEmbedding(nn::EmbeddingOp embedding, int64_t padded);
  /// Records that a vocabulary of `size` of `what` stays whole and why.
  void remarkWholeVocabulary(Operation *op, StringRef what, int64_t size,
                             StringRef why);

  MeshOp mesh;
  /// The axes of the tensor, data, sequence and expert roles; empty when
  /// none has it.
  StringRef tpAxis, dpAxis, spAxis, epAxis;
  int64_t tp, dp, sp;
  /// The axes that split the batch, major first: dp, and ep when tokens
  /// travel to their experts.
  SmallVector<StringRef> batchAxes;
  SequenceMode sequence;
  /// Vocabularies are padded to multiples of this (Megatron-LM's
  /// make_vocab_size_divisible_by times tp).
  int64_t vocabMultiple;
  bool expertDispatch;
  SmallVector<Attribute> &remarks;
  /// (user, operand) pairs pinned already.
  llvm::DenseSet<std::pair<Operation *, unsigned>> pinned;
  /// The padded copies padConstant made, by (constant, dim, size).
  std::map<std::tuple<Operation *, int64_t, int64_t>, Value> paddedConstants;
};

std::string Megatron::splitRefusal(Operation *user, unsigned index, int64_t dim,
                                   StringRef axis, StringRef role) {
  Value value = user->getOperand(index);
  auto type = cast<RankedTensorType>(value.getType());
  if (dim < 0)
    dim += type.getRank();
  int64_t size = *mesh.getAxisSize(axis);
  std::string text;
  llvm::raw_string_ostream os(text);
  if (type.getDimSize(dim) % size != 0) {
    std::string what =
        "operand " + std::to_string(index) + " of " + opName(user);
    if (auto constant = getConstant(value))
      if (std::string name = weightName(constant); !name.empty())
        what = "weight '" + name + "'";
    if (auto arg = dyn_cast<BlockArgument>(value))
      if (auto name =
              cast<func::FuncOp>(arg.getOwner()->getParentOp())
                  .getArgAttrOfType<StringAttr>(
                      arg.getArgNumber(), nn::NNDialect::kParameterAttrName))
        what = "parameter '" + name.str() + "'";
    os << "cannot split " << what << " (" << role << ") over " << axis << "="
       << size << ": dimension " << dim << " has size " << type.getDimSize(dim)
       << ", which " << axis << " does not divide";
    return text;
  }
  // A packed weight's rows split by whole blocks, and where four-bit zero
  // points pack two blocks to a byte, by whole bytes.
  if (auto dequantize = value.getDefiningOp<nn::DequantizeOp>();
      dequantize && type.getRank() == 2 && dim == 0) {
    int64_t rows = type.getDimSize(0), blockSize = dequantize.getBlockSize();
    int64_t blocks = dequantize.getPacked().getType().getDimSize(1);
    int64_t perUnit = dequantize.getZeroPoints() ? 8 / dequantize.getBits() : 1;
    nn::ConstantOp packed = getConstant(dequantize.getPacked());
    std::string name = packed ? weightName(packed) : "";
    std::string what = "int" + std::to_string(dequantize.getBits()) +
                       " weight " +
                       (name.empty() ? "of " + opName(user) : "'" + name + "'");
    if (rows != blocks * blockSize)
      os << "cannot split " << what << " (" << role << ") over " << axis << "="
         << size << ": its " << rows << " rows end in a short block of "
         << rows % blockSize << " (block_size " << blockSize
         << "), and a split may not cut a block";
    else if (blocks % (perUnit * size) != 0)
      os << "cannot split " << what << " (" << role << ") over " << axis << "="
         << size << ": its " << blocks << " blocks of " << blockSize
         << " rows do not divide into " << size << " parts of whole blocks"
         << (perUnit > 1 ? " and whole bytes of zero points (2 blocks "
                           "to a byte)"
                         : "");
  }
  return text;
}

AnnotateOp Megatron::annotateOperand(Operation *user, unsigned index,
                                     std::optional<int64_t> dim,
                                     StringRef axis) {
  auto type = cast<RankedTensorType>(user->getOperand(index).getType());
  SmallVector<SmallVector<StringRef>> dims(type.getRank());
  if (dim)
    dims[*dim < 0 ? *dim + type.getRank() : *dim].push_back(axis);
  return annotateOperand(user, index, dims);
}

AnnotateOp Megatron::annotateOperand(Operation *user, unsigned index,
                                     ArrayRef<SmallVector<StringRef>> dims) {
  Value value = user->getOperand(index);
  auto sharding =
      ShardingAttr::get(user->getContext(), mesh.getSymName(), dims);
  OpBuilder b(user);
  if (Operation *def = value.getDefiningOp())
    b.setInsertionPointAfter(def);
  auto annotate = AnnotateOp::create(b, user->getLoc(), value, sharding);
  annotate->setAttr(kStrategyAttr, b.getUnitAttr());
  user->setOperand(index, annotate);
  return annotate;
}

LogicalResult Megatron::pin(Operation *user, unsigned index, int64_t dim,
                            StringRef axis, StringRef role) {
  if (!pinned.insert({user, index}).second)
    return success();
  if (std::string why = splitRefusal(user, index, dim, axis, role);
      !why.empty())
    return user->emitError() << why;
  annotateOperand(user, index, dim, axis);
  return success();
}

/// `value` with `count` heads along the attention heads dimension, head h
/// being head h / group of `value` (nn.gather). The index constant is made
/// once into `indices` and reused by later calls given it.
Value repeatHeads(OpBuilder &b, Location loc, Value value, int64_t count,
                  int64_t group, Value &indices) {
  if (!indices) {
    SmallVector<int64_t> which(count);
    for (int64_t h = 0; h < count; ++h)
      which[h] = h / group;
    auto indexType = RankedTensorType::get({count}, b.getI64Type());
    indices = nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(indexType, ArrayRef(which))));
  }
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[kAttentionHeadsDim] = count;
  return nn::GatherOp::create(b, loc, type.clone(shape), value, indices,
                              kAttentionHeadsDim);
}

/// A constant like `constant` whose dimension `dim` (the last by default)
/// is permuted: index `j` of the result is index `permutation[j]` of the
/// original.
Value permuteColumns(OpBuilder &b, nn::ConstantOp constant,
                     ArrayRef<int64_t> permutation, StringRef suffix,
                     std::optional<int64_t> dim = std::nullopt) {
  auto type = cast<RankedTensorType>(constant.getType());
  std::string name = weightName(constant);
  ElementsAttr value = permuteAlongDim(
      constant.getValue(), dim.value_or(type.getRank() - 1), permutation,
      (name.empty() ? "weight" : name) + suffix.str());
  if (value == constant.getValue())
    return constant; // A splat: every column is the same.
  return nn::ConstantOp::create(b, constant.getLoc(), value);
}

/// `weight` (a matmul's `[k, n]` constant, or the nn.dequantize of a packed
/// one) with its columns permuted; null when it is neither. A packed
/// weight keeps its columns in dimension 0 of every operand.
Value permuteWeightColumns(OpBuilder &b, Value weight,
                           ArrayRef<int64_t> permutation, StringRef suffix) {
  if (nn::ConstantOp constant = getConstant(weight))
    return permuteColumns(b, constant, permutation, suffix);
  auto dequantize = weight.getDefiningOp<nn::DequantizeOp>();
  if (!dequantize || !llvm::all_of(dequantize->getOperands(), [](Value v) {
        return static_cast<bool>(getConstant(v));
      }))
    return {};
  SmallVector<Value> operands;
  for (Value operand : dequantize->getOperands())
    operands.push_back(
        permuteColumns(b, getConstant(operand), permutation, suffix, 0));
  return nn::DequantizeOp::create(
      b, dequantize.getLoc(), dequantize.getType(), operands[0], operands[1],
      dequantize.getZeroPoints() ? operands[2] : Value(),
      dequantize.getBitsAttr(), dequantize.getBlockSizeAttr());
}

LogicalResult Megatron::splitSegments(nn::SplitOp split) {
  auto matmul = split.getInput().getDefiningOp<nn::MatmulOp>();
  if (!matmul || !matmul->hasOneUse())
    return success();
  auto inType = cast<RankedTensorType>(split.getInput().getType());
  int64_t rank = inType.getRank();
  if (static_cast<int64_t>(split.getAxis()) != rank - 1)
    return success();
  nn::ConstantOp bias = getConstant(matmul.getBias());
  auto dequantize = matmul.getRhs().getDefiningOp<nn::DequantizeOp>();
  if ((!getConstant(matmul.getRhs()) &&
       !(dequantize && dequantize->hasOneUse())) ||
      (matmul.getBias() && !bias) || matmul.getRhs().getType().getRank() != 2)
    return success();
  // The segments may differ in size (a grouped-query projection's query,
  // key and value); each must split evenly.
  SmallVector<int64_t> pieces;
  for (Value result : split.getResults())
    pieces.push_back(
        cast<RankedTensorType>(result.getType()).getShape().back());
  if (pieces.size() < 2 ||
      llvm::any_of(pieces, [&](int64_t piece) { return piece % tp != 0; }))
    return success();
  int64_t total = inType.getShape().back();

  // Rank r's block of the new weight holds its part of every segment, in
  // order: column r * (total / tp) + offset_i + c is column start_i + r *
  // block_i + c of the old one, block_i = piece_i / tp.
  int64_t width = total / tp;
  SmallVector<int64_t> permutation(total);
  for (int64_t r = 0; r < tp; ++r)
    for (int64_t i = 0, start = 0, offset = 0;
         i < static_cast<int64_t>(pieces.size()); ++i) {
      int64_t block = pieces[i] / tp;
      for (int64_t c = 0; c < block; ++c)
        permutation[r * width + offset + c] = start + r * block + c;
      start += pieces[i];
      offset += block;
    }
  OpBuilder b(matmul);
  std::string suffix = ".segments_tp" + std::to_string(tp);
  Value newWeight =
      permuteWeightColumns(b, matmul.getRhs(), permutation, suffix);
  if (!newWeight)
    return success();
  Value newBias = bias ? permuteColumns(b, bias, permutation, suffix) : Value();
  Location loc = matmul.getLoc();
  auto fused =
      nn::MatmulOp::create(b, loc, inType, matmul.getLhs(), newWeight, newBias);

  // [..., total] -> [..., tp, total / tp], split each rank's block into
  // its segments, and read each back as [..., piece].
  SmallVector<int64_t> grouped(inType.getShape().drop_back());
  grouped.append({tp, width});
  Value view = nn::ReshapeOp::create(b, loc, inType.clone(grouped), fused);
  SmallVector<Type> pieceTypes;
  for (int64_t piece : pieces) {
    SmallVector<int64_t> shape(grouped);
    shape.back() = piece / tp;
    pieceTypes.push_back(inType.clone(shape));
  }
  auto parts =
      nn::SplitOp::create(b, loc, pieceTypes, view, static_cast<int64_t>(rank));
  for (auto [old, now] : llvm::zip(split.getResults(), parts.getResults()))
    old.replaceAllUsesWith(
        nn::ReshapeOp::create(b, loc, old.getType(), now).getResult());
  Value oldWeight = matmul.getRhs();
  split.erase();
  matmul.erase();
  SmallVector<Operation *> dead = {oldWeight.getDefiningOp()};
  if (dequantize && dequantize->use_empty())
    for (Value operand : dequantize->getOperands())
      dead.push_back(operand.getDefiningOp());
  if (bias)
    dead.push_back(bias);
  for (Operation *op : dead)
    if (op && op->use_empty())
      op->erase();
  return success();
}

/// A KV cache of fewer key/value heads than the heads are split (GQA at
/// tp above the key/value heads), written by a cache write, becomes a cache
/// of one slot per rank: slot s holds key/value head s / (split / kvHeads),
/// the head of the group that rank's query heads belong to, and is split
/// over tp on the heads. The write writes the new keys or values gathered
/// into slots; attention that reads the written cache (a decode step) reads
/// the slots as key/value heads, one per rank, which is the right head for
/// each query head. Each rank holds one head of every cache instead of all
/// of them. Applies where the split is a multiple of the key/value heads;
/// otherwise the cache stays whole on every rank (repeatKeyValueHeads).
void Megatron::groupKeyValueCaches(func::FuncOp func) {
  int64_t split = headSplit();
  SmallVector<nn::KvCacheWriteOp> writes;
  func.walk([&](nn::KvCacheWriteOp write) { writes.push_back(write); });
  bool changed = false;
  for (nn::KvCacheWriteOp write : writes) {
    auto cache = dyn_cast<BlockArgument>(write.getCache());
    auto type = cast<RankedTensorType>(write.getCache().getType());
    if (!cache || cache.getOwner() != &func.getBody().front() ||
        !func.getArgAttr(cache.getArgNumber(),
                         nn::NNDialect::kKvCacheAttrName) ||
        type.getRank() != 4 || write.getAxis() == kAttentionHeadsDim)
      continue;
    int64_t kvHeads = type.getDimSize(kAttentionHeadsDim);
    // The query heads of the attention that reads the new keys or values,
    // or the written cache.
    int64_t heads = 0;
    for (Value value : {write.getUpdate(), write.getResult()})
      for (Operation *user : value.getUsers())
        if (auto attention = dyn_cast<nn::AttentionOp>(user))
          heads = cast<RankedTensorType>(attention.getQuery().getType())
                      .getDimSize(kAttentionHeadsDim);
    if (heads == 0 || kvHeads % split == 0 || split % kvHeads != 0 ||
        heads % split != 0)
      continue;
    OpBuilder b(write);
    Value indices;
    Value slots = repeatHeads(b, write.getLoc(), write.getUpdate(), split,
                              split / kvHeads, indices);
    SmallVector<int64_t> cacheShape(type.getShape());
    cacheShape[kAttentionHeadsDim] = split;
    auto slotted = type.clone(cacheShape);
    cache.setType(slotted);
    write.getResult().setType(slotted);
    write->setOperand(1, slots);
    // The cache never moves: each rank holds its slot, batch over dp.
    OpBuilder atStart(&func.getBody().front(), func.getBody().front().begin());
    auto annotate =
        AnnotateOp::create(atStart, cache.getLoc(), cache,
                           batchAnd(slotted, kAttentionHeadsDim, {tpAxis}));
    annotate->setAttr(kStrategyAttr, b.getUnitAttr());
    annotate->setAttr(kPriorityAttr, b.getI64IntegerAttr(kEdgePriority));
    write->setOperand(0, annotate);
    // The returned cache is held as the argument is, whatever the attention
    // that reads it chooses (a fused projection may keep it whole).
    b.setInsertionPointAfter(write);
    auto returned =
        AnnotateOp::create(b, write.getLoc(), write.getResult(),
                           batchAnd(slotted, kAttentionHeadsDim, {tpAxis}));
    returned->setAttr(kStrategyAttr, b.getUnitAttr());
    returned->setAttr(kPriorityAttr, b.getI64IntegerAttr(kEdgePriority));
    write.getResult().replaceUsesWithIf(returned, [&](OpOperand &use) {
      return isa<func::ReturnOp>(use.getOwner());
    });
    changed = true;
    std::string name = "argument " + std::to_string(cache.getArgNumber());
    if (auto onnxName = func.getArgAttrOfType<StringAttr>(cache.getArgNumber(),
                                                          "onnx.name"))
      name = onnxName.getValue().str();
    remarks.push_back(
        StringAttr::get(func.getContext(),
                        "KV cache '" + name + "': " + std::to_string(kvHeads) +
                            " key/value heads, fewer than " + tpAxis.str() +
                            "=" + std::to_string(split) +
                            "; each rank holds the one its query heads use"));
  }
  if (!changed)
    return;
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  func.setFunctionType(FunctionType::get(
      func.getContext(), func.getBody().front().getArgumentTypes(),
      ret.getOperandTypes()));
}

void Megatron::repeatKeyValueHeads(nn::AttentionOp attention) {
  auto query = cast<RankedTensorType>(attention.getQuery().getType());
  auto key = cast<RankedTensorType>(attention.getKey().getType());
  int64_t heads = query.getDimSize(kAttentionHeadsDim),
          kvHeads = key.getDimSize(kAttentionHeadsDim);
  int64_t split = headSplit();
  if (kvHeads == heads || kvHeads % split == 0 || heads % split != 0)
    return;
  OpBuilder b(attention);
  Value indices;
  for (unsigned operand : {1u, 2u})
    attention->setOperand(operand,
                          repeatHeads(b, attention.getLoc(),
                                      attention->getOperand(operand), heads,
                                      heads / kvHeads, indices));
  remarks.push_back(StringAttr::get(
      attention.getContext(),
      "attention " + opName(attention) + ": " + std::to_string(kvHeads) +
          " key/value heads do not divide " +
          (split == tp ? tpAxis.str() + "=" + std::to_string(tp)
                       : tpAxis.str() + "×" + spAxis.str() + "=" +
                             std::to_string(split)) +
          "; the key/value projections are replicated and each rank "
          "repeats the key/value heads its " +
          std::to_string(heads / split) + " query heads use"));
}

/// A fused projection whose segments are taken by slices (torch's legacy
/// exporter writes `qkv[..., a:b]` and `chunk` so): where every use of the
/// matmul's result is a slice of a range of its last dimension and the
/// ranges tile it, the slices become one nn.split, whose segments
/// splitSegments then splits over tp.
void Megatron::slicesAsSplit(nn::MatmulOp matmul) {
  auto type = cast<RankedTensorType>(matmul.getType());
  int64_t rank = type.getRank(), width = type.getDimSize(rank - 1);
  std::map<int64_t, SmallVector<nn::SliceOp>> byStart;
  std::map<int64_t, int64_t> limitOf;
  for (Operation *user : matmul->getUsers()) {
    auto slice = dyn_cast<nn::SliceOp>(user);
    if (!slice)
      return;
    ArrayRef<int64_t> start = slice.getStart(), limit = slice.getLimit(),
                      stride = slice.getStride();
    for (int64_t d = 0; d < rank; ++d) {
      bool whole = start[d] == 0 && limit[d] == type.getDimSize(d);
      if (stride[d] != 1 || (d != rank - 1 && !whole))
        return;
    }
    int64_t first = start[rank - 1], last = limit[rank - 1];
    if (last <= first)
      return;
    auto [it, inserted] = limitOf.try_emplace(first, last);
    if (!inserted && it->second != last)
      return;
    byStart[first].push_back(slice);
  }
  if (byStart.size() < 2)
    return;
  int64_t next = 0;
  SmallVector<Type> pieces;
  for (auto [first, last] : limitOf) {
    if (first != next)
      return;
    SmallVector<int64_t> shape(type.getShape());
    shape[rank - 1] = last - first;
    pieces.push_back(type.clone(shape));
    next = last;
  }
  if (next != width)
    return;
  OpBuilder b(matmul->getContext());
  b.setInsertionPointAfter(matmul);
  auto split = nn::SplitOp::create(b, matmul.getLoc(), pieces,
                                   matmul.getResult(), rank - 1);
  for (auto [index, entry] : llvm::enumerate(byStart))
    for (nn::SliceOp slice : entry.second) {
      slice.getResult().replaceAllUsesWith(split.getResult(index));
      slice.erase();
    }
}

LogicalResult Megatron::annotateTensorParallel(func::FuncOp func) {
  SmallVector<nn::MatmulOp> matmuls;
  func.walk([&](nn::MatmulOp matmul) { matmuls.push_back(matmul); });
  for (nn::MatmulOp matmul : matmuls)
    slicesAsSplit(matmul);
  SmallVector<nn::SplitOp> splits;
  func.walk([&](nn::SplitOp split) { splits.push_back(split); });
  for (nn::SplitOp split : splits)
    if (failed(splitSegments(split)))
      return failure();
  // The roles of the rewritten model: the segments permuted, key/value heads
  // repeated (their projections then feed a gather and stay replicated).
  ModelRoles roles(func);
  for (auto [op, role] : roles.getEntries()) {
    if (std::optional<MatmulSplit> split = getMegatronSplit(role)) {
      // An LM head whose vocabulary is not a multiple of tp (GPT-2's
      // 50257) is padded to one; the other projections' sizes are the
      // model's and must divide.
      if (role == ModelRole::LmHead) {
        auto matmul = cast<nn::MatmulOp>(op);
        int64_t vocab = matmul.getRhs().getType().getShape().back();
        if (int64_t padded = paddedVocab(vocab); padded != vocab) {
          if (std::string why = padLmHead(matmul, padded); !why.empty()) {
            remarkWholeVocabulary(op, "LM head", vocab, why);
            continue;
          }
        }
      }
      if (failed(pin(op, 1, split->dim, tpAxis, split->what)))
        return failure();
      continue;
    }
    if (role != ModelRole::Embedding)
      continue;
    auto embedding = cast<nn::EmbeddingOp>(op);
    int64_t rows = embedding.getTable().getType().getDimSize(0);
    // A table with fewer rows than a multiple (BERT's two token types)
    // stays whole on every rank: it is small, and padding would give ranks
    // mostly zeros.
    if (rows < vocabMultiple) {
      remarkWholeVocabulary(op, "embedding", rows,
                            "it has fewer rows than that");
      continue;
    }
    if (int64_t padded = paddedVocab(rows); padded != rows) {
      if (std::string why = padEmbedding(embedding, padded); !why.empty()) {
        remarkWholeVocabulary(op, "embedding", rows, why);
        continue;
      }
    }
    if (failed(pin(embedding, 0, 0, tpAxis, "vocab-parallel embedding")))
      return failure();
  }
  return success();
}

void Megatron::remarkWholeVocabulary(Operation *op, StringRef what,
                                     int64_t size, StringRef why) {
  remarks.push_back(StringAttr::get(
      op->getContext(),
      what + " " + opName(op) + ": a vocabulary of " + std::to_string(size) +
          " is not a multiple of " + std::to_string(vocabMultiple) +
          " and cannot be padded (" + why + "); it is replicated over " +
          tpAxis + "=" + std::to_string(tp)));
}

Value Megatron::padConstant(nn::ConstantOp constant, int64_t dim,
                            int64_t size) {
  auto key = std::make_tuple(constant.getOperation(), dim, size);
  if (auto it = paddedConstants.find(key); it != paddedConstants.end())
    return it->second;
  std::string name = weightName(constant);
  ElementsAttr value = padAlongDim(constant.getValue(), dim, size,
                                   (name.empty() ? "vocabulary" : name) +
                                       ".vocab" + std::to_string(size));
  if (!value)
    return {};
  OpBuilder b(constant);
  b.setInsertionPointAfter(constant);
  Value padded = nn::ConstantOp::create(b, constant.getLoc(), value);
  paddedConstants[key] = padded;
  return padded;
}

/// The constant `value` is, or the constant a transpose of it reads, and
/// the dimension of that constant that `dim` of `value` is.
static std::pair<nn::ConstantOp, int64_t> constantDim(Value value,
                                                      int64_t dim) {
  if (auto transpose = value.getDefiningOp<nn::TransposeOp>())
    return {getConstant(transpose.getInput()), transpose.getPermutation()[dim]};
  return {getConstant(value), dim};
}

/// `value` (a constant or a transpose of one, as constantDim) with
/// dimension `dim` padded to `size` by `padConstant`.
static Value padThrough(OpBuilder &b, Value value, int64_t dim, int64_t size,
                        function_ref<Value(nn::ConstantOp, int64_t)> pad) {
  auto [constant, constantDimension] = constantDim(value, dim);
  Value padded = constant ? pad(constant, constantDimension) : Value();
  auto transpose = value.getDefiningOp<nn::TransposeOp>();
  if (!transpose || !padded)
    return padded;
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return nn::TransposeOp::create(b, transpose.getLoc(), type.clone(shape),
                                 padded, transpose.getPermutationAttr());
}

std::string Megatron::padLmHead(nn::MatmulOp matmul, int64_t padded) {
  int64_t last = matmul.getRhs().getType().getRank() - 1;
  if (!constantDim(matmul.getRhs(), last).first)
    return "its weight is not a constant: a trained parameter or a "
           "quantized weight";
  Value bias = matmul.getBias();
  if (bias && !constantDim(bias, 0).first)
    return "its bias is not a constant";
  auto pad = [&](nn::ConstantOp constant, int64_t dim) {
    return padConstant(constant, dim, padded);
  };
  OpBuilder b(matmul);
  Value rhs = padThrough(b, matmul.getRhs(), last, padded, pad);
  if (bias)
    bias = padThrough(b, bias, 0, padded, pad);
  if (!rhs || (matmul.getBias() && !bias))
    return "its weight is not a float constant";
  matmul.getRhsMutable().assign(rhs);
  if (bias)
    matmul.getBiasMutable().assign(bias);
  // The logits of the real vocabulary: the padded ones never leave.
  auto type = matmul.getType();
  SmallVector<int64_t> shape(type.getShape());
  int64_t vocab = shape.back();
  shape.back() = padded;
  matmul.getResult().setType(type.clone(shape));
  b.setInsertionPointAfter(matmul);
  SmallVector<int64_t> start(type.getRank(), 0), stride(type.getRank(), 1);
  SmallVector<int64_t> limit(shape);
  limit.back() = vocab;
  auto slice = nn::SliceOp::create(b, matmul.getLoc(), type, matmul, start,
                                   limit, stride);
  matmul.getResult().replaceAllUsesExcept(slice, slice);
  return "";
}

std::string Megatron::padEmbedding(nn::EmbeddingOp embedding, int64_t padded) {
  nn::ConstantOp table = getConstant(embedding.getTable());
  if (!table)
    return "its table is not a constant: a trained parameter";
  Value paddedTable = padConstant(table, 0, padded);
  if (!paddedTable)
    return "its table is not a float constant";
  // An id the vocabulary does not hold must stay outside the padded
  // table, and a negative one must still count from the vocabulary's end:
  // ids in [rows, padded) move up by the padding, ids in [-padded, 0) down
  // by it (id - pad + padded = id + rows), so the lookup refuses or finds
  // what the unpadded one did. Ids outside [-padded, padded) are out of
  // range already and keep their value (the error names the user's id).
  int64_t rows = embedding.getTable().getType().getDimSize(0);
  OpBuilder b(embedding);
  Location loc = embedding.getLoc();
  Value ids = embedding.getIndices();
  auto idType = cast<RankedTensorType>(ids.getType());
  Value padding = indicesWithin(b, loc, ids, rows, padded);
  Value negative = indicesWithin(b, loc, ids, -padded, 0);
  Value shift = scalarConstant(b, loc, idType.getElementType(),
                               static_cast<double>(padded - rows));
  Value up = nn::AddOp::create(b, loc, ids, shift);
  Value down = nn::SubOp::create(b, loc, ids, shift);
  Value shifted = nn::WhereOp::create(b, loc, idType, negative, down, ids);
  Value remapped = nn::WhereOp::create(b, loc, idType, padding, up, shifted);
  embedding.getTableMutable().assign(paddedTable);
  embedding.getIndicesMutable().assign(remapped);
  return "";
}

LogicalResult Megatron::annotateBatch(func::FuncOp func) {
  MLIRContext *context = func.getContext();
  auto batchSharding = [&](RankedTensorType type) {
    SmallVector<SmallVector<StringRef>> dims(type.getRank());
    if (type.getRank() > 0)
      dims[0] = batchAxes;
    return ShardingAttr::get(context, mesh.getSymName(), dims);
  };
  // Ulysses feeds every rank its part of the sequence; ring attention
  // reads whole inputs and permutes them locally into its layout.
  bool splitSequence = sp > 1 && sequence == SequenceMode::Ulysses;
  auto inputSharding = [&](RankedTensorType type) {
    if (!splitSequence || type.getRank() < 2 || type.getDimSize(1) % sp != 0)
      return batchSharding(type);
    return batchAnd(type, 1, {spAxis});
  };
  auto checkBatch = [&](RankedTensorType type,
                        StringRef what) -> LogicalResult {
    if (dp <= 1 || type.getRank() == 0 || type.getDimSize(0) % dp == 0)
      return success();
    return func.emitError()
           << "cannot split " << what << " over " << dpAxis << "=" << dp
           << ": its batch dimension 0 has size " << type.getDimSize(0)
           << ", which " << dpAxis << " does not divide";
  };
  auto nameOf = [&](DictionaryAttr attrs, StringRef kind, unsigned i) {
    if (attrs)
      if (auto name = attrs.getAs<StringAttr>("onnx.name"))
        return (kind + " '" + name.getValue() + "'").str();
    return (kind + " " + Twine(i)).str();
  };
  Block &body = func.getBody().front();
  OpBuilder b(&body, body.begin());
  if (!batchAxes.empty() || splitSequence) {
    for (BlockArgument arg : body.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || arg.use_empty())
        continue;
      if (isBatchArgument(func, arg.getArgNumber())) {
        if (failed(
                checkBatch(type, nameOf(func.getArgAttrDict(arg.getArgNumber()),
                                        "input", arg.getArgNumber()))))
          return failure();
        auto annotate =
            AnnotateOp::create(b, arg.getLoc(), arg, inputSharding(type));
        annotate->setAttr(kStrategyAttr, b.getUnitAttr());
        annotate->setAttr(kPriorityAttr, b.getI64IntegerAttr(kEdgePriority));
        arg.replaceAllUsesExcept(annotate, annotate);
        continue;
      }
      // The cache slot is one for the batch: every rank reads it whole.
      // A KV cache, a training parameter and its optimizer state take the
      // shardings of their uses (the parameters replicated over dp, whose
      // ranks each update their copy alike).
      if (func.getArgAttr(arg.getArgNumber(),
                          nn::NNDialect::kCachePositionAttrName)) {
        auto whole = AnnotateOp::create(
            b, arg.getLoc(), arg,
            ShardingAttr::get(
                context, mesh.getSymName(),
                SmallVector<SmallVector<StringRef>>(type.getRank())));
        whole->setAttr(kStrategyAttr, b.getUnitAttr());
        whole->setAttr(kPriorityAttr, b.getI64IntegerAttr(kEdgePriority));
        arg.replaceAllUsesExcept(whole, whole);
      }
    }
  }
  // Results: split on the batch over dp, whole over every other axis.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  b.setInsertionPoint(ret);
  for (OpOperand &operand : ret->getOpOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!type)
      continue;
    unsigned i = operand.getOperandNumber();
    if (!isBatchResult(func, i))
      continue;
    if (failed(
            checkBatch(type, nameOf(func.getResultAttrDict(i), "output", i))))
      return failure();
    auto annotate =
        AnnotateOp::create(b, ret.getLoc(), operand.get(), batchSharding(type));
    annotate->setAttr(kStrategyAttr, b.getUnitAttr());
    annotate->setAttr(kPriorityAttr, b.getI64IntegerAttr(kEdgePriority));
    operand.set(annotate);
  }
  return success();
}

ShardingAttr Megatron::batchAnd(RankedTensorType type, int64_t dim,
                                ArrayRef<StringRef> axes) {
  SmallVector<SmallVector<StringRef>> dims(type.getRank());
  dims[0] = batchAxes;
  dims[dim].append(axes.begin(), axes.end());
  return ShardingAttr::get(mesh.getContext(), mesh.getSymName(), dims);
}

LogicalResult Megatron::annotateSequence(func::FuncOp func) {
  StringRef axis = sequenceAxis();
  int64_t size = *mesh.getAxisSize(axis);
  // The residual stream: what enters each norm is split on the sequence
  // (dimension 1 of [batch, sequence, hidden]), at a priority below the
  // weights', so the tensor-parallel matmuls gather it rather than give up
  // their split. Other norms (over a head, or over flattened tokens) are
  // left to propagation.
  SmallVector<std::pair<Operation *, int64_t>> norms;
  Operation *otherNorm = nullptr;
  // The analysis outlives the loop: its entries are a view of it.
  ModelRoles roles(func);
  for (auto [op, role] : roles.getEntries()) {
    if (role != ModelRole::Norm)
      continue;
    if (std::optional<int64_t> dim = ModelRoles::getResidualSequenceDim(op))
      norms.push_back({op, *dim});
    else if (!otherNorm)
      otherNorm = op;
  }
  if (norms.empty() && otherNorm)
    return otherNorm->emitError()
           << "--sp-mode splits the residual stream on the sequence, the "
              "[batch, sequence, hidden] input of a norm over hidden, but no "
              "norm has such an input; this one's is "
           << otherNorm->getOperand(0).getType();
  // A sequence that the axis does not divide (ViT's 16 patches and class
  // token over 2) stays whole, and a remark says so.
  for (auto [norm, dim] : norms) {
    int64_t length =
        cast<RankedTensorType>(norm->getOperand(0).getType()).getDimSize(dim);
    if (length % size == 0)
      continue;
    remarks.push_back(
        StringAttr::get(func.getContext(),
                        "--sp-mode: the sequence of " + std::to_string(length) +
                            " positions (the input of norm " + opName(norm) +
                            ") is not "
                            "divisible by " +
                            axis.str() + "=" + std::to_string(size) +
                            ", so it is not split over " + axis.str()));
    return success();
  }
  for (auto [norm, dim] : norms) {
    auto type = cast<RankedTensorType>(norm->getOperand(0).getType());
    OpBuilder b(norm);
    auto annotate = AnnotateOp::create(b, norm->getLoc(), norm->getOperand(0),
                                       batchAnd(type, dim, {axis}));
    annotate->setAttr(kStrategyAttr, b.getUnitAttr());
    annotate->setAttr(kPriorityAttr, b.getI64IntegerAttr(kActivationPriority));
    norm->setOperand(0, annotate);
  }
  if (sequence == SequenceMode::Ring)
    return planRing(func);
  MLIRContext *context = func.getContext();
  func->getParentOfType<ModuleOp>()->setAttr(
      kSequenceParallelAttr,
      SequenceParallelAttr::get(context,
                                sequence == SequenceMode::Megatron
                                    ? SequenceParallelMode::Megatron
                                    : SequenceParallelMode::Ulysses,
                                StringAttr::get(context, axis), size,
                                /*causal=*/{}, /*zigzag=*/{}, /*imbalance=*/{},
                                /*contiguous_imbalance=*/{}));
  if (sequence != SequenceMode::Ulysses)
    return success();
  // Forward attentions first: a backward reads the forward's result.
  SmallVector<Operation *> attentions;
  func.walk([&](nn::AttentionOp a) { attentions.push_back(a); });
  func.walk([&](nn::AttentionGradOp a) { attentions.push_back(a); });
  for (Operation *attention : attentions)
    if (failed(ulyssesAttention(attention)))
      return failure();
  return success();
}

/// Around attention, heads instead of the sequence are split over sp: one
/// all-to-all per input before, one per output after. Its backward
/// (nn.attention_grad) does the same: its query, key and value are the
/// forward's (their all-to-alls are shared), its `out` is the forward's
/// result while still split by heads, and the output gradient and the
/// three input gradients each take one all-to-all, as DeepSpeed-Ulysses'
/// backward does.
LogicalResult Megatron::ulyssesAttention(Operation *attention) {
  auto grad = dyn_cast<nn::AttentionGradOp>(attention);
  for (unsigned i : {0u, 1u, 2u}) {
    auto type = cast<RankedTensorType>(attention->getOperand(i).getType());
    if (type.getDimSize(kAttentionHeadsDim) % headSplit() != 0)
      return attention->emitError()
             << "--sp-mode ulysses splits attention heads over "
             << (tp > 1 ? tpAxis.str() + "×" : "") << spAxis << "="
             << headSplit() << ", but "
             << (i == 0 ? "the query has " : "the keys and values have ")
             << type.getDimSize(kAttentionHeadsDim)
             << " heads, which it does not divide";
  }
  SmallVector<StringRef> headAxes;
  if (tp > 1)
    headAxes.push_back(tpAxis);
  headAxes.push_back(spAxis);
  OpBuilder b(attention);
  auto byHeads = [&](OpOperand &operand) {
    Value input = operand.get();
    auto type = cast<RankedTensorType>(input.getType());
    operand.set(
        ReshardOp::create(b, attention->getLoc(), input,
                          batchAnd(type, kAttentionHeadsDim, headAxes)));
  };
  for (unsigned i : {0u, 1u, 2u})
    byHeads(attention->getOpOperand(i));
  if (grad) {
    // The forward's result before its reshard back to the sequence split.
    auto back = grad.getOut().getDefiningOp<ReshardOp>();
    if (back && back.getInput().getDefiningOp<nn::AttentionOp>())
      grad.getOutMutable().assign(back.getInput());
    else
      byHeads(grad.getOutMutable());
    byHeads(grad.getDoutMutable());
  }
  b.setInsertionPointAfter(attention);
  for (Value result : attention->getResults()) {
    auto type = cast<RankedTensorType>(result.getType());
    ShardingAttr back = batchAnd(type, kAttentionSequenceDim, {spAxis});
    if (tp > 1) {
      SmallVector<SmallVector<StringRef>> dims;
      for (int64_t d = 0; d < back.getRank(); ++d)
        dims.push_back(back.getAxesOfDim(d));
      dims[kAttentionHeadsDim].push_back(tpAxis);
      back = ShardingAttr::get(b.getContext(), mesh.getSymName(), dims);
    }
    auto reshard = ReshardOp::create(b, attention->getLoc(), result, back);
    result.replaceAllUsesExcept(reshard, reshard);
  }
  return success();
}

/// The work of each rank of a causal ring: the number of (query, key) pairs
/// its queries see, given the global position of every sequence slot (with
/// a sliding `window`, at most that many keys per query; 0: none).
static SmallVector<int64_t> ringWork(ArrayRef<int64_t> order, int64_t ranks,
                                     int64_t window) {
  SmallVector<int64_t> work(ranks, 0);
  int64_t perRank = static_cast<int64_t>(order.size()) / ranks;
  for (auto [slot, position] : llvm::enumerate(order))
    work[slot / perRank] +=
        window > 0 ? std::min<int64_t>(position + 1, window) : position + 1;
  return work;
}

static double imbalance(ArrayRef<int64_t> work) {
  int64_t total = 0, most = 0;
  for (int64_t w : work) {
    total += w;
    most = std::max(most, w);
  }
  return total == 0 ? 1.0
                    : static_cast<double>(most) * work.size() /
                          static_cast<double>(total);
}

LogicalResult Megatron::planRing(func::FuncOp func) {
  SmallVector<nn::AttentionOp> attentions;
  func.walk([&](nn::AttentionOp a) { attentions.push_back(a); });
  if (attentions.empty())
    return success();
  int64_t length =
      attentions.front().getQuery().getType().getDimSize(kAttentionSequenceDim);
  bool causal =
      llvm::any_of(attentions, [](nn::AttentionOp a) { return a.getCausal(); });
  MLIRContext *context = func.getContext();
  for (nn::AttentionOp attention : attentions) {
    if (attention.getQuery().getType().getDimSize(kAttentionSequenceDim) !=
            length ||
        attention.getKey().getType().getDimSize(kAttentionSequenceDim) !=
            length)
      return attention.emitError()
             << "--sp-mode ring needs self-attention over the whole "
                "sequence of "
             << length << " positions";
    attention->setAttr(kRingAttr, StringAttr::get(context, spAxis));
  }
  // A training step's backward runs as a ring too (RingAttention).
  func.walk([&](nn::AttentionGradOp grad) {
    if (grad.getQuery().getType().getDimSize(kAttentionSequenceDim) == length &&
        grad.getKey().getType().getDimSize(kAttentionSequenceDim) == length)
      grad->setAttr(kRingAttr, StringAttr::get(context, spAxis));
  });

  // Causal attention: a zigzag layout gives rank r the chunks r and
  // 2*sp-1-r of 2*sp, so every rank sees as many (query, key) pairs. A mask
  // with a row per query reads its key columns in sequence order, so it
  // keeps the layout contiguous.
  SmallVector<int64_t> order(length), contiguous(length);
  for (int64_t i = 0; i < length; ++i)
    order[i] = contiguous[i] = i;
  bool perQueryMask = llvm::any_of(attentions, [](nn::AttentionOp a) {
    if (!a.getMask())
      return false;
    ShardingRule rule = a.getShardingRule();
    return usesFactor(rule, ShardingRule::operand(3),
                      rule.getOperands()[0][kAttentionSequenceDim].front());
  });
  // With sliding windows (every causal attention's; the widest counts),
  // each row sees at most a window of keys: contiguous blocks are about as
  // balanced, and only they let the ring stop once the blocks left are
  // behind every window (RingAttention skips those steps). Zigzag is kept
  // only where it balances better.
  int64_t window = 0;
  for (nn::AttentionOp attention : attentions) {
    if (!attention.getCausal())
      continue;
    std::optional<int64_t> own = attention.getWindow();
    if (!own) {
      window = 0;
      break;
    }
    window = std::max(window, *own);
  }
  bool zigzag = causal && !perQueryMask && length % (2 * sp) == 0;
  if (zigzag) {
    int64_t chunk = length / (2 * sp), perRank = length / sp;
    for (int64_t i = 0; i < length; ++i) {
      int64_t rank = i / perRank, offset = i % perRank;
      int64_t which = offset < chunk ? rank : 2 * sp - 1 - rank;
      order[i] = which * chunk + offset % chunk;
    }
    if (window > 0 && imbalance(ringWork(order, sp, window)) >=
                          imbalance(ringWork(contiguous, sp, window))) {
      zigzag = false;
      order = contiguous;
    }
  }
  ModuleOp module = func->getParentOfType<ModuleOp>();
  Builder attrs(context);
  FloatAttr balance, contiguousBalance;
  if (causal) {
    balance = attrs.getF64FloatAttr(imbalance(ringWork(order, sp, window)));
    contiguousBalance =
        attrs.getF64FloatAttr(imbalance(ringWork(contiguous, sp, window)));
  }
  StringAttr ringAxis = attrs.getStringAttr(spAxis);
  module->setAttr(kSequenceParallelAttr,
                  SequenceParallelAttr::get(
                      context, SequenceParallelMode::Ring, ringAxis, sp,
                      attrs.getBoolAttr(causal), attrs.getBoolAttr(zigzag),
                      balance, contiguousBalance));
  if (!zigzag)
    return success();
  module->setAttr(kSequenceOrderAttr,
                  SequenceOrderAttr::get(context, ringAxis,
                                         attrs.getDenseI64ArrayAttr(order)));

  // The model sees its sequence in that order: inputs are permuted on
  // entry, outputs gathered whole and put back in order on exit.
  SmallVector<int64_t> inverse(length);
  for (int64_t i = 0; i < length; ++i)
    inverse[order[i]] = i;
  // The permutations themselves are in sequence order already; partitioning
  // must not reorder them again.
  auto indices = [&](OpBuilder &b, Location loc, ArrayRef<int64_t> values,
                     StringRef name) {
    auto constant = nn::ConstantOp::create(
        b, loc, nn::getIndexConstant(context, {length}, values, name));
    constant->setAttr(kSequenceOrderAttr, b.getUnitAttr());
    return constant;
  };
  Block &body = func.getBody().front();
  OpBuilder b(&body, body.begin());
  for (BlockArgument arg : body.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() < 2 || type.getDimSize(1) != length ||
        arg.use_empty())
      continue;
    Value permuted =
        nn::GatherOp::create(b, arg.getLoc(), type, arg,
                             indices(b, arg.getLoc(), order, "sequence_order"),
                             static_cast<int64_t>(1));
    arg.replaceAllUsesExcept(permuted, permuted.getDefiningOp());
  }
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  b.setInsertionPoint(ret);
  for (OpOperand &operand : ret->getOpOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand.get().getType());
    if (!type || type.getRank() < 2 || type.getDimSize(1) != length)
      continue;
    SmallVector<SmallVector<StringRef>> dims(type.getRank());
    dims[0] = batchAxes;
    auto whole =
        AnnotateOp::create(b, ret.getLoc(), operand.get(),
                           ShardingAttr::get(context, mesh.getSymName(), dims));
    whole->setAttr(kStrategyAttr, b.getUnitAttr());
    operand.set(nn::GatherOp::create(
        b, ret.getLoc(), type, whole,
        indices(b, ret.getLoc(), inverse, "sequence_order.inverse"),
        static_cast<int64_t>(1)));
  }
  return success();
}

namespace {
/// A matmul weight the split search places: its candidate dimensions
/// (the weight's columns and rows, and the batch dimensions of a stacked
/// weight, where tp divides them) and the one chosen.
struct SearchedWeight {
  nn::MatmulOp matmul;
  /// Or a mixture of experts, whose expert weights are placed together.
  nn::MoeOp moe;
  SmallVector<int64_t, 2> splits;
  /// The next searched matmul its result reaches without passing another
  /// matmul, whose choice is searched jointly with this one's; -1: none.
  int partner = -1;
};
/// A mixture of experts' candidates, beside a matmul weight's dimensions.
constexpr int64_t kByExperts = -3, kByFeatures = -4;

/// The dimension of nn.moe's operand `index` (an expert weight or bias) that
/// `split` (kByExperts or kByFeatures) splits; none where it stays whole
/// (fc2's bias under a feature split).
std::optional<int64_t> moeSplitDim(nn::MoeOp moe, unsigned index,
                                   int64_t split) {
  if (split == kByExperts)
    return 0;
  // fc2 [E, H, F]; fc1, fc3 and their biases hold the features on
  // dimension 1; fc2's bias [E, H] has none.
  if (index == moe.getFc2Mutable().getOperandNumber())
    return 2;
  MutableOperandRange fc2Bias = moe.getFc2BiasMutable();
  if (!fc2Bias.empty() && index == fc2Bias[0].getOperandNumber())
    return std::nullopt;
  return 1;
}
} // namespace

/// The first matmul in `searched` (its index) that `matmul`'s result
/// reaches through ops other than matmuls; -1 when none within a few
/// dozen ops.
static int findPartner(nn::MatmulOp matmul, ArrayRef<SearchedWeight> searched) {
  SmallVector<Operation *> work(matmul->getUsers());
  llvm::SmallPtrSet<Operation *, 32> seen;
  while (!work.empty() && seen.size() < 64) {
    Operation *op = work.pop_back_val();
    if (!seen.insert(op).second)
      continue;
    if (auto next = dyn_cast<nn::MatmulOp>(op)) {
      for (auto [index, candidate] : llvm::enumerate(searched))
        if (candidate.matmul == next)
          return static_cast<int>(index);
      continue;
    }
    for (Operation *user : op->getUsers())
      work.push_back(user);
  }
  return -1;
}

/// Where the model-role analysis gives a matmul no role (a patch
/// embedding, an encoder's convolutions, a block the analysis does not
/// know) and propagation from the pinned roles leaves its weight whole,
/// the weight's split is chosen by comparing the cost model's estimate of
/// the whole function on one device (compute divided among the devices
/// that split it, the collectives each placement needs, by the cluster's
/// alpha-beta links): columns, rows, a batch dimension of a stacked weight
/// (a mixture of experts' [E, in, out], split by experts), or whole. A
/// matmul and the next searched matmul its result reaches are decided
/// jointly (a column split pays off only with the row split after it),
/// then each alone, until no change lowers the estimate. Each placed
/// weight's candidates and their estimates go on its matmul
/// (`dist.split_costs`, for --explain); a split one gets a remark. The
/// search evaluates at most kMaxEvaluations placements; where it stops
/// early, what it has not decided stays whole, with a remark.
LogicalResult Megatron::searchSplits(func::FuncOp func) {
  constexpr int kMaxEvaluations = 512;
  FailureOr<ClusterModel> cluster = ClusterModel::of(func);
  if (failed(cluster))
    return failure();
  propagateShardings(func, mesh);
  SmallVector<SearchedWeight> searched;
  func.walk([&](nn::MatmulOp matmul) {
    if (pinned.contains({matmul, 1u}) || !getWeightConstant(matmul.getRhs()))
      return;
    ShardingAttr held = getValueSharding(matmul.getRhs(), mesh);
    for (int64_t d = 0; d < held.getRank(); ++d)
      if (llvm::is_contained(held.getAxesOfDim(d), tpAxis))
        return;
    SearchedWeight weight{matmul, nn::MoeOp(), {}, -1};
    // Columns, rows, and a batch dimension of a stacked weight (a mixture
    // of experts' [E, in, out]: its experts).
    SmallVector<int64_t> dims{-1, -2};
    int64_t rank = matmul.getRhs().getType().getRank();
    for (int64_t d = 0; d + 2 < rank; ++d)
      dims.push_back(d);
    for (int64_t dim : dims)
      if (splitRefusal(matmul, 1, dim, tpAxis, "").empty())
        weight.splits.push_back(dim);
    if (!weight.splits.empty())
      searched.push_back(weight);
  });
  // A mixture of experts: its experts (each device computes the slots
  // routed to its block) or, where the activation allows, each expert's
  // features.
  func.walk([&](nn::MoeOp moe) {
    SmallVector<int64_t, 2> splits;
    for (int64_t split : {kByExperts, kByFeatures}) {
      if (split == kByFeatures) {
        ShardingRule rule = moe.getShardingRule();
        unsigned features = rule.getTensor(ShardingRule::operand(4))[2].back();
        if (rule.getFactor(features).kind == FactorKind::Opaque)
          continue;
      }
      bool refused = false;
      for (unsigned i = 3; i < moe->getNumOperands(); ++i) {
        if (pinned.contains({moe, i}) ||
            !getWeightConstant(moe->getOperand(i))) {
          refused = true;
          break;
        }
        if (std::optional<int64_t> dim = moeSplitDim(moe, i, split))
          refused |= !splitRefusal(moe, i, *dim, tpAxis, "").empty();
      }
      if (!refused)
        splits.push_back(split);
    }
    if (!splits.empty())
      searched.push_back({nn::MatmulOp(), moe, splits, -1});
  });
  if (searched.empty()) {
    clearShardings(func);
    return success();
  }
  for (SearchedWeight &weight : searched)
    if (weight.matmul)
      weight.partner = findPartner(weight.matmul, searched);

  // The estimate of each placement evaluated, by the chosen dimension of
  // every searched weight (kWhole: none).
  constexpr int64_t kWhole = std::numeric_limits<int64_t>::min();
  std::map<std::vector<int64_t>, double> estimates;
  auto asSplit = [](int64_t dim) {
    return dim == kWhole ? std::nullopt : std::optional<int64_t>(dim);
  };
  // Annotates the weights of `weight` as `dim` places them.
  auto place = [&](const SearchedWeight &weight, int64_t dim,
                   SmallVectorImpl<AnnotateOp> &placed) {
    if (weight.matmul) {
      placed.push_back(annotateOperand(weight.matmul, 1, asSplit(dim), tpAxis));
      return;
    }
    for (unsigned i = 3; i < weight.moe->getNumOperands(); ++i)
      placed.push_back(annotateOperand(
          weight.moe, i,
          dim == kWhole ? std::nullopt : moeSplitDim(weight.moe, i, dim),
          tpAxis));
  };
  auto evaluate = [&](const std::vector<int64_t> &choice) {
    if (auto it = estimates.find(choice); it != estimates.end())
      return it->second;
    SmallVector<AnnotateOp> placed;
    for (auto [weight, dim] : llvm::zip(searched, choice))
      place(weight, dim, placed);
    propagateShardings(func, mesh);
    double seconds = estimateShardedCost(func, mesh, *cluster).seconds();
    for (AnnotateOp annotate : placed) {
      annotate.getResult().replaceAllUsesWith(annotate.getInput());
      annotate.erase();
    }
    estimates[choice] = seconds;
    return seconds;
  };
  auto optionsOf = [&](const SearchedWeight &weight) {
    SmallVector<int64_t, 4> options{kWhole};
    options.append(weight.splits.begin(), weight.splits.end());
    return options;
  };
  std::vector<int64_t> best(searched.size(), kWhole);
  double bestSeconds = evaluate(best);
  bool stopped = false;
  for (bool changed = true; changed && !stopped;) {
    changed = false;
    for (auto [index, weight] : llvm::enumerate(searched)) {
      for (int64_t mine : optionsOf(weight)) {
        SmallVector<int64_t, 4> theirs{kWhole};
        if (weight.partner >= 0)
          theirs = optionsOf(searched[weight.partner]);
        for (int64_t other : theirs) {
          if (estimates.size() >= static_cast<size_t>(kMaxEvaluations)) {
            stopped = true;
            break;
          }
          std::vector<int64_t> trial = best;
          trial[index] = mine;
          if (weight.partner >= 0)
            trial[weight.partner] = other;
          // Ties keep the current placement; a real gain must beat the
          // estimate's rounding.
          double seconds = evaluate(trial);
          if (seconds < bestSeconds * (1 - 1e-9)) {
            best = trial;
            bestSeconds = seconds;
            changed = true;
          }
        }
      }
    }
  }

  MLIRContext *context = func.getContext();
  auto nameOf = [](int64_t dim) {
    return dim == -1            ? "columns"
           : dim == -2          ? "rows"
           : dim == kByExperts  ? "experts"
           : dim == kByFeatures ? "features"
           : dim == kWhole      ? "whole"
                                : "batch";
  };
  for (auto [index, weight] : llvm::enumerate(searched)) {
    // Each candidate with the others as chosen.
    SmallVector<NamedAttribute> costs;
    std::string listed;
    for (int64_t dim : optionsOf(weight)) {
      std::vector<int64_t> trial = best;
      trial[index] = dim;
      auto it = estimates.find(trial);
      if (it == estimates.end())
        continue;
      costs.emplace_back(StringAttr::get(context, nameOf(dim)),
                         FloatAttr::get(Float64Type::get(context), it->second));
      listed += (listed.empty() ? "" : ", ") + std::string(nameOf(dim)) + " " +
                llvm::formatv("{0:e3}", it->second).str() + " s";
    }
    Operation *op = weight.matmul ? weight.matmul.getOperation()
                                  : weight.moe.getOperation();
    op->setAttr(kSplitCostsAttr, DictionaryAttr::get(context, costs));
    // A split is the search's doing: the report says why.
    if (best[index] != kWhole) {
      std::string name =
          weightName(getWeightConstant(op->getOperand(weight.matmul ? 1 : 3)));
      remarks.push_back(StringAttr::get(
          context, (weight.matmul ? "weight '" + name + "'"
                                  : "the experts of '" + name + "'") +
                       ", which no role splits, " +
                       (weight.matmul ? "is" : "are") + " split by " +
                       nameOf(best[index]) + " over " + tpAxis +
                       ": the cost model's estimate of a step is " + listed));
    }
    // Whole is pinned too, so that the plan is the one estimated (else
    // propagation could still split the weight from its neighbours).
    unsigned first = weight.matmul ? 1 : 3;
    unsigned last = weight.matmul ? 2 : op->getNumOperands();
    for (unsigned i = first; i < last; ++i) {
      std::optional<int64_t> dim;
      if (best[index] != kWhole)
        dim = weight.matmul ? std::optional<int64_t>(best[index])
                            : moeSplitDim(weight.moe, i, best[index]);
      if (!dim) {
        pinned.insert({op, i});
        annotateOperand(op, i, std::nullopt, tpAxis);
      } else if (failed(pin(op, i, *dim, tpAxis, "split by cost"))) {
        return failure();
      }
    }
  }
  if (stopped)
    remarks.push_back(StringAttr::get(
        context, "the split search stopped after " + Twine(kMaxEvaluations) +
                     " estimates; the weights it had not placed stay whole"));
  clearShardings(func);
  return success();
}

void Megatron::batchOverExperts(func::FuncOp func) {
  int64_t size = epAxis.empty() ? 1 : *mesh.getAxisSize(epAxis);
  if (size <= 1 || !expertDispatch ||
      !func.walk([](nn::MoeOp) { return WalkResult::interrupt(); })
           .wasInterrupted())
    return;
  int64_t batch = dp * size;
  auto divides = [&](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return !tensor || tensor.getRank() == 0 ||
           tensor.getDimSize(0) % batch == 0;
  };
  // What annotateBatch splits: the batch inputs and the outputs.
  std::string refused;
  for (BlockArgument arg : func.getArguments()) {
    if (arg.use_empty() || divides(arg.getType()) ||
        !isBatchArgument(func, arg.getArgNumber()))
      continue;
    refused =
        "its batch of " +
        std::to_string(cast<RankedTensorType>(arg.getType()).getDimSize(0));
    break;
  }
  for (auto [i, type] : llvm::enumerate(func.getResultTypes()))
    if (refused.empty() && !divides(type) && isBatchResult(func, i))
      refused = "the batch of output " + std::to_string(i) + " (" +
                std::to_string(cast<RankedTensorType>(type).getDimSize(0)) +
                ")";
  if (refused.empty()) {
    batchAxes.push_back(epAxis);
    return;
  }
  std::string ep = epAxis.str();
  std::string axes = dp > 1 ? dpAxis.str() + "×" + ep : ep;
  remarks.push_back(StringAttr::get(
      func.getContext(),
      "tokens stay on their " + ep + " devices: " + refused +
          " is not a multiple of " + axes + " = " + std::to_string(batch) +
          ", so every " + ep +
          " device runs all of its group's tokens, and the experts' outputs "
          "are summed over " +
          ep));
}

LogicalResult Megatron::annotateExperts(func::FuncOp func) {
  if (epAxis.empty() || mesh.getAxisSize(epAxis).value_or(1) <= 1)
    return success();
  WalkResult walked = func.walk([&](nn::MoeOp moe) {
    // Each expert's features over tp too where the activation allows it
    // (not a fused swiglu's halves, not under fc2's bias) and tp divides
    // them; else the experts are whole within each ep group's tp ranks.
    bool features = false;
    if (tp > 1) {
      ShardingRule rule = moe.getShardingRule();
      unsigned f = rule.getTensor(ShardingRule::operand(4))[2].back();
      features = rule.getFactor(f).kind != FactorKind::Opaque &&
                 splitRefusal(moe, 4, 2, tpAxis, "").empty();
    }
    // Tokens split as the batch, ep included: they travel to their experts
    // rather than the experts' outputs being summed. ep splits one factor
    // of an op, so the experts' split yields to the tokens' (its
    // annotations rank below), and partitioning sees both (nn.moe's
    // partition hook).
    bool dispatch = llvm::is_contained(batchAxes, epAxis);
    if (dispatch)
      for (unsigned i = 0; i < 3; ++i) {
        SmallVector<SmallVector<StringRef>> dims(
            cast<RankedTensorType>(moe->getOperand(i).getType()).getRank());
        dims[0] = batchAxes;
        annotateOperand(moe, i, dims);
      }
    for (unsigned i = 3; i < moe->getNumOperands(); ++i) {
      if (!pinned.insert({moe, i}).second)
        continue;
      if (std::string why = splitRefusal(moe, i, 0, epAxis, "experts");
          !why.empty()) {
        moe->emitError() << why;
        return WalkResult::interrupt();
      }
      auto type = cast<RankedTensorType>(moe->getOperand(i).getType());
      SmallVector<SmallVector<StringRef>> dims(type.getRank());
      dims[0].push_back(epAxis);
      if (features)
        if (std::optional<int64_t> dim = moeSplitDim(moe, i, kByFeatures))
          dims[*dim].push_back(tpAxis);
      AnnotateOp annotate = annotateOperand(moe, i, dims);
      if (dispatch)
        annotate->setAttr(kPriorityAttr, OpBuilder(annotate).getI64IntegerAttr(
                                             kActivationPriority));
    }
    return WalkResult::advance();
  });
  if (walked.wasInterrupted())
    return failure();
  // A mixture written densely (a training step's): the reads of its
  // stacked weights and biases, split on their experts.
  walked = func.walk([&](Operation *op) {
    if (!op->hasAttr(nn::NNDialect::kExpertsAttrName) ||
        !pinned.insert({op, 0}).second)
      return WalkResult::advance();
    if (std::string why = splitRefusal(op, 0, 0, epAxis, "experts");
        !why.empty()) {
      op->emitError() << why;
      return WalkResult::interrupt();
    }
    annotateOperand(op, 0, 0, epAxis);
    return WalkResult::advance();
  });
  return failure(walked.wasInterrupted());
}

LogicalResult Megatron::run(func::FuncOp func) {
  if (tp > 1 && headSplit() == tp)
    groupKeyValueCaches(func);
  if (headSplit() > 1)
    func.walk([&](nn::AttentionOp a) { repeatKeyValueHeads(a); });
  if (tp > 1 && failed(annotateTensorParallel(func)))
    return failure();
  if (sequence != SequenceMode::None && failed(annotateSequence(func)))
    return failure();
  batchOverExperts(func);
  if (failed(annotateBatch(func)))
    return failure();
  if (failed(annotateExperts(func)))
    return failure();
  return tp > 1 ? searchSplits(func) : success();
}

/// Whether `mesh` has the axes `spec` gives, in order (a module planned by
/// partita-plan-mesh, replayed with the mesh it chose).
bool sameMesh(MeshOp mesh, const ::partita::Mesh &spec) {
  if (mesh.getAxisNames().size() != spec.axes.size())
    return false;
  for (auto [index, axis] : llvm::enumerate(spec.axes))
    if (cast<StringAttr>(mesh.getAxisNames()[index]).getValue() != axis.name ||
        mesh.getAxisSizes()[index] != axis.size ||
        stringifyAxisRole(mesh.getAxisRole(index)) != axis.role)
      return false;
  return true;
}

struct AnnotatePass : mlir::partita::impl::AnnotatePassBase<AnnotatePass> {
  using AnnotatePassBase::AnnotatePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshOp> existing = getModuleMesh(module);
    if (failed(existing))
      return signalPassFailure();
    MeshOp mesh = *existing;
    // The option's parser has checked the axes and spelled out their roles.
    const ::partita::Mesh &spec = this->mesh;
    if (!mesh.getOperation() && !spec.empty()) {
      SmallVector<StringRef> names;
      SmallVector<int64_t> sizes;
      SmallVector<AxisRole> roles;
      for (const ::partita::MeshAxis &axis : spec.axes) {
        names.push_back(axis.name);
        sizes.push_back(axis.size);
        roles.push_back(
            symbolizeAxisRole(axis.role.empty()
                                  ? ::partita::impliedAxisRole(axis.name)
                                  : axis.role)
                .value_or(AxisRole::None));
      }
      OpBuilder b(module.getBodyRegion());
      mesh = MeshOp::create(b, module.getLoc(), kMeshName, names, sizes, roles);
      if (failed(mesh.verify())) {
        mesh.erase();
        return signalPassFailure();
      }
    } else if (mesh && !spec.empty() && !sameMesh(mesh, spec)) {
      module.emitError() << "--mesh " << spec.str() << " given, but the "
                         << "module declares @" << mesh.getSymName();
      return signalPassFailure();
    }
    // The option parser refused any other strategy.
    if (!mesh || strategy == Strategy::None)
      return;
    SequenceMode sequence = spMode;
    int64_t tpSize = mesh.getRoleSize(AxisRole::Tensor);
    int64_t spSize = mesh.getRoleSize(AxisRole::Sequence);
    if (sequence == SequenceMode::Megatron && tpSize == 1) {
      module.emitError() << "--sp-mode megatron splits the sequence over tp, "
                            "but the mesh has no tp axis larger than 1";
      return signalPassFailure();
    }
    if ((sequence == SequenceMode::Ulysses || sequence == SequenceMode::Ring) &&
        spSize == 1) {
      module.emitError() << "--sp-mode " << ::partita::optionName(sequence)
                         << " splits the sequence over sp, but the mesh has "
                            "no sp axis larger than 1";
      return signalPassFailure();
    }
    // A mixture of experts, or one written densely (partita-expand-moe).
    bool experts = false;
    module.walk([&](Operation *op) {
      experts |=
          isa<nn::MoeOp>(op) || op->hasAttr(nn::NNDialect::kExpertsAttrName);
    });
    for (auto [index, name, size] :
         llvm::enumerate(mesh.getAxisNameRefs(), mesh.getAxisSizes())) {
      AxisRole role = mesh.getAxisRole(index);
      if (size == 1 || role == AxisRole::Data || role == AxisRole::Tensor ||
          role == AxisRole::Pipeline || (role == AxisRole::Expert && experts))
        continue;
      if (role == AxisRole::Expert) {
        mesh.emitError() << "axis '" << name << "' (size " << size
                         << ") splits the experts of a mixture of experts "
                            "(nn.moe), and the model has none: it would only "
                            "replicate the model";
        return signalPassFailure();
      }
      bool sequenceRole = role == AxisRole::Sequence;
      if (sequenceRole &&
          (sequence == SequenceMode::Ulysses || sequence == SequenceMode::Ring))
        continue;
      mesh.emitError() << "the megatron strategy splits over dp and tp"
                       << (sequenceRole ? " (and sp with --sp-mode ulysses "
                                          "or ring)"
                                        : "")
                       << "; axis '" << name << "' (size " << size
                       << ") would only replicate the model";
      return signalPassFailure();
    }
    SmallVector<Attribute> remarks;
    if (vocabDivisibleBy < 1) {
      module.emitError() << "--make-vocab-size-divisible-by must be at least "
                            "1, not "
                         << vocabDivisibleBy;
      return signalPassFailure();
    }
    Megatron megatron(mesh, sequence, vocabDivisibleBy, expertDispatch,
                      remarks);
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() && failed(megatron.run(func)))
        return signalPassFailure();
    if (!remarks.empty())
      module->setAttr(kRemarksAttr, ArrayAttr::get(&getContext(), remarks));
  }
};

} // namespace
