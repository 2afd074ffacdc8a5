//===- DistOps.td - dist dialect ops -----------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_IR_DISTOPS_TD
#define PARTITA_DIALECT_DIST_IR_DISTOPS_TD

include "mlir/IR/BuiltinTypes.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "partita/Dialect/Dist/IR/DistAttrs.td"
include "partita/Dialect/Dist/IR/DistBase.td"
include "partita/Dialect/Dist/IR/DistTypes.td"

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

def Dist_MeshOp : Dist_Op<"mesh", [Symbol]> {
  let summary = "A device mesh with named axes";
  let description = [{
    `dist.mesh` declares a logical mesh of devices as a symbol, usually at
    module level. Each axis has a name and a size; the number of devices is
    the product of the sizes. Axes may come in any order and have size 1, so
    one plan covers every `--mesh` setting. Shardings, collectives and
    stages refer to the mesh by symbol and to its axes by name.

    A device's rank is its coordinates linearised with the first axis major.

    Each axis has a role (`#dist.axis_role`): the kind of parallelism the
    strategies run over it. The passes look axes up by role, so the names
    are free. A role is written after the size (`model = 4 : tp`) and
    printed only where it is not the default of the axis name (`dp`, `tp`,
    `pp` and `sp` play their own role, other names `none`). `axis_roles`,
    when present, holds the role of every axis.

    ```mlir
    dist.mesh @mesh [dp = 2, tp = 4, pp = 1, sp = 1]
    dist.mesh @named [data = 2 : dp, model = 4 : tp]
    ```

    **Constraints**

    1. `mesh_c1`: the mesh has at least one axis.
    2. `mesh_c2`: there are as many axis sizes as axis names.
    3. `mesh_c3`: every axis name is an identifier (a letter or `_`, then
       letters, digits or `_`).
    4. `mesh_c4`: axis names are distinct.
    5. `mesh_c5`: every axis size is at least 1.
    6. `mesh_c6`: `axis_roles`, when present, has one role per axis.
    7. `mesh_c7`: no role other than `none` is held by more than one axis.
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    StrArrayAttr:$axis_names,
    DenseI64ArrayAttr:$axis_sizes,
    OptionalAttr<TypedArrayAttrBase<Dist_AxisRoleAttr,
                                    "mesh axis roles">>:$axis_roles
  );
  let assemblyFormat = [{
    $sym_name custom<MeshAxes>($axis_names, $axis_sizes, $axis_roles)
    attr-dict
  }];
  let builders = [
    // `axisRoles` empty: every axis has the default role of its name.
    // Roles equal to the defaults are not stored.
    OpBuilder<(ins "::llvm::StringRef":$name,
                   "::llvm::ArrayRef<::llvm::StringRef>":$axisNames,
                   "::llvm::ArrayRef<int64_t>":$axisSizes,
                   CArg<"::llvm::ArrayRef<AxisRole>", "{}">:$axisRoles)>
  ];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The number of axes.
    unsigned getNumAxes() { return getAxisSizes().size(); }

    /// The position of `axis` among the axes, or nullopt if there is none.
    std::optional<unsigned> getAxisIndex(::llvm::StringRef axis);

    /// The size of `axis`, or nullopt if the mesh has no such axis.
    std::optional<int64_t> getAxisSize(::llvm::StringRef axis);

    /// True when the mesh has an axis named `axis`.
    bool hasAxis(::llvm::StringRef axis) {
      return getAxisIndex(axis).has_value();
    }

    /// The axis names as StringRefs, in order.
    ::llvm::SmallVector<::llvm::StringRef> getAxisNameRefs();

    /// The number of devices: the product of all axis sizes.
    int64_t getNumDevices();

    /// The number of devices in a group spanned by `axes` (the product of
    /// their sizes), or nullopt if one is not an axis of the mesh.
    std::optional<int64_t>
    getGroupSize(::llvm::ArrayRef<::llvm::StringRef> axes);

    /// The role of axis `index`: the stored one, else its name's default.
    AxisRole getAxisRole(unsigned index);

    /// The role of `axis`, or nullopt if the mesh has no such axis.
    std::optional<AxisRole> getAxisRole(::llvm::StringRef axis);

    /// The name of the axis with `role` (not `none`), or nullopt if no axis
    /// has it.
    std::optional<::llvm::StringRef> getAxisWithRole(AxisRole role);

    /// The size of the axis with `role`, 1 when no axis has it.
    int64_t getRoleSize(AxisRole role);
  }];
}

//===----------------------------------------------------------------------===//
// Global-value ops
//===----------------------------------------------------------------------===//

