//===- TestModelRoles.cpp - print the model-role analysis -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "partita/Analysis/ModelRoles.h"

namespace mlir::partita::test {
#define GEN_PASS_DECL
#define GEN_PASS_DEF_TESTMODELROLESPASS
#include "TestPasses.h.inc"
} // namespace mlir::partita::test

using namespace mlir;
using namespace mlir::partita;

namespace {

struct TestModelRolesPass
    : mlir::partita::test::impl::TestModelRolesPassBase<TestModelRolesPass> {
  void runOnOperation() override {
    auto &roles = getAnalysis<ModelRoles>();
    for (auto [op, role] : roles.getEntries()) {
      InFlightDiagnostic remark = op->emitRemark()
                                  << "model role: " << getModelRoleName(role);
      if (std::optional<int64_t> dim = ModelRoles::getResidualSequenceDim(op))
        remark << " (residual stream, sequence dimension " << *dim << ")";
    }
    markAllAnalysesPreserved();
  }
};

} // namespace

namespace mlir::partita::test {

#define GEN_PASS_REGISTRATION
#include "TestPasses.h.inc"

/// Called by partita-opt, the only tool that runs test passes.
void registerTestPasses() { registerPartitaTestPasses(); }

} // namespace mlir::partita::test
