//===- Artifact.h - writing the sharded binary and its report ---*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The last step of partita-compile: the rank programs and the weights they
// name go into an artifact directory (docs/artifact.md) through the
// runtime's ArtifactWriter, and the plan into the --report JSON (DESIGN.md).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_ARTIFACT_ARTIFACT_H
#define PARTITA_ARTIFACT_ARTIFACT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "partita/Analysis/Planner.h"
#include "partita/Target/ExecProgram/ExecProgram.h"
#include "partita/runtime/Manifest.h"

#include <map>
#include <optional>
#include <string>

namespace mlir::partita {

/// The CUDA module of a rank: generated source, the fatbin nvcc built from
/// it, and ptxas's report on its kernels.
struct CudaModule {
  std::string source;
  std::string fatbin;
  std::string ptxasLog;
};

struct ArtifactOptions {
  /// `host` or `cuda`.
  std::string target = "host";
  /// For `cuda`: each rank's module (index = rank; ranks with equal sources
  /// are stored once, under `cuda/<hash>.*`) and the architectures the
  /// fatbins hold code for.
  std::vector<CudaModule> cudaModules;
  /// For `cuda` serving artifacts: each rank's module of its decode program
  /// (index = rank), stored like cudaModules.
  std::vector<CudaModule> decodeCudaModules;
  std::vector<std::string> cudaArchs;
  /// The flags the artifact was compiled with, recorded in its manifest.
  std::map<std::string, std::string> compileOptions;
  /// A training step's loss and optimizer (--train); the writer adds the
  /// parameters and the state from the function.
  std::optional<::partita::runtime::TrainingSpec> training;
};

/// A serving artifact's second program (partita-compile --max-seq): the
/// decode step, compiled on the same mesh over the same weights and KV
/// cache as the prefill program that writeArtifact and writeReport are
/// given.
struct ServingPrograms {
  func::FuncOp decode;
  ArrayRef<ExecProgram> programs;
  int64_t maxSeq = 0;
};

/// Writes the artifact for `programs` (one per rank, in rank order) of
/// `main`: the global function, or the one partitioned over the module's
/// dist.mesh, whose argument and result `dist.sharding`s give the
/// manifest's global shapes and shardings. Reports failures (a write error,
/// an inconsistent program) as a diagnostic at `main`; on failure nothing
/// is left at `path`.
/// With `serving`, `main` is the prefill program and the manifest gets the
/// decode programs and the cache (arguments and results marked
/// `partita.kv_cache`, which are not the artifact's inputs and outputs).
LogicalResult writeArtifact(func::FuncOp main, ArrayRef<ExecProgram> programs,
                            const ArtifactOptions &options, StringRef path,
                            const ServingPrograms *serving = nullptr);

/// What the report says of the model itself, taken from the global
/// function before partitioning.
struct ModelSummary {
  std::string name;
  int64_t nnOps = 0;
  int64_t params = 0;
  int64_t flops = 0;
};
ModelSummary summarizeModel(func::FuncOp global);

/// Writes the --report JSON (format `partita-report/1`) for `main` compiled
/// into `programs`, whose times are estimated on `cluster`; with `plan`
/// (--mesh auto), the plan and the candidates it was chosen from.
LogicalResult writeReport(const ModelSummary &model, func::FuncOp main,
                          ArrayRef<ExecProgram> programs,
                          const ClusterModel &cluster, const Plan *plan,
                          StringRef path,
                          const ServingPrograms *serving = nullptr);

/// Writes Chrome trace-event JSON (--trace; Perfetto opens it): every
/// rank's program timeline (compute and communication tracks, as the cost
/// model and the cluster's links time them), and with pipeline stages the
/// schedule as the schedule simulator times it.
LogicalResult writeTrace(func::FuncOp main, ArrayRef<ExecProgram> programs,
                         StringRef path);

} // namespace mlir::partita

#endif // PARTITA_ARTIFACT_ARTIFACT_H