def Dist_AnnotateOp : Dist_Op<"annotate", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Constrains the sharding of a global value";
  // `}]` ends a TableGen code block, so the example splices it in with `#`.
  let description = [{
    `dist.annotate` returns its operand unchanged and records that the value
    should have the given sharding. The planner puts annotations on a few
    values (inputs, weights, the values a strategy pins) and propagation
    fills in the rest; partitioning then turns annotations into the local
    layout. Shapes are global.

    ```mlir
    dist.mesh @mesh [dp = 2, tp = 4]
    func.func @f(%w: tensor<512x1024xf32>) -> tensor<512x1024xf32> {
      %0 = dist.annotate %w sharding<@mesh, [{}, {tp}] # "}]" # [{>
          : tensor<512x1024xf32>
      return %0 : tensor<512x1024xf32>
    }
    ```

    **Constraints**

    1. `annotate_c1`: the sharding's mesh names a `dist.mesh`.
    2. `annotate_c2`: the result type equals the operand type.
    3. The sharding is valid for the operand type on that mesh:
       `sharding_c2`, `sharding_c3`, `sharding_c4`.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input,
                       Dist_ShardingAttr:$sharding);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `sharding` `` $sharding attr-dict `:` type($input)
      `` custom<SameType>(type($result), ref(type($input)))
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$input, "ShardingAttr":$sharding), [{
      build($_builder, $_state, input.getType(), input, sharding);
    }]>
  ];
  let hasVerifier = 1;
}

def Dist_ReshardOp : Dist_Op<"reshard", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Changes the sharding of a global value";
  // `}]` ends a TableGen code block, so the example splices it in with `#`.
  let description = [{
    `dist.reshard` returns its operand with a new sharding. The value is the
    same; only how the devices hold it changes. Propagation inserts a
    reshard where two uses of a value want different shardings, and
    partitioning lowers each reshard to the collectives that move the data
    (a split dimension that becomes whole is an all-gather, a partial axis
    that goes away an all-reduce, and so on). Shapes are global.

    ```mlir
    dist.mesh @mesh [tp = 4]
    func.func @f(%x: tensor<8x1024xf32>) -> tensor<8x1024xf32> {
      %0 = dist.annotate %x
          sharding<@mesh, [{}, {}] # "}]" # [{, partial = [tp]>
          : tensor<8x1024xf32>
      %1 = dist.reshard %0 to sharding<@mesh, [{}, {tp}] # "}]" # [{>
          : tensor<8x1024xf32>
      return %1 : tensor<8x1024xf32>
    }
    ```

    A reshard to the sharding its operand already has (an operand defined by
    `dist.annotate` or `dist.reshard` with an equal sharding) folds away, and
    a reshard of a reshard skips the inner one.

    **Constraints**

    1. `reshard_c1`: the sharding's mesh names a `dist.mesh`.
    2. `reshard_c2`: the result type equals the operand type.
    3. The sharding is valid for the operand type on that mesh:
       `sharding_c2`, `sharding_c3`, `sharding_c4`.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input,
                       Dist_ShardingAttr:$sharding);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `to` `sharding` `` $sharding attr-dict `:` type($input)
      `` custom<SameType>(type($result), ref(type($input)))
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$input, "ShardingAttr":$sharding), [{
      build($_builder, $_state, input.getType(), input, sharding);
    }]>
  ];
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// What the synchronous and the `_start` form of a collective share: the
// operand, the mesh and group axes, the kind's own attributes (`extraArgs`)
// and the verifier. `localResult` is the C++ expression for the local tensor
// type the op produces: its result, or its token's payload.
class Dist_CollectiveBase<string mnemonic, list<Trait> traits, dag extraArgs,
                          string localResult, string startDecl = "",
                          string startDef = "">
    : Dist_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  let arguments = !con((ins AnyStaticShapeTensor:$input,
                            FlatSymbolRefAttr:$mesh,
                            StrArrayAttr:$axes), extraArgs);
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The mesh `mesh` names; null when it does not resolve to a dist.mesh.
    MeshOp getMeshOp(::mlir::SymbolTableCollection *symbolTable = nullptr);

    /// The names of the group's axes, major to minor.
    ::llvm::SmallVector<::llvm::StringRef> getGroupAxes();

    /// The number of devices in the group, or nullopt when the mesh or one
    /// of the axes does not resolve.
    std::optional<int64_t>
    getGroupSize(::mlir::SymbolTableCollection *symbolTable = nullptr);

    /// The local tensor type the op produces (for a start: once waited).
    ::mlir::Type getLocalResultType() { return }] # localResult # [{; }
  }] # startDecl;
  // The verifier is written once, as templates over the op class, in
  // DistOps.cpp; every collective and its `_start` form instantiate it.
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyCollective(*this);
    }
    ::llvm::LogicalResult
    $cppClass::verifySymbolUses(::mlir::SymbolTableCollection &symbolTable) {
      return verifyCollectiveSymbolUses(*this, symbolTable);
    }
    MeshOp $cppClass::getMeshOp(::mlir::SymbolTableCollection *symbolTable) {
      return lookupMesh(*this, getMeshAttr(), symbolTable);
    }
    ::llvm::SmallVector<::llvm::StringRef> $cppClass::getGroupAxes() {
      return getStringRefs(getAxes());
    }
    std::optional<int64_t>
    $cppClass::getGroupSize(::mlir::SymbolTableCollection *symbolTable) {
      MeshOp mesh = getMeshOp(symbolTable);
      if (!mesh)
        return std::nullopt;
      return mesh.getGroupSize(getGroupAxes());
    }
  }] # startDef;
}

