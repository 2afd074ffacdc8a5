//===- PropagateSharding.cpp - shardings from a few annotations -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Every tensor value holds, per dimension, the axes that split it and the
// priority of the annotation they came from (or "open"). Visiting an op
// projects what its operands and results hold onto the op's factors, picks
// each factor's axes by priority, and writes the result back to every
// operand and result dimension whose priority is worse. Priorities only get
// better and there are finitely many, so the sweeps (forward, then
// backward, repeated) reach a fixpoint.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

#include <climits>

namespace mlir::partita {
#define GEN_PASS_DEF_PROPAGATESHARDINGPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

constexpr int kOpen = INT_MAX;

struct DimState {
  AxisList axes;
  int priority = kOpen;
};
using ValueState = SmallVector<DimState, 4>;

/// One factor's winning proposal.
struct Proposal {
  AxisList axes;
  int priority = kOpen;
};

class Propagation {
public:
  explicit Propagation(MeshOp mesh) : mesh(mesh) {}

  /// Runs to a fixpoint over `func` and records the shardings.
  void run(func::FuncOp func);

private:
  ValueState &stateOf(Value value);
  /// Lowers `dim` of `value` to `axes` at `priority` if that is better.
  bool update(Value value, unsigned dim, ArrayRef<StringRef> axes,
              int priority);
  /// The assignment the op's operands and results propose, each factor's
  /// priority, and whether a factor lost axes to a factor of better
  /// priority (a local decision of this op, not a proposal to its
  /// neighbours).
  FactorAxes assign(Operation *op, const ShardingRule &rule,
                    SmallVectorImpl<int> &priorities,
                    SmallVectorImpl<bool> *truncated = nullptr);
  bool visit(Operation *op);
  bool visitAnnotate(Operation *op, ShardingAttr sharding, int priority,
                     bool constrainsOperand);
  void record(func::FuncOp func);

  MeshOp mesh;
  llvm::DenseMap<Value, ValueState> states;
};

ValueState &Propagation::stateOf(Value value) {
  auto it = states.find(value);
  if (it != states.end())
    return it->second;
  ValueState state(cast<RankedTensorType>(value.getType()).getRank());
  return states.try_emplace(value, std::move(state)).first->second;
}

bool Propagation::update(Value value, unsigned dim, ArrayRef<StringRef> axes,
                         int priority) {
  DimState &state = stateOf(value)[dim];
  if (priority > state.priority)
    return false;
  if (priority == state.priority) {
    // Equal priorities that disagree keep what they agree on; a dimension
    // only ever loses axes this way, so sweeps still end.
    size_t common = 0;
    while (common < state.axes.size() && common < axes.size() &&
           state.axes[common] == axes[common])
      ++common;
    if (common == state.axes.size())
      return false;
    state.axes.resize(common);
    return true;
  }
  state.axes.assign(axes.begin(), axes.end());
  state.priority = priority;
  return true;
}

/// The tensor operands and results of `op`, in rule order.
static SmallVector<std::pair<ShardingRule::TensorRef, Value>>
ruleTensors(Operation *op) {
  SmallVector<std::pair<ShardingRule::TensorRef, Value>> tensors;
  unsigned i = 0;
  for (Value operand : op->getOperands())
    if (isa<RankedTensorType>(operand.getType()))
      tensors.push_back({ShardingRule::operand(i++), operand});
  i = 0;
  for (Value result : op->getResults())
    if (isa<RankedTensorType>(result.getType()))
      tensors.push_back({ShardingRule::result(i++), result});
  return tensors;
}

FactorAxes Propagation::assign(Operation *op, const ShardingRule &rule,
                               SmallVectorImpl<int> &priorities,
                               SmallVectorImpl<bool> *truncated) {
  unsigned numFactors = rule.getNumFactors();
  SmallVector<Proposal> best(numFactors);
  for (auto [ref, value] : ruleTensors(op)) {
    const ValueState &state = stateOf(value);
    for (auto [dim, factors] : llvm::enumerate(rule.getTensor(ref))) {
      const DimState &dimState = state[dim];
      if (dimState.priority == kOpen)
        continue;
      SmallVector<AxisList> split =
          projectDim(rule, factors, dimState.axes, mesh);
      for (auto [i, factor] : llvm::enumerate(factors)) {
        if (!isShardable(rule.getFactor(factor)))
          continue;
        Proposal &p = best[factor];
        if (dimState.priority < p.priority) {
          p.axes = split[i];
          p.priority = dimState.priority;
        } else if (dimState.priority == p.priority) {
          // Equal priorities that disagree keep what they agree on.
          unsigned common = 0;
          while (common < p.axes.size() && common < split[i].size() &&
                 p.axes[common] == split[i][common])
            ++common;
          p.axes.resize(common);
        }
      }
    }
  }
  // An axis splits one factor of the op: higher priority first; on a tie a
  // reduction or lookup factor first (the result then holds a partial sum
  // that a reduce-scatter can split, instead of the op's input being
  // gathered); then lower index.
  auto splitsWork = [&](unsigned f) {
    FactorKind kind = rule.getFactor(f).kind;
    return kind == FactorKind::Reduction || kind == FactorKind::Lookup;
  };
  SmallVector<unsigned> order(numFactors);
  for (unsigned f = 0; f < numFactors; ++f)
    order[f] = f;
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    if (best[a].priority != best[b].priority)
      return best[a].priority < best[b].priority;
    return splitsWork(a) && !splitsWork(b);
  });
  FactorAxes assignment(numFactors);
  priorities.assign(numFactors, kOpen);
  if (truncated)
    truncated->assign(numFactors, false);
  llvm::StringSet<> used;
  for (unsigned f : order) {
    priorities[f] = best[f].priority;
    for (StringRef axis : best[f].axes) {
      if (used.contains(axis)) {
        if (truncated)
          (*truncated)[f] = true;
        break;
      }
      assignment[f].push_back(axis);
    }
    for (StringRef axis : assignment[f])
      used.insert(axis);
  }
  return assignment;
}

