//===- ExecOps.cpp - exec dialect ops -------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Exec/IR/ExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "partita/runtime/Sha256.h"
#include "llvm/ADT/StringExtras.h"

#include <cstring>

using namespace mlir;
using namespace mlir::partita::exec;

#define GET_OP_CLASSES
#include "partita/Dialect/Exec/IR/ExecOps.cpp.inc"

void ExecDialect::registerOps() {
  addOperations<
#define GET_OP_LIST
#include "partita/Dialect/Exec/IR/ExecOps.cpp.inc"
      >();
}

BufferAttr mlir::partita::exec::getBuffer(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto function =
        dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
    if (!function)
      return nullptr;
    return function.getArgAttrOfType<BufferAttr>(arg.getArgNumber(),
                                                 ExecDialect::kBufferAttr);
  }
  auto result = cast<OpResult>(value);
  auto buffers =
      result.getOwner()->getAttrOfType<ArrayAttr>(ExecDialect::kBuffersAttr);
  if (!buffers || buffers.size() <= result.getResultNumber())
    return nullptr;
  return dyn_cast<BufferAttr>(buffers[result.getResultNumber()]);
}

namespace {

bool onlySliced(Value value) {
  return !value.use_empty() && llvm::all_of(value.getUsers(), [](Operation *u) {
    return isa<SliceBlockOp>(u);
  });
}

bool isConstant(Value value) {
  Operation *def = value.getDefiningOp();
  return def && def->hasTrait<OpTrait::ConstantLike>();
}

} // namespace

bool mlir::partita::exec::isHostData(Value value) {
  if (isConstant(value))
    return onlySliced(value);
  auto block = value.getDefiningOp<SliceBlockOp>();
  return block && isHostData(block.getInput());
}

bool mlir::partita::exec::isHostOnly(Value value) {
  return isHostData(value) && onlySliced(value);
}

size_t mlir::partita::exec::getElementBytes(Type type) {
  return type.isInteger(1) ? 1 : type.getIntOrFloatBitWidth() / 8;
}

std::vector<char> mlir::partita::exec::serializeDense(DenseElementsAttr attr) {
  Type element = attr.getElementType();
  size_t width = getElementBytes(element);
  std::vector<char> bytes(attr.getNumElements() * width);
  int64_t i = 0;
  if (isa<FloatType>(element)) {
    for (const APFloat &v : attr.getValues<APFloat>()) {
      uint64_t bits = v.bitcastToAPInt().getZExtValue();
      std::memcpy(bytes.data() + i++ * width, &bits, width);
    }
  } else {
    for (const APInt &v : attr.getValues<APInt>()) {
      uint64_t bits = width == 1 && element.isInteger(1) ? v.getBoolValue()
                                                         : v.getZExtValue();
      std::memcpy(bytes.data() + i++ * width, &bits, width);
    }
  }
  return bytes;
}

std::string mlir::partita::exec::getConstantWeightName(RankedTensorType type,
                                                       ArrayRef<char> bytes) {
  std::string header;
  llvm::raw_string_ostream(header) << type;
  ::partita::runtime::Sha256 hash;
  hash.update(header.data(), header.size());
  hash.update(bytes.data(), bytes.size());
  return "constant." +
         ::partita::runtime::Sha256::hex(hash.finish()).substr(0, 16);
}

std::string mlir::partita::exec::getBlockWeightName(StringRef name,
                                                    SliceBlockOp op) {
  std::string block =
      (name + ".shard" + Twine(op.getDim()) + "_" + Twine(op.getBlock())).str();
  // A block without elements has no bytes; its size along `dim` may be 0.
  if (cast<RankedTensorType>(op.getType()).getNumElements() == 0)
    return block + ".empty";
  return block + "of" + std::to_string(op.getParts());
}

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

SmallVector<Operation *> KernelOp::getSteps() {
  SmallVector<Operation *> steps;
  for (Operation &op : getBody().front().without_terminator())
    if (&op != getHead())
      steps.push_back(&op);
  return steps;
}

LogicalResult KernelOp::verify() {
  Block &body = getBody().front();
  if (body.getOperations().size() < 3 || getHead()->getNumResults() != 1)
    return emitOpError("kernel_c1: the body holds a head with one result and "
                       "at least one step");
  Value chain = getHead()->getResult(0);
  for (Operation *step : getSteps()) {
    if (step->getNumResults() != 1 ||
        !llvm::is_contained(step->getOperands(), chain) ||
        step->getResult(0).getType() != chain.getType())
      return step->emitOpError("kernel_c2: a step reads the value of the op "
                               "before it and has its type");
    chain = step->getResult(0);
  }
  if (body.getTerminator()->getOperand(0) != chain ||
      chain.getType() != getType())
    return emitOpError("kernel_c3: the body yields the last step's result");
  return success();
}

//===----------------------------------------------------------------------===//
// SliceBlockOp
//===----------------------------------------------------------------------===//

LogicalResult SliceBlockOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto result = cast<RankedTensorType>(getType());
  int64_t dim = getDimAttr().getInt();
  int64_t block = getBlockAttr().getInt(), parts = getPartsAttr().getInt();
  if (dim < 0 || dim >= input.getRank())
    return emitOpError("slice_block_c1: dim ")
           << dim << " is not a dimension of " << input;
  if (block < 0 || block >= parts)
    return emitOpError("slice_block_c2: block ")
           << block << " is not one of " << parts;
  SmallVector<int64_t> expected(input.getShape());
  if (expected[dim] % parts == 0)
    expected[dim] /= parts;
  if (expected[dim] * parts != input.getDimSize(dim) ||
      result != input.clone(expected))
    return emitOpError("slice_block_c3: the result type is ")
           << input << " with dimension " << dim << " divided by " << parts;
  return success();
}
