//===- DistOps.cpp - dist dialect ops -------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/IR/DistOps.h"

#include "AxisSyntax.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <string>

using namespace mlir;
using namespace mlir::partita::dist;

//===----------------------------------------------------------------------===//
// Public helpers
//===----------------------------------------------------------------------===//

MeshOp mlir::partita::dist::lookupMesh(Operation *from, FlatSymbolRefAttr mesh,
                                       SymbolTableCollection *symbolTable) {
  if (!mesh)
    return {};
  if (symbolTable)
    return symbolTable->lookupNearestSymbolFrom<MeshOp>(from, mesh.getAttr());
  return SymbolTable::lookupNearestSymbolFrom<MeshOp>(from, mesh);
}

SmallVector<StringRef> mlir::partita::dist::getStringRefs(ArrayAttr strings) {
  return llvm::map_to_vector(strings, [](Attribute attr) {
    return cast<StringAttr>(attr).getValue();
  });
}

AxisRole mlir::partita::dist::getDefaultAxisRole(StringRef name) {
  // The roles are spelled as their conventional axis names.
  return symbolizeAxisRole(name).value_or(AxisRole::None);
}

WaitOp mlir::partita::dist::getWaitOfToken(Value token) {
  if (!token || !token.hasOneUse())
    return {};
  return dyn_cast<WaitOp>(*token.user_begin());
}

//===----------------------------------------------------------------------===//
// Custom directives
//===----------------------------------------------------------------------===//

namespace mlir::partita::dist {
namespace {

/// The `axis_roles` of a mesh with these names and roles: null when every
/// role is its name's default, so that the default form is the only one.
ArrayAttr getStoredRoles(MLIRContext *context, ArrayRef<StringRef> names,
                         ArrayRef<AxisRole> roles) {
  if (roles.empty() || llvm::all_of(llvm::zip(names, roles), [](auto axis) {
        return getDefaultAxisRole(std::get<0>(axis)) == std::get<1>(axis);
      }))
    return {};
  return ArrayAttr::get(context, llvm::map_to_vector(roles, [&](AxisRole role) {
                          return Attribute(AxisRoleAttr::get(context, role));
                        }));
}

/// `[` name `=` size (`:` role)? (`,` ...)* `]`, the axes of a mesh.
ParseResult parseMeshAxes(OpAsmParser &parser, ArrayAttr &names,
                          DenseI64ArrayAttr &sizes, ArrayAttr &roles) {
  SmallVector<StringRef> nameRefs;
  SmallVector<int64_t> sizeValues;
  SmallVector<AxisRole> roleValues;
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            StringAttr name;
            int64_t size = 0;
            if (syntax::parseAxis(parser, name) || parser.parseEqual() ||
                parser.parseInteger(size))
              return failure();
            AxisRole role = getDefaultAxisRole(name.getValue());
            if (succeeded(parser.parseOptionalColon())) {
              SMLoc loc = parser.getCurrentLocation();
              StringRef keyword;
              if (parser.parseKeyword(&keyword))
                return failure();
              std::optional<AxisRole> given = symbolizeAxisRole(keyword);
              if (!given)
                return parser.emitError(loc, "unknown axis role '")
                       << keyword << "'; expected dp, tp, pp, sp, ep or none";
              role = *given;
            }
            nameRefs.push_back(name.getValue());
            sizeValues.push_back(size);
            roleValues.push_back(role);
            return success();
          }))
    return failure();
  names = parser.getBuilder().getStrArrayAttr(nameRefs);
  sizes = parser.getBuilder().getDenseI64ArrayAttr(sizeValues);
  roles = getStoredRoles(parser.getContext(), nameRefs, roleValues);
  return success();
}

void printMeshAxes(OpAsmPrinter &printer, MeshOp mesh, ArrayAttr names,
                   DenseI64ArrayAttr sizes, ArrayAttr) {
  printer << '[';
  for (auto [index, axis] : llvm::enumerate(llvm::zip(
           names.getAsValueRange<StringAttr>(), sizes.asArrayRef()))) {
    auto [name, size] = axis;
    if (index > 0)
      printer << ", ";
    syntax::printAxis(printer, name);
    printer << " = " << size;
    AxisRole role = mesh.getAxisRole(index);
    if (role != getDefaultAxisRole(name))
      printer << " : " << stringifyAxisRole(role);
  }
  printer << ']';
}

