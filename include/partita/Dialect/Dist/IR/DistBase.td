//===- DistBase.td - dist dialect, base classes and enums --*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_IR_DISTBASE_TD
#define PARTITA_DIALECT_DIST_IR_DISTBASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::mlir::partita::dist";
  let summary = "Meshes, shardings, collectives and pipeline stages";
  let description = [{
    The `dist` dialect says how a model is spread over devices. It sits
    between the planner, which picks a mesh and a few shardings, and the
    per-rank programs the back ends compile:

    ```
    nn ──plan──▶ nn + dist.mesh + dist.annotate (global shapes)
                   │ propagate: #dist.sharding on every value
                   │ pipeline-split: dist.stage, dist.send / dist.recv
                   ▼
                 partition: dist.reshard ──▶ collectives on local shapes
                   │ overlap: dist.*_start ... dist.wait
                   ▼
                 local nn + dist, one program per rank ──▶ host / CUDA
    ```

    A `dist.mesh` symbol names the axes of the device mesh (`dp`, `tp`,
    `pp`, `sp`, any names, any order, size 1 allowed). A `#dist.sharding`
    attribute says which mesh axes split each dimension of a *global*
    tensor, and along which axes the tensor holds partial sums.
    `dist.annotate` and `dist.reshard` attach and change shardings of
    global values.

    After partitioning, values are *local*: each rank holds its shard.
    Collectives (`dist.all_reduce`, `dist.all_gather`, `dist.reduce_scatter`,
    `dist.all_to_all`, `dist.collective_permute`) run over a *group*, the
    devices that differ only in the coordinates of the listed mesh axes; the
    group size is the product of those axes' sizes. `dist.send` and
    `dist.recv` move a value to or from one peer along a single axis,
    usually `pp`. Every collective and point-to-point op has an asynchronous
    form, `dist.<op>_start`, that returns a `!dist.token` which exactly one
    later `dist.wait` in the same block redeems for the result.

    `dist.stage` holds the part of the program one pipeline stage runs.

    Verifiers check axis names against the mesh, that no axis is used twice,
    divisibility of split dimensions, local result shapes, peer coordinates
    and the pairing of every async start with its wait. Each check cites a
    constraint id (`all_gather_c3`) listed in the op's documentation.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();
    void registerOps();
  }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Dist_ReductionKind : I32Enum<"ReductionKind",
    "how a collective combines the values of a group", [
      I32EnumCase<"Sum", 0, "sum">,
      I32EnumCase<"Max", 1, "max">,
      I32EnumCase<"Min", 2, "min">
    ]> {
  let cppNamespace = "::mlir::partita::dist";
}

def Dist_ReductionKindAttr
    : EnumAttr<Dist_Dialect, Dist_ReductionKind, "reduction"> {
  let description = [{
    How `dist.all_reduce` and `dist.reduce_scatter` combine the tensors of a
    group, element by element: `sum` (partial sums of a row-parallel matmul),
    `max` or `min` (softmax and norm statistics of a split axis). Inside an
    op it is written bare; on its own it reads `#dist<reduction sum>`.

    ```mlir
    %r = dist.all_reduce max %x on @mesh axes [tp] : tensor<8x1xf32>
    ```

    **Constraints**

    None beyond the spelling: the parser accepts only `sum`, `max` and `min`.
  }];
}

//===----------------------------------------------------------------------===//
// Traits and resources
//===----------------------------------------------------------------------===//

// Marks the `_start` form of a collective or point-to-point op: result 0 is a
// `!dist.token` that exactly one `dist.wait` redeems.
def Dist_AsyncStart : NativeOpTrait<"AsyncStartOpTrait"> {
  let cppNamespace = "::mlir::partita::dist";
}

// The communicator a rank talks through. Point-to-point and async ops read
// and write it so that passes keep their order and never merge or drop them.
def Dist_Communicator
    : Resource<"::mlir::partita::dist::CommunicatorResource">;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

class Dist_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Dist_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

class Dist_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Dist_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

#endif // PARTITA_DIALECT_DIST_IR_DISTBASE_TD