// What a `_start` op adds to the class of its synchronous form.
defvar asyncStartDecl = [{
    /// The dist.wait that finishes this op; null if the IR is invalid.
    WaitOp getWaitOp();
}];
defvar asyncStartDef = [{
    WaitOp $cppClass::getWaitOp() { return getWaitOfToken(getToken()); }
}];

// A collective `dist.<mnemonic>` and its async form `dist.<mnemonic>_start`,
// from one definition. `preFormat` is printed before the operand,
// `postFormat` after the group. With `sameType`, the result type is the
// operand type and is printed once.
multiclass Dist_Collective<string mnemonic, dag extraArgs, string preFormat,
                           string postFormat, bit sameType,
                           string syncSummary, string syncDescription,
                           string startDescription> {
  defvar groupFormat =
      preFormat # " $input `on` $mesh `axes` custom<AxisList>($axes) " #
      postFormat # " attr-dict `:` type($input) ";

  def Op : Dist_CollectiveBase<mnemonic, [Pure, Dist_GroupCollective],
                               extraArgs,
                               "getResult().getType()"> {
    let summary = syncSummary;
    let description = syncDescription;
    let results = (outs AnyStaticShapeTensor:$result);
    let assemblyFormat = groupFormat #
        !if(sameType, "`` custom<SameType>(type($result), ref(type($input)))",
                      "`->` type($result)");
    let hasFolder = 1;
  }

  def StartOp : Dist_CollectiveBase<mnemonic # "_start", [
        Dist_AsyncStart, Dist_GroupCollective,
        MemoryEffects<[MemRead<Dist_Communicator>,
                       MemWrite<Dist_Communicator>]>],
      extraArgs, "getToken().getType().getPayload()",
      asyncStartDecl, asyncStartDef> {
    let summary = "Starts a `dist." # mnemonic # "` that `dist.wait` finishes";
    let description = startDescription;
    let results = (outs Dist_TokenType:$token);
    let assemblyFormat = groupFormat # "`->` qualified(type($token))";
  }
}

defm Dist_AllReduce : Dist_Collective<"all_reduce",
  (ins Dist_ReductionKindAttr:$reduction), "`` $reduction", "",
  /*sameType=*/1,
  "Reduces a local tensor over a group; every device gets the result",
  [{
    `dist.all_reduce` combines the operand of every device in the group
    element-wise with `reduction` (`sum`, `max` or `min`) and returns the
    combined tensor on every device. It is how a partial sum (a value with a
    `partial` axis) becomes whole, e.g. after a row-parallel matmul.

    The group is the set of devices that differ only in their coordinates on
    `axes`; its size is the product of those axes' sizes. A group of size 1
    makes the op an identity, and it folds away.

    ```mlir
    %r = dist.all_reduce sum %x on @mesh axes [tp] : tensor<8x1024xf32>
    ```

    **Constraints**

    1. `all_reduce_c1`: `mesh` names a `dist.mesh`.
    2. `all_reduce_c2`: `axes` is a non-empty list of distinct axes of the
       mesh.
    3. `all_reduce_c3`: the result type equals the operand type.
  }],
  [{
    The asynchronous form of `dist.all_reduce`: it starts the reduction and
    returns a token whose payload is the type `dist.all_reduce` would return.
    Work placed between the start and its `dist.wait` overlaps the
    communication.

    ```mlir
    %t = dist.all_reduce_start sum %x on @mesh axes [tp]
        : tensor<8x1024xf32> -> !dist.token<tensor<8x1024xf32>>
    %r = dist.wait %t : !dist.token<tensor<8x1024xf32>>
    ```

    **Constraints**

    The constraints of `dist.all_reduce`, with the token's payload in place
    of the result type, and:

    1. `all_reduce_start_c1`: the token has exactly one use, a `dist.wait`
       later in the same block.
  }]>;

