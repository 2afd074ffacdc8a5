//===- Driver.h - The compiler, from a model to an artifact -----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What partita-compile does, as a library: import an ONNX model, plan and
// partition it for a mesh, lower every rank, generate CUDA, and write the
// artifact (or print a stage). partita-compile parses flags into
// DriverOptions; the embedding API (include/partita/Partita.h) fills them
// from its own options. Every error is an MLIR diagnostic on the context:
// located at the ONNX node where there is one, at an unknown location for
// errors in the options.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DRIVER_DRIVER_H
#define PARTITA_DRIVER_DRIVER_H

#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LLVM.h"
#include "mlir/Support/Timing.h"
#include "partita/Analysis/Planner.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Pipelines/Options.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace mlir::partita {

/// Where the compiler stops and prints (--emit): the nn module as the
/// importer built it, after each pass stage, the plan --mesh auto chose
/// (its --explain-plan table), an exec program per rank, the generated
/// CUDA, or the artifact (nothing printed); in the order the compiler
/// reaches them.
enum class EmitStage { Import, NN, Plan, Dist, Local, Exec, CUDA, Artifact };

struct DriverOptions {
  /// The model file, or with `inputBuffer` the name that stands for it in
  /// diagnostics.
  std::string input;
  /// The model's bytes, when it is held in memory.
  std::optional<std::string> inputBuffer;
  EmitStage emit = EmitStage::Artifact;
  /// The artifact directory (emit Artifact).
  std::string output;
  Target target = Target::Host;
  std::map<std::string, int64_t> bindings;
  /// Empty: one device.
  dist::MeshSpec mesh;
  Strategy strategy = Strategy::Megatron;
  SequenceMode spMode = SequenceMode::None;
  int64_t microbatches = 1;
  int64_t virtualStages = 1;
  StorageType dtype = StorageType::FP32;
  /// `sm_80,sm_90a` (the --cuda-arch syntax).
  std::string cudaArch = "sm_80,sm_90a";
  bool overlap = true;
  CollectiveMatmulMode collectiveMatmul = CollectiveMatmulMode::Auto;
  /// The cluster model's JSON text and where it came from (for messages);
  /// empty: the defaults.
  std::string clusterJson;
  std::string clusterSource;
  bool raise = true;
  bool explain = false;
  /// Files to write the report and the trace to; empty: none.
  std::string reportFile;
  std::string traceFile;
  /// Apply MLIR's pass manager command-line options (partita-compile).
  bool passManagerCommandLine = false;
  /// --mesh auto: the planner chooses the mesh, the sequence mode, the
  /// microbatches and collective matmul for `devices` devices (0: the
  /// cluster's) after the nn stage, and `mesh` and those options are
  /// ignored.
  bool autoMesh = false;
  /// --max-seq: a decoder export with past key values compiles to a
  /// prefill and a decode program over one KV cache of this many slots per
  /// sequence; 0: one program, as the model is.
  int64_t maxSeq = 0;
  int64_t devices = 0;
  PlanObjective objective = PlanObjective::Latency;
  std::optional<double> deviceMemoryBytes;
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