/// `[` axis (`,` axis)* `]`, the axes of a collective's group.
ParseResult parseAxisList(OpAsmParser &parser, ArrayAttr &axes) {
  SmallVector<StringAttr> names;
  if (syntax::parseAxisArray(parser, names))
    return failure();
  axes = parser.getBuilder().getArrayAttr(
      SmallVector<Attribute>(names.begin(), names.end()));
  return success();
}

void printAxisList(OpAsmPrinter &printer, Operation *, ArrayAttr axes) {
  syntax::printAxisArray(printer,
                         llvm::to_vector(axes.getAsRange<StringAttr>()));
}

/// A single axis name.
ParseResult parseAxisName(OpAsmParser &parser, StringAttr &axis) {
  return syntax::parseAxis(parser, axis);
}

void printAxisName(OpAsmPrinter &printer, Operation *, StringAttr axis) {
  syntax::printAxis(printer, axis.getValue());
}

/// Nothing: the result has the operand's type, which the format printed.
ParseResult parseSameType(OpAsmParser &, Type &result, Type input) {
  result = input;
  return success();
}

void printSameType(OpAsmPrinter &, Operation *, Type, Type) {}

/// Nothing: a wait yields its token's payload, or nothing for `none`.
ParseResult parseWaitResult(OpAsmParser &parser, Type &result, Type token) {
  auto tokenType = dyn_cast<TokenType>(token);
  if (!tokenType)
    return parser.emitError(parser.getCurrentLocation(),
                            "expected a !dist.token type");
  if (tokenType.hasPayload())
    result = tokenType.getPayload();
  return success();
}

void printWaitResult(OpAsmPrinter &, Operation *, Type, Type) {}

} // namespace
} // namespace mlir::partita::dist

//===----------------------------------------------------------------------===//
// Shared verification
//===----------------------------------------------------------------------===//
//
// Every diagnostic starts with the id of the constraint it enforces, as
// listed in DistOps.td. A `_start` op reports the ids of its synchronous form
// for what they share, and `<op>_start_cN` for what is its own.

