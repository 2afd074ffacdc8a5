//===- DistAttrs.td - dist dialect attributes --------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_IR_DISTATTRS_TD
#define PARTITA_DIALECT_DIST_IR_DISTATTRS_TD

include "mlir/IR/BuiltinAttributeInterfaces.td"
include "partita/Dialect/Dist/IR/DistBase.td"

def Dist_ShardingAttr : Dist_Attr<"Sharding", "sharding"> {
  let summary = "How a global tensor is split over the axes of a mesh";
  // `}]` ends a TableGen code block, so the examples splice it in with `#`.
  let description = [{
    `#dist.sharding` describes how the devices of a `dist.mesh` hold a
    *global* tensor. It lists, for each tensor dimension, the mesh axes that
    split it, major to minor, and the axes along which the tensor holds
    partial sums that are not reduced yet.

    A dimension split by axes `{a, b}` is cut into `size(a) * size(b)` equal
    blocks; the device with coordinates `(i, j)` on `(a, b)` holds block
    `i * size(b) + j`. A dimension with `{}` is whole on every device. Axes
    that split no dimension and are not partial replicate the tensor. Along a
    `partial` axis every device holds a tensor of the full local shape, and
    the value is the *sum* of those tensors (a row-parallel matmul produces
    this; an all-reduce or reduce-scatter finishes it).

    A sharding may only split evenly: local shapes are the global ones
    divided by the product of each dimension's axis sizes.

    ```mlir
    dist.mesh @mesh [dp = 2, tp = 4, sp = 2]
    // A global 8x128x512 tensor: batch over dp, hidden over tp and sp, so
    // each device holds 4x128x64.
    #dist.sharding<@mesh, [{dp}, {}, {tp, sp}] # "}]" # [{>
    // Whole on every device, each tp rank holding a partial sum.
    #dist.sharding<@mesh, [{}, {}] # "}]" # [{, partial = [tp]>
    ```

    The `partial = [...]` part is omitted when no axis is partial. An axis
    name that is not a bare identifier prints as a quoted string.

    **Constraints**

    1. `sharding_c1`: no mesh axis appears more than once, across all
       dimensions and the partial axes.
    2. `sharding_c2`: the number of dimension entries equals the rank of the
       tensor it describes.
    3. `sharding_c3`: every axis, of a dimension or partial, is an axis of
       the mesh.
    4. `sharding_c4`: each tensor dimension is divisible by the product of
       the sizes of the axes that split it.

    `sharding_c1` is checked wherever the attribute is built; the others
    need the tensor type and the mesh and are checked by the ops that carry
    the attribute (`dist.annotate`, `dist.reshard`).
  }];
  let parameters = (ins
    AttrParameter<"::mlir::FlatSymbolRefAttr", "the mesh">:$mesh,
    ArrayRefParameter<"::mlir::ArrayAttr",
                      "per dimension, the axes (StringAttr) splitting it">
        :$dimAxes,
    OptionalArrayRefParameter<"::mlir::StringAttr",
                              "axes holding unreduced partial sums">
        :$partialAxes
  );
  let builders = [
    AttrBuilder<(ins
      "::llvm::StringRef":$mesh,
      "::llvm::ArrayRef<::llvm::SmallVector<::llvm::StringRef>>":$dimAxes,
      CArg<"::llvm::ArrayRef<::llvm::StringRef>", "{}">:$partialAxes)>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// A sharding of a rank-`rank` tensor that splits nothing.
    static ShardingAttr getReplicated(::mlir::MLIRContext *context,
                                      ::llvm::StringRef mesh, int64_t rank);

    /// The rank of the tensors this sharding describes.
    int64_t getRank() const { return getDimAxes().size(); }

    /// The names of the axes splitting dimension `dim`, major to minor.
    ::llvm::SmallVector<::llvm::StringRef> getAxesOfDim(unsigned dim) const;

    /// The names of the partial axes.
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxisNames() const;

    /// True when no dimension is split and no axis is partial.
    bool isReplicated() const;

    /// True when some axis holds partial sums.
    bool isPartial() const { return !getPartialAxes().empty(); }

    /// True when `axis` splits a dimension or is partial.
    bool usesAxis(::llvm::StringRef axis) const;

    /// The shape each device holds: `globalShape` with every dimension
    /// divided by the product of its axes' sizes. The sharding must be valid
    /// for `globalShape` on `mesh` (see `verify`).
    ::llvm::SmallVector<int64_t>
    getLocalShape(::llvm::ArrayRef<int64_t> globalShape, MeshOp mesh) const;

    /// The inverse of `getLocalShape`.
    ::llvm::SmallVector<int64_t>
    getGlobalShape(::llvm::ArrayRef<int64_t> localShape, MeshOp mesh) const;

    /// `type` with its shape replaced by the local shape.
    ::mlir::RankedTensorType getLocalType(::mlir::RankedTensorType type,
                                          MeshOp mesh) const;

    /// Checks sharding_c1 to sharding_c4 for a global value of type `type`
    /// on `mesh`; each diagnostic starts with the constraint id.
    ::llvm::LogicalResult
    verify(::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
           ::mlir::RankedTensorType type, MeshOp mesh) const;
  }];
}

#endif // PARTITA_DIALECT_DIST_IR_DISTATTRS_TD
