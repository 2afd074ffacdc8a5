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

namespace mlir::partita {
#define GEN_PASS_DEF_SCHEDULEPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

bool isCommunication(Operation *op) {
  return isAsyncStart(op) ||
         isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp,
             CollectivePermuteOp, SendOp, RecvOp>(op);
}

/// Seconds a communication op keeps the link busy (alpha-beta, ring bytes).
double communicationSeconds(Operation *op, const ClusterModel &cluster) {
  StringRef kind = op->getName().stripDialect();
  kind.consume_back("_start");
  std::vector<std::string> axes;
  int64_t n = 2;
  if (auto list = op->getAttrOfType<ArrayAttr>("axes")) {
    for (StringRef axis : getStringRefs(list))
      axes.push_back(axis.str());
    if (auto mesh =
            lookupMesh(op, op->getAttrOfType<FlatSymbolRefAttr>("mesh")))
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
  return cluster.collectiveSeconds(kind, n, sent, axes);
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
  SmallVector<double> cost(n), bottom(n, 0);
  for (unsigned i = 0; i < n; ++i)
    cost[i] = isCommunication(ops[i])
                  ? 0
                  : estimateSeconds(estimateCost(ops[i]), cluster.device);
  for (int i = n - 1; i >= 0; --i) {
    double most = 0;
    for (unsigned s : succs[i])
      most = std::max(most, bottom[s]);
    bottom[i] = cost[i] + most;
  }

  // Simulate while scheduling.
  double computeClock = 0, commClock = 0;
  llvm::DenseMap<unsigned, double> done; // When an op's result is ready.
  SmallVector<unsigned> ready;
  for (unsigned i = 0; i < n; ++i)
    if (preds[i] == 0)
      ready.push_back(i);
  SmallVector<unsigned> order;
  while (!ready.empty()) {
    // 1. Communication, in program order (it is chained).
    auto pick = ready.end();
    for (auto it = ready.begin(); it != ready.end(); ++it)
      if (isCommunication(ops[*it]))
        pick = it;
    // 2. Compute that does not wait, by bottom level.
    if (pick == ready.end())
      for (auto it = ready.begin(); it != ready.end(); ++it)
        if (!isa<WaitOp>(ops[*it]) &&
            (pick == ready.end() || bottom[*it] > bottom[*pick]))
          pick = it;
    // 3. The wait that finishes first.
    if (pick == ready.end())
      for (auto it = ready.begin(); it != ready.end(); ++it) {
        auto start = cast<WaitOp>(ops[*it]).getToken().getDefiningOp();
        double end = done.lookup(index.lookup(start));
        if (pick == ready.end() ||
            end < done.lookup(index.lookup(
                      cast<WaitOp>(ops[*pick]).getToken().getDefiningOp())))
          pick = it;
      }
    unsigned i = *pick;
    ready.erase(pick);
    Operation *op = ops[i];
    if (isCommunication(op)) {
      double start = std::max(computeClock, commClock);
      commClock = start + communicationSeconds(op, cluster);
      done[i] = commClock;
      if (!isAsyncStart(op) && !isa<SendOp>(op))
        computeClock = commClock; // Synchronous: compute waits.
    } else if (auto wait = dyn_cast<WaitOp>(op)) {
      computeClock =
          std::max(computeClock,
                   done.lookup(index.lookup(wait.getToken().getDefiningOp())));
    } else {
      computeClock += cost[i];
    }
    order.push_back(i);
    for (unsigned s : succs[i])
      if (--preds[s] == 0)
        ready.push_back(s);
  }
  if (order.size() != n)
    return; // A cycle would be a bug; leave the block as it was.
  Operation *terminator = block.getTerminator();
  for (unsigned i : order)
    ops[i]->moveBefore(terminator);
}

struct SchedulePass : mlir::partita::impl::SchedulePassBase<SchedulePass> {
  void runOnOperation() override {
    ClusterModel cluster;
    getOperation().walk([&](Operation *op) {
      if (isa<func::FuncOp, StageOp>(op) && op->getNumRegions() == 1 &&
          !op->getRegion(0).empty())
        scheduleBlock(op->getRegion(0).front(), cluster);
    });
  }
};

} // namespace
