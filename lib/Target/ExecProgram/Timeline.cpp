//===- Timeline.cpp - the timeline estimate of a planned program ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A rank's program on one compute stream and one communication stream, as
// the cost model and the cluster's alpha-beta links time it: kernels run in
// order, a transfer starts when both the stream and the data are ready, a
// wait (or a synchronous collective) holds compute until it is done.
// Cross-rank waits for point-to-point transfers are not modelled, nor are
// the copies into outputs and the slices of a rank's block.
//
//===----------------------------------------------------------------------===//

#include "partita/Target/ExecProgram/ExecProgram.h"

#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Exec/IR/ExecOps.h"
#include "partita/Dialect/Exec/Transforms/Passes.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::partita;

namespace {

class Timer {
public:
  Timer(const ClusterModel &cluster) : cluster(cluster) {}

  void compute(Operation *head, ArrayRef<Operation *> steps) {
    OpCost cost = estimateCost(head);
    for (Operation *step : steps)
      cost += estimateCost(step);
    double seconds = estimateSeconds(cost, cluster.device);
    t.events.push_back({head->getName().stripDialect().str(), false,
                        computeClock, computeClock + seconds});
    computeClock += seconds;
    t.computeSeconds += seconds;
  }

  /// A transfer of `seconds`; `token` is what a later wait redeems, null
  /// for a synchronous transfer (which holds compute until it is done).
  void communicate(StringRef name, double seconds, Value token,
                   bool holdsCompute) {
    double start = std::max(computeClock, commClock);
    double end = start + seconds;
    t.events.push_back({name.str(), true, start, end});
    t.communicationSeconds += seconds;
    commClock = end;
    if (token)
      tokenEnd[token] = end;
    if (!holdsCompute)
      return;
    t.exposedSeconds += end - computeClock;
    computeClock = end;
  }

  void wait(Value token) {
    double end = tokenEnd.lookup(token);
    if (end > computeClock) {
      t.exposedSeconds += end - computeClock;
      computeClock = end;
    }
  }

  ExecTimeline finish() {
    t.stepSeconds = std::max(computeClock, commClock);
    return std::move(t);
  }

private:
  const ClusterModel &cluster;
  ExecTimeline t;
  double computeClock = 0, commClock = 0;
  llvm::DenseMap<Value, double> tokenEnd;
};

/// A token's payload, or the type itself.
Type payloadOf(Type type) {
  if (auto token = dyn_cast<dist::TokenType>(type))
    return token.getPayload();
  return type;
}

} // namespace

ExecTimeline mlir::partita::estimateExecTimeline(func::FuncOp func,
                                                 const ClusterModel &cluster) {
  Timer timer(cluster);
  // Links follow the roles of the mesh's axes.
  dist::MeshOp mesh;
  if (auto module = func->getParentOfType<ModuleOp>())
    for (auto m : module.getOps<dist::MeshOp>())
      mesh = m;
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (op.hasAttr(exec::ExecDialect::kViewAttr))
      continue; // Moves no bytes.
    if (auto kernel = dyn_cast<exec::KernelOp>(op)) {
      timer.compute(kernel.getHead(), kernel.getSteps());
    } else if (isKernel(&op)) {
      timer.compute(&op, {});
    } else if (auto group = op.getAttrOfType<DenseI32ArrayAttr>(
                   exec::ExecDialect::kGroupAttr)) {
      ExecCollectiveStat stat = getCollectiveStat(&op, group.size());
      bool async = dist::isAsyncStart(&op);
      timer.communicate(stat.kind,
                        cluster.collectiveSeconds(stat.kind, group.size(),
                                                  stat.bytes, stat.axes, mesh),
                        async ? op.getResult(0) : Value(), !async);
    } else if (isa<dist::SendOp, dist::RecvOp, dist::RecvStartOp,
                   dist::SendStartOp>(op)) {
      bool send = isa<dist::SendOp, dist::SendStartOp>(op);
      bool async = dist::isAsyncStart(&op);
      int64_t bytes = tensorBytes(payloadOf(send ? op.getOperand(0).getType()
                                                 : op.getResult(0).getType()));
      std::vector<std::string> axis = {
          op.getAttrOfType<StringAttr>("axis").getValue().str()};
      // A send does not hold compute: its buffer is not written again
      // before the peer has it.
      timer.communicate(
          send ? "send" : "recv",
          cluster.collectiveSeconds("collective_permute", 2, bytes, axis, mesh),
          async ? op.getResult(0) : Value(), !async && !send);
    } else if (auto wait = dyn_cast<dist::WaitOp>(op)) {
      timer.wait(wait.getToken());
    }
  }
  return timer.finish();
}
