//===- ExecBase.td - exec dialect, base classes and enums --*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_EXEC_IR_EXECBASE_TD
#define PARTITA_DIALECT_EXEC_IR_EXECBASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"

def Exec_Dialect : Dialect {
  let name = "exec";
  let cppNamespace = "::mlir::partita::exec";
  let summary = "One rank's program, planned for the exec translation";
  let description = [{
    The `exec` dialect holds what the exec stage decides about one rank's
    program before it is written as `partita.program.Program`
    (`proto/program.proto`, `docs/exec-program.md`):

    ```
    local nn + dist (SPMD, every rank)
      │ --partita-specialize-rank{rank=N}: stage inlined, axis indices
      │     constant, exec.slice_block, #exec groups and peers
      │ --partita-fuse: exec.kernel regions (a kernel and its epilogue)
      │ --partita-prefetch-receives: dist.recv_start one ahead
      │ --partita-plan-buffers: #exec.buffer on every value, arena size
      ▼
    planned IR ──exec-to-proto (no decisions)──▶ program.proto
    ```

    Its ops are the few program constructs `nn` and `dist` have no op
    for: a fused kernel, a rank's block of a replicated tensor and the copy
    into an output. Its attributes carry the rank (`exec.rank`,
    `exec.world_size`), the global ranks of collective groups
    (`exec.group`) and point-to-point peers (`exec.peer`), and the buffer
    plan (`#exec.buffer`, `exec.arena_bytes`, `exec.view` on a slice or a
    concatenation whose bytes the plan left where they lie, so that the
    translation writes no instruction for it); the dialect verifies them
    where they are attached.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerOps();

    /// Discardable attribute names, spelled once.
    static constexpr ::llvm::StringLiteral kRankAttr = "exec.rank";
    static constexpr ::llvm::StringLiteral kWorldSizeAttr = "exec.world_size";
    static constexpr ::llvm::StringLiteral kGroupAttr = "exec.group";
    static constexpr ::llvm::StringLiteral kPeerAttr = "exec.peer";
    static constexpr ::llvm::StringLiteral kBindingAttr = "exec.binding";
    /// On a training parameter's argument: the rank's block of its
    /// initial value, as (parts, block) per dimension.
    static constexpr ::llvm::StringLiteral kInitialBlocksAttr =
        "exec.initial_blocks";
    static constexpr ::llvm::StringLiteral kOutputsElsewhereAttr =
        "exec.outputs_elsewhere";
    static constexpr ::llvm::StringLiteral kBufferAttr = "exec.buffer";
    static constexpr ::llvm::StringLiteral kBuffersAttr = "exec.buffers";
    static constexpr ::llvm::StringLiteral kArenaBytesAttr = "exec.arena_bytes";
    static constexpr ::llvm::StringLiteral kActivationBytesAttr =
        "exec.activation_bytes";
    /// On an nn.slice or nn.concat that the buffer plan made a view: the
    /// slice's result lies in its input's bytes, or the concatenation's
    /// operands were written in its result's. No instruction moves bytes.
    static constexpr ::llvm::StringLiteral kViewAttr = "exec.view";
  }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Exec_BufferKind : I32EnumAttr<"BufferKind",
    "what memory holds a value of the program", [
      I32EnumAttrCase<"Activation", 1, "activation">,
      I32EnumAttrCase<"Input", 2, "input">,
      I32EnumAttrCase<"Output", 3, "output">,
      I32EnumAttrCase<"Weight", 4, "weight">,
      I32EnumAttrCase<"Constant", 5, "constant">,
      I32EnumAttrCase<"Alias", 6, "alias">
    ]> {
  let cppNamespace = "::mlir::partita::exec";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

class Exec_Op<string mnemonic, list<Trait> traits = []>
    : Op<Exec_Dialect, mnemonic, traits>;

class Exec_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Exec_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // PARTITA_DIALECT_EXEC_IR_EXECBASE_TD
