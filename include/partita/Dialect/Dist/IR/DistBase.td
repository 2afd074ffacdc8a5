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

    **Discardable attributes**

    The sharding passes hand their results to each other, and to the
    artifact writer, as `dist.*` attributes on ops, function arguments and
    results and the module. The dialect names them (`DistDialect.h`) and
    verifies each wherever it appears:

    | attribute | on | value |
    |---|---|---|
    | `dist.sharding` | function argument or result | `#dist.sharding` |
    | `dist.shardings` | an op with results | one `#dist.sharding` per result |
    | `dist.strategy` | `dist.annotate` | unit: a strategy put it there |
    | `dist.priority` | `dist.annotate` | integer, its propagation priority |
    | `dist.reason` | a collective | string: why partitioning inserted it |
    | `dist.remarks` | module | strings for the report |
    | `dist.ring` | `nn.attention` | string: the ring attention axis |
    | `dist.sequence_order` | module / index constant | `#dist.sequence_order` / unit |
    | `dist.sequence_parallel` | module | `#dist.sequence_parallel` |
    | `dist.pipeline` | module | `#dist.pipeline` |
    | `dist.split_costs` | `nn.matmul` | the split search's estimate per candidate |

    **Constraints**

    1. `attrs_c1`: `dist.sharding` is a `#dist.sharding` of the rank of the
       argument or result it is on.
    2. `attrs_c2`: `dist.shardings` is an array of one `#dist.sharding` per
       result, each of the rank of its result.
    3. `attrs_c3`: `dist.strategy` is a unit attribute and `dist.priority`
       an integer, on a `dist.annotate`.
    4. `attrs_c4`: `dist.reason` is a string.
    5. `attrs_c5`: `dist.remarks` is an array of strings, on a module.
    6. `attrs_c6`: `dist.pipeline`, `dist.sequence_parallel` and
       `dist.sequence_order` are attributes of their kind on a module;
       elsewhere `dist.sequence_order` is a unit attribute.
    7. `attrs_c7`: `dist.ring` is the name of an axis of the module's
       `dist.mesh`.
    8. `attrs_c8`: no other attribute name starts with `dist.`.
    9. `attrs_c9`: `dist.split_costs` is on an `nn.matmul` or an `nn.moe`:
       a dictionary from the candidates the strategy's split search
       compared for its weight (`columns`, `rows`, `batch`, `whole`) or its
       experts' weights (`experts`, `features`, `whole`) to the estimated
       seconds of the function's step on one device with that candidate
       (f64).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
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

def Dist_AxisRole : I32Enum<"AxisRole",
    "which kind of parallelism a mesh axis carries", [
      I32EnumCase<"None", 0, "none">,
      I32EnumCase<"Data", 1, "dp">,
      I32EnumCase<"Tensor", 2, "tp">,
      I32EnumCase<"Pipeline", 3, "pp">,
      I32EnumCase<"Sequence", 4, "sp">,
      I32EnumCase<"Expert", 5, "ep">
    ]> {
  let cppNamespace = "::mlir::partita::dist";
}

def Dist_AxisRoleAttr : EnumAttr<Dist_Dialect, Dist_AxisRole, "axis_role"> {
  let description = [{
    The parallelism a `dist.mesh` axis carries: `dp` (data: the batch is
    split), `tp` (tensor: Megatron's column and row splits of weights), `pp`
    (pipeline: each coordinate runs one stage), `sp` (sequence: Ulysses or
    ring attention), `ep` (expert: a mixture of experts' experts are split,
    each coordinate holding a block of them), or `none` (the strategies
    leave the axis alone). The passes find an axis by its role, never by
    its name. An axis named `dp`, `tp`, `pp`, `sp` or `ep` has that role
    unless the mesh says otherwise; any other name has `none`. Inside `dist.mesh` a role is written after the
    size, `model = 4 : tp`, as `--mesh model=4:tp` spells it.

    ```mlir
    dist.mesh @mesh [model = 4 : tp, data = 2 : dp]
    ```

    **Constraints**

    None beyond the spelling; `dist.mesh` checks that a role other than
    `none` is held by one axis at most (`mesh_c7`).
  }];
}

def Dist_PipelineSchedule : I32Enum<"PipelineSchedule",
    "the order in which pipeline stages run their microbatches", [
      I32EnumCase<"GPipe", 0, "gpipe">,
      I32EnumCase<"Interleaved", 1, "interleaved">
    ]> {
  let cppNamespace = "::mlir::partita::dist";
}

def Dist_SequenceParallelMode : I32Enum<"SequenceParallelMode",
    "how sequence parallelism splits attention", [
      I32EnumCase<"Megatron", 0, "megatron">,
      I32EnumCase<"Ulysses", 1, "ulysses">,
      I32EnumCase<"Ring", 2, "ring">
    ]> {
  let cppNamespace = "::mlir::partita::dist";
}

//===----------------------------------------------------------------------===//
// Traits and resources
//===----------------------------------------------------------------------===//

// Marks the `_start` form of a collective or point-to-point op: result 0 is a
// `!dist.token` that exactly one `dist.wait` redeems.
def Dist_AsyncStart : NativeOpTrait<"AsyncStartOpTrait"> {
  let cppNamespace = "::mlir::partita::dist";
}

// A collective over a group of mesh axes (all_reduce, ..., in both forms):
// what rank specialization gives a group and the exec program runs as one
// collective instruction.
def Dist_GroupCollective : NativeOpTrait<"GroupCollectiveOpTrait"> {
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