namespace mlir::partita::dist {
namespace {

template <typename OpTy, typename... Kinds>
constexpr bool isOneOf = llvm::is_one_of<OpTy, Kinds...>::value;

/// The constraint id stem of `op`: its mnemonic, less the `_start` suffix of
/// an async form.
std::string constraintStem(Operation *op) {
  StringRef name = op->getName().stripDialect();
  name.consume_back("_start");
  return name.str();
}

/// An error on `op` whose message starts with constraint id
/// `<stem>_c<number>`.
InFlightDiagnostic emitConstraintError(Operation *op, StringRef stem,
                                       unsigned number) {
  return op->emitOpError() << stem << "_c" << number << ": ";
}

/// Checks `<stem>_c1`: `mesh` names a dist.mesh.
FailureOr<MeshOp> verifyMeshSymbol(Operation *op, StringRef stem,
                                   FlatSymbolRefAttr mesh,
                                   SymbolTableCollection &symbolTable) {
  if (MeshOp meshOp = lookupMesh(op, mesh, &symbolTable))
    return meshOp;
  return emitConstraintError(op, stem, 1)
         << mesh << " does not name a dist.mesh";
}

/// The part of `<stem>_c<number>` that needs no mesh: the group's axes are
/// a non-empty list without repeats.
LogicalResult verifyGroupAxes(Operation *op, StringRef stem, unsigned number,
                              ArrayAttr axes) {
  if (axes.empty())
    return emitConstraintError(op, stem, number)
           << "the group names no mesh axis";
  llvm::StringSet<> seen;
  for (StringRef axis : axes.getAsValueRange<StringAttr>())
    if (!seen.insert(axis).second)
      return emitConstraintError(op, stem, number)
             << "axis '" << axis << "' appears more than once";
  return success();
}

/// The part of `<stem>_c<number>` that needs the mesh: every axis is one of
/// its axes. Returns the product of their sizes, the group size.
FailureOr<int64_t> verifyAxesOnMesh(Operation *op, StringRef stem,
                                    unsigned number, MeshOp mesh,
                                    ArrayAttr axes) {
  int64_t groupSize = 1;
  for (StringRef axis : axes.getAsValueRange<StringAttr>()) {
    std::optional<int64_t> size = mesh.getAxisSize(axis);
    if (!size)
      return emitConstraintError(op, stem, number)
             << "'" << axis << "' is not an axis of mesh @"
             << mesh.getSymName();
    groupSize *= *size;
  }
  return groupSize;
}

/// Checks `<mnemonic>_c1` of a `_start` op: its token has exactly one use, a
/// dist.wait later in the same block. Pairing starts and waits this strictly
/// lets the overlap scheduler move either without reasoning about control
/// flow.
LogicalResult verifyTokenUse(Operation *op) {
  StringRef id = op->getName().stripDialect();
  Value token = op->getResult(0);
  if (token.use_empty())
    return emitConstraintError(op, id, 1) << "the token has no dist.wait";
  if (!token.hasOneUse())
    return emitConstraintError(op, id, 1)
           << "the token has " << llvm::range_size(token.getUses())
           << " uses; it needs exactly one, a dist.wait";
  Operation *user = *token.user_begin();
  if (!isa<WaitOp>(user))
    return emitConstraintError(op, id, 1)
           << "the token is used by '" << user->getName()
           << "', not by a dist.wait";
  if (user->getBlock() != op->getBlock())
    return emitConstraintError(op, id, 1)
           << "the dist.wait is not in the block of the start";
  if (!op->isBeforeInBlock(user))
    return emitConstraintError(op, id, 1)
           << "the dist.wait comes before the start";
  return success();
}

/// What the "result type" of a constraint is called in a message: an async
/// form has a token payload instead.
StringRef resultName(Operation *op) {
  return isAsyncStart(op) ? "token payload" : "result type";
}

/// The row checks of dist.dispatch and dist.dispatch_return: one
/// destination per row on the side that sends (or gets back) the rows, and
/// a result that is the operand with another number of rows.
template <typename OpTy> LogicalResult verifyDispatch(OpTy op, StringRef stem) {
  auto input = cast<RankedTensorType>(op.getInput().getType());
  auto result = cast<RankedTensorType>(op.getResult().getType());
  if (input.getRank() == 0)
    return emitConstraintError(op, stem, 3) << "the operand has no rows";
  RankedTensorType sent = std::is_same_v<OpTy, DispatchOp> ? input : result;
  int64_t destinations = op.getDestinations().getType().getDimSize(0);
  if (destinations != sent.getDimSize(0))
    return emitConstraintError(op, stem, 3)
           << destinations << " destinations for "
           << (std::is_same_v<OpTy, DispatchOp> ? "an operand" : "a result")
           << " of " << sent.getDimSize(0) << " rows";
  if (result.getRank() != input.getRank() ||
      result.getElementType() != input.getElementType() ||
      result.getShape().drop_front() != input.getShape().drop_front())
    return emitConstraintError(op, stem, 4)
           << "the result type " << result
           << " is not the operand type with other rows";
  return success();
}

/// The checks of a collective that need no mesh: the group's axes, the
/// dimension attributes, and for a start its wait.
template <typename OpTy> LogicalResult verifyCollective(OpTy op) {
  std::string stem = constraintStem(op);
  if (failed(verifyGroupAxes(op, stem, 2, op.getAxes())))
    return failure();

  int64_t rank = cast<RankedTensorType>(op.getInput().getType()).getRank();
  auto checkDim = [&](uint64_t attr, StringRef name) -> LogicalResult {
    auto dim = static_cast<int64_t>(attr);
    if (dim >= 0 && dim < rank)
      return success();
    return emitConstraintError(op, stem, 3)
           << name << " " << dim << " is out of range for an operand of rank "
           << rank;
  };
  if constexpr (isOneOf<OpTy, AllGatherOp, AllGatherStartOp>) {
    if (failed(checkDim(op.getGatherDim(), "gather_dim")))
      return failure();
  } else if constexpr (isOneOf<OpTy, ReduceScatterOp, ReduceScatterStartOp>) {
    if (failed(checkDim(op.getScatterDim(), "scatter_dim")))
      return failure();
  } else if constexpr (isOneOf<OpTy, AllSliceOp>) {
    if (failed(checkDim(op.getSliceDim(), "slice_dim")))
      return failure();
  } else if constexpr (isOneOf<OpTy, AllToAllOp, AllToAllStartOp>) {
    if (failed(checkDim(op.getSplitDim(), "split_dim")) ||
        failed(checkDim(op.getConcatDim(), "concat_dim")))
      return failure();
  } else if constexpr (isOneOf<OpTy, DispatchOp, DispatchReturnOp>) {
    return verifyDispatch(op, stem);
  }

  if constexpr (OpTy::template hasTrait<AsyncStartOpTrait>())
    return verifyTokenUse(op);
  return success();
}

template <typename OpTy>
LogicalResult verifyCollectiveResult(OpTy op, int64_t n,
                                     const std::string &stem);

/// The checks of a collective that need its mesh: the mesh, its axes, the
/// divisibility of split dimensions and the local result type.
template <typename OpTy>
LogicalResult verifyCollectiveSymbolUses(OpTy op,
                                         SymbolTableCollection &symbolTable) {
  std::string stem = constraintStem(op);
  FailureOr<MeshOp> mesh =
      verifyMeshSymbol(op, stem, op.getMeshAttr(), symbolTable);
  if (failed(mesh))
    return failure();
  FailureOr<int64_t> groupSize =
      verifyAxesOnMesh(op, stem, 2, *mesh, op.getAxes());
  if (failed(groupSize))
    return failure();
  int64_t n = *groupSize;
  if constexpr (isOneOf<OpTy, DispatchOp, DispatchReturnOp>) {
    int64_t counts = op.getCounts().getType().getDimSize(0);
    if (counts != n)
      return emitConstraintError(op, stem, 5)
             << counts << " counts for a group of " << n << " devices";
    return success();
  } else {
    return verifyCollectiveResult(op, n, stem);
  }
}

/// Constraints `<stem>_c3` to `_c5` of a collective whose result type the
/// group size `n` fixes.
template <typename OpTy>
LogicalResult verifyCollectiveResult(OpTy op, int64_t n,
                                     const std::string &stem) {
  auto inputType = cast<RankedTensorType>(op.getInput().getType());
  SmallVector<int64_t> shape(inputType.getShape());
  // verify() reported out-of-range dimensions already; stay in bounds here.
  auto inRange = [&](uint64_t dim) { return dim < shape.size(); };
  auto checkDivisible = [&](uint64_t dim, StringRef name) -> LogicalResult {
    if (shape[dim] % n == 0)
      return success();
    return emitConstraintError(op, stem, 4)
           << "dimension " << name << " = " << dim << " has size " << shape[dim]
           << ", which is not divisible by the group size " << n;
  };

  // The number of the constraint that fixes the result type.
  unsigned resultConstraint;
  if constexpr (isOneOf<OpTy, AllReduceOp, AllReduceStartOp,
                        CollectivePermuteOp, CollectivePermuteStartOp>) {
    resultConstraint = 3;
  } else if constexpr (isOneOf<OpTy, AllGatherOp, AllGatherStartOp>) {
    uint64_t dim = op.getGatherDim();
    if (!inRange(dim))
      return failure();
    shape[dim] *= n;
    resultConstraint = 4;
  } else if constexpr (isOneOf<OpTy, ReduceScatterOp, ReduceScatterStartOp>) {
    uint64_t dim = op.getScatterDim();
    if (!inRange(dim) || failed(checkDivisible(dim, "scatter_dim")))
      return failure();
    shape[dim] /= n;
    resultConstraint = 5;
  } else if constexpr (isOneOf<OpTy, AllSliceOp>) {
    uint64_t dim = op.getSliceDim();
    if (!inRange(dim) || failed(checkDivisible(dim, "slice_dim")))
      return failure();
    shape[dim] /= n;
    resultConstraint = 5;
  } else {
    static_assert(isOneOf<OpTy, AllToAllOp, AllToAllStartOp>,
                  "unhandled collective");
    uint64_t split = op.getSplitDim();
    uint64_t concat = op.getConcatDim();
    if (!inRange(split) || !inRange(concat) ||
        failed(checkDivisible(split, "split_dim")))
      return failure();
    shape[split] /= n;
    shape[concat] *= n;
    resultConstraint = 5;
  }

  Type expected = RankedTensorType::get(shape, inputType.getElementType(),
                                        inputType.getEncoding());
  Type actual = op.getLocalResultType();
  if (actual == expected)
    return success();
  return emitConstraintError(op, stem, resultConstraint)
         << "expected " << resultName(op) << " " << expected << " for group "
         << "size " << n << ", got " << actual;
}

/// The checks of a send or receive that need no mesh.
template <typename OpTy> LogicalResult verifyPointToPoint(OpTy op) {
  std::string stem = constraintStem(op);
  auto peer = static_cast<int64_t>(op.getPeer());
  if (peer < 0)
    return emitConstraintError(op, stem, 3)
           << "peer coordinate " << peer << " is negative";
  auto tag = static_cast<int64_t>(op.getTag());
  if (tag < 0)
    return emitConstraintError(op, stem, 4) << "tag " << tag << " is negative";

  if constexpr (std::is_same_v<OpTy, SendStartOp>) {
    if (!isa<NoneType>(op.getLocalResultType()))
      return emitConstraintError(op, "send_start", 2)
             << "the token's payload is " << op.getLocalResultType()
             << ", not none";
  } else if constexpr (std::is_same_v<OpTy, RecvStartOp>) {
    auto payload = dyn_cast<RankedTensorType>(op.getLocalResultType());
    if (!payload || !payload.hasStaticShape())
      return emitConstraintError(op, stem, 5)
             << "the token's payload " << op.getLocalResultType()
             << " is not a statically shaped tensor";
  }

  if constexpr (OpTy::template hasTrait<AsyncStartOpTrait>())
    return verifyTokenUse(op);
  return success();
}

/// The checks of a send or receive that need the mesh.
template <typename OpTy>
LogicalResult verifyPointToPointSymbolUses(OpTy op,
                                           SymbolTableCollection &symbolTable) {
  std::string stem = constraintStem(op);
  FailureOr<MeshOp> mesh =
      verifyMeshSymbol(op, stem, op.getMeshAttr(), symbolTable);
  if (failed(mesh))
    return failure();
  std::optional<int64_t> size = mesh->getAxisSize(op.getAxis());
  if (!size)
    return emitConstraintError(op, stem, 2)
           << "'" << op.getAxis() << "' is not an axis of mesh @"
           << mesh->getSymName();
  auto peer = static_cast<int64_t>(op.getPeer());
  if (peer >= *size)
    return emitConstraintError(op, stem, 3)
           << "peer coordinate " << peer << " is out of range for axis '"
           << op.getAxis() << "' of size " << *size;
  return success();
}

/// The checks of annotate and reshard that need the mesh.
template <typename OpTy>
LogicalResult verifyShardingUse(OpTy op, SymbolTableCollection &symbolTable) {
  ShardingAttr sharding = op.getSharding();
  FailureOr<MeshOp> mesh =
      verifyMeshSymbol(op, constraintStem(op), sharding.getMesh(), symbolTable);
  if (failed(mesh))
    return failure();
  return sharding.verify([&] { return op.emitOpError(); },
                         cast<RankedTensorType>(op.getInput().getType()),
                         *mesh);
}

/// Checks `<stem>_c2` of annotate and reshard: the result type is the
/// operand type.
template <typename OpTy> LogicalResult verifySameType(OpTy op) {
  if (op.getInput().getType() == op.getResult().getType())
    return success();
  return emitConstraintError(op, constraintStem(op), 2)
         << "the result type " << op.getResult().getType()
         << " differs from the operand type " << op.getInput().getType();
}

/// The operand of a collective whose group has one device, which makes the
/// op an identity.
template <typename OpTy> OpFoldResult foldSingletonGroup(OpTy op) {
  if (op.getInput().getType() != op.getResult().getType())
    return {};
  std::optional<int64_t> groupSize = op.getGroupSize();
  if (groupSize && *groupSize == 1)
    return op.getInput();
  return {};
}

} // namespace
} // namespace mlir::partita::dist

