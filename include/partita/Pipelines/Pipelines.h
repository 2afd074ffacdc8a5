//===- Pipelines.h - the compiler's pass pipelines --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Each pass stage of partita-compile is a pipeline built here from one
// options struct and registered with partita-opt, so that
// `partita-opt --partita-<stage>-pipeline='<options>'` on the previous
// stage's output prints what `partita-compile --emit <stage>` prints:
//
//   --emit import ─nn─▶ --emit nn ─plan─▶ --emit dist ─partition─▶ --emit local
//
// Every stage takes the same PipelineOptions (the declared options of
// partita/Options/CompilerOptions.def that shape the IR, typed), and reads
// the ones it needs, so one option string replays any stage.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PIPELINES_PIPELINES_H
#define PARTITA_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Options/CommandLine.h"

namespace mlir::partita {

struct Plan;

/// A member of PipelineOptions for a declared option: a pass pipeline
/// option where the declaration says kPipeline, else nothing at all.
template <bool IsPipelineOption, typename T> struct PipelineOptionMember {
  PipelineOptionMember(detail::PassOptions &, const char *, const char *,
                       const T &) {}
  void assign(const T &) {}
};
template <typename T>
struct PipelineOptionMember<true, T> : detail::PassOptions::Option<T> {
  PipelineOptionMember(detail::PassOptions &parent, const char *name,
                       const char *help, const T &defaultValue)
      : detail::PassOptions::Option<T>(parent, name, llvm::cl::desc(help),
                                       llvm::cl::init(defaultValue),
                                       optionTypeValues<T>()) {}
  void assign(const T &value) { this->setValue(value); }
};

/// The options every pass pipeline of the compiler shares: the declared
/// options marked kPipeline (partita/Options/CompilerOptions.def), typed,
/// so one option string replays any stage. Each stage reads the ones it
/// needs.
struct PipelineOptions : public PassPipelineOptions<PipelineOptions> {
#define PARTITA_OPTION(FIELD, KIND, TYPE, NAME, DEFAULT, USES, VALUE, HELP)    \
  [[no_unique_address]] PipelineOptionMember<                                  \
      ((USES) & ::partita::kPipeline) != 0, TYPE> FIELD{*this, NAME, HELP,     \
                                                        DEFAULT};
#include "partita/Options/CompilerOptions.def"

  /// The pipeline options of `options` (the driver's), field by field as
  /// declared.
  void assign(const CompilerOptions &options) {
#define PARTITA_OPTION(FIELD, KIND, TYPE, NAME, DEFAULT, USES, VALUE, HELP)    \
  FIELD.assign(options.FIELD);
#include "partita/Options/CompilerOptions.def"
  }
};

/// From freshly imported nn to clean transformer-level nn, stored as
/// `dtype` (partita-compile --emit nn): reads `raise`, `max-seq` and
/// `dtype`, and with `train` builds the training step after raising:
/// `loss`, the gradients, the `optimizer`'s update (`clip-grad-norm`,
/// `output-gradients`; docs/training.md).
void buildNNPipeline(OpPassManager &pm, const PipelineOptions &options);

/// --mesh auto, between the nn and the dist stage: partita-plan-mesh
/// chooses the mesh and the parallel options for `devices` devices
/// minimizing `objective` within `device-memory`, and writes them as IR
/// (dist.mesh, partita.plan). `sink`, when given, receives the whole plan
/// (the driver's report); `requireFit` false keeps a model no plan fits
/// (--emit plan prints why).
void buildPlanMeshPipeline(OpPassManager &pm, const PipelineOptions &options,
                           Plan *sink = nullptr, bool requireFit = true);

/// Global nn to nn with a sharding on every value: the strategy's
/// annotations, then propagation (partita-compile --emit dist): reads
/// `mesh`, `strategy` and `sp-mode`.
void buildPlanPipeline(OpPassManager &pm, const PipelineOptions &options);

/// Global nn with shardings to the SPMD program of every device: partition,
/// then cancel collectives and clean up, then cut pipeline stages of
/// `microbatches` each (partita-compile --emit local).
/// With `overlap`, collectives then become async starts and waits
/// (--partita-async-collectives); partita-compile --no-overlap turns it off.
/// `collectiveMatmul` applies only with `overlap`.
void buildPartitionPipeline(OpPassManager &pm, const PipelineOptions &options);

struct ExecPipelineOptions : public PassPipelineOptions<ExecPipelineOptions> {
  Option<int64_t> rank{*this, "rank",
                       llvm::cl::desc("The global rank whose program to plan"),
                       llvm::cl::init(0)};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("Fuse elementwise chains into the kernel "
                                   "that produces them"),
                    llvm::cl::init(true)};
  Option<int64_t> maxInlineConstantBytes{
      *this, "max-inline-constant-bytes",
      llvm::cl::desc("Constants up to this many bytes stay inline in the "
                     "program"),
      llvm::cl::init(1024)};
};

/// The SPMD program of every device (after buildPartitionPipeline) to the
/// planned program of rank `rank`, which translateToExecProgram writes
/// (partita-compile --emit exec runs it once per rank on a copy).
void buildExecPipeline(OpPassManager &pm, const ExecPipelineOptions &options);

/// Registers every pipeline with the pass registry (for partita-opt):
/// partita-nn-pipeline, partita-plan-pipeline, partita-partition-pipeline,
/// partita-shard-pipeline (plan and partition) and partita-pipeline (all
/// three), partita-exec-pipeline.
void registerPartitaPipelines();

} // namespace mlir::partita

#endif // PARTITA_PIPELINES_PIPELINES_H
