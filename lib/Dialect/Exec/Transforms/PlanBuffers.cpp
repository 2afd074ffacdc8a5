//===- PlanBuffers.cpp - buffers, lifetimes and the arena of a program ----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Buffers are numbered in the order the program first needs them: the
// arguments, then each op's results in program order (a receive's buffer at
// its wait, where its value appears), then the copies into outputs. Each
// activation lives from the instruction that writes it to the last one that
// reads it (through views too), and activations whose lives do not overlap
// share arena bytes.
//
// A KV cache that a pipeline stage writes microbatch by microbatch (the
// returned concatenation of kv_cache_writes into the cache argument's rows)
// is written where it lies: each microbatch's rows are a view of the cache
// at their offset, read and written in place, and the concatenation is a
// view too (exec.view): no instruction copies the cache.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Exec/Transforms/Passes.h"

#include "mlir/IR/DialectResourceBlobManager.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Exec/IR/ExecOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

namespace mlir::partita {
#define GEN_PASS_DEF_PLANBUFFERSPASS
#include "partita/Dialect/Exec/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using exec::BufferKind;

namespace {

constexpr int64_t kArenaAlignment = 64;

/// The largest tensor an exec program holds: 2^48 bytes (256 TiB), what a
/// 64-bit process on x86-64 or AArch64 can address. With it, and with at
/// most 2^62 bytes for all of a rank's tensors together, no size, stride,
/// arena offset or sum that the lowering, the runtime or the CUDA target
/// computes in int64_t can overflow.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 48;
constexpr int64_t kMaxRankBytes = int64_t(1) << 62;

/// Whether the bytes of the static `type`, counting every dimension of 0 as
/// 1 (so that every stride is bounded too), are at most kMaxTensorBytes;
/// its bytes then go to `bytes`.
bool boundedBytes(RankedTensorType type, int64_t &bytes) {
  int64_t bound = static_cast<int64_t>(
      std::max<size_t>(1, exec::getElementBytes(type.getElementType())));
  bytes = bound;
  for (int64_t d : type.getShape()) {
    if (d < 0 || llvm::MulOverflow(bound, std::max<int64_t>(d, 1), bound) ||
        bound > kMaxTensorBytes)
      return false;
    bytes *= d; // At most bound.
  }
  return true;
}

/// Element types the runtime stores.
bool isSupportedElementType(Type type) {
  return type.isF32() || type.isF16() || type.isBF16() || type.isInteger(64) ||
         type.isInteger(32) || type.isInteger(8) || type.isInteger(1);
}

bool isCollective(Operation *op) {
  return dist::isGroupCollective(op) && !dist::isAsyncStart(op);
}

bool isCollectiveStart(Operation *op) {
  return dist::isGroupCollective(op) && dist::isAsyncStart(op);
}

class BufferPlanner {
public:
  BufferPlanner(func::FuncOp func, int64_t maxInlineConstantBytes)
      : func(func), maxInline(maxInlineConstantBytes) {}

  LogicalResult run();

private:
  struct Buffer {
    BufferKind kind;
    RankedTensorType type;
    int64_t aliasOf = -1;
    std::string weight;
    /// The arena offset of an activation, the byte offset of a view in
    /// the buffer it views.
    int64_t firstWrite = -1, lastRead = -1, offset = 0;
  };
  /// A weight, or a block of one, kept on the host.
  struct HostData {
    std::string name;
    int64_t bytes;
  };

  LogicalResult checkSizes();
  int64_t add(Value value, BufferKind kind);
  int64_t addAlias(Value value, Value of, int64_t offset = 0);
  void planCacheRowsInPlace(func::ReturnOp ret);
  LogicalResult addConstant(nn::ConstantOp op);
  LogicalResult addHostConstant(nn::ConstantOp op);
  void addHostBlock(exec::SliceBlockOp op);
  void materialize(Value value);
  LogicalResult addBuffers();
  void computeLifetimes();
  void planArena();
  void writeAttributes();

