//===- PlanMesh.cpp - choose the mesh for a number of devices -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// --mesh auto as a pass: the planner (Analysis/Planner) searches the meshes
// and strategies on the module's cluster, and its choice becomes IR (the
// dist.mesh and the partita.plan attribute) that the later phases compile
// with, so that planning replays with partita-opt like every other phase.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Analysis/Cluster.h"
#include "partita/Analysis/Planner.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

namespace mlir::partita {
#define GEN_PASS_DEF_PLANMESHPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

/// The mesh a candidate compiles with: its axes of more than one device,
/// in the order dp, pp, ep, sp, tp, each with the role its name implies.
SmallVector<std::pair<StringRef, int64_t>>
candidateAxes(const PlanCandidate &candidate) {
  SmallVector<std::pair<StringRef, int64_t>> axes;
  for (auto [name, size] :
       {std::pair{"dp", candidate.dp}, std::pair{"pp", candidate.pp},
        std::pair{"ep", candidate.ep}, std::pair{"sp", candidate.sp},
        std::pair{"tp", candidate.tp}})
    if (size > 1)
      axes.push_back({name, size});
  return axes;
}

/// The partita.plan attribute: what the later phases compile with, what
/// the cost model predicts, and why the other families lost.
DictionaryAttr planAttr(MLIRContext *context, const Plan &plan,
                        const PlanCandidate &best) {
  Builder b(context);
  std::string mesh;
  for (auto [name, size] : candidateAxes(best))
    mesh += (mesh.empty() ? "" : ",") + name.str() + "=" + std::to_string(size);
  SmallVector<Attribute> rejected;
  for (const std::string &line : plan.rejected)
    rejected.push_back(b.getStringAttr(line));
  NamedAttribute entries[] = {
      b.getNamedAttr("devices", b.getI64IntegerAttr(plan.request.devices)),
      b.getNamedAttr("objective", b.getStringAttr(::partita::optionName(
                                      plan.request.objective))),
      b.getNamedAttr("mesh", b.getStringAttr(mesh)),
      b.getNamedAttr("sp_mode",
                     b.getStringAttr(::partita::optionName(best.spMode))),
      b.getNamedAttr("microbatches", b.getI64IntegerAttr(best.microbatches)),
      b.getNamedAttr("virtual_stages", b.getI64IntegerAttr(best.virtualStages)),
      b.getNamedAttr("collective_matmul", b.getBoolAttr(best.collectiveMatmul)),
      b.getNamedAttr("flags", b.getStringAttr(best.flags())),
      b.getNamedAttr("step_seconds", b.getF64FloatAttr(best.stepSeconds)),
      b.getNamedAttr("memory_bytes", b.getF64FloatAttr(best.memoryBytes)),
      b.getNamedAttr("rejected", b.getArrayAttr(rejected)),
  };
  return b.getDictionaryAttr(entries);
}

/// Records in `module`'s cluster that it has `nodes` nodes (the planner
/// grew it to hold the devices asked for).
void setClusterNodes(ModuleOp module, int64_t nodes) {
  llvm::json::Object cluster;
  if (auto text =
          module->getAttrOfType<StringAttr>(ClusterModel::kAttributeName)) {
    // ClusterModel::of parsed this text already; it is an object.
    llvm::Expected<llvm::json::Value> parsed =
        llvm::json::parse(text.getValue());
    if (!parsed)
      llvm::consumeError(parsed.takeError());
    else if (llvm::json::Object *object = parsed->getAsObject())
      cluster = std::move(*object);
  }
  if (cluster.empty())
    cluster["preset"] = "default";
  cluster["nodes"] = nodes;
  module->setAttr(
      ClusterModel::kAttributeName,
      StringAttr::get(
          module.getContext(),
          llvm::formatv("{0}", llvm::json::Value(std::move(cluster))).str()));
}

struct PlanMeshPass : mlir::partita::impl::PlanMeshPassBase<PlanMeshPass> {
  using PlanMeshPassBase::PlanMeshPassBase;
  PlanMeshPass(const PlanMeshPassOptions &options, Plan *sink)
      : PlanMeshPassBase(options), sink(sink) {}

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshOp> existing = getModuleMesh(module);
    if (failed(existing))
      return signalPassFailure();
    if (*existing) {
      module.emitError() << "--mesh auto plans a module without a mesh, but "
                            "it declares @"
                         << existing->getSymName();
      return signalPassFailure();
    }
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError() << "--mesh auto plans @main, which the module lacks";
      return signalPassFailure();
    }
    FailureOr<ClusterModel> cluster = ClusterModel::of(module);
    if (failed(cluster))
      return signalPassFailure();
    PlanRequest request;
    request.devices = devices > 0 ? int64_t(devices) : cluster->devices();
    request.objective = objective;
    request.expertDispatch = expertDispatch;
    if (deviceMemory > 0)
      request.deviceMemoryBytes = double(deviceMemory);
    // More devices than the cluster's shape holds: more nodes of its kind.
    int64_t nodes = cluster->nodes;
    cluster->growTo(request.devices);
    if (cluster->nodes != nodes)
      setClusterNodes(module, cluster->nodes);
    Plan plan = planParallelism(readModelShape(main), *cluster, request);
    const PlanCandidate *best = plan.best();
    if (best) {
      module->setAttr(kPlanAttrName, planAttr(&getContext(), plan, *best));
      SmallVector<std::pair<StringRef, int64_t>> axes = candidateAxes(*best);
      if (!axes.empty()) {
        SmallVector<StringRef> names;
        SmallVector<int64_t> sizes;
        SmallVector<AxisRole> roles;
        for (auto [name, size] : axes) {
          names.push_back(name);
          sizes.push_back(size);
          roles.push_back(getDefaultAxisRole(name));
        }
        OpBuilder b(module.getBodyRegion());
        MeshOp::create(b, module.getLoc(), "mesh", names, sizes, roles);
      }
    } else if (requireFit) {
      std::string why;
      for (const std::string &line : plan.rejected)
        why += "\n  " + line;
      // An error of the options, not of a place in the model.
      emitError(UnknownLoc::get(&getContext()))
          << "--mesh auto: no plan for " << request.devices
          << " devices fits on " << cluster->name << ":" << why;
      if (sink)
        *sink = std::move(plan);
      return signalPassFailure();
    }
    if (sink)
      *sink = std::move(plan);
  }

  Plan *sink = nullptr;
};

} // namespace

std::unique_ptr<Pass>
mlir::partita::createPlanMeshPass(const PlanMeshPassOptions &options,
                                  Plan *sink) {
  return std::make_unique<PlanMeshPass>(options, sink);
}
