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
    lookup, opaque). Sharding propagation, partitioning and the cost model
    read only this rule, never the op itself.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"Returns the sharding rule of this op.",
      /*retTy=*/"::mlir::partita::ShardingRule",
      /*methodName=*/"getShardingRule">
  ];
}

#endif // PARTITA_DIALECT_NN_IR_NNINTERFACES_TD
