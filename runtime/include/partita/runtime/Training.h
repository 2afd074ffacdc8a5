//===- Training.h - steps of a training artifact ----------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A training artifact (partita-compile --train) runs one optimizer step
// per Runner::run: the ranks keep the parameters and the optimizer state
// between runs (Runner.h), and the step takes the batch and the scalars
// computed here: the learning rate of the step (a schedule's, or the
// compiled one), and for AdamW the bias corrections 1 - beta^t in double,
// as torch computes them. partita-run --train-steps and the embedding
// APIs' train_step drive it (docs/training.md).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TRAINING_H
#define PARTITA_RUNTIME_TRAINING_H

#include "partita/runtime/Executor.h"
#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace partita::runtime {

class Runner;
struct Manifest;

/// partita-run --lr-schedule: `constant`, `cosine:warmup=N,total=M,min=X`
/// or `linear:warmup=N,total=M` (min defaults to 0).
struct LrSchedule {
  enum class Kind { Constant, Cosine, Linear };
  Kind kind = Kind::Constant;
  int64_t warmup = 0;
  int64_t total = 0;
  double min = 0;

  /// Parses the flag's value; an error names the key or value at fault.
  static Status parse(const std::string &text, LrSchedule &schedule);
  /// The learning rate of step `step` (0 first) for peak rate `peak`:
  /// linear warm-up from peak / warmup over `warmup` steps, then constant,
  /// or a cosine or linear decay to `min` at step `total`, `min` after it.
  double at(double peak, int64_t step) const;
};

class Trainer {
public:
  /// A trainer of `runner`'s artifact, which must be a training one; the
  /// runner must outlive it.
  static Status create(Runner &runner, std::unique_ptr<Trainer> &trainer);
  ~Trainer();
  Trainer(const Trainer &) = delete;
  Trainer &operator=(const Trainer &) = delete;

  /// The inputs a batch gives: the manifest's inputs but the step's
  /// scalars.
  const std::vector<std::string> &batchInputs() const;
  /// Runs one step on `batch` (every batch input once, global tensors of
  /// the manifest's dtypes and shapes) at learning rate `lr` (the
  /// compiled one when not given): `loss` is the loss before the update.
  /// Labels outside [0, classes) other than -100 are refused before the
  /// step, as torch refuses them; a refused step changes nothing.
  Status step(const std::vector<NamedTensor> &batch, std::optional<double> lr,
              float &loss);
  /// The outputs of the last step other than the loss (the gradients of
  /// --output-gradients), by name.
  const std::vector<std::pair<std::string, HostTensor>> &lastOutputs() const;
  /// Steps taken (the next step's number t is steps() + 1).
  int64_t steps() const;
  /// Continues the count (a loaded checkpoint's).
  void setSteps(int64_t steps);
  /// The compiled learning rate.
  double baseLr() const;

private:
  Trainer();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TRAINING_H
