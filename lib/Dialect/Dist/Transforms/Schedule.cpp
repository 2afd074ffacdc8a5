//===- Schedule.cpp - a latency-hiding list scheduler ---------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Top-down list scheduling of one block. Dependences are the SSA uses
// (through nested regions), program order among communication ops (starts,
// sends, receives keep their relative order on every rank), and the
// terminator last. Ready ops are issued by preference: communication as
// soon as possible, then compute by its bottom level (the longest
// cost-weighted path to the end), and waits only when nothing else is
// ready, the earliest-finishing first.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Analysis/Cluster.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "llvm/ADT/DenseMap.h"

#include <queue>

namespace mlir::partita {
#define GEN_PASS_DEF_SCHEDULEPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

bool isCommunication(Operation *op) {
  return isAsyncStart(op) || isGroupCollective(op) || isa<SendOp, RecvOp>(op);
}

/// Seconds a communication op keeps the link busy (alpha-beta, ring bytes).
double communicationSeconds(Operation *op, const ClusterModel &cluster) {
  StringRef kind = op->getName().stripDialect();
  kind.consume_back("_start");
  std::vector<std::string> axes;
  int64_t n = 2;
  MeshOp mesh = lookupMesh(op, op->getAttrOfType<FlatSymbolRefAttr>("mesh"));
  if (auto list = op->getAttrOfType<ArrayAttr>("axes")) {
    for (StringRef axis : getStringRefs(list))
      axes.push_back(axis.str());
    if (mesh)
      n = mesh.getGroupSize(getStringRefs(list)).value_or(2);
  } else if (auto axis = op->getAttrOfType<StringAttr>("axis")) {
    axes.push_back(axis.str());
    kind = "collective_permute";
  }
  int64_t bytes = op->getNumOperands()
                      ? tensorBytes(op->getOperand(0).getType())
                      : tensorBytes(op->getResult(0).getType());
  int64_t sent = kind == "all_reduce"           ? 2 * (n - 1) * bytes / n
                 : kind == "collective_permute" ? bytes
                                                : (n - 1) * bytes / n;
  return cluster.collectiveSeconds(kind, n, sent, axes, mesh);
}

void scheduleBlock(Block &block, const ClusterModel &cluster) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  if (ops.size() < 3)
    return;
  llvm::DenseMap<Operation *, unsigned> index;
  for (auto [i, op] : llvm::enumerate(ops))
    index[op] = i;
  unsigned n = ops.size();
  SmallVector<SmallVector<unsigned>> succs(n);
  SmallVector<unsigned> preds(n, 0);
  auto edge = [&](unsigned from, unsigned to) {
    succs[from].push_back(to);
    ++preds[to];
  };
  int lastComm = -1;
  for (unsigned i = 0; i < n; ++i) {
    Operation *op = ops[i];
    llvm::SmallDenseSet<unsigned> from;
    op->walk([&](Operation *inner) {
      for (Value operand : inner->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (Operation *top = block.findAncestorOpInBlock(*def))
            if (auto it = index.find(top); it != index.end() && top != op)
              from.insert(it->second);
    });
    for (unsigned f : from)
      edge(f, i);
    // Communication keeps its program order; so does anything with other
    // side effects.
    if (isCommunication(op) || (!isa<WaitOp>(op) && !isMemoryEffectFree(op))) {
      if (lastComm >= 0)
        edge(lastComm, i);
      lastComm = i;
    }
  }
  // An op's time (compute, or its transfer on the communication stream),
  // and its bottom level: the longest path from it to the end of the block,
  // communication included (a chain of transfers and the adds between them,
  // as a decomposed reduce-scatter makes, is as critical as a chain of
  // compute).
  SmallVector<double> cost(n), bottom(n, 0);
  for (unsigned i = 0; i < n; ++i)
    cost[i] = isCommunication(ops[i])
                  ? communicationSeconds(ops[i], cluster)
                  : estimateSeconds(estimateCost(ops[i]), cluster.device);
  for (int i = n - 1; i >= 0; --i) {
    double most = 0;
    for (unsigned s : succs[i])
      most = std::max(most, bottom[s]);
    bottom[i] = cost[i] + most;
  }

  // Simulate while scheduling. Ready ops wait in three queues: communication
  // (at most one, as it is chained), compute by bottom level (ties: program
  // order), and waits.
  double computeClock = 0, commClock = 0;
  SmallVector<double> done(n, 0); // When an op's result is ready.
  SmallVector<unsigned> commReady, waitReady;
  auto later = [&](unsigned a, unsigned b) {
    return bottom[a] != bottom[b] ? bottom[a] < bottom[b] : a > b;
  };
  std::priority_queue<unsigned, std::vector<unsigned>, decltype(later)>
      computeReady(later);
  auto enqueue = [&](unsigned i) {
    if (isCommunication(ops[i]))
      commReady.push_back(i);
    else if (isa<WaitOp>(ops[i]))
      waitReady.push_back(i);
    else
      computeReady.push(i);
  };
  auto startOf = [&](unsigned wait) {
    return index.lookup(cast<WaitOp>(ops[wait]).getToken().getDefiningOp());
  };
  for (unsigned i = 0; i < n; ++i)
    if (preds[i] == 0)
      enqueue(i);
  SmallVector<unsigned> order;
  order.reserve(n);
  while (!commReady.empty() || !computeReady.empty() || !waitReady.empty()) {
    unsigned i;
    // A wait whose transfer has finished costs nothing: it goes first, so
    // that what it guards competes with the other ready compute.
    auto finished = llvm::find_if(waitReady, [&](unsigned wait) {
      return done[startOf(wait)] <= computeClock;
    });
    if (!commReady.empty()) {
      i = commReady.back();
      commReady.pop_back();
    } else if (finished != waitReady.end()) {
      i = *finished;
      waitReady.erase(finished);
    } else if (!computeReady.empty()) {
      i = computeReady.top();
      computeReady.pop();
    } else {
      auto first = llvm::min_element(waitReady, [&](unsigned a, unsigned b) {
        return done[startOf(a)] < done[startOf(b)];
      });
      i = *first;
      waitReady.erase(first);
    }
    Operation *op = ops[i];
    if (isCommunication(op)) {
      double start = std::max(computeClock, commClock);
      commClock = start + cost[i];
      done[i] = commClock;
      if (!isAsyncStart(op) && !isa<SendOp>(op))
        computeClock = commClock; // Synchronous: compute waits.
    } else if (isa<WaitOp>(op)) {
      computeClock = std::max(computeClock, done[startOf(i)]);
    } else {
      computeClock += cost[i];
    }
    order.push_back(i);
    for (unsigned s : succs[i])
      if (--preds[s] == 0)
        enqueue(s);
  }
  if (order.size() != n)
    return; // A cycle would be a bug; leave the block as it was.
  Operation *terminator = block.getTerminator();
  for (unsigned i : order)
    ops[i]->moveBefore(terminator);
}

struct SchedulePass : mlir::partita::impl::SchedulePassBase<SchedulePass> {
  void runOnOperation() override {
    FailureOr<ClusterModel> cluster = ClusterModel::of(getOperation());
    if (failed(cluster))
      return signalPassFailure();
    getOperation().walk([&](Operation *op) {
      if (isa<func::FuncOp, StageOp>(op) && op->getNumRegions() == 1 &&
          !op->getRegion(0).empty())
        scheduleBlock(op->getRegion(0).front(), *cluster);
    });
  }
};

} // namespace
