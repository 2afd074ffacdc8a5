//===- DistAttrs.cpp - dist dialect attributes and types ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "AxisSyntax.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::partita::dist;

#include "partita/Dialect/Dist/IR/DistEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "partita/Dialect/Dist/IR/DistAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "partita/Dialect/Dist/IR/DistTypes.cpp.inc"

void DistDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "partita/Dialect/Dist/IR/DistAttrs.cpp.inc"
      >();
}

void DistDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "partita/Dialect/Dist/IR/DistTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

namespace {

/// The product of the sizes of `axes` on `mesh`; an unknown axis counts as 1
/// so that callers on unverified IR do not divide by zero.
int64_t productOfAxisSizes(MeshOp mesh, ArrayAttr axes) {
  int64_t product = 1;
  for (StringAttr axis : axes.getAsRange<StringAttr>())
    product *= mesh.getAxisSize(axis.getValue()).value_or(1);
  return product;
}

} // namespace

ShardingAttr ShardingAttr::get(MLIRContext *context, StringRef mesh,
                               ArrayRef<SmallVector<StringRef>> dimAxes,
                               ArrayRef<StringRef> partialAxes) {
  Builder builder(context);
  SmallVector<ArrayAttr> dims =
      llvm::map_to_vector(dimAxes, [&](ArrayRef<StringRef> axes) -> ArrayAttr {
        return builder.getStrArrayAttr(axes);
      });
  SmallVector<StringAttr> partial = llvm::map_to_vector(
      partialAxes, [&](StringRef axis) { return builder.getStringAttr(axis); });
  return get(context, FlatSymbolRefAttr::get(context, mesh), dims, partial);
}

ShardingAttr ShardingAttr::getReplicated(MLIRContext *context, StringRef mesh,
                                         int64_t rank) {
  SmallVector<SmallVector<StringRef>> dims(rank);
  return get(context, mesh, dims);
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  FlatSymbolRefAttr mesh;
  if (parser.parseLess() || parser.parseAttribute(mesh) || parser.parseComma())
    return {};

  SmallVector<ArrayAttr> dims;
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            SmallVector<StringAttr> axes;
            if (syntax::parseAxisSet(parser, axes))
              return failure();
            dims.push_back(parser.getBuilder().getArrayAttr(
                SmallVector<Attribute>(axes.begin(), axes.end())));
            return success();
          }))
    return {};

  SmallVector<StringAttr> partial;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        syntax::parseAxisArray(parser, partial))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(),
                    mesh, dims, partial);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printer.printAttributeWithoutType(getMesh());
  printer << ", [";
  llvm::interleaveComma(getDimAxes(), printer, [&](ArrayAttr axes) {
    syntax::printAxisSet(printer,
                         llvm::to_vector(axes.getAsRange<StringAttr>()));
  });
  printer << ']';
  if (!getPartialAxes().empty()) {
    printer << ", partial = ";
    syntax::printAxisArray(printer, getPartialAxes());
  }
  printer << '>';
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   FlatSymbolRefAttr mesh,
                                   ArrayRef<ArrayAttr> dimAxes,
                                   ArrayRef<StringAttr> partialAxes) {
  assert(mesh && "a sharding needs a mesh");
  llvm::StringSet<> seen;
  auto checkAxis = [&](Attribute attr) -> LogicalResult {
    auto axis = dyn_cast<StringAttr>(attr);
    if (!axis)
      return emitError() << "sharding_c3: " << attr << " is not an axis name";
    if (!seen.insert(axis.getValue()).second)
      return emitError() << "sharding_c1: axis '" << axis.getValue()
                         << "' is used more than once";
    return success();
  };
  for (ArrayAttr axes : dimAxes) {
    assert(axes && "a sharding needs an axis list for every dimension");
    for (Attribute axis : axes)
      if (failed(checkAxis(axis)))
        return failure();
  }
  for (StringAttr axis : partialAxes)
    if (failed(checkAxis(axis)))
      return failure();
  return success();
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   RankedTensorType type, MeshOp mesh) const {
  // Attributes built with `get` skip verification in release builds.
  if (failed(verify(emitError, getMesh(), getDimAxes(), getPartialAxes())))
    return failure();
  if (getRank() != type.getRank())
    return emitError() << "sharding_c2: the sharding has " << getRank()
                       << " dimension entries but " << type << " has rank "
                       << type.getRank();

  auto checkOnMesh = [&](StringAttr axis) -> LogicalResult {
    if (mesh.hasAxis(axis.getValue()))
      return success();
    return emitError() << "sharding_c3: '" << axis.getValue()
                       << "' is not an axis of mesh @" << mesh.getSymName();
  };
  for (ArrayAttr axes : getDimAxes())
    for (StringAttr axis : axes.getAsRange<StringAttr>())
      if (failed(checkOnMesh(axis)))
        return failure();
  for (StringAttr axis : getPartialAxes())
    if (failed(checkOnMesh(axis)))
      return failure();

  for (auto [dim, axes] : llvm::enumerate(getDimAxes())) {
    int64_t size = type.getDimSize(dim);
    int64_t parts = productOfAxisSizes(mesh, axes);
    if (ShapedType::isDynamic(size) || size % parts == 0)
      continue;
    return emitError() << "sharding_c4: dimension " << dim << " of size "
                       << size << " is not divisible by " << parts
                       << ", the number of devices along ["
                       << llvm::join(getStringRefs(axes), ", ") << "]";
  }
  return success();
}