defm Dist_AllGather : Dist_Collective<"all_gather",
  (ins I64Attr:$gather_dim), "", "`gather_dim` $gather_dim",
  /*sameType=*/0,
  "Concatenates the local tensors of a group along one dimension",
  [{
    `dist.all_gather` concatenates the operands of the devices in the group
    along `gather_dim`, in the order of their group positions, and returns
    the concatenation on every device. It makes a dimension that was split
    over `axes` whole again.

    The position of a device in the group linearises its coordinates on
    `axes` with the first axis major. A group of size 1 makes the op an
    identity, and it folds away.

    ```mlir
    %g = dist.all_gather %x on @mesh axes [sp] gather_dim 1
        : tensor<2x32x512xf32> -> tensor<2x128x512xf32>
    ```

    **Constraints**

    1. `all_gather_c1`: `mesh` names a `dist.mesh`.
    2. `all_gather_c2`: `axes` is a non-empty list of distinct axes of the
       mesh.
    3. `all_gather_c3`: `0 <= gather_dim < rank(input)`.
    4. `all_gather_c4`: the result type is the operand type with dimension
       `gather_dim` multiplied by the group size.
  }],
  [{
    The asynchronous form of `dist.all_gather`: it starts the gather and
    returns a token whose payload is the type `dist.all_gather` would
    return.

    ```mlir
    %t = dist.all_gather_start %x on @mesh axes [sp] gather_dim 1
        : tensor<2x32x512xf32> -> !dist.token<tensor<2x128x512xf32>>
    %g = dist.wait %t : !dist.token<tensor<2x128x512xf32>>
    ```

    **Constraints**

    The constraints of `dist.all_gather`, with the token's payload in place
    of the result type, and:

    1. `all_gather_start_c1`: the token has exactly one use, a `dist.wait`
       later in the same block.
  }]>;

defm Dist_ReduceScatter : Dist_Collective<"reduce_scatter",
  (ins Dist_ReductionKindAttr:$reduction, I64Attr:$scatter_dim),
  "`` $reduction", "`scatter_dim` $scatter_dim",
  /*sameType=*/0,
  "Reduces a local tensor over a group and splits the result",
  [{
    `dist.reduce_scatter` combines the operands of the group element-wise
    with `reduction`, splits the combined tensor along `scatter_dim` into as
    many equal blocks as the group has devices, and gives each device the
    block of its group position. Megatron sequence parallelism uses it in
    place of an all-reduce.

    A group of size 1 makes the op an identity, and it folds away.

    ```mlir
    %s = dist.reduce_scatter sum %x on @mesh axes [tp] scatter_dim 1
        : tensor<2x128x512xf32> -> tensor<2x32x512xf32>
    ```

    **Constraints**

    1. `reduce_scatter_c1`: `mesh` names a `dist.mesh`.
    2. `reduce_scatter_c2`: `axes` is a non-empty list of distinct axes of
       the mesh.
    3. `reduce_scatter_c3`: `0 <= scatter_dim < rank(input)`.
    4. `reduce_scatter_c4`: dimension `scatter_dim` of the operand is
       divisible by the group size.
    5. `reduce_scatter_c5`: the result type is the operand type with
       dimension `scatter_dim` divided by the group size.
  }],
  [{
    The asynchronous form of `dist.reduce_scatter`: it starts the reduction
    and returns a token whose payload is the type `dist.reduce_scatter`
    would return.

    ```mlir
    %t = dist.reduce_scatter_start sum %x on @mesh axes [tp] scatter_dim 1
        : tensor<2x128x512xf32> -> !dist.token<tensor<2x32x512xf32>>
    %s = dist.wait %t : !dist.token<tensor<2x32x512xf32>>
    ```

    **Constraints**

    The constraints of `dist.reduce_scatter`, with the token's payload in
    place of the result type, and:

    1. `reduce_scatter_start_c1`: the token has exactly one use, a
       `dist.wait` later in the same block.
  }]>;

defm Dist_AllToAll : Dist_Collective<"all_to_all",
  (ins I64Attr:$split_dim, I64Attr:$concat_dim), "",
  "`split_dim` $split_dim `concat_dim` $concat_dim",
  /*sameType=*/0,
  "Exchanges blocks of a local tensor between all devices of a group",
  [{
    `dist.all_to_all` splits the operand along `split_dim` into as many
    equal blocks as the group has devices, sends block `j` to the device at
    group position `j`, and concatenates the blocks it receives along
    `concat_dim`, in order of the senders' positions. Ulysses sequence
    parallelism uses it to trade a sequence split for a head split around
    attention.

    A group of size 1 makes the op an identity, and it folds away.

    ```mlir
    // [batch, seq/4, heads, dim] -> [batch, seq, heads/4, dim]
    %a = dist.all_to_all %x on @mesh axes [sp] split_dim 2 concat_dim 1
        : tensor<2x32x16x64xf32> -> tensor<2x128x4x64xf32>
    ```

    **Constraints**

    1. `all_to_all_c1`: `mesh` names a `dist.mesh`.
    2. `all_to_all_c2`: `axes` is a non-empty list of distinct axes of the
       mesh.
    3. `all_to_all_c3`: `0 <= split_dim < rank(input)` and
       `0 <= concat_dim < rank(input)`.
    4. `all_to_all_c4`: dimension `split_dim` of the operand is divisible by
       the group size.
    5. `all_to_all_c5`: the result type is the operand type with dimension
       `split_dim` divided by, then dimension `concat_dim` multiplied by, the
       group size.
  }],
  [{
    The asynchronous form of `dist.all_to_all`: it starts the exchange and
    returns a token whose payload is the type `dist.all_to_all` would
    return.

    ```mlir
    %t = dist.all_to_all_start %x on @mesh axes [sp] split_dim 2 concat_dim 1
        : tensor<2x32x16x64xf32> -> !dist.token<tensor<2x128x4x64xf32>>
    %a = dist.wait %t : !dist.token<tensor<2x128x4x64xf32>>
    ```

    **Constraints**

    The constraints of `dist.all_to_all`, with the token's payload in place
    of the result type, and:

    1. `all_to_all_start_c1`: the token has exactly one use, a `dist.wait`
       later in the same block.
  }]>;