//===----------------------------------------------------------------------===//
// Generated op definitions
//===----------------------------------------------------------------------===//

#define GET_OP_CLASSES
#include "partita/Dialect/Dist/IR/DistOps.cpp.inc"

void DistDialect::registerOps() {
  addOperations<
#define GET_OP_LIST
#include "partita/Dialect/Dist/IR/DistOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

void MeshOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                   ArrayRef<StringRef> axisNames, ArrayRef<int64_t> axisSizes,
                   ArrayRef<AxisRole> axisRoles) {
  build(builder, state, builder.getStringAttr(name),
        builder.getStrArrayAttr(axisNames),
        builder.getDenseI64ArrayAttr(axisSizes),
        getStoredRoles(builder.getContext(), axisNames, axisRoles));
}

LogicalResult MeshOp::verify() {
  ArrayAttr names = getAxisNames();
  ArrayRef<int64_t> sizes = getAxisSizes();
  if (names.empty())
    return emitOpError("mesh_c1: the mesh has no axes");
  if (names.size() != sizes.size())
    return emitOpError("mesh_c2: ")
           << names.size() << " axis names but " << sizes.size() << " sizes";
  llvm::StringSet<> seen;
  for (auto [name, size] :
       llvm::zip_equal(names.getAsValueRange<StringAttr>(), sizes)) {
    if (!syntax::isAxisIdentifier(name))
      return emitOpError("mesh_c3: axis name '")
             << name << "' is not an identifier";
    if (!seen.insert(name).second)
      return emitOpError("mesh_c4: axis '") << name << "' is declared twice";
    if (size < 1)
      return emitOpError("mesh_c5: axis '")
             << name << "' has size " << size << "; sizes start at 1";
  }
  if (std::optional<ArrayAttr> roles = getAxisRoles();
      roles && roles->size() != names.size())
    return emitOpError("mesh_c6: ")
           << roles->size() << " axis roles for " << names.size() << " axes";
  DenseMap<AxisRole, StringRef> holder;
  for (auto [index, name] : llvm::enumerate(getAxisNameRefs())) {
    AxisRole role = getAxisRole(index);
    if (role == AxisRole::None)
      continue;
    auto [it, inserted] = holder.try_emplace(role, name);
    if (!inserted)
      return emitOpError("mesh_c7: axes '")
             << it->second << "' and '" << name << "' both have role "
             << stringifyAxisRole(role);
  }
  return success();
}

