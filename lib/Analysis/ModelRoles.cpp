//===- ModelRoles.cpp - What each weight does in a transformer ------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Analysis/ModelRoles.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace mlir::partita;

StringRef mlir::partita::getModelRoleName(ModelRole role) {
  switch (role) {
  case ModelRole::Embedding:
    return "embedding";
  case ModelRole::AttentionQuery:
    return "attention query projection";
  case ModelRole::AttentionKey:
    return "attention key projection";
  case ModelRole::AttentionValue:
    return "attention value projection";
  case ModelRole::AttentionFusedProjection:
    return "attention fused projection";
  case ModelRole::AttentionOutput:
    return "attention output projection";
  case ModelRole::MlpUp:
    return "MLP up projection";
  case ModelRole::MlpGate:
    return "MLP gate projection";
  case ModelRole::MlpFusedGateUp:
    return "MLP fused gate/up projection";
  case ModelRole::MlpDown:
    return "MLP down projection";
  case ModelRole::Norm:
    return "norm";
  case ModelRole::LmHead:
    return "LM head";
  }
  llvm_unreachable("unknown model role");
}

namespace {

/// A weight: a constant, or a training step's parameter (an argument
/// marked partita.parameter, docs/training.md), whose roles are a
/// weight's, or either through transposes and reshapes.
bool isConstant(Value value) {
  // A weight seen through layout changes: an export without constant
  // folding multiplies by transpose(W) (torch's Linear keeps W as
  // [out, in]), which the importer folds only when W is a constant.
  // A training step holds a fused projection's parameter as its segments
  // (partita-split-fused-parameters), each a split of it. A packed int4
  // weight is its nn.dequantize.
  while (value && isa_and_present<nn::TransposeOp, nn::ReshapeOp, nn::SplitOp,
                                  nn::DequantizeOp>(value.getDefiningOp()))
    value = value.getDefiningOp()->getOperand(0);
  if (!value)
    return false;
  if (value.getDefiningOp<nn::ConstantOp>())
    return true;
  auto arg = dyn_cast<BlockArgument>(value);
  auto func =
      arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()) : nullptr;
  return func &&
         func.getArgAttr(arg.getArgNumber(), nn::NNDialect::kParameterAttrName);
}

bool isElementwise(Operation *op) {
  return op->hasTrait<nn::ElementwiseOpTrait>();
}

/// The non-linearities that mark an MLP's gate.
bool isActivation(Operation *op) {
  return isa<nn::SiluOp, nn::GeluOp, nn::ReluOp, nn::SigmoidOp, nn::TanhOp>(op);
}

/// The first operand of `op` that is not a constant.
Value firstVariable(Operation *op) {
  for (Value operand : op->getOperands())
    if (!isConstant(operand))
      return operand;
  return {};
}

/// The matmul with a constant weight that produces `value`, looking through
/// ops that keep features in place (layout changes, nn.rope or rotary
/// embedding's slices and products, elementwise ops); null if there is
/// none.
nn::MatmulOp projectionOf(Value value) {
  while (value) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return {};
    if (auto matmul = dyn_cast<nn::MatmulOp>(def))
      return isConstant(matmul.getRhs()) ? matmul : nn::MatmulOp();
    // Through norms too: OLMo2's q/k norms over the whole projection
    // (distributed when split) and Qwen3's per head.
    if (isa<nn::ReshapeOp, nn::TransposeOp, nn::SplitOp, nn::SliceOp,
            nn::ConcatOp, nn::RopeOp, nn::RmsNormOp, nn::LayerNormOp>(def) ||
        isElementwise(def))
      value = firstVariable(def);
    else
      return {};
  }
  return {};
}

/// Whether `value` comes from an attention op through layout changes.
bool isAttentionOutput(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    if (isa<nn::AttentionOp>(def))
      return true;
    if (!isa<nn::ReshapeOp, nn::TransposeOp>(def))
      return false;
    value = def->getOperand(0);
  }
  return false;
}

/// An MLP input as seen from its down projection.
struct MlpInput {
  nn::MatmulOp matmul;
  /// Some path from the down projection reaches it without an activation.
  bool direct = false;
  /// Some path reaches it through an nn.split.
  bool split = false;
};

/// The matmuls with constant weights that `value` comes from through
/// elementwise ops, reshapes, splits and norms only (an MLP's up
/// projections as seen from its down projection), none of them claimed by
/// another role (`hasRole`). Empty when some path reaches anything else.
SmallVector<MlpInput> mlpInputsOf(Value value,
                                  function_ref<bool(Operation *)> hasRole) {
  struct Step {
    Value value;
    bool activated, split;
  };
  SmallVector<MlpInput> found;
  SmallVector<Step> work{{value, false, false}};
  // Each op is visited once per (activated, split) state.
  llvm::SmallPtrSet<Operation *, 8> seen[2][2];
  while (!work.empty()) {
    Step step = work.pop_back_val();
    if (isConstant(step.value))
      continue;
    Operation *def = step.value.getDefiningOp();
    if (!def)
      return {};
    if (!seen[step.activated][step.split].insert(def).second)
      continue;
    if (auto matmul = dyn_cast<nn::MatmulOp>(def)) {
      if (!isConstant(matmul.getRhs()) || hasRole(matmul))
        return {};
      auto it = llvm::find_if(
          found, [&](const MlpInput &input) { return input.matmul == matmul; });
      if (it == found.end()) {
        found.push_back({matmul});
        it = std::prev(found.end());
      }
      it->direct |= !step.activated;
      it->split |= step.split;
      continue;
    }
    if (isa<nn::ConstantOp>(def))
      continue;
    // A norm between the two matmuls (over the MLP's width: a distributed
    // norm when it is split) keeps the MLP an MLP.
    if (!isElementwise(def) &&
        !isa<nn::ReshapeOp, nn::SplitOp, nn::RmsNormOp, nn::LayerNormOp>(def))
      return {};
    for (Value operand : def->getOperands())
      work.push_back({operand, step.activated || isActivation(def),
                      step.split || isa<nn::SplitOp>(def)});
  }
  return found;
}

} // namespace