// Token dispatch for a mixture of experts: rows travel to the group
// positions their destinations name, in variable numbers, and come back.
def Dist_DispatchOp : Dist_CollectiveBase<"dispatch", [Pure,
    Dist_GroupCollective], (ins 1DTensorOf<[I64]>:$destinations),
    "getResult().getType()"> {
  let summary = "Sends each row of a local tensor to the device its "
                "destination names";
  let description = [{
    `dist.dispatch` is an all-to-all with a variable number of rows per
    device (MPI's `alltoallv`). Row `i` of the operand goes to the device at
    group position `destinations[i]`; a destination outside `[0, n)` sends
    the row nowhere. Each device first tells every other how many rows it
    will send them, then the rows move: only the rows sent cross the
    network, never the padding of a bound. The result holds the rows
    received from position 0 in their send order, then those from position
    1, and so on; the rows after the last one received are zero. `counts[j]`
    is the number of rows received from position `j`.

    The result's first dimension is a bound the compiler chose (for a
    dropless mixture of experts, every row of every device); a device that
    receives more rows than it fails at run time with a message, never
    writes past it. Partitioning a mixture of experts (`nn.moe`) whose
    tokens and experts are split over the same axis sends each token to the
    devices holding its experts with it, and `dist.dispatch_return` brings
    the experts' outputs back.

    ```mlir
    %rows, %counts = dist.dispatch %x to %dest on @mesh axes [ep]
        : tensor<16x64xf32>, tensor<16xi64> -> tensor<32x64xf32>, tensor<2xi64>
    ```

    **Constraints**

    1. `dispatch_c1`: `mesh` names a `dist.mesh`.
    2. `dispatch_c2`: `axes` is a non-empty list of distinct axes of the
       mesh.
    3. `dispatch_c3`: the operand has at least one dimension, and
       `destinations` has one entry per row (its size is the operand's first
       dimension).
    4. `dispatch_c4`: the result type is the operand type with any first
       dimension.
    5. `dispatch_c5`: `counts` is a 1-D `i64` tensor with one entry per
       device of the group.
  }];
  let results = (outs AnyStaticShapeTensor:$result,
                      1DTensorOf<[I64]>:$counts);
  let assemblyFormat = [{
    $input `to` $destinations `on` $mesh `axes` custom<AxisList>($axes)
      attr-dict `:` type($input) `,` type($destinations) `->` type($result)
      `,` type($counts)
  }];
}

def Dist_DispatchReturnOp : Dist_CollectiveBase<"dispatch_return", [Pure,
    Dist_GroupCollective], (ins 1DTensorOf<[I64]>:$counts,
                                1DTensorOf<[I64]>:$destinations),
    "getResult().getType()"> {
  let summary = "Sends the rows a `dist.dispatch` brought back to where "
                "they came from";
  let description = [{
    `dist.dispatch_return` undoes a `dist.dispatch`: the operand holds, as
    that dispatch's result did, `counts[j]` rows for the device at group
    position `j` (in order of `j`); each goes back to its sender, which puts
    it in the row it was sent from. `destinations` are the sender's own, as
    given to the dispatch: row `i` of the result is what came back for row
    `i`, or zero where `destinations[i]` is outside `[0, n)`. The rows after
    the counted ones are not sent.

    ```mlir
    %rows, %counts = dist.dispatch %x to %dest on @mesh axes [ep]
        : tensor<16x64xf32>, tensor<16xi64> -> tensor<32x64xf32>, tensor<2xi64>
    %y = ... %rows ...
    %back = dist.dispatch_return %y from %counts to %dest on @mesh axes [ep]
        : tensor<32x64xf32>, tensor<2xi64>, tensor<16xi64> -> tensor<16x64xf32>
    ```

    **Constraints**

    1. `dispatch_return_c1`: `mesh` names a `dist.mesh`.
    2. `dispatch_return_c2`: `axes` is a non-empty list of distinct axes of
       the mesh.
    3. `dispatch_return_c3`: the operand has at least one dimension, and
       `destinations` has one entry per result row.
    4. `dispatch_return_c4`: the result type is the operand type with any
       first dimension.
    5. `dispatch_return_c5`: `counts` is a 1-D `i64` tensor with one entry
       per device of the group.
  }];
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `from` $counts `to` $destinations `on` $mesh `axes`
      custom<AxisList>($axes) attr-dict `:` type($input) `,` type($counts)
      `,` type($destinations) `->` type($result)
  }];
}