AxisRole MeshOp::getAxisRole(unsigned index) {
  if (std::optional<ArrayAttr> roles = getAxisRoles();
      roles && index < roles->size())
    return cast<AxisRoleAttr>((*roles)[index]).getValue();
  return getDefaultAxisRole(cast<StringAttr>(getAxisNames()[index]).getValue());
}

std::optional<AxisRole> MeshOp::getAxisRole(StringRef axis) {
  if (std::optional<unsigned> index = getAxisIndex(axis))
    return getAxisRole(*index);
  return std::nullopt;
}

std::optional<StringRef> MeshOp::getAxisWithRole(AxisRole role) {
  assert(role != AxisRole::None && "several axes may have no role");
  for (auto [index, name] : llvm::enumerate(getAxisNameRefs()))
    if (getAxisRole(index) == role)
      return name;
  return std::nullopt;
}

int64_t MeshOp::getRoleSize(AxisRole role) {
  std::optional<StringRef> axis = getAxisWithRole(role);
  return axis ? getAxisSize(*axis).value_or(1) : 1;
}

std::optional<unsigned> MeshOp::getAxisIndex(StringRef axis) {
  for (auto [index, name] :
       llvm::enumerate(getAxisNames().getAsValueRange<StringAttr>()))
    if (name == axis)
      return index;
  return std::nullopt;
}

