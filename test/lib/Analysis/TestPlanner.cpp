//===- TestPlanner.cpp - the planner against a brute-force search ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "partita/Analysis/Planner.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

namespace mlir::partita::test {
#define GEN_PASS_DECL
#define GEN_PASS_DEF_TESTPLANNERPASS
#include "TestPasses.h.inc"
} // namespace mlir::partita::test

using namespace mlir;
using namespace mlir::partita;

namespace {

bool sameSeconds(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

std::string describe(const PlanCandidate &c) {
  return llvm::formatv("{0} ({1:f6} ms)", c.flags(), c.stepSeconds * 1e3);
}

struct TestPlannerPass
    : mlir::partita::test::impl::TestPlannerPassBase<TestPlannerPass> {
  using TestPlannerPassBase::TestPlannerPassBase;

  void runOnOperation() override {
    func::FuncOp main = getOperation();
    if (main.getSymName() != "main")
      return;
    llvm::Expected<ClusterModel> preset = ClusterModel::fromPreset(cluster);
    if (!preset) {
      main.emitError() << llvm::toString(preset.takeError());
      return signalPassFailure();
    }
    std::optional<PlanObjective> goal =
        ::partita::parseOption<PlanObjective>(objective);
    if (!goal) {
      main.emitError() << ::partita::badOptionMessage<PlanObjective>(objective);
      return signalPassFailure();
    }
    ModelShape shape = readModelShape(main);
    for (int64_t n : devices) {
      PlanRequest request;
      request.devices = n;
      request.objective = *goal;
      ClusterModel grown = *preset;
      grown.growTo(n);
      Plan plan = planParallelism(shape, grown, request);
      // The brute force: every candidate on every op of every layer.
      std::vector<PlanCandidate> all = enumeratePlans(shape, grown, request);
      const PlanCandidate *fastest = nullptr;
      size_t feasible = 0;
      for (const PlanCandidate &c : all) {
        if (!c.feasible)
          continue;
        ++feasible;
        if (!fastest || c.stepSeconds < fastest->stepSeconds)
          fastest = &c;
      }
      size_t plannedFeasible = llvm::count_if(
          plan.candidates, [](const PlanCandidate &c) { return c.feasible; });
      const PlanCandidate *best = plan.best();
      llvm::outs() << n << " devices: ";
      if (!best || !fastest) {
        llvm::outs() << "planner: "
                     << (best ? describe(*best) : std::string("no plan"))
                     << "; brute force: "
                     << (fastest ? describe(*fastest) : std::string("no plan"))
                     << "\n";
        if (best || fastest) {
          main.emitError() << "the planner and the brute force disagree for "
                           << n << " devices";
          signalPassFailure();
        }
        continue;
      }
      // The planner's choice, costed again on the unfolded shape.
      PlanCandidate again = *best;
      evaluatePlan(again, shape, grown, request);
      bool agree = plannedFeasible == feasible && again.feasible &&
                   sameSeconds(again.stepSeconds, fastest->stepSeconds) &&
                   sameSeconds(best->stepSeconds, fastest->stepSeconds);
      llvm::outs() << "planner " << describe(*best) << " of " << feasible
                   << " feasible in " << all.size() << "; brute force "
                   << (agree ? "agrees" : "disagrees: " + describe(*fastest))
                   << "\n";
      if (!agree) {
        main.emitError() << "the planner and the brute force disagree for " << n
                         << " devices";
        signalPassFailure();
      }
    }
    markAllAnalysesPreserved();
  }
};

} // namespace