defm Dist_CollectivePermute : Dist_Collective<"collective_permute",
  (ins I64Attr:$shift), "", "`shift` $shift",
  /*sameType=*/1,
  "Rotates local tensors around a ring formed by a group",
  [{
    `dist.collective_permute` sends the operand of the device at group
    position `i` to the device at position `(i + shift) mod n`, where `n` is
    the group size, and returns what the device receives. `shift` may be
    negative. Ring attention rotates key/value blocks with it.

    A shift that is a multiple of the group size (in particular any shift in
    a group of size 1) makes the op an identity, and it folds away.

    ```mlir
    %p = dist.collective_permute %kv on @mesh axes [sp] shift 1
        : tensor<2x32x8x64xf32>
    ```

    **Constraints**

    1. `collective_permute_c1`: `mesh` names a `dist.mesh`.
    2. `collective_permute_c2`: `axes` is a non-empty list of distinct axes
       of the mesh.
    3. `collective_permute_c3`: the result type equals the operand type.
  }],
  [{
    The asynchronous form of `dist.collective_permute`: it starts the
    rotation and returns a token whose payload is the operand type.

    ```mlir
    %t = dist.collective_permute_start %kv on @mesh axes [sp] shift 1
        : tensor<2x32x8x64xf32> -> !dist.token<tensor<2x32x8x64xf32>>
    %p = dist.wait %t : !dist.token<tensor<2x32x8x64xf32>>
    ```

    **Constraints**

    The constraints of `dist.collective_permute`, with the token's payload
    in place of the result type, and:

    1. `collective_permute_start_c1`: the token has exactly one use, a
       `dist.wait` later in the same block.
  }]>;

//===----------------------------------------------------------------------===//
// Point to point
//===----------------------------------------------------------------------===//

// What the synchronous and the `_start` form of a send or receive share: the
// mesh, the one axis along which the peer lies, the peer's coordinate on it
// and the tag that pairs a send with its receive.
class Dist_PointToPointBase<string mnemonic, list<Trait> traits,
                            dag operands, string localResult,
                            string startDecl = "", string startDef = "">
    : Dist_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  let arguments = !con(operands, (ins FlatSymbolRefAttr:$mesh,
                                      StrAttr:$axis,
                                      I64Attr:$peer,
                                      I64Attr:$tag));
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The mesh `mesh` names; null when it does not resolve to a dist.mesh.
    MeshOp getMeshOp(::mlir::SymbolTableCollection *symbolTable = nullptr);

    /// What the op produces once complete: the received tensor type, or
    /// `none` for a send.
    ::mlir::Type getLocalResultType() { return }] # localResult # [{; }
  }] # startDecl;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyPointToPoint(*this);
    }
    ::llvm::LogicalResult
    $cppClass::verifySymbolUses(::mlir::SymbolTableCollection &symbolTable) {
      return verifyPointToPointSymbolUses(*this, symbolTable);
    }
    MeshOp $cppClass::getMeshOp(::mlir::SymbolTableCollection *symbolTable) {
      return lookupMesh(*this, getMeshAttr(), symbolTable);
    }
  }] # startDef;
}

// A point-to-point op `dist.<mnemonic>` and its async form. `format` is the
// part before the colon.
multiclass Dist_PointToPoint<string mnemonic, dag operands, dag syncResults,
                             list<Trait> syncTraits, string syncLocalResult,
                             string format, string syncTypes,
                             string startTypes, string syncSummary,
                             string syncDescription, string startDescription> {
  def Op : Dist_PointToPointBase<mnemonic, syncTraits, operands,
                                 syncLocalResult> {
    let summary = syncSummary;
    let description = syncDescription;
    let results = syncResults;
    let assemblyFormat = format # " attr-dict `:` " # syncTypes;
  }

  def StartOp : Dist_PointToPointBase<mnemonic # "_start", [
        Dist_AsyncStart,
        MemoryEffects<[MemRead<Dist_Communicator>,
                       MemWrite<Dist_Communicator>]>],
      operands, "getToken().getType().getPayload()",
      asyncStartDecl, asyncStartDef> {
    let summary = "Starts a `dist." # mnemonic # "` that `dist.wait` finishes";
    let description = startDescription;
    let results = (outs Dist_TokenType:$token);
    let assemblyFormat = format # " attr-dict `:` " # startTypes;
  }
}