SmallVector<StringRef> ShardingAttr::getAxesOfDim(unsigned dim) const {
  return getStringRefs(getDimAxes()[dim]);
}

SmallVector<StringRef> ShardingAttr::getPartialAxisNames() const {
  return llvm::map_to_vector(getPartialAxes(),
                             [](StringAttr axis) { return axis.getValue(); });
}

bool ShardingAttr::isReplicated() const {
  return !isPartial() && llvm::all_of(getDimAxes(), [](ArrayAttr axes) {
    return axes.empty();
  });
}

bool ShardingAttr::usesAxis(StringRef axis) const {
  auto isAxis = [&](Attribute attr) {
    return cast<StringAttr>(attr).getValue() == axis;
  };
  return llvm::any_of(getPartialAxes(), isAxis) ||
         llvm::any_of(getDimAxes(), [&](ArrayAttr axes) {
           return llvm::any_of(axes, isAxis);
         });
}

SmallVector<int64_t> ShardingAttr::getLocalShape(ArrayRef<int64_t> globalShape,
                                                 MeshOp mesh) const {
  assert(globalShape.size() == getDimAxes().size() && "rank mismatch");
  SmallVector<int64_t> shape(globalShape);
  for (auto [size, axes] : llvm::zip_equal(shape, getDimAxes()))
    if (!ShapedType::isDynamic(size))
      size /= productOfAxisSizes(mesh, axes);
  return shape;
}

SmallVector<int64_t> ShardingAttr::getGlobalShape(ArrayRef<int64_t> localShape,
                                                  MeshOp mesh) const {
  assert(localShape.size() == getDimAxes().size() && "rank mismatch");
  SmallVector<int64_t> shape(localShape);
  for (auto [size, axes] : llvm::zip_equal(shape, getDimAxes()))
    if (!ShapedType::isDynamic(size))
      size *= productOfAxisSizes(mesh, axes);
  return shape;
}

RankedTensorType ShardingAttr::getLocalType(RankedTensorType type,
                                            MeshOp mesh) const {
  return type.clone(getLocalShape(type.getShape(), mesh));
}

//===----------------------------------------------------------------------===//
// The plans passes record on the module
//===----------------------------------------------------------------------===//

LogicalResult PipelineAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t stages, int64_t microbatches,
                                   PipelineSchedule schedule,
                                   int64_t virtualStages,
                                   DenseF64ArrayAttr stageSeconds) {
  if (stages < 1 || microbatches < 1 || virtualStages < 1)
    return emitError() << "pipeline_c1: stages (" << stages
                       << "), microbatches (" << microbatches
                       << ") and virtual_stages (" << virtualStages
                       << ") are at least 1";
  if (schedule == PipelineSchedule::GPipe && virtualStages != 1)
    return emitError() << "pipeline_c1: the gpipe schedule has no virtual "
                          "stages, got "
                       << virtualStages;
  if (!stageSeconds || stageSeconds.size() != stages)
    return emitError() << "pipeline_c2: " << stages << " stages but "
                       << (stageSeconds ? stageSeconds.size() : 0)
                       << " stage_seconds";
  return success();
}

LogicalResult
SequenceOrderAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          StringAttr axis, DenseI64ArrayAttr order) {
  SmallVector<bool> seen(order ? order.size() : 0, false);
  for (int64_t position : order ? order.asArrayRef() : ArrayRef<int64_t>()) {
    if (position < 0 || position >= static_cast<int64_t>(seen.size()) ||
        seen[position])
      return emitError() << "sequence_order_c1: the order is not a "
                            "permutation of 0 .. "
                         << static_cast<int64_t>(seen.size()) - 1;
    seen[position] = true;
  }
  return success();
}

LogicalResult SequenceParallelAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, SequenceParallelMode mode,
    StringAttr axis, int64_t ranks, BoolAttr causal, BoolAttr zigzag,
    FloatAttr imbalance, FloatAttr contiguousImbalance) {
  if (ranks < 1)
    return emitError() << "sequence_parallel_c1: ranks is " << ranks
                       << "; it is at least 1";
  bool ringFields = causal || zigzag || imbalance || contiguousImbalance;
  if (ringFields && mode != SequenceParallelMode::Ring)
    return emitError() << "sequence_parallel_c1: causal, zigzag and the "
                          "imbalances describe ring attention, not "
                       << stringifySequenceParallelMode(mode);
  return success();
}

//===----------------------------------------------------------------------===//
// TokenType
//===----------------------------------------------------------------------===//

LogicalResult TokenType::verify(function_ref<InFlightDiagnostic()> emitError,
                                Type payload) {
  if (isa<NoneType>(payload))
    return success();
  auto tensor = dyn_cast<RankedTensorType>(payload);
  if (tensor && tensor.hasStaticShape())
    return success();
  return emitError() << "token_c1: the payload must be a statically shaped "
                        "tensor or none, got "
                     << payload;
}
