//===- Training.h - a training step's loss and optimizer specs --*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The spellings of --loss and --optimizer (docs/training.md), parsed once
// for the driver's checks and for the passes that build the step.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_TRANSFORMS_TRAINING_H
#define PARTITA_DIALECT_NN_TRANSFORMS_TRAINING_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace mlir::partita {

/// `cross_entropy:OUTPUT` or `mse:OUTPUT`.
struct LossSpec {
  std::string kind;
  std::string output;
};

/// Parses a --loss value; on error returns nullopt with `error` set.
std::optional<LossSpec> parseLossSpec(llvm::StringRef text, std::string &error);

enum class OptimizerKind { SGD, AdamW };

/// torch.optim.SGD (momentum, weight_decay; no dampening, no Nesterov) or
/// torch.optim.AdamW, with torch's defaults for what the text leaves out.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::SGD;
  double lr = 0;
  double momentum = 0;
  double weightDecay = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;

  /// `sgd` or `adamw`.
  llvm::StringRef kindName() const;
  /// The state each parameter has, by suffix: `exp_avg` and `exp_avg_sq`
  /// (AdamW), `momentum_buffer` (SGD with momentum), none otherwise.
  llvm::SmallVector<llvm::StringRef, 2> stateNames() const;
};

/// Parses an --optimizer value (`sgd:lr=0.1,momentum=0.9`); on error
/// returns nullopt with `error` naming the key or value at fault.
std::optional<OptimizerSpec> parseOptimizerSpec(llvm::StringRef text,
                                                std::string &error);

/// The names of the step's scalar inputs the optimizer adds, which the
/// runtime computes each step: the learning rate, and AdamW's bias
/// corrections 1 - beta^t (computed in double, as torch does).
inline constexpr llvm::StringLiteral kLearningRateInput = "lr";
inline constexpr llvm::StringLiteral kBiasCorrection1Input = "bias_correction1";
inline constexpr llvm::StringLiteral kBiasCorrection2Input = "bias_correction2";

} // namespace mlir::partita

#endif // PARTITA_DIALECT_NN_TRANSFORMS_TRAINING_H
