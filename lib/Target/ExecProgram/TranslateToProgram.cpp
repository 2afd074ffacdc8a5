//===- TranslateToProgram.cpp - planned IR to the exec program ------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Walks a planned function and writes what its attributes say: one buffer
// per #exec.buffer id, one instruction per instruction op in IR order, the
// bindings of its arguments and results. Every decision (which rank, what
// fuses, which memory, what order) was made by a pass before.
//
//===----------------------------------------------------------------------===//

#include "partita/Target/ExecProgram/ExecProgram.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Exec/IR/ExecOps.h"
#include "partita/Dialect/Exec/Transforms/Passes.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/InitAllDialects.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <google/protobuf/text_format.h>

#include <cstring>

using namespace mlir;
using namespace mlir::partita;
namespace rt = ::partita::runtime;
namespace program = ::partita::program;

program::DType mlir::partita::getExecDType(Type type) {
  if (type.isF32())
    return program::F32;
  if (type.isF16())
    return program::F16;
  if (type.isBF16())
    return program::BF16;
  if (type.isInteger(64))
    return program::I64;
  if (type.isInteger(32))
    return program::I32;
  if (type.isInteger(8))
    return program::I8;
  if (type.isInteger(1))
    return program::BOOL;
  return program::DTYPE_UNSPECIFIED;
}

namespace {

/// The tensor a value holds once complete (a token's payload).
RankedTensorType tensorOf(Value value) {
  Type type = value.getType();
  if (auto token = dyn_cast<dist::TokenType>(type))
    type = token.getPayload();
  return cast<RankedTensorType>(type);
}

std::string locationString(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::string s = locationString(inner); !s.empty())
        return s;
  return "";
}

/// The op name of the kernel an nn op becomes ("matmul" for nn.matmul).
StringRef kernelName(Operation *op) { return op->getName().stripDialect(); }

program::Attribute intAttr(int64_t v) {
  program::Attribute a;
  a.set_i(v);
  return a;
}
program::Attribute floatAttr(double v) {
  program::Attribute a;
  a.set_f(v);
  return a;
}
program::Attribute boolAttr(bool v) {
  program::Attribute a;
  a.set_b(v);
  return a;
}
program::Attribute stringAttr(StringRef v) {
  program::Attribute a;
  a.set_s(v.str());
  return a;
}
program::Attribute intsAttr(ArrayRef<int64_t> v) {
  program::Attribute a;
  for (int64_t x : v)
    a.mutable_ints()->add_values(x);
  return a;
}

} // namespace

