//===- NNInterfaces.td - nn interfaces ---------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_NNINTERFACES_TD
#define PARTITA_DIALECT_NN_IR_NNINTERFACES_TD

include "mlir/IR/OpBase.td"

def NN_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::partita::nn";
  let description = [{
    The op's sharding rule: every dimension of every tensor operand and
    result mapped to a list of factors (major to minor), each factor with a
    size and a kind (parallel, reduction, normalization, kv_sequence,
    lookup, opaque). Sharding propagation reads only this rule, never the
    op itself. Partitioning reads the op only through this interface: the
    rule, and the `partition` hook, whose default builds the local op from
    the rule alone. An op overrides the hook where its shards combine in a
    way no factor says: `nn.attention` planned as a ring (blocks of keys
    and values passed around it, merged by online softmax),
    `nn.constant` (kept global, each device slicing its block, laid out in
    ring attention's sequence order) and `nn.attention_grad` (operands
    read whole over the reduction factors its cotangents sum over, which
    the default would make partial sums); `getOrderedFactors` tells the check
    of that order which ops compare positions. The hook reaches the mesh
    and the collectives through its `PartitionContext` argument
    (`PartitionContext.h`), which the dist partitioner implements, so the
    nn dialect does not depend on dist.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Returns the sharding rule of this op.",
      /*retTy=*/"::mlir::partita::ShardingRule",
      /*methodName=*/"getShardingRule">,
    InterfaceMethod<
      /*desc=*/[{
        Builds this op's local form on every device: reads the local
        operands from `context`, builds the local ops at its builder and
        records the local results with it. The default partitions by the
        sharding rule alone.
      }],
      /*retTy=*/"::llvm::LogicalResult",
      /*methodName=*/"partition",
      /*args=*/(ins "::mlir::partita::nn::PartitionContext &":$context),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{ return context.partitionByRule(); }]>,
    InterfaceMethod<
      /*desc=*/[{
        Returns the factors of `rule` (this op's) along which the op
        compares positions instead of treating them one by one: causal
        attention's query and key sequences; none by default. On a
        sequence laid out out of order (ring attention's zigzag), such an
        op is right only where its `partition` hook compares the layout's
        global positions, as ring attention does when the first of these
        factors is split over the ring.
      }],
      /*retTy=*/"::llvm::SmallVector<unsigned>",
      /*methodName=*/"getOrderedFactors",
      /*args=*/(ins "const ::mlir::partita::ShardingRule &":$rule),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{ return {}; }]>
  ];
}

def NN_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::partita::nn";
  let description = [{
    The op's vector-Jacobian product, for reverse-mode differentiation
    (`partita-differentiate`, docs/training.md): given a cotangent for each
    result (null where a result has none: a zero), `buildVjp` builds at
    `builder` the nn ops computing each operand's cotangent and appends one
    value per operand to `operandGrads`: null where the operand takes none
    (an integer index, a boolean condition). The ops it builds read the
    op's operands and results as they are (the forward values the backward
    needs are those it uses). An op without this interface cannot be on the
    path from a parameter to the loss: the pass refuses it by name. The
    rules are attached to the ops as external models in NNDerivatives.cpp,
    beside the sharding rules.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Builds the cotangents of the operands from the results'.",
      /*retTy=*/"::llvm::LogicalResult",
      /*methodName=*/"buildVjp",
      /*args=*/(ins "::mlir::OpBuilder &":$builder,
                    "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
                    "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // PARTITA_DIALECT_NN_IR_NNINTERFACES_TD
