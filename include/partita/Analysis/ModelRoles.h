//===- ModelRoles.h - What each weight does in a transformer ----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The roles of the ops that carry a transformer's weights, recognized from
// the dataflow around them rather than from names: what feeds attention,
// what attention feeds, what reaches the next matmul through activations
// only, what the function returns. A strategy decides how to split each
// role (Megatron: projections into attention and an MLP's first matmuls
// column-parallel, the matmuls after them row-parallel); the analysis only
// says which op plays which part.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_ANALYSIS_MODELROLES_H
#define PARTITA_ANALYSIS_MODELROLES_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace mlir::partita {

enum class ModelRole {
  /// nn.embedding with a constant table.
  Embedding,
  /// A matmul with a constant weight producing attention's queries, keys or
  /// values (through layout changes, rotary embedding and elementwise ops).
  AttentionQuery,
  AttentionKey,
  AttentionValue,
  /// One matmul producing several of them (a fused Q/K/V or K/V weight).
  AttentionFusedProjection,
  /// A matmul with a constant weight reading attention's result.
  AttentionOutput,
  /// The first matmuls of an MLP: those whose results reach the next matmul
  /// through elementwise ops, reshapes and splits only. The gate is the one
  /// that reaches it only through an activation when there are several; a
  /// single matmul whose result is split feeds both (a fused gate/up).
  MlpUp,
  MlpGate,
  MlpFusedGateUp,
  /// The MLP's last matmul.
  MlpDown,
  /// nn.layer_norm or nn.rms_norm.
  Norm,
  /// A matmul with a constant weight whose result the function returns,
  /// perhaps reshaped or cast.
  LmHead,
};

/// The role's name in remarks and diagnostics, e.g. "MLP up projection".
llvm::StringRef getModelRoleName(ModelRole role);

/// nn.attention's operand layout, `[batch, heads, sequence, head_dim]`
/// (attention_c1): the dimensions strategies split.
constexpr int64_t kAttentionHeadsDim = 1;
constexpr int64_t kAttentionSequenceDim = 2;

/// The roles of the ops of the functions in `op` (a function or a module).
/// Usable as an analysis (`getAnalysis<ModelRoles>()`); computed once, so a
/// pass that rewrites the model constructs it after its rewrites.
class ModelRoles {
public:
  struct Entry {
    Operation *op;
    ModelRole role;
  };

  explicit ModelRoles(Operation *op);

  /// The role of `op`, if it has one.
  std::optional<ModelRole> getRole(Operation *op) const;

  /// Every op with a role, in the order roles were found: for each op in
  /// program order, the projections into an attention when the attention is
  /// reached, an MLP's up projections when its down projection is. An op has
  /// one role, the first found.
  llvm::ArrayRef<Entry> getEntries() const { return entries; }

  /// For a norm: the sequence dimension of its input when the input is the
  /// residual stream, `[batch, sequence, hidden]` normalized over hidden.
  static std::optional<int64_t> getResidualSequenceDim(Operation *norm);

private:
  void analyzeFunction(Operation *func);
  void assign(Operation *op, ModelRole role);

  llvm::SmallVector<Entry> entries;
  llvm::DenseMap<Operation *, ModelRole> roles;
};

} // namespace mlir::partita

#endif // PARTITA_ANALYSIS_MODELROLES_H