void mlir::partita::setKernelAttributes(
    Operation *op, google::protobuf::Map<std::string, program::Attribute> &m) {
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](nn::CompareOp o) {
        m["direction"] =
            stringAttr(nn::stringifyCompareDirection(o.getDirection()));
      })
      .Case([&](nn::CastOp o) {
        if (o.getSaturate())
          m["saturate"] = boolAttr(true);
      })
      .Case([&](nn::GeluOp o) {
        m["approximation"] =
            stringAttr(nn::stringifyGeluApproximation(o.getApproximation()));
      })
      .Case([&](nn::ReduceOp o) {
        m["kind"] = stringAttr(nn::stringifyReduceKind(o.getKind()));
        m["axes"] = intsAttr(o.getAxes());
        m["keepdims"] = boolAttr(o.getKeepdims());
      })
      .Case<nn::SoftmaxOp, nn::LogSoftmaxOp>(
          [&](auto o) { m["axis"] = intAttr(o.getAxis()); })
      .Case([&](nn::CumsumOp o) {
        m["axis"] = intAttr(o.getAxis());
        m["exclusive"] = boolAttr(o.getExclusive());
        m["reverse"] = boolAttr(o.getReverse());
      })
      .Case([&](nn::LayerNormOp o) {
        m["axis"] = intAttr(o.getAxis());
        m["epsilon"] = floatAttr(o.getEpsilon().convertToDouble());
        m["has_scale"] = boolAttr(static_cast<bool>(o.getScale()));
        m["has_bias"] = boolAttr(static_cast<bool>(o.getBias()));
      })
      .Case([&](nn::RmsNormOp o) {
        m["axis"] = intAttr(o.getAxis());
        m["epsilon"] = floatAttr(o.getEpsilon().convertToDouble());
        m["has_scale"] = boolAttr(static_cast<bool>(o.getScale()));
      })
      .Case([&](nn::MatmulOp o) {
        m["has_bias"] = boolAttr(static_cast<bool>(o.getBias()));
      })
      .Case([&](nn::DequantizeOp o) {
        m["bits"] = intAttr(o.getBits());
        m["block_size"] = intAttr(o.getBlockSize());
        m["has_zero_points"] = boolAttr(static_cast<bool>(o.getZeroPoints()));
      })
      .Case([&](nn::QuantizedMatmulOp o) {
        m["bits"] = intAttr(o.getBits());
        m["block_size"] = intAttr(o.getBlockSize());
        m["has_zero_points"] = boolAttr(static_cast<bool>(o.getZeroPoints()));
        m["has_bias"] = boolAttr(static_cast<bool>(o.getBias()));
      })
      .Case([&](nn::AttentionOp o) {
        m["causal"] = boolAttr(o.getCausal());
        m["scale"] = floatAttr(o.getEffectiveScale());
        m["has_mask"] = boolAttr(static_cast<bool>(o.getMask()));
        if (std::optional<APFloat> cap = o.getSoftcap())
          m["softcap"] = floatAttr(cap->convertToDouble());
        if (std::optional<int64_t> window = o.getWindow())
          m["window"] = intAttr(*window);
      })
      .Case([&](nn::AttentionGradOp o) {
        m["causal"] = boolAttr(o.getCausal());
        m["scale"] = floatAttr(o.getEffectiveScale());
        m["has_mask"] = boolAttr(static_cast<bool>(o.getMask()));
        if (std::optional<APFloat> cap = o.getSoftcap())
          m["softcap"] = floatAttr(cap->convertToDouble());
        if (std::optional<int64_t> window = o.getWindow())
          m["window"] = intAttr(*window);
      })
      .Case([&](nn::AttentionPartialOp o) {
        m["scale"] = floatAttr(o.getEffectiveScale());
        m["has_mask"] = boolAttr(static_cast<bool>(o.getMask()));
        m["has_positions"] = boolAttr(static_cast<bool>(o.getQueryPositions()));
        if (std::optional<APFloat> cap = o.getSoftcap())
          m["softcap"] = floatAttr(cap->convertToDouble());
        if (std::optional<int64_t> window = o.getWindow())
          m["window"] = intAttr(*window);
      })
      .Case([&](nn::RopeOp o) {
        m["interleaved"] = boolAttr(o.getInterleaved());
      })
      .Case([&](nn::MoeOp o) {
        m["activation"] =
            stringAttr(nn::stringifyMoeActivation(o.getActivation()));
        m["interleaved"] = boolAttr(o.getInterleaved());
        if (std::optional<APFloat> alpha = o.getAlpha())
          m["alpha"] = floatAttr(alpha->convertToDouble());
        if (std::optional<APFloat> beta = o.getBeta())
          m["beta"] = floatAttr(beta->convertToDouble());
        if (std::optional<APFloat> limit = o.getLimit())
          m["limit"] = floatAttr(limit->convertToDouble());
        m["has_fc3"] = boolAttr(static_cast<bool>(o.getFc3()));
        m["has_fc1_bias"] = boolAttr(static_cast<bool>(o.getFc1Bias()));
        m["has_fc2_bias"] = boolAttr(static_cast<bool>(o.getFc2Bias()));
        m["has_fc3_bias"] = boolAttr(static_cast<bool>(o.getFc3Bias()));
      })
      .Case([&](nn::GatherOp o) { m["axis"] = intAttr(o.getAxis()); })
      .Case([&](nn::TransposeOp o) {
        m["permutation"] = intsAttr(o.getPermutation());
      })
      .Case([&](nn::SliceOp o) {
        m["start"] = intsAttr(o.getStart());
        m["limit"] = intsAttr(o.getLimit());
        m["stride"] = intsAttr(o.getStride());
      })
      .Case<nn::ConcatOp, nn::SplitOp, nn::KvCacheWriteOp>(
          [&](auto o) { m["axis"] = intAttr(o.getAxis()); });
}