  func::FuncOp func;
  int64_t maxInline;
  std::vector<Buffer> buffers;
  llvm::DenseMap<Value, int64_t> bufferOf;
  llvm::DenseMap<Value, HostData> hostData;
  /// Where each result that a kernel writes directly is bound: result index
  /// to the value's buffer.
  llvm::DenseMap<unsigned, int64_t> boundOutputs;
  /// Microbatch rows of a KV cache written in place: each slice and each
  /// write, the view it becomes (the value viewed, the byte offset); and
  /// the output index of each concatenation they form.
  llvm::DenseMap<Operation *, std::pair<Value, int64_t>> rowViews;
  llvm::DenseMap<Operation *, unsigned> viewConcats;
  int64_t arenaBytes = 0, activationBytes = 0;
};

LogicalResult BufferPlanner::checkSizes() {
  int64_t total = 0;
  auto check =
      [&](Type type,
          llvm::function_ref<InFlightDiagnostic()> error) -> LogicalResult {
    if (auto token = dyn_cast<dist::TokenType>(type))
      type = token.getPayload();
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !tensor.getElementType().isIntOrFloat())
      return success(); // Not a buffer, or refused with its dtype.
    if (!tensor.hasStaticShape())
      return error() << tensor
                     << " has a dynamic shape (give its size with --bind)";
    int64_t bytes;
    if (!boundedBytes(tensor, bytes))
      return error() << tensor
                     << " is larger than a tensor can be (2^48 bytes, what "
                        "a 64-bit process can address)";
    total += bytes;
    if (total > kMaxRankBytes)
      return func.emitError()
             << "the tensors of this rank need more than 2^62 bytes together";
    return success();
  };
  for (BlockArgument arg : func.getArguments())
    if (failed(check(arg.getType(), [&] {
          auto name = func.getArgAttrOfType<StringAttr>(
              arg.getArgNumber(), exec::ExecDialect::kBindingAttr);
          return func.emitError()
                 << "input '"
                 << (name ? name.str()
                          : "input" + std::to_string(arg.getArgNumber()))
                 << "': ";
        })))
      return failure();
  WalkResult walk = func.walk([&](Operation *op) {
    if (op == func || isa<exec::KernelOp>(op))
      return WalkResult::advance(); // Its body's ops are checked.
    for (OpResult value : op->getResults())
      if (failed(check(value.getType(), [&] { return op->emitError(); })))
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

int64_t BufferPlanner::add(Value value, BufferKind kind) {
  Type type = value.getType();
  if (auto token = dyn_cast<dist::TokenType>(type))
    type = token.getPayload();
  buffers.push_back({kind, cast<RankedTensorType>(type)});
  int64_t id = static_cast<int64_t>(buffers.size()) - 1;
  bufferOf[value] = id;
  return id;
}

int64_t BufferPlanner::addAlias(Value value, Value of, int64_t offset) {
  int64_t id = add(value, BufferKind::Alias);
  buffers[id].aliasOf = bufferOf.lookup(of);
  buffers[id].offset = offset;
  return id;
}

/// The byte offset of `slice`'s result in its input where the result is a
/// contiguous run of the input's bytes: a range of dimension `dim`, every
/// dimension before it of size 1 and every other taken whole.
static std::optional<int64_t> contiguousRowsOffset(nn::SliceOp slice,
                                                   int64_t dim) {
  auto type = cast<RankedTensorType>(slice.getInput().getType());
  ArrayRef<int64_t> start = slice.getStart(), limit = slice.getLimit();
  if (dim < 0 || dim >= type.getRank())
    return std::nullopt;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    bool whole = start[d] == 0 && limit[d] == type.getDimSize(d);
    if (slice.getStride()[d] != 1 || (d != dim && !whole) ||
        (d < dim && type.getDimSize(d) != 1))
      return std::nullopt;
  }
  if (type.getDimSize(dim) == 0)
    return 0;
  return start[dim] * (tensorBytes(type) / type.getDimSize(dim));
}

void BufferPlanner::planCacheRowsInPlace(func::ReturnOp ret) {
  for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
    // Returned once, and nothing else reads it.
    auto concat = value.getDefiningOp<nn::ConcatOp>();
    if (!concat || !concat->hasOneUse())
      continue;
    // Each operand: a write that this concatenation reads once and nothing
    // returns, into a slice only it reads of the function argument all the
    // slices share, along the concatenation's axis; in order, the slices
    // tile the argument's bytes.
    BlockArgument cache;
    int64_t next = 0;
    SmallVector<std::pair<nn::KvCacheWriteOp, int64_t>> pieces;
    for (Value operand : concat.getInputs()) {
      auto write = operand.getDefiningOp<nn::KvCacheWriteOp>();
      auto slice =
          write ? write.getCache().getDefiningOp<nn::SliceOp>() : nn::SliceOp();
      auto arg =
          slice ? dyn_cast<BlockArgument>(slice.getInput()) : BlockArgument();
      std::optional<int64_t> offset =
          arg ? contiguousRowsOffset(slice, concat.getAxis()) : std::nullopt;
      if (!offset || *offset != next || (cache && arg != cache) ||
          !slice->hasOneUse() ||
          llvm::count(concat.getInputs(), operand) != 1 ||
          llvm::is_contained(ret.getOperands(), operand))
        break;
      cache = arg;
      pieces.push_back({write, *offset});
      next += tensorBytes(cast<RankedTensorType>(operand.getType()));
    }
    // The slices are all that read the cache argument: a write in place
    // changes what any other reader would see.
    if (pieces.size() != concat.getInputs().size() || !cache ||
        cache.getType() != concat.getType() ||
        !llvm::all_of(cache.getUsers(), [&](Operation *user) {
          return llvm::any_of(pieces, [&](auto piece) {
            return piece.first.getCache().getDefiningOp() == user;
          });
        }))
      continue;
    viewConcats[concat] = i;
    for (auto [write, offset] : pieces) {
      rowViews[write.getCache().getDefiningOp()] = {cache, offset};
      rowViews[write] = {value, offset};
    }
  }
}

/// A weight without bytes to read: its blob (a view's source's) was never
/// given, as in IR printed with its resources elided.
static LogicalResult checkWeightData(nn::ConstantOp op) {
  DenseResourceElementsAttr resource =
      dyn_cast<DenseResourceElementsAttr>(op.getValue());
  if (auto view = dyn_cast<nn::WeightViewAttr>(op.getValue()))
    resource = view.getSource();
  if (!resource || resource.getRawHandle().getBlob())
    return success();
  return op.emitError() << "weight '" << nn::getWeightName(op.getValue())
                        << "' has no data";
}

LogicalResult BufferPlanner::addConstant(nn::ConstantOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  if (nn::isWeight(op.getValue())) {
    if (failed(checkWeightData(op)))
      return failure();
    int64_t id = add(op.getResult(), BufferKind::Weight);
    buffers[id].weight = nn::getWeightName(op.getValue()).str();
    return success();
  }
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense)
    return op.emitError() << "constant of an unsupported kind";
  if (tensorBytes(type) <= maxInline) {
    add(op.getResult(), BufferKind::Constant);
    return success();
  }
  int64_t id = add(op.getResult(), BufferKind::Weight);
  buffers[id].weight =
      exec::getConstantWeightName(type, exec::serializeDense(dense));
  return success();
}

LogicalResult BufferPlanner::addHostConstant(nn::ConstantOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  HostData data{"", tensorBytes(type)};
  if (nn::isWeight(op.getValue())) {
    if (failed(checkWeightData(op)))
      return failure();
    data.name = nn::getWeightName(op.getValue()).str();
  } else if (auto dense = dyn_cast<DenseElementsAttr>(op.getValue())) {
    data.name = exec::getConstantWeightName(type, exec::serializeDense(dense));
  } else {
    return op.emitError() << "constant of an unsupported kind";
  }
  hostData[op.getResult()] = std::move(data);
  return success();
}

void BufferPlanner::addHostBlock(exec::SliceBlockOp op) {
  const HostData &from = hostData.find(op.getInput())->second;
  auto type = cast<RankedTensorType>(op.getType());
  hostData[op.getResult()] =
      HostData{exec::getBlockWeightName(from.name, op), tensorBytes(type)};
}

void BufferPlanner::materialize(Value value) {
  const HostData &data = hostData.find(value)->second;
  if (data.bytes <= maxInline) {
    add(value, BufferKind::Constant);
    return;
  }
  int64_t id = add(value, BufferKind::Weight);
  buffers[id].weight = data.name;
}

LogicalResult BufferPlanner::addBuffers() {
  Block &body = func.getBody().front();
  // Views are this plan's to decide: a previous plan's marks go.
  for (Operation &op : body)
    op.removeAttr(exec::ExecDialect::kViewAttr);
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || !isSupportedElementType(type.getElementType()))
      return func.emitError() << "argument " << arg.getArgNumber()
                              << " has a type the runtime does not support";
    add(arg, BufferKind::Input);
  }
  // Results a kernel can write directly (first occurrence of each value);
  // the others are copied at the end.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  llvm::DenseMap<Value, unsigned> outputIndex;
  for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
    Operation *def = value.getDefiningOp();
    auto block = dyn_cast_if_present<exec::SliceBlockOp>(def);
    // A block of a value other slices read too is copied (as it always
    // was), not bound.
    auto onlySliced = [](Value v) {
      return llvm::all_of(v.getUsers(), llvm::IsaPred<exec::SliceBlockOp>);
    };
    bool writes = def && (isKernel(def) || isa<exec::KernelOp>(def) ||
                          isCollective(def) ||
                          (block && !onlySliced(block.getInput()) &&
                           !isa_and_nonnull<nn::ConstantOp, exec::SliceBlockOp>(
                               block.getInput().getDefiningOp())));
    if (writes && !outputIndex.count(value))
      outputIndex[value] = i;
  }
  planCacheRowsInPlace(ret);
  for (Operation &op : body.without_terminator()) {
    if (isCollectiveStart(&op) || isa<dist::RecvOp>(op)) {
      add(op.getResult(0), BufferKind::Activation);
      continue;
    }
    if (auto wait = dyn_cast<dist::WaitOp>(op)) {
      if (!wait->getNumResults())
        continue;
      if (isa<dist::RecvStartOp>(wait.getToken().getDefiningOp())) {
        int64_t id = add(wait.getResult(), BufferKind::Activation);
        bufferOf[wait.getToken()] = id;
        continue;
      }
      bufferOf[wait.getResult()] = bufferOf.lookup(wait.getToken());
      continue;
    }
    if (isa<dist::SendOp, dist::RecvStartOp>(op))
      continue;
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      // A weight only sliced stays on the host: each rank keeps its block.
      if (exec::isHostOnly(constant.getResult())) {
        if (failed(addHostConstant(constant)))
          return failure();
        continue;
      }
      if (failed(addConstant(constant)))
        return failure();
      continue;
    }
    if (auto block = dyn_cast<exec::SliceBlockOp>(op);
        block && hostData.count(block.getInput())) {
      addHostBlock(block);
      if (!exec::isHostOnly(block.getResult()))
        materialize(block.getResult());
      continue;
    }
    if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
      addAlias(reshape.getResult(), reshape.getInput());
      continue;
    }
    // A cache's microbatch rows, in place: the slice a view of the cache
    // argument, the write a view of the returned cache (its buffer made
    // here, where the first write needs it), the concatenation nothing.
    if (auto view = rowViews.find(&op); view != rowViews.end()) {
      auto [of, offset] = view->second;
      if (!bufferOf.count(of)) {
        auto concat = cast<nn::ConcatOp>(of.getDefiningOp());
        boundOutputs[viewConcats.lookup(concat)] = add(of, BufferKind::Output);
      }
      if (isa<nn::SliceOp>(op))
        op.setAttr(exec::ExecDialect::kViewAttr,
                   UnitAttr::get(op.getContext()));
      addAlias(op.getResult(0), of, offset);
      continue;
    }
    if (viewConcats.count(&op)) {
      op.setAttr(exec::ExecDialect::kViewAttr, UnitAttr::get(op.getContext()));
      continue;
    }
    bool instruction = isKernel(&op) || isa<exec::KernelOp>(op) ||
                       isCollective(&op) || isa<exec::SliceBlockOp>(op);
    if (!instruction) {
      if (isa<dist::DistDialect>(op.getDialect()))
        return op.emitError()
               << "the exec lowering does not handle this op yet";
      return op.emitError() << "the exec lowering does not handle this op";
    }
    // A KV-cache write into an activation nothing else reads (a pipeline
    // microbatch's rows of the cache) writes it in place: the kernel, its
    // result on its cache operand's memory, moves only the new slots.
    if (auto write = dyn_cast<nn::KvCacheWriteOp>(op);
        write && !outputIndex.count(write.getResult()) &&
        write.getCache().hasOneUse()) {
      auto cache = bufferOf.find(write.getCache());
      if (cache != bufferOf.end() &&
          buffers[cache->second].kind == BufferKind::Activation) {
        addAlias(write.getResult(), write.getCache());
        continue;
      }
    }
    for (Value res : op.getResults()) {
      auto type = cast<RankedTensorType>(res.getType());
      if (!isSupportedElementType(type.getElementType()))
        return op.emitError()
               << "result type " << type << " is not supported by the runtime";
      auto it = outputIndex.find(res);
      bool isOutput = it != outputIndex.end();
      int64_t id =
          add(res, isOutput ? BufferKind::Output : BufferKind::Activation);
      if (isOutput)
        boundOutputs[it->second] = id;
    }
  }
  // Outputs no kernel writes directly are copied into caller memory.
  OpBuilder builder(ret);
  Location loc = NameLoc::get(builder.getStringAttr("return"));
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    if (boundOutputs.count(i))
      continue;
    auto copy = exec::CopyOp::create(builder, loc, ret.getOperand(i));
    ret.setOperand(i, copy.getResult());
    boundOutputs[i] = add(copy.getResult(), BufferKind::Output);
  }
  return success();
}

