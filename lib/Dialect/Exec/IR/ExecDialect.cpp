//===- ExecDialect.cpp - exec dialect -------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Exec/IR/ExecDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "partita/Dialect/Exec/IR/ExecOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::partita::exec;

#include "partita/Dialect/Exec/IR/ExecDialect.cpp.inc"
#include "partita/Dialect/Exec/IR/ExecEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "partita/Dialect/Exec/IR/ExecAttrs.cpp.inc"

void ExecDialect::initialize() {
  registerAttributes();
  registerOps();
}

void ExecDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "partita/Dialect/Exec/IR/ExecAttrs.cpp.inc"
      >();
}

LogicalResult BufferAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t id, BufferKind kind, int64_t offset,
                                 int64_t firstWrite, int64_t lastRead,
                                 int64_t aliasOf, StringRef weight) {
  if (id < 0)
    return emitError() << "buffer_c1: id " << id << " is negative";
  if (kind == BufferKind::Alias && (aliasOf < 0 || aliasOf == id))
    return emitError() << "buffer_c2: an alias names another buffer, not "
                       << aliasOf;
  if (kind == BufferKind::Weight && weight.empty())
    return emitError() << "buffer_c2: a weight has a name";
  if (kind == BufferKind::Activation &&
      (offset % 64 != 0 || firstWrite > lastRead))
    return emitError() << "buffer_c3: an activation sits at a multiple of 64 "
                          "and is written before it is last read";
  if (offset < 0 || (offset != 0 && kind != BufferKind::Activation &&
                     kind != BufferKind::Alias))
    return emitError() << "buffer_c4: only an activation or an alias has an "
                          "offset, and it is non-negative (got "
                       << offset << ")";
  return success();
}

namespace {

/// Checks an attribute the dialect owns, named `name`, on `op`.
LogicalResult verifyExecAttribute(Operation *op, StringRef name,
                                  Attribute attr) {
  auto fail = [&](const Twine &what) {
    return op->emitError() << "'" << name << "' must be " << what;
  };
  if (name == ExecDialect::kRankAttr || name == ExecDialect::kWorldSizeAttr ||
      name == ExecDialect::kArenaBytesAttr ||
      name == ExecDialect::kActivationBytesAttr ||
      name == ExecDialect::kPeerAttr) {
    auto value = dyn_cast<IntegerAttr>(attr);
    if (!value || value.getInt() < 0)
      return fail("a non-negative integer");
    return success();
  }
  if (name == ExecDialect::kGroupAttr) {
    auto group = dyn_cast<DenseI32ArrayAttr>(attr);
    if (!group || group.empty() ||
        llvm::any_of(group.asArrayRef(), [](int32_t r) { return r < 0; }))
      return fail("a non-empty array<i32> of global ranks");
    return success();
  }
  if (name == ExecDialect::kBuffersAttr) {
    auto buffers = dyn_cast<ArrayAttr>(attr);
    if (!buffers || buffers.size() != op->getNumResults() ||
        !llvm::all_of(buffers, llvm::IsaPred<BufferAttr>))
      return fail("one #exec.buffer per result");
    return success();
  }
  if (name == ExecDialect::kOutputsElsewhereAttr) {
    auto names = dyn_cast<ArrayAttr>(attr);
    if (!names || !llvm::all_of(names, llvm::IsaPred<StringAttr>))
      return fail("an array of output names");
    return success();
  }
  if (name == ExecDialect::kViewAttr) {
    StringRef opName = op->getName().getStringRef();
    if (!isa<UnitAttr>(attr) || (opName != "nn.slice" && opName != "nn.concat"))
      return fail("a unit attribute on an nn.slice or nn.concat");
    return success();
  }
  return op->emitError() << "unknown exec attribute '" << name << "'";
}

} // namespace

LogicalResult ExecDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  return verifyExecAttribute(op, attr.getName().getValue(), attr.getValue());
}

LogicalResult ExecDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned /*region*/,
                                                    unsigned /*arg*/,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kBufferAttr) {
    if (!isa<BufferAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be an #exec.buffer";
    return success();
  }
  if (name == kBindingAttr) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a string";
    return success();
  }
  if (name == kInitialBlocksAttr) {
    auto blocks = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!blocks || blocks.size() % 2 != 0)
      return op->emitError()
             << "'" << name << "' must be (parts, block) pairs of i64";
    for (int64_t i = 0; i < blocks.size(); i += 2)
      if (blocks[i] < 1 || blocks[i + 1] < 0 || blocks[i + 1] >= blocks[i])
        return op->emitError() << "'" << name << "': block " << blocks[i + 1]
                               << " of " << blocks[i] << " parts";
    return success();
  }
  return op->emitError() << "unknown exec argument attribute '" << name << "'";
}

LogicalResult ExecDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned /*region*/,
                                                       unsigned /*result*/,
                                                       NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != kBindingAttr)
    return op->emitError() << "unknown exec result attribute '" << name << "'";
  if (!isa<StringAttr>(attr.getValue()))
    return op->emitError() << "'" << name << "' must be a string";
  return success();
}
