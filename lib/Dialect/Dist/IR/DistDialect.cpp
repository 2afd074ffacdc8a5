//===- DistDialect.cpp - dist dialect -------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/IR/DistDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "partita/Dialect/Dist/IR/DistOps.h"

using namespace mlir;
using namespace mlir::partita::dist;

#include "partita/Dialect/Dist/IR/DistDialect.cpp.inc"

void DistDialect::initialize() {
  registerAttributes();
  registerTypes();
  registerOps();
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//
//
// Each diagnostic starts with the id of the constraint it enforces, as the
// dialect's documentation lists them (attrs_cN) or the attribute's own.

namespace {

InFlightDiagnostic emitAttrError(Operation *op, NamedAttribute attribute,
                                 unsigned number) {
  return op->emitError() << "attrs_c" << number << ": '"
                         << attribute.getName().getValue() << "' ";
}

/// The first dist.mesh of the module that holds `op` (or is `op`); null if
/// there is none.
MeshOp moduleMesh(Operation *op) {
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    module = op->getParentOfType<ModuleOp>();
  if (!module)
    return {};
  for (auto mesh : module.getOps<MeshOp>())
    return mesh;
  return {};
}

/// Checks that `sharding` is a #dist.sharding of rank `rank`.
LogicalResult verifyShardingOf(Operation *op, NamedAttribute attribute,
                               unsigned number, Attribute sharding, Type type,
                               StringRef what) {
  auto attr = dyn_cast<ShardingAttr>(sharding);
  if (!attr)
    return emitAttrError(op, attribute, number)
           << "expects a #dist.sharding, got " << sharding;
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (tensor && attr.getRank() != tensor.getRank())
    return emitAttrError(op, attribute, number)
           << "has " << attr.getRank() << " dimension entries but " << what
           << " has rank " << tensor.getRank();
  return success();
}

/// Checks that `axis` is an axis of the mesh of the module holding `op`.
LogicalResult verifyAxisOfModuleMesh(Operation *op, StringRef id,
                                     StringRef axis) {
  MeshOp mesh = moduleMesh(op);
  if (!mesh)
    return op->emitError() << id << ": axis '" << axis
                           << "' but the module declares no dist.mesh";
  if (!mesh.hasAxis(axis))
    return op->emitError() << id << ": '" << axis
                           << "' is not an axis of mesh @" << mesh.getSymName();
  return success();
}

/// The checks of the module-level records that need the mesh.
LogicalResult verifyModuleRecord(Operation *op, Attribute value) {
  if (auto order = dyn_cast<SequenceOrderAttr>(value))
    return verifyAxisOfModuleMesh(op, "sequence_order_c2",
                                  order.getAxis().getValue());
  if (auto plan = dyn_cast<SequenceParallelAttr>(value)) {
    StringRef axis = plan.getAxis().getValue();
    if (failed(verifyAxisOfModuleMesh(op, "sequence_parallel_c2", axis)))
      return failure();
    int64_t size = *moduleMesh(op).getAxisSize(axis);
    if (size != plan.getRanks())
      return op->emitError()
             << "sequence_parallel_c2: " << plan.getRanks() << " ranks, but '"
             << axis << "' has size " << size;
    return success();
  }
  auto pipeline = cast<PipelineAttr>(value);
  MeshOp mesh = moduleMesh(op);
  if (!mesh)
    return success();
  int64_t stages = mesh.getRoleSize(AxisRole::Pipeline);
  if (stages != pipeline.getStages())
    return op->emitError() << "pipeline_c3: " << pipeline.getStages()
                           << " stages, but the pipeline axis of mesh @"
                           << mesh.getSymName() << " has size " << stages;
  return success();
}

} // namespace

LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attribute) {
  StringRef name = attribute.getName().getValue();
  Attribute value = attribute.getValue();
  if (name == kResultShardingsAttr) {
    auto list = dyn_cast<ArrayAttr>(value);
    if (!list || list.size() != op->getNumResults())
      return emitAttrError(op, attribute, 2)
             << "expects an array of " << op->getNumResults()
             << " #dist.sharding, got " << value;
    for (auto [sharding, result] : llvm::zip(list, op->getResults()))
      if (failed(verifyShardingOf(op, attribute, 2, sharding, result.getType(),
                                  "its result")))
        return failure();
    return success();
  }
  if (name == kStrategyAttr || name == kPriorityAttr) {
    bool kind =
        name == kStrategyAttr ? isa<UnitAttr>(value) : isa<IntegerAttr>(value);
    if (!kind || !isa<AnnotateOp>(op))
      return emitAttrError(op, attribute, 3)
             << "is " << (name == kStrategyAttr ? "a unit" : "an integer")
             << " attribute on a dist.annotate";
    return success();
  }
  if (name == kReasonAttr) {
    if (!isa<StringAttr>(value))
      return emitAttrError(op, attribute, 4)
             << "expects a string, got " << value;
    return success();
  }
  if (name == kRemarksAttr) {
    auto list = dyn_cast<ArrayAttr>(value);
    if (!isa<ModuleOp>(op) || !list ||
        !llvm::all_of(list, llvm::IsaPred<StringAttr>))
      return emitAttrError(op, attribute, 5)
             << "is an array of strings on a module";
    return success();
  }
  if (name == kPipelineAttr || name == kSequenceParallelAttr ||
      name == kSequenceOrderAttr) {
    bool onModule = isa<ModuleOp>(op);
    if (name == kSequenceOrderAttr && !onModule) {
      if (!isa<UnitAttr>(value))
        return emitAttrError(op, attribute, 6)
               << "is a unit attribute on an op other than a module";
      return success();
    }
    bool kind = name == kPipelineAttr ? isa<PipelineAttr>(value)
                : name == kSequenceParallelAttr
                    ? isa<SequenceParallelAttr>(value)
                    : isa<SequenceOrderAttr>(value);
    if (!onModule || !kind)
      return emitAttrError(op, attribute, 6)
             << "expects a #" << name << " on a module, got " << value;
    return verifyModuleRecord(op, value);
  }
  if (name == kRingAttr) {
    auto axis = dyn_cast<StringAttr>(value);
    if (!axis)
      return emitAttrError(op, attribute, 7)
             << "expects an axis name, got " << value;
    return verifyAxisOfModuleMesh(op, "attrs_c7", axis.getValue());
  }
  if (name == kSplitCostsAttr) {
    auto costs = dyn_cast<DictionaryAttr>(value);
    StringRef opName = op->getName().getStringRef();
    bool matmul = opName == "nn.matmul";
    bool valid =
        costs && (matmul || opName == "nn.moe") &&
        llvm::all_of(costs, [&](NamedAttribute entry) {
          StringRef key = entry.getName().getValue();
          bool known =
              matmul
                  ? llvm::is_contained({"columns", "rows", "batch", "whole"},
                                       key)
                  : llvm::is_contained({"experts", "features", "whole"}, key);
          return known && isa<FloatAttr>(entry.getValue());
        });
    if (!valid)
      return emitAttrError(op, attribute, 9)
             << "expects a dictionary of seconds by columns, rows, batch and "
                "whole on an nn.matmul, or by experts, features and whole on "
                "an nn.moe, got "
             << value;
    return success();
  }
  return emitAttrError(op, attribute, 8)
         << "is not an attribute of the dist dialect";
}

/// The sharding of a function argument or result (`dist.sharding`).
static LogicalResult verifyFunctionSharding(Operation *op, Type type,
                                            NamedAttribute attribute,
                                            StringRef what) {
  if (attribute.getName() != kShardingAttr)
    return emitAttrError(op, attribute, 8)
           << "is not an attribute of the dist dialect on a " << what;
  return verifyShardingOf(op, attribute, 1, attribute.getValue(), type,
                          "the " + what.str());
}

LogicalResult DistDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned regionIndex,
                                                    unsigned argIndex,
                                                    NamedAttribute attribute) {
  Type type;
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    if (argIndex < function.getNumArguments())
      type = function.getArgumentTypes()[argIndex];
  return verifyFunctionSharding(op, type, attribute, "argument");
}

LogicalResult
DistDialect::verifyRegionResultAttribute(Operation *op, unsigned regionIndex,
                                         unsigned resultIndex,
                                         NamedAttribute attribute) {
  Type type;
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    if (resultIndex < function.getNumResults())
      type = function.getResultTypes()[resultIndex];
  return verifyFunctionSharding(op, type, attribute, "result");
}