namespace {

class Translator {
public:
  explicit Translator(func::FuncOp func) : func(func) {}

  LogicalResult run();
  ExecProgram result;

private:
  LogicalResult collectBuffers();
  /// Refuses IR the exec pipeline has not planned all of: bindings without
  /// names, values an instruction reads or writes without a buffer,
  /// collectives without their group, transfers without their peer.
  LogicalResult checkPlanned();
  FailureOr<::partita::runtime::WeightView> hostView(Value value);
  LogicalResult recordInitialValue(BlockArgument arg,
                                   program::Binding &binding);
  int32_t bufferOf(Value value);
  program::Instruction *addInstruction(Operation *op);
  void emitKernel(Operation *head, ArrayRef<Operation *> steps, Value result);
  void emitSlice(exec::SliceBlockOp op);
  void emitCollective(Operation *op);
  void emitTransfer(Operation *op);
  void emitWait(dist::WaitOp op);

  func::FuncOp func;
  program::Program &prog = result.program;
  /// The value that defines each buffer, by id.
  SmallVector<Value> definedBy;
  llvm::DenseMap<Value, ::partita::runtime::WeightView> viewOf_;
  llvm::StringSet<> weightNames;
  llvm::DenseMap<Value, int32_t> tokenOf;
  int32_t nextToken = 0;
};

/// A view of all of `bytes` bytes at `data`, holding `owner`.
static rt::WeightView viewOf(const void *data, size_t bytes,
                             RankedTensorType type,
                             std::shared_ptr<const void> owner) {
  return rt::WeightView::of(
      data, bytes, getExecDType(type.getElementType()),
      std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
      std::move(owner));
}

/// Where the bytes of a constant, or of a block of one, come from: a view
/// of the module's blobs (the model's mapped bytes), which only the
/// artifact writer reads; an inline value is serialized (it is small).
FailureOr<rt::WeightView> Translator::hostView(Value value) {
  if (auto it = viewOf_.find(value); it != viewOf_.end())
    return it->second;
  rt::WeightView view;
  if (auto constant = value.getDefiningOp<nn::ConstantOp>()) {
    ElementsAttr attr = constant.getValue();
    auto viewAttr = dyn_cast<nn::WeightViewAttr>(attr);
    auto resource = viewAttr ? viewAttr.getSource()
                             : dyn_cast<DenseResourceElementsAttr>(attr);
    if (resource) {
      AsmResourceBlob *blob = resource.getRawHandle().getBlob();
      if (!blob)
        return constant.emitError()
               << "weight '" << nn::getWeightName(attr) << "' has no data";
      ArrayRef<char> bytes = blob->getData();
      view = viewOf(bytes.data(), bytes.size(),
                    cast<RankedTensorType>(resource.getType()), nullptr);
    } else if (auto dense = dyn_cast<DenseElementsAttr>(attr)) {
      auto bytes =
          std::make_shared<std::vector<char>>(exec::serializeDense(dense));
      view = viewOf(bytes->data(), bytes->size(),
                    cast<RankedTensorType>(dense.getType()), bytes);
    } else {
      return constant.emitError() << "constant of an unsupported kind";
    }
    if (viewAttr) {
      for (int64_t d = 0; d < viewAttr.getType().getRank(); ++d)
        view = view.select(d, viewAttr.getRuns(d));
      view = view.convert(getExecDType(viewAttr.getType().getElementType()));
    }
  } else {
    auto op = value.getDefiningOp<exec::SliceBlockOp>();
    FailureOr<rt::WeightView> from = hostView(op.getInput());
    if (failed(from))
      return failure();
    view = from->block(op.getDimAttr().getInt(), op.getPartsAttr().getInt(),
                       op.getBlockAttr().getInt());
  }
  auto type = cast<RankedTensorType>(value.getType());
  if (!view.valid() || view.dtype() != getExecDType(type.getElementType()) ||
      ArrayRef<int64_t>(view.shape()) != type.getShape())
    return value.getDefiningOp()->emitError()
           << "the bytes of this constant do not match its type " << type;
  viewOf_[value] = view;
  return view;
}

/// A training parameter's input: the rank's block of its initializer,
/// stored as a weight of its own that the binding names.
LogicalResult Translator::recordInitialValue(BlockArgument arg,
                                             program::Binding &binding) {
  unsigned i = arg.getArgNumber();
  auto initial = func.getArgAttrOfType<ElementsAttr>(
      i, nn::NNDialect::kInitialValueAttrName);
  if (!initial)
    return success();
  auto blocks = func.getArgAttrOfType<DenseI64ArrayAttr>(
      i, exec::ExecDialect::kInitialBlocksAttr);
  auto global = cast<RankedTensorType>(initial.getType());
  if (!blocks || blocks.size() != 2 * global.getRank())
    return func.emitError() << "argument " << i << " has no "
                            << exec::ExecDialect::kInitialBlocksAttr
                            << " (run --partita-specialize-rank first)";
  rt::WeightView view;
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(initial)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return func.emitError()
             << "parameter '" << binding.name() << "' has no data";
    ArrayRef<char> bytes = blob->getData();
    view = viewOf(bytes.data(), bytes.size(), global, nullptr);
  } else if (auto dense = dyn_cast<DenseElementsAttr>(initial)) {
    auto bytes =
        std::make_shared<std::vector<char>>(exec::serializeDense(dense));
    view = viewOf(bytes->data(), bytes->size(), global, bytes);
  } else {
    return func.emitError() << "parameter '" << binding.name()
                            << "' has an initial value of an unsupported kind";
  }
  // Named by the block, so that ranks holding the same block share it.
  std::string name = "initial/" + binding.name();
  for (int64_t d = 0; d < global.getRank(); ++d) {
    int64_t parts = blocks[2 * d], block = blocks[2 * d + 1];
    if (parts == 1)
      continue;
    view = view.block(d, parts, block);
    name += "." + std::to_string(d) + ":" + std::to_string(block) + "/" +
            std::to_string(parts);
  }
  if (!view.valid() ||
      ArrayRef<int64_t>(view.shape()) != tensorOf(arg).getShape())
    return func.emitError()
           << "parameter '" << binding.name()
           << "': its initial value's block does not match " << tensorOf(arg);
  binding.set_initial_weight(name);
  if (weightNames.insert(name).second)
    result.weights.push_back({name, std::move(view)});
  return success();
}

