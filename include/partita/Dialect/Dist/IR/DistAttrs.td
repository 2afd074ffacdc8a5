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

def Dist_PipelineAttr : Dist_Attr<"Pipeline", "pipeline"> {
  let summary = "The pipeline plan of a module";
  let description = [{
    `partita-pipeline-split` records its plan on the module as
    `dist.pipeline`: the number of stages (the size of the mesh's pipeline
    axis), microbatches, the schedule (`gpipe`, or `interleaved` with
    `virtual_stages` chunks per rank) and the estimated forward seconds of
    each stage's share of the model, which the report's schedule
    simulation reads.

    ```mlir
    module attributes {dist.pipeline = #dist.pipeline<stages = 2,
        microbatches = 4, schedule = gpipe, virtual_stages = 1,
        stage_seconds = array<f64: 1.0e-3, 1.2e-3>>} {}
    ```

    **Constraints**

    1. `pipeline_c1`: `stages`, `microbatches` and `virtual_stages` are at
       least 1, and `virtual_stages` is 1 under `gpipe`.
    2. `pipeline_c2`: `stage_seconds` has one entry per stage.
    3. `pipeline_c3`: on a module with a `dist.mesh`, `stages` is the size
       of its pipeline axis (checked by the dialect's attribute verifier).
  }];
  let parameters = (ins
    "int64_t":$stages,
    "int64_t":$microbatches,
    EnumParameter<Dist_PipelineSchedule>:$schedule,
    "int64_t":$virtual_stages,
    "::mlir::DenseF64ArrayAttr":$stage_seconds
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Dist_SequenceOrderAttr : Dist_Attr<"SequenceOrder", "sequence_order"> {
  let summary = "The zigzag layout of the sequence over a ring";
  let description = [{
    With causal ring attention, `partita-annotate` lays the sequence out
    over the ring axis in a zigzag so that every rank does the same work.
    The module's `dist.sequence_order` records it: slot `i` of the sequence
    as the program sees it holds global position `order[i]`. Partitioning
    reads it to permute constants along the sequence, and ring attention
    to place causal masks. (The index constants that apply the permutation
    carry a unit `dist.sequence_order`, so that it is not applied twice.)

    ```mlir
    module attributes {dist.sequence_order = #dist.sequence_order<
        axis = "sp", order = array<i64: 0, 1, 6, 7, 2, 3, 4, 5>>} {}
    ```

    **Constraints**

    1. `sequence_order_c1`: `order` is a permutation of `0 .. n-1`.
    2. `sequence_order_c2`: `axis` is an axis of the module's `dist.mesh`
       (checked by the dialect's attribute verifier).
  }];
  let parameters = (ins
    "::mlir::StringAttr":$axis,
    "::mlir::DenseI64ArrayAttr":$order
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Dist_SequenceParallelAttr
    : Dist_Attr<"SequenceParallel", "sequence_parallel"> {
  let summary = "The sequence-parallel plan of a module";
  let description = [{
    `partita-annotate` records how `--sp-mode` splits the sequence, for the
    report: the mode, the axis and its size (`ranks`), and for ring
    attention whether it is causal, whether the zigzag layout is used, and
    the work imbalance (the busiest rank's share of the (query, key) pairs
    times the number of ranks) with the layout and with a contiguous one.

    ```mlir
    module attributes {dist.sequence_parallel = #dist.sequence_parallel<
        mode = ring, axis = "sp", ranks = 2, causal = true, zigzag = true,
        imbalance = 1.0 : f64, contiguous_imbalance = 1.44 : f64>} {}
    ```

    **Constraints**

    1. `sequence_parallel_c1`: `ranks` is at least 1; `causal`, `zigzag`
       and the imbalances are given for `ring` only.
    2. `sequence_parallel_c2`: `axis` is an axis of the module's
       `dist.mesh`, of size `ranks` (checked by the dialect's attribute
       verifier).
  }];
  let parameters = (ins
    EnumParameter<Dist_SequenceParallelMode>:$mode,
    "::mlir::StringAttr":$axis,
    "int64_t":$ranks,
    OptionalParameter<"::mlir::BoolAttr">:$causal,
    OptionalParameter<"::mlir::BoolAttr">:$zigzag,
    OptionalParameter<"::mlir::FloatAttr">:$imbalance,
    OptionalParameter<"::mlir::FloatAttr">:$contiguous_imbalance
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // PARTITA_DIALECT_DIST_IR_DISTATTRS_TD
