//===- Pipelines.h - the compiler's pass pipelines --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Each stage of partita-compile is a pipeline built here and registered with
// partita-opt, so `partita-opt --partita-nn-pipeline` reproduces what
// `partita-compile --emit nn` runs after import.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PIPELINES_PIPELINES_H
#define PARTITA_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::partita {

struct NNPipelineOptions : public PassPipelineOptions<NNPipelineOptions> {
  Option<bool> raise{*this, "raise",
                     llvm::cl::desc("Raise decomposed subgraphs to "
                                    "transformer-level nn ops"),
                     llvm::cl::init(true)};
};

/// From freshly imported nn to clean transformer-level nn.
void buildNNPipeline(OpPassManager &pm, const NNPipelineOptions &options);

/// Where tensor-parallel matmuls are pipelined with their collective
/// (--partita-collective-matmul).
enum class CollectiveMatmulMode { Auto, Always, Never };

struct ShardPipelineOptions : public PassPipelineOptions<ShardPipelineOptions> {
  Option<std::string> mesh{*this, "mesh",
                           llvm::cl::desc("Mesh axes and sizes, e.g. "
                                          "dp=2,tp=4"),
                           llvm::cl::init("")};
  Option<std::string> strategy{*this, "strategy",
                               llvm::cl::desc("megatron or none"),
                               llvm::cl::init("megatron")};
  Option<int64_t> microbatches{*this, "microbatches",
                               llvm::cl::desc("Microbatches per pipeline "
                                              "stage"),
                               llvm::cl::init(1)};
  Option<int64_t> virtualStages{*this, "virtual-stages",
                                llvm::cl::desc("Pipeline chunks per rank "
                                               "(interleaved)"),
                                llvm::cl::init(1)};
  Option<CollectiveMatmulMode> collectiveMatmul{
      *this, "collective-matmul",
      llvm::cl::desc("Pipeline tensor-parallel matmuls with their "
                     "collective"),
      llvm::cl::values(
          clEnumValN(CollectiveMatmulMode::Auto, "auto",
                     "where the cost model says it pays"),
          clEnumValN(CollectiveMatmulMode::Always, "always", "every candidate"),
          clEnumValN(CollectiveMatmulMode::Never, "never", "none")),
      llvm::cl::init(CollectiveMatmulMode::Auto)};
  Option<bool> overlap{*this, "overlap",
                       llvm::cl::desc("Start collectives early and wait "
                                      "late (async)"),
                       llvm::cl::init(true)};
  Option<std::string> spMode{*this, "sp-mode",
                             llvm::cl::desc("megatron, ulysses or ring"),
                             llvm::cl::init("")};
};

/// Global nn to nn with a sharding on every value: the strategy's
/// annotations, then propagation (partita-compile --emit dist).
void buildPlanPipeline(OpPassManager &pm, const ShardPipelineOptions &options);

/// Global nn with shardings to the SPMD program of every device: partition,
/// then cancel collectives and clean up, then cut pipeline stages of
/// `microbatches` each (partita-compile --emit local).
/// With `overlap`, collectives then become async starts and waits
/// (--partita-async-collectives); partita-compile --no-overlap turns it off.
/// `collectiveMatmul` applies only with `overlap`.
void buildPartitionPipeline(OpPassManager &pm,
                            const ShardPipelineOptions &options);

/// Registers every pipeline with the pass registry (for partita-opt).
void registerPartitaPipelines();

} // namespace mlir::partita

#endif // PARTITA_PIPELINES_PIPELINES_H