LogicalResult Translator::collectBuffers() {
  auto note = [&](Value value) -> LogicalResult {
    exec::BufferAttr buffer = exec::getBuffer(value);
    if (!buffer)
      return success();
    size_t id = buffer.getId();
    if (id >= definedBy.size())
      definedBy.resize(id + 1);
    if (!definedBy[id])
      definedBy[id] = value;
    return success();
  };
  for (BlockArgument arg : func.getArguments()) {
    if (!exec::getBuffer(arg))
      return func.emitError() << "argument " << arg.getArgNumber()
                              << " has no #exec.buffer (run "
                                 "--partita-plan-buffers first)";
    (void)note(arg);
  }
  for (Operation &op : func.getBody().front())
    for (Value res : op.getResults())
      (void)note(res);
  for (auto [id, value] : llvm::enumerate(definedBy))
    if (!value)
      return func.emitError() << "buffer " << id << " is not planned";

  for (auto [id, value] : llvm::enumerate(definedBy)) {
    exec::BufferAttr planned = exec::getBuffer(value);
    RankedTensorType type = tensorOf(value);
    program::Buffer *buffer = prog.add_buffers();
    buffer->set_id(static_cast<int32_t>(id));
    buffer->mutable_type()->set_dtype(getExecDType(type.getElementType()));
    for (int64_t d : type.getShape())
      buffer->mutable_type()->add_shape(d);
    buffer->set_kind(static_cast<program::Buffer::Kind>(planned.getKind()));
    switch (planned.getKind()) {
    case exec::BufferKind::Activation:
      buffer->set_arena_offset(planned.getOffset());
      break;
    case exec::BufferKind::Alias:
      buffer->set_alias_of(static_cast<int32_t>(planned.getAliasOf()));
      buffer->set_alias_offset(static_cast<uint64_t>(planned.getOffset()));
      break;
    case exec::BufferKind::Constant: {
      // Inline data is small (at most the plan's inline limit): copied.
      FailureOr<rt::WeightView> view = hostView(value);
      if (failed(view))
        return failure();
      std::string bytes(view->byteSize(), '\0');
      view->copyTo(bytes.data());
      buffer->set_data(std::move(bytes));
      break;
    }
    case exec::BufferKind::Weight: {
      buffer->set_weight(planned.getWeight().str());
      if (!weightNames.insert(planned.getWeight()).second)
        break;
      FailureOr<rt::WeightView> view = hostView(value);
      if (failed(view))
        return failure();
      result.weights.push_back({planned.getWeight().str(), std::move(*view)});
      break;
    }
    case exec::BufferKind::Input:
    case exec::BufferKind::Output:
      break;
    }
  }
  return success();
}

