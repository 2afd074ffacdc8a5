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

#endif // PARTITA_TEST_LIB_ANALYSIS_TESTPASSES_TD
