//===- TestPasses.td - passes that test analyses -----------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_LIB_ANALYSIS_TESTPASSES_TD
#define PARTITA_TEST_LIB_ANALYSIS_TESTPASSES_TD

include "mlir/Pass/PassBase.td"

def TestModelRolesPass : Pass<"partita-test-model-roles",
                              "::mlir::func::FuncOp"> {
  let summary = "Print the model-role analysis as remarks";
  let description = [{
    Emits a remark `model role: <role>` on every op the model-role analysis
    (`partita/Analysis/ModelRoles.h`) gives a role, and for a norm on the
    residual stream the sequence dimension of its input. Changes nothing.
  }];
}

def TestPlannerPass : Pass<"partita-test-planner", "::mlir::func::FuncOp"> {
  let summary = "Check the planner against a brute-force search";
  let description = [{
    On an nn function before sharding (`partita-compile --emit nn`), plans
    it for each of `devices` as `--mesh auto` does (the folded shape: one
    layer's ops counted once per layer), and evaluates every candidate of
    the same space on the unfolded shape (every op of every layer) by brute
    force. Prints one line per device count: the planner's plan, its
    predicted step, and whether the brute force's best is the same; an
    error where the two disagree (the best step differs by more than one
    part in 1e9, or the feasible sets differ). Changes nothing.
  }];
  let options = [
    ListOption<"devices", "devices", "int64_t", "Device counts to plan for">,
    Option<"cluster", "cluster", "std::string", /*default=*/"\"default\"",
           "A cluster preset (NAME[:NODESxGPUS])">,
    Option<"objective", "objective", "std::string",
           /*default=*/"\"latency\"", "latency or throughput">,
  ];
}

#endif // PARTITA_TEST_LIB_ANALYSIS_TESTPASSES_TD