LogicalResult Translator::checkPlanned() {
  StringRef binding = exec::ExecDialect::kBindingAttr;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (!func.getArgAttrOfType<StringAttr>(i, binding))
      return func.emitError() << "argument " << i << " has no " << binding
                              << " (run --partita-exec-pipeline first)";
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (!func.getResultAttrOfType<StringAttr>(i, binding))
      return func.emitError() << "result " << i << " has no " << binding
                              << " (run --partita-exec-pipeline first)";
  auto planned = [](Value value) {
    if (auto kernel =
            dyn_cast<exec::KernelOp>(value.getParentBlock()->getParentOp()))
      value = kernel.getResult();
    return static_cast<bool>(exec::getBuffer(value));
  };
  // A token names a buffer only where its start writes one.
  auto writesThroughToken = [](Operation *op) {
    return dist::isGroupCollective(op) || isa<dist::RecvStartOp>(op);
  };
  auto checkValues = [&](Operation *op) -> LogicalResult {
    for (Value value : llvm::concat<Value>(op->getOperands(), op->getResults()))
      if (!isa<dist::TokenType>(value.getType()) ||
          (value.getDefiningOp() == op && writesThroughToken(op)))
        if (!planned(value))
          return op->emitError() << "a value it reads or writes has no "
                                    "#exec.buffer (run --partita-plan-buffers "
                                    "first)";
    return success();
  };
  Block &body = func.getBody().front();
  for (Operation &op : body) {
    if (auto kernel = dyn_cast<exec::KernelOp>(op)) {
      if (failed(checkValues(kernel.getHead())))
        return failure();
      for (Operation *step : kernel.getSteps())
        if (failed(checkValues(step)))
          return failure();
      continue;
    }
    bool instruction =
        isKernel(&op) || isa<exec::CopyOp, dist::WaitOp, func::ReturnOp>(op) ||
        dist::isGroupCollective(&op) ||
        isa<dist::SendOp, dist::RecvOp, dist::SendStartOp, dist::RecvStartOp>(
            op);
    if (auto slice = dyn_cast<exec::SliceBlockOp>(op))
      instruction = !exec::isHostData(slice.getResult());
    if (!instruction)
      continue;
    if (failed(checkValues(&op)))
      return failure();
    if (dist::isGroupCollective(&op) &&
        !op.getAttrOfType<DenseI32ArrayAttr>(exec::ExecDialect::kGroupAttr))
      return op.emitError() << "has no " << exec::ExecDialect::kGroupAttr
                            << " (run --partita-specialize-rank first)";
    if (isa<dist::SendOp, dist::RecvOp, dist::SendStartOp, dist::RecvStartOp>(
            op) &&
        !op.getAttrOfType<IntegerAttr>(exec::ExecDialect::kPeerAttr))
      return op.emitError() << "has no " << exec::ExecDialect::kPeerAttr
                            << " (run --partita-specialize-rank first)";
  }
  return success();
}