defm Dist_Send : Dist_PointToPoint<"send",
  (ins AnyStaticShapeTensor:$input), (outs),
  [MemoryEffects<[MemWrite<Dist_Communicator>]>],
  "::mlir::NoneType::get(getContext())",
  "$input `on` $mesh `axis` custom<AxisName>($axis) `to` $peer `tag` $tag",
  "type($input)", "type($input) `->` qualified(type($token))",
  "Sends a local tensor to a peer along one mesh axis",
  [{
    `dist.send` sends the operand to the device whose coordinate on `axis`
    is `peer` and whose other coordinates equal the sender's. The matching
    `dist.recv` on the peer names the sender's coordinate and the same
    `tag`; the tag tells apart several transfers between the same pair
    (one per microbatch, say). Pipeline stages hand activations on this way.

    ```mlir
    dist.send %h on @mesh axis pp to 1 tag 0 : tensor<2x128x512xf32>
    ```

    **Constraints**

    1. `send_c1`: `mesh` names a `dist.mesh`.
    2. `send_c2`: `axis` is an axis of the mesh.
    3. `send_c3`: `0 <= peer < size(axis)`.
    4. `send_c4`: `tag` is non-negative.
  }],
  [{
    The asynchronous form of `dist.send`: it starts the transfer and returns
    a `!dist.token<none>`; its `dist.wait` returns nothing and marks the
    point after which the operand may be overwritten.

    ```mlir
    %t = dist.send_start %h on @mesh axis pp to 1 tag 0
        : tensor<2x128x512xf32> -> !dist.token<none>
    dist.wait %t : !dist.token<none>
    ```

    **Constraints**

    The constraints of `dist.send`, and:

    1. `send_start_c1`: the token has exactly one use, a `dist.wait` later in
       the same block.
    2. `send_start_c2`: the token's payload is `none`.
  }]>;