std::optional<int64_t> MeshOp::getAxisSize(StringRef axis) {
  std::optional<unsigned> index = getAxisIndex(axis);
  if (!index || *index >= getAxisSizes().size())
    return std::nullopt;
  return getAxisSizes()[*index];
}

SmallVector<StringRef> MeshOp::getAxisNameRefs() {
  return getStringRefs(getAxisNames());
}

int64_t MeshOp::getNumDevices() {
  int64_t devices = 1;
  for (int64_t size : getAxisSizes())
    devices *= size;
  return devices;
}

std::optional<int64_t> MeshOp::getGroupSize(ArrayRef<StringRef> axes) {
  int64_t groupSize = 1;
  for (StringRef axis : axes) {
    std::optional<int64_t> size = getAxisSize(axis);
    if (!size)
      return std::nullopt;
    groupSize *= *size;
  }
  return groupSize;
}

//===----------------------------------------------------------------------===//
// AnnotateOp and ReshardOp
//===----------------------------------------------------------------------===//

LogicalResult AnnotateOp::verify() { return verifySameType(*this); }

LogicalResult AnnotateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyShardingUse(*this, symbolTable);
}

LogicalResult ReshardOp::verify() { return verifySameType(*this); }

LogicalResult ReshardOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyShardingUse(*this, symbolTable);
}

OpFoldResult ReshardOp::fold(FoldAdaptor) {
  Value input = getInput();
  if (auto annotate = input.getDefiningOp<AnnotateOp>())
    if (annotate.getSharding() == getSharding())
      return input;
  if (auto reshard = input.getDefiningOp<ReshardOp>()) {
    if (reshard.getSharding() == getSharding())
      return input;
    // Only the last sharding of a chain is observable: skip the inner one.
    getInputMutable().assign(reshard.getInput());
    return getResult();
  }
  return {};
}