int32_t Translator::bufferOf(Value value) {
  // A value inside a fused kernel is the kernel's result buffer.
  if (auto *parent = value.getParentBlock()->getParentOp();
      auto kernel = dyn_cast<exec::KernelOp>(parent))
    value = kernel.getResult();
  return static_cast<int32_t>(exec::getBuffer(value).getId());
}

program::Instruction *Translator::addInstruction(Operation *op) {
  program::Instruction *inst = prog.add_instructions();
  inst->set_location(locationString(op->getLoc()));
  return inst;
}

void Translator::emitKernel(Operation *head, ArrayRef<Operation *> steps,
                            Value resultValue) {
  program::Kernel *kernel = addInstruction(head)->mutable_kernel();
  kernel->set_op(kernelName(head).str());
  for (Value operand : head->getOperands())
    kernel->add_operands(bufferOf(operand));
  if (steps.empty())
    for (Value res : head->getResults())
      kernel->add_results(bufferOf(res));
  else
    kernel->add_results(bufferOf(resultValue));
  setKernelAttributes(head, *kernel->mutable_attributes());
  Value chain = head->getResult(0);
  for (Operation *step : steps) {
    program::ElementwiseStep *s = kernel->add_epilogue();
    s->set_op(kernelName(step).str());
    s->set_operand(-1);
    if (step->getNumOperands() == 2) {
      bool chainFirst = step->getOperand(0) == chain;
      s->set_operand(bufferOf(step->getOperand(chainFirst ? 1 : 0)));
      s->set_operand_first(!chainFirst);
    }
    setKernelAttributes(step, *s->mutable_attributes());
    chain = step->getResult(0);
  }
  ++result.numKernels;
  result.numFusedOps += static_cast<int64_t>(steps.size());
}

void Translator::emitSlice(exec::SliceBlockOp op) {
  program::Kernel *kernel = addInstruction(op)->mutable_kernel();
  kernel->set_op("slice");
  kernel->add_operands(bufferOf(op.getInput()));
  kernel->add_results(bufferOf(op.getResult()));
  auto type = cast<RankedTensorType>(op.getType());
  int64_t dim = op.getDimAttr().getInt();
  SmallVector<int64_t> start(type.getRank(), 0), limit(type.getShape()),
      stride(type.getRank(), 1);
  start[dim] = op.getBlockAttr().getInt() * type.getDimSize(dim);
  limit[dim] = start[dim] + type.getDimSize(dim);
  auto &attrs = *kernel->mutable_attributes();
  attrs["start"] = intsAttr(start);
  attrs["limit"] = intsAttr(limit);
  attrs["stride"] = intsAttr(stride);
  ++result.numKernels;
}