ModelRoles::ModelRoles(Operation *op) {
  if (isa<func::FuncOp>(op)) {
    analyzeFunction(op);
    return;
  }
  op->walk([&](func::FuncOp func) {
    if (!func.isExternal())
      analyzeFunction(func);
  });
}

std::optional<ModelRole> ModelRoles::getRole(Operation *op) const {
  auto it = roles.find(op);
  if (it == roles.end())
    return std::nullopt;
  return it->second;
}

std::optional<int64_t> ModelRoles::getResidualSequenceDim(Operation *norm) {
  auto type = dyn_cast<RankedTensorType>(norm->getOperand(0).getType());
  auto axis = norm->getAttrOfType<IntegerAttr>("axis");
  if (!isa<nn::LayerNormOp, nn::RmsNormOp>(norm) || !type ||
      type.getRank() != 3 || !axis || axis.getInt() != 2)
    return std::nullopt;
  return 1;
}

void ModelRoles::assign(Operation *op, ModelRole role) {
  if (roles.try_emplace(op, role).second)
    entries.push_back({op, role});
}

void ModelRoles::analyzeFunction(Operation *funcOp) {
  auto func = cast<func::FuncOp>(funcOp);
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) { ops.push_back(op); });
  auto hasRole = [&](Operation *op) { return roles.contains(op); };
  for (Operation *op : ops) {
    if (isa<nn::LayerNormOp, nn::RmsNormOp>(op)) {
      assign(op, ModelRole::Norm);
      continue;
    }
    if (auto attention = dyn_cast<nn::AttentionOp>(op)) {
      nn::MatmulOp query = projectionOf(attention.getQuery());
      nn::MatmulOp key = projectionOf(attention.getKey());
      nn::MatmulOp value = projectionOf(attention.getValue());
      auto roleOf = [&](nn::MatmulOp matmul, ModelRole own) {
        int uses = (matmul == query) + (matmul == key) + (matmul == value);
        return uses > 1 ? ModelRole::AttentionFusedProjection : own;
      };
      for (auto [matmul, role] : {std::pair{query, ModelRole::AttentionQuery},
                                  std::pair{key, ModelRole::AttentionKey},
                                  std::pair{value, ModelRole::AttentionValue}})
        if (matmul && !hasRole(matmul))
          assign(matmul, roleOf(matmul, role));
      continue;
    }
    if (auto embedding = dyn_cast<nn::EmbeddingOp>(op)) {
      if (isConstant(embedding.getTable()))
        assign(embedding, ModelRole::Embedding);
      continue;
    }
    auto matmul = dyn_cast<nn::MatmulOp>(op);
    // A matmul with a role already has its weight claimed.
    if (!matmul || !isConstant(matmul.getRhs()) || hasRole(matmul))
      continue;
    if (isAttentionOutput(matmul.getLhs())) {
      assign(matmul, ModelRole::AttentionOutput);
      continue;
    }
    SmallVector<MlpInput> inputs = mlpInputsOf(matmul.getLhs(), hasRole);
    if (!inputs.empty()) {
      assign(matmul, ModelRole::MlpDown);
      for (const MlpInput &input : inputs) {
        ModelRole role = ModelRole::MlpUp;
        if (inputs.size() == 1 && input.split)
          role = ModelRole::MlpFusedGateUp;
        else if (inputs.size() > 1 && !input.direct)
          role = ModelRole::MlpGate;
        assign(input.matmul, role);
      }
      continue;
    }
    // The LM head: a matmul whose result the function returns, perhaps
    // reshaped or cast (to fp32 under --dtype), scaled by a constant
    // (Granite's logit scaling) or softcapped (Gemma2's c * tanh(x / c)).
    Value result = matmul.getResult();
    auto perLogit = [](Operation *user) {
      if (isa<nn::ReshapeOp, nn::TransposeOp, nn::CastOp, nn::TanhOp>(user))
        return true;
      if (!isa<nn::MulOp, nn::DivOp>(user))
        return false;
      return llvm::any_of(user->getOperands(), [](Value operand) {
        return isConstant(operand) &&
               cast<RankedTensorType>(operand.getType()).getNumElements() == 1;
      });
    };
    while (result.hasOneUse() && perLogit(*result.user_begin()))
      result = result.user_begin()->getResult(0);
    if (llvm::is_contained(ret.getOperands(), result))
      assign(matmul, ModelRole::LmHead);
  }
}
