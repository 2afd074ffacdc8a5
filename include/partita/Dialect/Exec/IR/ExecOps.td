//===- ExecOps.td - exec dialect ops -----------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_EXEC_IR_EXECOPS_TD
#define PARTITA_DIALECT_EXEC_IR_EXECOPS_TD

include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "partita/Dialect/Exec/IR/ExecAttrs.td"

def Exec_KernelOp : Exec_Op<"kernel", [
    RecursiveMemoryEffects,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "A kernel and the elementwise chain fused into its epilogue";
  let description = [{
    `exec.kernel` is one kernel instruction of the program: the first op of
    its body (the head) computes a value, and each later op is an
    elementwise step applied to the value before anything else reads it
    (`Kernel.epilogue`). The body yields the chain's last value, which is
    the kernel's result. `--partita-fuse` builds it; the operands of the
    steps other than the chain value are defined before the kernel.

    ```mlir
    %y = exec.kernel -> tensor<4x8xf32> {
      %m = nn.matmul %a, %w : ...
      %t = nn.tanh %m : tensor<4x8xf32>
      %s = nn.add %t, %x : ...
      exec.yield %s : tensor<4x8xf32>
    }
    ```

    **Constraints**

    1. `kernel_c1`: the body holds a head with one result and at least one
       step.
    2. `kernel_c2`: each step reads the value of the op before it and has
       that value's type.
    3. `kernel_c3`: the body yields the last step's result.
  }];
  let results = (outs AnyRankedTensor:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`->` type($result) attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The op whose kernel runs; the steps follow it.
    ::mlir::Operation *getHead() { return &getBody().front().front(); }

    /// The elementwise steps, in order.
    ::llvm::SmallVector<::mlir::Operation *> getSteps();
  }];
}

def Exec_YieldOp : Exec_Op<"yield", [
    Pure, Terminator, HasParent<"KernelOp">]> {
  let summary = "Ends an exec.kernel with the chain's value";
  let description = [{
    `exec.yield` terminates the body of an `exec.kernel`; its operand is
    the kernel's result.

    ```mlir
    exec.yield %s : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let builders = [OpBuilder<(ins), [{ /* the builder of the body adds it */ }]>];
}

def Exec_SliceBlockOp : Exec_Op<"slice_block", [Pure]> {
  let summary = "One rank's block of a tensor every rank of a group holds";
  let description = [{
    `exec.slice_block` is `dist.all_slice` on a known rank: of the input
    split along `dim` into `parts` equal blocks it keeps block `block`.
    `--partita-specialize-rank` makes it from `dist.all_slice`. Of a weight
    (an `nn.constant`, possibly through other slice_blocks) the program
    holds only the block; of any other value it is a `slice` kernel.

    ```mlir
    %b = exec.slice_block %w dim 1 block 1 of 2
        : tensor<64x256xf32> -> tensor<64x128xf32>
    ```

    **Constraints**

    1. `slice_block_c1`: `0 <= dim < rank(input)`.
    2. `slice_block_c2`: `0 <= block < parts`.
    3. `slice_block_c3`: the result type is the input type with dimension
       `dim` divided by `parts`.
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim, I64Attr:$block,
                       I64Attr:$parts);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `block` $block `of` $parts attr-dict `:` type($input)
      `->` type($result)
  }];
  let hasVerifier = 1;
}

def Exec_CopyOp : Exec_Op<"copy", [Pure, SameOperandsAndResultType]> {
  let summary = "Copies a value into a buffer of its own";
  let description = [{
    `exec.copy` is the program's `copy` kernel. `--partita-plan-buffers`
    inserts one before the return for each output no kernel writes (an
    input, a weight, a view, a value returned twice), so that every output
    binding has a buffer of its own.

    ```mlir
    %o = exec.copy %x : tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

#endif // PARTITA_DIALECT_EXEC_IR_EXECOPS_TD