void Translator::emitCollective(Operation *op) {
  program::Collective *c = addInstruction(op)->mutable_collective();
  if (dist::isAsyncStart(op)) {
    c->set_async(true);
    c->set_token(nextToken);
    tokenOf[op->getResult(0)] = nextToken++;
  }
  auto group =
      op->getAttrOfType<DenseI32ArrayAttr>(exec::ExecDialect::kGroupAttr);
  for (int32_t r : group.asArrayRef())
    c->add_group(r);
  c->set_operand(bufferOf(op->getOperand(0)));
  c->set_result(bufferOf(op->getResult(0)));
  auto dimAttr = [&](StringRef name) {
    return op->getAttrOfType<IntegerAttr>(name).getInt();
  };
  auto reduction = [&] {
    return dist::stringifyReductionKind(
               op->getAttrOfType<dist::ReductionKindAttr>("reduction")
                   .getValue())
        .str();
  };
  ExecCollectiveStat stat = getCollectiveStat(op, group.size());
  if (stat.kind == "all_reduce") {
    c->set_kind(program::Collective::ALL_REDUCE);
    c->set_reduction(reduction());
  } else if (stat.kind == "all_gather") {
    c->set_kind(program::Collective::ALL_GATHER);
    c->set_dim(dimAttr("gather_dim"));
  } else if (stat.kind == "reduce_scatter") {
    c->set_kind(program::Collective::REDUCE_SCATTER);
    c->set_reduction(reduction());
    c->set_dim(dimAttr("scatter_dim"));
  } else if (stat.kind == "all_to_all") {
    c->set_kind(program::Collective::ALL_TO_ALL);
    c->set_dim(dimAttr("split_dim"));
    c->set_concat_dim(dimAttr("concat_dim"));
  } else if (auto dispatch = dyn_cast<dist::DispatchOp>(op)) {
    c->set_kind(program::Collective::DISPATCH);
    c->set_destinations(bufferOf(dispatch.getDestinations()));
    c->set_counts(bufferOf(dispatch.getCounts()));
  } else if (auto back = dyn_cast<dist::DispatchReturnOp>(op)) {
    c->set_kind(program::Collective::DISPATCH_RETURN);
    c->set_destinations(bufferOf(back.getDestinations()));
    c->set_counts(bufferOf(back.getCounts()));
  } else {
    c->set_kind(program::Collective::COLLECTIVE_PERMUTE);
    c->set_shift(dimAttr("shift"));
  }
  result.collectives.push_back(std::move(stat));
}

void Translator::emitTransfer(Operation *op) {
  program::PointToPoint *p2p = addInstruction(op)->mutable_p2p();
  if (dist::isAsyncStart(op)) {
    p2p->set_async(true);
    p2p->set_token(nextToken);
    tokenOf[op->getResult(0)] = nextToken++;
  }
  ExecTransferStat stat;
  stat.send = isa<dist::SendOp, dist::SendStartOp>(op);
  Value data = stat.send ? op->getOperand(0) : op->getResult(0);
  int32_t id = bufferOf(data);
  p2p->set_kind(stat.send ? program::PointToPoint::SEND
                          : program::PointToPoint::RECV);
  p2p->set_buffer(id);
  p2p->set_peer(
      op->getAttrOfType<IntegerAttr>(exec::ExecDialect::kPeerAttr).getInt());
  p2p->set_tag(op->getAttrOfType<IntegerAttr>("tag").getInt());
  stat.peer = p2p->peer();
  stat.bytes = tensorBytes(tensorOf(data));
  result.transfers.push_back(stat);
}

void Translator::emitWait(dist::WaitOp op) {
  addInstruction(op)->mutable_wait()->set_token(tokenOf.lookup(op.getToken()));
}

LogicalResult Translator::run() {
  auto rank = func->getAttrOfType<IntegerAttr>(exec::ExecDialect::kRankAttr);
  auto worldSize =
      func->getAttrOfType<IntegerAttr>(exec::ExecDialect::kWorldSizeAttr);
  auto arena =
      func->getAttrOfType<IntegerAttr>(exec::ExecDialect::kArenaBytesAttr);
  auto activations =
      func->getAttrOfType<IntegerAttr>(exec::ExecDialect::kActivationBytesAttr);
  if (!rank || !worldSize || !arena || !activations)
    return func.emitError() << "the function is not a planned rank program "
                               "(run --partita-exec-pipeline first)";
  prog.set_format_version(1);
  prog.set_rank(static_cast<int32_t>(rank.getInt()));
  prog.set_world_size(static_cast<int32_t>(worldSize.getInt()));
  if (failed(checkPlanned()) || failed(collectBuffers()))
    return failure();

  for (BlockArgument arg : func.getArguments()) {
    program::Binding *binding = prog.add_inputs();
    binding->set_name(
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                          exec::ExecDialect::kBindingAttr)
            .str());
    binding->set_buffer(bufferOf(arg));
    if (failed(recordInitialValue(arg, *binding)))
      return failure();
  }
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator()) {
    if (op.hasAttr(exec::ExecDialect::kViewAttr))
      continue; // The plan left its bytes where they lie.
    if (auto kernel = dyn_cast<exec::KernelOp>(op))
      emitKernel(kernel.getHead(), kernel.getSteps(), kernel.getResult());
    else if (isKernel(&op))
      emitKernel(&op, {}, Value());
    else if (auto copy = dyn_cast<exec::CopyOp>(op))
      emitKernel(copy, {}, Value());
    else if (auto slice = dyn_cast<exec::SliceBlockOp>(op);
             slice && !exec::isHostData(slice.getResult()))
      emitSlice(slice);
    else if (dist::isGroupCollective(&op))
      emitCollective(&op);
    else if (isa<dist::SendOp, dist::RecvOp, dist::SendStartOp,
                 dist::RecvStartOp>(op))
      emitTransfer(&op);
    else if (auto wait = dyn_cast<dist::WaitOp>(op))
      emitWait(wait);
  }
  for (auto [i, value] : llvm::enumerate(body.getTerminator()->getOperands())) {
    program::Binding *binding = prog.add_outputs();
    binding->set_name(
        func.getResultAttrOfType<StringAttr>(i, exec::ExecDialect::kBindingAttr)
            .str());
    binding->set_buffer(bufferOf(value));
  }
  prog.set_arena_bytes(arena.getInt());
  result.peakActivationBytes = arena.getInt();
  result.totalActivationBytes = activations.getInt();
  return success();
}

} // namespace