//===----------------------------------------------------------------------===//
// Collective folders
//===----------------------------------------------------------------------===//

OpFoldResult AllReduceOp::fold(FoldAdaptor) {
  return foldSingletonGroup(*this);
}

OpFoldResult AllGatherOp::fold(FoldAdaptor) {
  return foldSingletonGroup(*this);
}

OpFoldResult ReduceScatterOp::fold(FoldAdaptor) {
  return foldSingletonGroup(*this);
}

OpFoldResult AllToAllOp::fold(FoldAdaptor) { return foldSingletonGroup(*this); }

OpFoldResult AllSliceOp::fold(FoldAdaptor) { return foldSingletonGroup(*this); }

SmallVector<StringRef> AxisIndexOp::getGroupAxes() {
  return getStringRefs(getAxes());
}

LogicalResult AxisIndexOp::verify() {
  return verifyGroupAxes(*this, "axis_index", 2, getAxes());
}

LogicalResult
AxisIndexOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<MeshOp> mesh =
      verifyMeshSymbol(*this, "axis_index", getMeshAttr(), symbolTable);
  if (failed(mesh))
    return failure();
  return verifyAxesOnMesh(*this, "axis_index", 2, *mesh, getAxes());
}

OpFoldResult CollectivePermuteOp::fold(FoldAdaptor) {
  // A rotation by a multiple of the ring length moves nothing.
  std::optional<int64_t> groupSize = getGroupSize();
  if (groupSize && static_cast<int64_t>(getShift()) % *groupSize == 0)
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// WaitOp
//===----------------------------------------------------------------------===//

void WaitOp::build(OpBuilder &builder, OperationState &state, Value token) {
  state.addOperands(token);
  auto tokenType = cast<TokenType>(token.getType());
  if (tokenType.hasPayload())
    state.addTypes(tokenType.getPayload());
}

Operation *WaitOp::getStartOp() {
  Operation *start = getToken().getDefiningOp();
  if (start && isAsyncStart(start))
    return start;
  return nullptr;
}

LogicalResult WaitOp::verify() {
  if (!getStartOp())
    return emitOpError("wait_c1: the token is not the result of a "
                       "dist.<op>_start op");
  TokenType tokenType = getToken().getType();
  if (!tokenType.hasPayload()) {
    if (getResult())
      return emitOpError("wait_c2: a wait on ")
             << tokenType << " has no result";
    return success();
  }
  if (!getResult() || getResult().getType() != tokenType.getPayload())
    return emitOpError("wait_c2: expected one result of type ")
           << tokenType.getPayload();
  return success();
}

//===----------------------------------------------------------------------===//
// StageOp and YieldOp
//===----------------------------------------------------------------------===//

MeshOp StageOp::getMeshOp(SymbolTableCollection *symbolTable) {
  return lookupMesh(*this, getMeshAttr(), symbolTable);
}

LogicalResult StageOp::verify() {
  auto index = static_cast<int64_t>(getIndex());
  if (index < 0)
    return emitOpError("stage_c3: stage index ") << index << " is negative";

  Block &body = getBody();
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield)
    return emitOpError("stage_c4: the body does not end in dist.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("stage_c4: the body yields (")
           << yield.getValues().getTypes() << ") but the stage returns ("
           << getResultTypes() << ")";

  if ((*this)->getParentOfType<StageOp>())
    return emitOpError("stage_c5: a stage is nested in another dist.stage");
  return success();
}

LogicalResult StageOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<MeshOp> mesh =
      verifyMeshSymbol(*this, "stage", getMeshAttr(), symbolTable);
  if (failed(mesh))
    return failure();
  std::optional<int64_t> size = mesh->getAxisSize(getAxis());
  if (!size)
    return emitOpError("stage_c2: '")
           << getAxis() << "' is not an axis of mesh @" << mesh->getSymName();
  auto index = static_cast<int64_t>(getIndex());
  if (index >= *size)
    return emitOpError("stage_c3: stage index ")
           << index << " is out of range for axis '" << getAxis()
           << "' of size " << *size;
  return success();
}

LogicalResult YieldOp::verify() {
  if (!isa_and_nonnull<StageOp>((*this)->getParentOp()))
    return emitOpError("yield_c1: the parent op is not a dist.stage");
  return success();
}