void BufferPlanner::computeLifetimes() {
  int64_t index = -1;
  auto read = [&](Value value) {
    int64_t id = bufferOf.lookup(value);
    buffers[id].lastRead = std::max(buffers[id].lastRead, index);
  };
  auto write = [&](Value value) {
    int64_t id = bufferOf.lookup(value);
    if (buffers[id].firstWrite < 0)
      buffers[id].firstWrite = index;
  };
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (auto wait = dyn_cast<dist::WaitOp>(op)) {
      ++index;
      Operation *start = wait.getToken().getDefiningOp();
      if (isa<dist::RecvStartOp>(start)) {
        write(wait.getToken());
        continue;
      }
      if (isa<dist::SendStartOp>(start)) {
        read(start->getOperand(0));
        continue;
      }
      // The operand of the collective stays alive until it completes.
      read(start->getOperand(0));
      read(wait.getToken());
      continue;
    }
    if (isa<dist::RecvStartOp, dist::RecvOp>(op)) {
      ++index;
      write(op.getResult(0));
    } else if (isa<dist::SendOp, dist::SendStartOp>(op)) {
      ++index;
      read(op.getOperand(0));
    } else if (isCollective(&op) || isCollectiveStart(&op)) {
      // A dispatch also reads its destinations (and counts) and writes its
      // counts.
      ++index;
      for (Value operand : op.getOperands())
        read(operand);
      for (Value result : op.getResults())
        write(result);
    } else if (auto kernel = dyn_cast<exec::KernelOp>(op)) {
      ++index;
      Value chain = kernel.getHead()->getResult(0);
      for (Value operand : kernel.getHead()->getOperands())
        read(operand);
      write(kernel.getResult());
      for (Operation *step : kernel.getSteps()) {
        for (Value operand : step->getOperands())
          if (operand != chain)
            read(operand);
        chain = step->getResult(0);
      }
    } else if (op.hasAttr(exec::ExecDialect::kViewAttr)) {
      continue; // No instruction: its bytes are where they lie.
    } else if (isKernel(&op) || isa<exec::CopyOp>(op) ||
               (isa<exec::SliceBlockOp>(op) &&
                !hostData.count(op.getResult(0)))) {
      ++index;
      for (Value operand : op.getOperands())
        read(operand);
      for (Value res : op.getResults())
        write(res);
    }
  }
  // Reads through a view keep the viewed activation alive.
  for (int64_t id = static_cast<int64_t>(buffers.size()) - 1; id >= 0; --id) {
    if (buffers[id].kind != BufferKind::Alias)
      continue;
    int64_t root = id;
    while (buffers[root].kind == BufferKind::Alias)
      root = buffers[root].aliasOf;
    buffers[root].lastRead =
        std::max(buffers[root].lastRead, buffers[id].lastRead);
  }
}