defm Dist_Recv : Dist_PointToPoint<"recv",
  (ins), (outs AnyStaticShapeTensor:$result),
  [MemoryEffects<[MemRead<Dist_Communicator>, MemWrite<Dist_Communicator>]>],
  "getResult().getType()",
  "`on` $mesh `axis` custom<AxisName>($axis) `from` $peer `tag` $tag",
  "type($result)", "qualified(type($token))",
  "Receives a local tensor from a peer along one mesh axis",
  [{
    `dist.recv` receives a tensor of the result type from the device whose
    coordinate on `axis` is `peer` and whose other coordinates equal the
    receiver's; it pairs with the `dist.send` there that has the same `tag`.

    ```mlir
    %h = dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x128x512xf32>
    ```

    **Constraints**

    1. `recv_c1`: `mesh` names a `dist.mesh`.
    2. `recv_c2`: `axis` is an axis of the mesh.
    3. `recv_c3`: `0 <= peer < size(axis)`.
    4. `recv_c4`: `tag` is non-negative.
    5. `recv_c5`: the received type is a statically shaped tensor (for
       `dist.recv_start`: the token's payload).
  }],
  [{
    The asynchronous form of `dist.recv`: it posts the receive and returns a
    token whose payload is the received tensor type.

    ```mlir
    %t = dist.recv_start on @mesh axis pp from 0 tag 0
        : !dist.token<tensor<2x128x512xf32>>
    %h = dist.wait %t : !dist.token<tensor<2x128x512xf32>>
    ```

    **Constraints**

    The constraints of `dist.recv`, with the token's payload in place of the
    result type, and:

    1. `recv_start_c1`: the token has exactly one use, a `dist.wait` later in
       the same block.
  }]>;

//===----------------------------------------------------------------------===//
// Device-local ops without communication
//===----------------------------------------------------------------------===//

def Dist_AllSliceOp : Dist_CollectiveBase<"all_slice", [Pure],
    (ins I64Attr:$slice_dim), "getResult().getType()"> {
  let summary = "Keeps this device's block of a tensor every device holds";
  let description = [{
    `dist.all_slice` is the inverse of `dist.all_gather`, and moves no data:
    every device of the group holds the same tensor, splits it along
    `slice_dim` into as many equal blocks as the group has devices, and keeps
    the block of its group position. Partitioning uses it where a value that
    is whole on every device must become split (a replicated weight feeding
    a column-parallel matmul, a batch entering a data-parallel region). When
    the operand is a constant, lowering to a rank's program keeps only that
    rank's block of the weight.

    The position of a device in the group linearises its coordinates on
    `axes` with the first axis major. A group of size 1 makes the op an
    identity, and it folds away.

    ```mlir
    %s = dist.all_slice %w on @mesh axes [tp] slice_dim 1
        : tensor<64x256xf32> -> tensor<64x128xf32>
    ```

    **Constraints**

    1. `all_slice_c1`: `mesh` names a `dist.mesh`.
    2. `all_slice_c2`: `axes` is a non-empty list of distinct axes of the
       mesh.
    3. `all_slice_c3`: `0 <= slice_dim < rank(input)`.
    4. `all_slice_c4`: dimension `slice_dim` of the operand is divisible by
       the group size.
    5. `all_slice_c5`: the result type is the operand type with dimension
       `slice_dim` divided by the group size.
  }];
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axes` custom<AxisList>($axes) `slice_dim` $slice_dim
      attr-dict `:` type($input) `->` type($result)
  }];
  let hasFolder = 1;
}

def Dist_AxisIndexOp : Dist_Op<"axis_index", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "This device's position in a group of the mesh";
  let description = [{
    `dist.axis_index` returns, as a 0-d `i64` tensor, the position of the
    running device in the group spanned by `axes`: its coordinates on those
    axes linearised with the first axis major. Partitioning uses it where a
    device computes with the offset of its block, as a vocab-parallel
    embedding does to find which rows of the table it holds. Lowering to a
    rank's program makes it a constant.

    ```mlir
    %i = dist.axis_index on @mesh axes [tp] : tensor<i64>
    ```

    **Constraints**

    1. `axis_index_c1`: `mesh` names a `dist.mesh`.
    2. `axis_index_c2`: `axes` is a non-empty list of distinct axes of the
       mesh.
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes);
  let results = (outs 0DTensorOf<[I64]>:$result);
  let assemblyFormat = [{
    `on` $mesh `axes` custom<AxisList>($axes) attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The names of the group's axes, major to minor.
    ::llvm::SmallVector<::llvm::StringRef> getGroupAxes();
  }];
}

//===----------------------------------------------------------------------===//
// Wait
//===----------------------------------------------------------------------===//

def Dist_WaitOp : Dist_Op<"wait", [
    MemoryEffects<[MemRead<Dist_Communicator>,
                   MemWrite<Dist_Communicator>]>]> {
  let summary = "Finishes an asynchronous collective or transfer";
  let description = [{
    `dist.wait` blocks until the communication its token stands for is
    complete and returns the token's payload: the tensor the synchronous op
    would have returned, or nothing for a send. Every `dist.<op>_start` has
    exactly one wait, later in the same block; what lies between them
    overlaps the communication.

    ```mlir
    %t = dist.all_gather_start %x on @mesh axes [tp] gather_dim 0
        : tensor<4x8xf32> -> !dist.token<tensor<16x8xf32>>
    %y = dist.wait %t : !dist.token<tensor<16x8xf32>>
    ```

    **Constraints**

    1. `wait_c1`: the token is the result of a `dist.<op>_start` op.
    2. `wait_c2`: the op has one result, of the payload type, when the
       payload is a tensor, and no result when it is `none`.
  }];
  let arguments = (ins Dist_TokenType:$token);
  let results = (outs Optional<AnyStaticShapeTensor>:$result);
  let assemblyFormat = [{
    $token attr-dict `:` qualified(type($token))
      `` custom<WaitResult>(type($result), ref(type($token)))
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$token)>
  ];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The `_start` op whose token this wait redeems; null if none.
    ::mlir::Operation *getStartOp();
  }];
}

//===----------------------------------------------------------------------===//
// Pipeline structure
//===----------------------------------------------------------------------===//

def Dist_StageOp : Dist_Op<"stage", [
    RecursiveMemoryEffects,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The part of a program one pipeline stage runs";
  let description = [{
    `dist.stage` holds what pipeline stage `index` runs: the devices whose
    coordinate on `axis` (usually `pp`) is `index` execute the body, the
    others skip it. Pipeline splitting cuts a model's layers into
    consecutive stages; values that cross from one stage to the next travel
    by `dist.send` in the producing stage and `dist.recv` in the consuming
    one. The body may use values defined above it (weights, constants) but
    should take activations of another stage only through a receive.

    The results are what the body yields; they are defined on the devices of
    that stage only. Microbatch loops and schedules are built on top of
    stages by later passes.

    ```mlir
    %out = dist.stage 1 on @mesh axis pp -> (tensor<2x128x512xf32>) {
      %h = dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x128x512xf32>
      %y = dist.all_reduce sum %h on @mesh axes [tp] : tensor<2x128x512xf32>
      dist.yield %y : tensor<2x128x512xf32>
    }
    ```

    **Constraints**

    1. `stage_c1`: `mesh` names a `dist.mesh`.
    2. `stage_c2`: `axis` is an axis of the mesh.
    3. `stage_c3`: `0 <= index < size(axis)`.
    4. `stage_c4`: the body ends in a `dist.yield` whose operand types equal
       the result types.
    5. `stage_c5`: the stage is not nested in another `dist.stage`.
  }];
  let arguments = (ins I64Attr:$index, FlatSymbolRefAttr:$mesh, StrAttr:$axis);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$region);
  let assemblyFormat = [{
    $index `on` $mesh `axis` custom<AxisName>($axis)
      (`->` `(` type($results)^ `)`)? attr-dict-with-keyword $region
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The block the stage runs.
    ::mlir::Block &getBody() { return getRegion().front(); }

    /// The mesh `mesh` names; null when it does not resolve to a dist.mesh.
    MeshOp getMeshOp(::mlir::SymbolTableCollection *symbolTable = nullptr);
  }];
}

def Dist_YieldOp : Dist_Op<"yield", [Pure, Terminator]> {
  let summary = "Ends a pipeline stage and yields its results";
  let description = [{
    `dist.yield` terminates the body of a `dist.stage`; its operands become
    the stage's results.

    ```mlir
    dist.yield %y : tensor<2x128x512xf32>
    ```

    **Constraints**

    1. `yield_c1`: the parent op is a `dist.stage`.
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
  let hasVerifier = 1;
}

#endif // PARTITA_DIALECT_DIST_IR_DISTOPS_TD
