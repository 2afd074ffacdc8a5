//===- DistOps.h - dist dialect ops, attributes and types -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Everything a user of the dist dialect needs: the mesh op, the sharding
// attribute, the token type, the collectives and their async forms, and the
// helpers that look meshes up and compute group sizes and local shapes.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_IR_DISTOPS_H
#define PARTITA_DIALECT_DIST_IR_DISTOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "partita/Dialect/Dist/IR/DistDialect.h"

#include <optional>

#include "partita/Dialect/Dist/IR/DistEnums.h.inc"

namespace mlir::partita::dist {

class MeshOp;
class WaitOp;

/// The role an axis named `name` has unless its mesh says otherwise: `dp`,
/// `tp`, `pp` and `sp` their own, any other name `none`.
AxisRole getDefaultAxisRole(StringRef name);

/// The communicator a rank talks through; point-to-point and async ops read
/// and write it so that passes keep their order.
struct CommunicatorResource
    : public SideEffects::Resource::Base<CommunicatorResource> {
  StringRef getName() final { return "dist::Communicator"; }
};

/// Marks the `_start` form of a collective or point-to-point op: result 0 is
/// a `!dist.token` that exactly one `dist.wait` redeems.
template <typename ConcreteType>
class AsyncStartOpTrait
    : public OpTrait::TraitBase<ConcreteType, AsyncStartOpTrait> {};

/// Marks a collective over a group of mesh axes, in its synchronous and its
/// `_start` form.
template <typename ConcreteType>
class GroupCollectiveOpTrait
    : public OpTrait::TraitBase<ConcreteType, GroupCollectiveOpTrait> {};

} // namespace mlir::partita::dist

#define GET_ATTRDEF_CLASSES
#include "partita/Dialect/Dist/IR/DistAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "partita/Dialect/Dist/IR/DistTypes.h.inc"

#define GET_OP_CLASSES
#include "partita/Dialect/Dist/IR/DistOps.h.inc"

namespace mlir::partita::dist {

/// The `dist.mesh` that `mesh` names, looked up from `from` outwards; null
/// when there is none. Pass `symbolTable` to reuse cached symbol tables.
MeshOp lookupMesh(Operation *from, FlatSymbolRefAttr mesh,
                  SymbolTableCollection *symbolTable = nullptr);

/// The string values of an array of StringAttr (e.g. a collective's `axes`).
SmallVector<StringRef> getStringRefs(ArrayAttr strings);

/// The `dist.wait` that is the only user of `token`, or null.
WaitOp getWaitOfToken(Value token);

/// True when `op` is the async `_start` form of a dist op.
inline bool isAsyncStart(Operation *op) {
  return op->hasTrait<AsyncStartOpTrait>();
}

/// True when `op` is a collective over a group of mesh axes (either form).
inline bool isGroupCollective(Operation *op) {
  return op->hasTrait<GroupCollectiveOpTrait>();
}

} // namespace mlir::partita::dist

#endif // PARTITA_DIALECT_DIST_IR_DISTOPS_H