bool Propagation::visit(Operation *op) {
  if (auto annotate = dyn_cast<AnnotateOp>(op))
    return visitAnnotate(op, annotate.getSharding(),
                         getAnnotationPriority(annotate),
                         /*constrainsOperand=*/true);
  // A reshard is where data moves: its result is fixed and its operand keeps
  // what it has (Ulysses' all-to-alls around attention are reshards).
  if (auto reshard = dyn_cast<ReshardOp>(op))
    return visitAnnotate(op, reshard.getSharding(), kUserPriority,
                         /*constrainsOperand=*/false);
  auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return false;
  ShardingRule rule = ruleOp.getShardingRule();
  SmallVector<int> priorities;
  SmallVector<bool> truncated;
  FactorAxes assignment = assign(op, rule, priorities, &truncated);
  bool changed = false;
  for (auto [ref, value] : ruleTensors(op)) {
    for (auto [dim, factors] : llvm::enumerate(rule.getTensor(ref))) {
      // Where a factor gave up an axis to a better one, this op reshards
      // its own operand; the value's sharding is not this op's to shrink.
      if (llvm::any_of(factors, [&](unsigned f) { return truncated[f]; }))
        continue;
      int priority = kOpen;
      for (unsigned factor : factors)
        if (isShardable(rule.getFactor(factor)))
          priority = std::min(priority, priorities[factor]);
      if (priority == kOpen)
        continue;
      AxisList axes = getDimAxes(rule, factors, assignment, mesh);
      // A dimension that merges factors ([batch * sequence]) shows a minor
      // factor's axes only when the major ones are split whole. One that
      // cannot show the assignment (the sequence split, the batch whole)
      // proposes nothing; nor does one left whole while some factor is
      // still open: "whole" at one factor's priority would claim the
      // others whole too, and undo a split everywhere they reach (the
      // embedding's gradient flattens the tokens, and undid the sequence
      // split of sp training).
      size_t assigned = 0;
      for (unsigned factor : factors)
        assigned += assignment[factor].size();
      if (axes.size() < assigned)
        continue;
      if (axes.empty() && factors.size() > 1 &&
          llvm::any_of(factors, [&](unsigned f) {
            return isShardable(rule.getFactor(f)) && priorities[f] == kOpen;
          }))
        continue;
      changed |= update(value, dim, axes, priority);
    }
  }
  return changed;
}

