//===- Passes.td - nn transformation passes ----------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_TRANSFORMS_PASSES_TD
#define PARTITA_DIALECT_NN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintShardingRulesPass : Pass<"partita-print-sharding-rules"> {
  let summary = "Report the sharding rule of every nn op";
  let description = [{
    Emits a remark on every op that implements `ShardingRuleOpInterface`
    with its factor mapping, after checking the rule against the op's types
    (every dimension's factors multiply to its size; no tensor uses a factor
    twice). A rule that fails the check is an error: it is a compiler bug.

    The notation is einsum-like: one bracket per operand and result, one
    entry per dimension, factors named `i, j, k, ...`; a dimension of several
    factors lists them major to minor (`jk`), one of size 1 prints `1`.
    Braces give each factor's size and, unless it is parallel, its kind:

    ```
    nn.matmul: ([i, j, l], [l, k]) -> ([i, j, k]) {i=2, j=8, k=32, l=16 reduction}
    ```
  }];
  let statistics = [
    Statistic<"numRules", "rules", "Number of sharding rules reported">
  ];
}

#endif // PARTITA_DIALECT_NN_TRANSFORMS_PASSES_TD