ExecCollectiveStat mlir::partita::getCollectiveStat(Operation *op,
                                                    int64_t groupSize) {
  ExecCollectiveStat stat;
  for (StringRef axis :
       dist::getStringRefs(op->getAttrOfType<ArrayAttr>("axes")))
    stat.axes.push_back(axis.str());
  stat.count = 1;
  // The sync form and its `_start` form carry the same attributes.
  StringRef kind = op->getName().stripDialect();
  kind.consume_back("_start");
  stat.kind = kind.str();
  int64_t operandBytes = tensorBytes(tensorOf(op->getOperand(0)));
  int64_t resultBytes = tensorBytes(tensorOf(op->getResult(0)));
  int64_t n = groupSize;
  // The report's payload (the unsharded side's buffer) and the bytes a
  // rank sends under the ring algorithm.
  if (kind == "all_reduce") {
    stat.payload = operandBytes;
    stat.bytes = 2 * (n - 1) * stat.payload / n;
  } else if (kind == "all_gather") {
    stat.payload = resultBytes;
    stat.bytes = (n - 1) * stat.payload / n;
  } else if (kind == "reduce_scatter" || kind == "all_to_all") {
    stat.payload = operandBytes;
    stat.bytes = (n - 1) * stat.payload / n;
  } else if (kind == "dispatch" || kind == "dispatch_return") {
    // The rows a rank sends at most (dispatch's operand, the rows that
    // come back to it); the bytes are what leaves the rank when routing
    // spreads them evenly over the group, as the cost model assumes.
    stat.payload = kind == "dispatch" ? operandBytes : resultBytes;
    stat.bytes = (n - 1) * stat.payload / n;
  } else {
    stat.payload = operandBytes;
    stat.bytes = stat.payload;
  }
  if (auto reason = op->getAttrOfType<StringAttr>(dist::kReasonAttr))
    stat.reason = reason.str();
  return stat;
}

FailureOr<ExecProgram>
mlir::partita::translateToExecProgram(func::FuncOp func) {
  Translator translator(func);
  if (failed(translator.run()))
    return failure();
  return std::move(translator.result);
}

void mlir::partita::registerToExecProgramTranslation() {
  TranslateFromMLIRRegistration registration(
      "exec-to-proto", "Write a planned rank program as the exec textproto",
      [](Operation *op, raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        auto func =
            module ? module.lookupSymbol<func::FuncOp>("main") : func::FuncOp();
        if (!func)
          return op->emitError() << "expected a module with a planned @main";
        FailureOr<ExecProgram> exec = translateToExecProgram(func);
        if (failed(exec))
          return failure();
        std::string text;
        google::protobuf::TextFormat::PrintToString(exec->program, &text);
        os << text;
        return success();
      },
      [](DialectRegistry &registry) { registerAllDialects(registry); });
}