bool Propagation::visitAnnotate(Operation *op, ShardingAttr sharding,
                                int priority, bool constrainsOperand) {
  // The result is the annotation, every dimension closed; the operand is
  // asked for the axes the annotation names (a dimension left whole there
  // does not forbid the producer to split it: the reshard gathers it).
  bool changed = false;
  Value input = op->getOperand(0), result = op->getResult(0);
  for (int64_t dim = 0; dim < sharding.getRank(); ++dim) {
    SmallVector<StringRef> axes = sharding.getAxesOfDim(dim);
    changed |= update(result, dim, axes, priority);
    if (constrainsOperand && !axes.empty())
      changed |= update(input, dim, axes, priority);
  }
  return changed;
}

void Propagation::record(func::FuncOp func) {
  MLIRContext *context = func.getContext();
  auto toAttr = [&](Value value, ArrayRef<StringRef> partial) {
    SmallVector<SmallVector<StringRef>> dims;
    for (const DimState &dim : stateOf(value))
      dims.emplace_back(dim.axes.begin(), dim.axes.end());
    return ShardingAttr::get(context, mesh.getSymName(), dims, partial);
  };
  for (BlockArgument arg : func.getArguments())
    if (isa<RankedTensorType>(arg.getType()))
      func.setArgAttr(arg.getArgNumber(), kShardingAttr, toAttr(arg, {}));
  func.walk([&](Operation *op) {
    if (isa<AnnotateOp, ReshardOp>(op))
      return;
    auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
    if (!ruleOp)
      return;
    ShardingRule rule = ruleOp.getShardingRule();
    SmallVector<int> priorities;
    FactorAxes assignment = assign(op, rule, priorities);
    // Results take the final assignment, with the axes of split reduction
    // and lookup factors as partial sums.
    SmallVector<Attribute> shardings;
    for (unsigned i = 0; i < rule.getResults().size(); ++i) {
      ShardingAttr sharding =
          getTensorSharding(rule, ShardingRule::result(i), assignment, mesh,
                            /*withPartial=*/true);
      shardings.push_back(sharding);
    }
    op->setAttr(kResultShardingsAttr, ArrayAttr::get(context, shardings));
  });
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (auto [i, value] : llvm::enumerate(ret.getOperands()))
    if (isa<RankedTensorType>(value.getType()))
      func.setResultAttr(i, kShardingAttr, getValueSharding(value, mesh));
}

void Propagation::run(func::FuncOp func) {
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (op != func)
      ops.push_back(op);
  });
  // Each sweep either improves some priority or ends the loop; the bound
  // only guards against a bug.
  for (int sweep = 0; sweep < 64; ++sweep) {
    bool changed = false;
    for (Operation *op : ops)
      changed |= visit(op);
    for (Operation *op : llvm::reverse(ops))
      changed |= visit(op);
    if (!changed)
      break;
  }
  record(func);
}

} // namespace

void dist::propagateShardings(func::FuncOp func, MeshOp mesh) {
  Propagation(mesh).run(func);
}

void dist::clearShardings(func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    func.removeArgAttr(i, kShardingAttr);
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    func.removeResultAttr(i, StringAttr::get(func.getContext(), kShardingAttr));
  func.walk([](Operation *op) { op->removeAttr(kResultShardingsAttr); });
}

namespace {

struct PropagateShardingPass
    : mlir::partita::impl::PropagateShardingPassBase<PropagateShardingPass> {
  void runOnOperation() override {
    FailureOr<MeshOp> mesh = getModuleMesh(getOperation());
    if (failed(mesh))
      return signalPassFailure();
    if (!*mesh)
      return; // Nothing is sharded without a mesh.
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        propagateShardings(func, *mesh);
  }
};

} // namespace
