//===- Passes.td - exec stage passes -----------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_EXEC_TRANSFORMS_PASSES_TD
#define PARTITA_DIALECT_EXEC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def SpecializeRankPass : Pass<"partita-specialize-rank", "::mlir::ModuleOp"> {
  let summary = "Make the SPMD program the program of one rank";
  let description = [{
    Every rank runs the same partitioned function; this pass keeps what
    rank `rank` runs and fixes what depends on it:

    - the bodies of the pipeline stages the rank belongs to (its coordinate
      on the stage's axis) are inlined, the other stages dropped; a
      function result another stage produces is removed and its name listed
      in `exec.outputs_elsewhere`, and every argument and result records its
      binding name (`exec.binding`);
    - `dist.axis_index` becomes an `nn.constant`, and the `nn.compare` and
      `nn.where` ops that read it are folded by their folders (the guard that
      adds a bias on one member of a partial-sum group disappears);
    - `dist.all_slice` becomes `exec.slice_block` with the rank's block;
    - collectives get `exec.group`, the global ranks of the rank's group in
      group order, and sends and receives `exec.peer`, the peer's global
      rank;
    - the function gets `exec.rank` and `exec.world_size`.

    ```mlir
    %i = dist.axis_index on @mesh axes [tp] : tensor<i64>
    // with rank=1 on a mesh [tp = 2]:
    %i = nn.constant dense<1> : tensor<i64>
    ```
  }];
  let dependentDialects = ["::mlir::partita::exec::ExecDialect",
                           "::mlir::partita::nn::NNDialect"];
  let options = [
    Option<"rank", "rank", "int64_t", /*default=*/"0",
           "The global rank whose program to keep">
  ];
}

def FusePass : Pass<"partita-fuse", "::mlir::func::FuncOp"> {
  let summary = "Fuse elementwise chains into the kernel that produces them";
  let description = [{
    An elementwise op whose operand is the only use of a kernel's result (or
    of a chain already fused into one), and whose result has that operand's
    type, joins the kernel's epilogue; a binary op only when its other
    operand exists before the kernel runs. Each kernel with an epilogue
    becomes an `exec.kernel` region at the kernel's place, holding the
    kernel and its steps in order and yielding the chain's last value.

    ```mlir
    %m = nn.matmul %a, %w : ...
    %t = nn.tanh %m : tensor<4x8xf32>
    // becomes
    %t = exec.kernel -> tensor<4x8xf32> {
      %m = nn.matmul %a, %w : ...
      %0 = nn.tanh %m : tensor<4x8xf32>
      exec.yield %0 : tensor<4x8xf32>
    }
    ```
  }];
  let dependentDialects = ["::mlir::partita::exec::ExecDialect"];
  let statistics = [
    Statistic<"numFused", "fused-ops", "Elementwise ops fused into a kernel">
  ];
}

def PrefetchReceivesPass : Pass<"partita-prefetch-receives",
                                "::mlir::func::FuncOp"> {
  let summary = "Post each pipeline receive one ahead, as dist.recv_start";
  let description = [{
    Each `dist.recv` becomes a `dist.recv_start` and a `dist.wait` at the
    receive's place. The first receive starts where it waits; each later one
    starts right after the wait of the one before, so that the next
    microbatch's activation arrives while this one computes (two receive
    buffers live, not one per microbatch), unless a send lies between the
    two: transfers run in order on the communication stream, and a receive
    waiting there would hold back a send its peer needs first.

    ```mlir
    %h = dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x8xf32>
    // becomes
    %t = dist.recv_start on @mesh axis pp from 0 tag 0
        : !dist.token<tensor<2x8xf32>>
    %h = dist.wait %t : !dist.token<tensor<2x8xf32>>
    ```
  }];
  let dependentDialects = ["::mlir::partita::dist::DistDialect"];
}

def PlanBuffersPass : Pass<"partita-plan-buffers", "::mlir::func::FuncOp"> {
  let summary = "Give every value of a rank's program a buffer and arena bytes";
  let description = [{
    Decides the memory of the program the exec translation writes, as
    `#exec.buffer` attributes (see the attribute):

    - arguments are `input`s; a result no kernel writes directly (an input,
      a weight, a view, a value returned twice) gets an `exec.copy` before
      the return, and the results become `output`s;
    - an `nn.constant` is a `weight` (resources by their name, dense values
      above `max-inline-constant-bytes` by a hash of type and bytes) or
      inline `constant` data; a weight read only through `exec.slice_block`
      has no buffer, its blocks are weights or constants of their own
      (named `<weight>.shard<dim>_<block>of<parts>`);
    - `nn.reshape` is an `alias` of its input;
    - an `nn.kv_cache_write` into an activation it alone reads (a pipeline
      microbatch's copy of the cache) is an `alias` of it: the kernel then
      writes the new slots in place;
    - everything else is an `activation` that lives from the instruction
      that first writes it to the last that reads it (through aliases, and
      until an async collective's wait), and activations whose lives do not
      overlap share arena bytes: largest first, each at the lowest offset
      free for its whole life, 64-byte aligned.

    The function gets `exec.arena_bytes`, the arena size, and
    `exec.activation_bytes`, what the activations would need without reuse.
    Refuses a tensor above 2^48 bytes, a dynamic shape, an element type or
    op the runtime does not support.
  }];
  let dependentDialects = ["::mlir::partita::exec::ExecDialect"];
  let options = [
    Option<"maxInlineConstantBytes", "max-inline-constant-bytes", "int64_t",
           /*default=*/"1024",
           "Constants up to this many bytes are kept inline in the program">
  ];
}

#endif // PARTITA_DIALECT_EXEC_TRANSFORMS_PASSES_TD
