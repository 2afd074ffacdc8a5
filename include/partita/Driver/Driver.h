//===- Driver.h - The compiler, from a model to an artifact -----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What partita-compile does, as a library: import an ONNX model, plan and
// partition it for a mesh, lower every rank, generate CUDA, and write the
// artifact (or print a stage). partita-compile's flags and the embedding
// API (include/partita/Partita.h) fill the same declared options. Every error
// is an MLIR diagnostic on the context: located at the ONNX node where there is
// one, at an unknown location for errors in the options.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DRIVER_DRIVER_H
#define PARTITA_DRIVER_DRIVER_H

#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LLVM.h"
#include "mlir/Support/Timing.h"
#include "partita/Analysis/Planner.h"
#include "partita/Options/Options.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlir::partita {

/// What the driver compiles and where it writes: the declared options
/// (partita/Options/CompilerOptions.def, checked by checkOptions), and the
/// input and output that are no option.
struct DriverOptions : CompilerOptions {
  /// The model file, or with `inputBuffer` the name that stands for it in
  /// diagnostics.
  std::string input;
  /// The model's bytes, when it is held in memory.
  std::optional<std::string> inputBuffer;
  /// The artifact directory (emit Artifact).
  std::string output;
  /// Apply MLIR's pass manager command-line options (partita-compile).
  bool passManagerCommandLine = false;
  /// Where the printed stage goes (emit other than Artifact), written as it
  /// is printed: a module holding a large model's weights prints to
  /// gigabytes of text, which is never held in memory.
  llvm::raw_ostream *emitStream = nullptr;
};

struct DriverResult {
  /// The --explain listing.
  std::string explanation;
  /// With autoMesh: the plan, and its --explain-plan table.
  std::optional<Plan> plan;
  std::string planExplanation;
  /// Wall seconds of each phase that ran (import, raise, plan, shard,
  /// partition, exec, cuda, emit), in the order they first ran; a phase
  /// that runs twice (a prefill and a decode program) adds up.
  std::vector<std::pair<std::string, double>> phaseSeconds;

  void addPhaseTime(const std::string &phase, double seconds) {
    for (auto &[name, total] : phaseSeconds)
      if (name == phase) {
        total += seconds;
        return;
      }
    phaseSeconds.emplace_back(phase, seconds);
  }
};

/// Runs the compiler. Diagnostics go to the context's handler.
LogicalResult runCompiler(MLIRContext &context, const DriverOptions &options,
                          DriverResult &result, TimingScope &timing);

/// The pass pipelines runCompiler runs for `options` (the stages up to
/// `options.emit`), one textual pipeline per stage after a `// --emit X`
/// comment line: each replays its stage with `partita-opt --pass-pipeline=`
/// on the previous stage's output.
FailureOr<std::string> describePipeline(MLIRContext &context,
                                        const DriverOptions &options);

/// The dialects the compiler needs, loaded into `context`.
void loadCompilerDialects(MLIRContext &context);

/// A location as users of ONNX models read it: `model.onnx: node 'name'`,
/// or empty for an unknown location.
std::string formatLocation(Location location);

} // namespace mlir::partita

#endif // PARTITA_DRIVER_DRIVER_H