void BufferPlanner::planArena() {
  struct Interval {
    int64_t id, begin, end, size;
  };
  std::vector<Interval> intervals;
  for (auto [id, b] : llvm::enumerate(buffers)) {
    if (b.kind != BufferKind::Activation)
      continue;
    int64_t size = tensorBytes(b.type);
    size = (size + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    intervals.push_back({static_cast<int64_t>(id), b.firstWrite,
                         std::max(b.firstWrite, b.lastRead),
                         std::max<int64_t>(size, kArenaAlignment)});
    activationBytes += size;
  }
  // Largest first, each at the lowest offset free for its whole lifetime.
  std::stable_sort(
      intervals.begin(), intervals.end(),
      [](const Interval &a, const Interval &b) { return a.size > b.size; });
  struct Placed {
    int64_t begin, end, offset, size;
  };
  std::vector<Placed> placed;
  for (const Interval &iv : intervals) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Placed &p : placed)
      if (p.begin <= iv.end && iv.begin <= p.end)
        busy.push_back({p.offset, p.offset + p.size});
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + iv.size <= lo)
        break;
      offset = std::max(offset, hi);
    }
    placed.push_back({iv.begin, iv.end, offset, iv.size});
    buffers[iv.id].offset = offset;
    arenaBytes = std::max(arenaBytes, offset + iv.size);
  }
}

