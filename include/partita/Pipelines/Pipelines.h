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
// Every stage takes the same PipelineOptions (the options of
// partita-compile that shape the IR, typed), and reads the ones it needs, so
// one option string replays any stage.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PIPELINES_PIPELINES_H
#define PARTITA_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Pipelines/OptionParser.h"

namespace mlir::partita {

struct PipelineOptions : public PassPipelineOptions<PipelineOptions> {
  // nn
  Option<bool> raise{*this, "raise",
                     llvm::cl::desc("Raise decomposed subgraphs to "
                                    "transformer-level nn ops"),
                     llvm::cl::init(true)};
  Option<StorageType> dtype{
      *this, "dtype",
      llvm::cl::desc("Storage type of the model's fp32 tensors"),
      optionValues<StorageType>(), llvm::cl::init(StorageType::FP32)};
  Option<int64_t> maxSeq{
      *this, "max-seq",
      llvm::cl::desc("Keep a decoder's keys and values in a cache of this "
                     "many slots (partita-kv-cache; 0: none)"),
      llvm::cl::init(0)};
  // plan
  Option<dist::MeshSpec> mesh{*this, "mesh",
                              llvm::cl::desc("Mesh axes, sizes and roles, "
                                             "e.g. dp=2,tp=4 or model=4:tp "
                                             "(default: the module's "
                                             "dist.mesh)")};
  Option<Strategy> strategy{
      *this, "strategy", llvm::cl::desc("How the strategy uses the mesh"),
      optionValues<Strategy>(), llvm::cl::init(Strategy::Megatron)};
  Option<SequenceMode> spMode{
      *this, "sp-mode", llvm::cl::desc("Sequence parallelism"),
      optionValues<SequenceMode>(), llvm::cl::init(SequenceMode::None)};
  // partition
  Option<int64_t> microbatches{*this, "microbatches",
                               llvm::cl::desc("Microbatches per pipeline "
                                              "stage"),
                               llvm::cl::init(1)};
  Option<int64_t> virtualStages{*this, "virtual-stages",
                                llvm::cl::desc("Pipeline chunks per rank "
                                               "(interleaved)"),
                                llvm::cl::init(1)};
  Option<bool> overlap{*this, "overlap",
                       llvm::cl::desc("Start collectives early and wait "
                                      "late (async)"),
                       llvm::cl::init(true)};
  Option<CollectiveMatmulMode> collectiveMatmul{
      *this, "collective-matmul",
      llvm::cl::desc("Pipeline tensor-parallel matmuls with their "
                     "collective (with overlap)"),
      optionValues<CollectiveMatmulMode>(),
      llvm::cl::init(CollectiveMatmulMode::Auto)};
};

/// From freshly imported nn to clean transformer-level nn, stored as
/// `dtype` (partita-compile --emit nn): reads `raise`, `max-seq` and `dtype`.
void buildNNPipeline(OpPassManager &pm, const PipelineOptions &options);

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