void BufferPlanner::writeAttributes() {
  MLIRContext *context = func.getContext();
  auto attrOf = [&](int64_t id) {
    const Buffer &b = buffers[id];
    bool activation = b.kind == BufferKind::Activation;
    bool placed = activation || b.kind == BufferKind::Alias;
    return exec::BufferAttr::get(context, id, b.kind, placed ? b.offset : 0,
                                 activation ? b.firstWrite : -1,
                                 activation ? b.lastRead : -1, b.aliasOf,
                                 b.weight);
  };
  for (BlockArgument arg : func.getArguments())
    func.setArgAttr(arg.getArgNumber(), exec::ExecDialect::kBufferAttr,
                    attrOf(bufferOf.lookup(arg)));
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (!op.getNumResults() || !bufferOf.count(op.getResult(0)))
      continue;
    SmallVector<Attribute> attrs;
    for (Value res : op.getResults())
      attrs.push_back(attrOf(bufferOf.lookup(res)));
    op.setAttr(exec::ExecDialect::kBuffersAttr, ArrayAttr::get(context, attrs));
  }
  Builder builder(context);
  func->setAttr(exec::ExecDialect::kArenaBytesAttr,
                builder.getI64IntegerAttr(arenaBytes));
  func->setAttr(exec::ExecDialect::kActivationBytesAttr,
                builder.getI64IntegerAttr(activationBytes));
}

LogicalResult BufferPlanner::run() {
  if (failed(checkSizes()) || failed(addBuffers()))
    return failure();
  computeLifetimes();
  planArena();
  writeAttributes();
  return success();
}

struct PlanBuffersPass
    : public mlir::partita::impl::PlanBuffersPassBase<PlanBuffersPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    if (!func.getBody().hasOneBlock()) {
      func.emitError() << "the exec lowering needs a single-block function";
      return signalPassFailure();
    }
    if (failed(BufferPlanner(func, maxInlineConstantBytes).run()))
      signalPassFailure();
  }
};

} // namespace
