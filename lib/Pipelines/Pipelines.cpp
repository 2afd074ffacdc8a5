//===- Pipelines.cpp - the compiler's pass pipelines ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Pipelines/Pipelines.h"

#include "partita/Analysis/Planner.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "partita/Dialect/Dist/Transforms/Passes.h"
#include "partita/Dialect/Exec/Transforms/Passes.h"
#include "partita/Dialect/NN/Transforms/Passes.h"
#include "partita/Dialect/NN/Transforms/Training.h"

using namespace mlir;
using namespace mlir::partita;

void mlir::partita::buildNNPipeline(OpPassManager &pm,
                                    const PipelineOptions &options) {
  OpPassManager &func = pm.nest<func::FuncOp>();
  // The importer folds what is constant; canonicalization removes what the
  // folding left dead and composes reshapes and transposes, so the raising
  // patterns see one canonical spelling of each subgraph.
  func.addPass(createCanonicalizerPass());
  if (options.raise)
    func.addPass(createRaisePass());
  // Raising leaves the decomposed ops dead and may duplicate small
  // constants.
  func.addPass(createCSEPass());
  func.addPass(createCanonicalizerPass());
  // Bounded experts drop tokens by rewriting the ids, before anything
  // computes or shards the mixture.
  if (options.moeCapacityFactor != 0) {
    MoeCapacityPassOptions capacity;
    capacity.factor = options.moeCapacityFactor;
    func.addPass(createMoeCapacityPass(capacity));
  }
  // The cache's slots replace the concatenations raising matched as
  // attention's keys and values.
  if (options.maxSeq > 0) {
    KvCachePassOptions cache;
    cache.maxSeq = options.maxSeq;
    func.addPass(createKvCachePass(cache));
  }
  // A training step: the loss, its gradients and the updates, on the
  // raised model (each rule is a transformer-level op's), before any
  // sharding, so the backward is partitioned as the forward is.
  if (options.train) {
    std::string error;
    std::optional<LossSpec> loss = parseLossSpec(options.loss, error);
    AddLossPassOptions addLoss;
    if (loss) {
      addLoss.kind = loss->kind;
      addLoss.output = loss->output;
    } else {
      // The pass refuses it with the same message.
      addLoss.kind = options.loss;
    }
    // nn.moe has no vector-Jacobian product of its sparse form yet: a
    // training step computes it densely (every expert on every token),
    // whose ops all differentiate.
    func.addPass(createExpandMoePass());
    // First, so that a fused projection's parameter is differentiated,
    // updated and sharded as its segments.
    func.addPass(createSplitFusedParametersPass());
    func.addPass(createAddLossPass(addLoss));
    func.addPass(createDifferentiatePass());
    func.addPass(createCSEPass());
    OptimizerPassOptions optimizer;
    optimizer.optimizer = options.optimizer;
    optimizer.clipGradNorm = options.clipGradNorm;
    optimizer.outputGradients = options.outputGradients;
    func.addPass(createOptimizerPass(optimizer));
  }
  // Last: the raising patterns match the model's fp32 subgraphs, which the
  // conversion's casts would break up.
  if (options.dtype != StorageType::FP32) {
    ConvertFloatPassOptions convert;
    convert.to = options.dtype;
    func.addPass(createConvertFloatPass(convert));
  }
}

void mlir::partita::buildPlanMeshPipeline(OpPassManager &pm,
                                          const PipelineOptions &options,
                                          Plan *sink, bool requireFit) {
  // Planning reads the raised model's shapes (the cost of attention, the
  // projections, the norms), so it follows the nn stage; it writes the mesh
  // the sharding stage annotates.
  PlanMeshPassOptions plan;
  plan.devices = options.devices;
  plan.objective = options.objective;
  plan.deviceMemory = options.deviceMemoryBytes;
  plan.requireFit = requireFit;
  plan.expertDispatch = options.target == Target::Host;
  pm.addPass(createPlanMeshPass(plan, sink));
}

void mlir::partita::buildPlanPipeline(OpPassManager &pm,
                                      const PipelineOptions &options) {
  AnnotatePassOptions annotate;
  annotate.mesh = options.mesh;
  annotate.strategy = options.strategy;
  annotate.spMode = options.spMode;
  annotate.vocabDivisibleBy = options.vocabDivisibleBy;
  // The CUDA runtime's communicators have no dispatch.
  annotate.expertDispatch = options.target == Target::Host;
  pm.addPass(createAnnotatePass(annotate));
  // The strategy's rewrites (fused segments, repeated key/value heads)
  // leave dead weights behind.
  pm.nest<func::FuncOp>().addPass(createCanonicalizerPass());
  pm.addPass(createPropagateShardingPass());
}

void mlir::partita::buildPartitionPipeline(OpPassManager &pm,
                                           const PipelineOptions &options) {
  bool overlap = options.overlap;
  pm.addPass(createPartitionPass());
  OpPassManager &func = pm.nest<func::FuncOp>();
  func.addPass(createCancelCollectivesPass());
  // One dist.axis_index per group, and no dead global weights.
  func.addPass(createCSEPass());
  func.addPass(createCanonicalizerPass());
  // Tensor-parallel matmuls pipelined with their all-gather or
  // reduce-scatter, where the cost model says it pays.
  if (overlap && options.collectiveMatmul != CollectiveMatmulMode::Never) {
    CollectiveMatmulPassOptions windowed;
    windowed.force = options.collectiveMatmul == CollectiveMatmulMode::Always;
    pm.addPass(createCollectiveMatmulPass(windowed));
  }
  // A training step's gradients all-reduced together, in buckets.
  if (options.train && options.gradBucketBytes > 0) {
    BucketCollectivesPassOptions buckets;
    buckets.bucketBytes = options.gradBucketBytes;
    pm.addPass(createBucketCollectivesPass(buckets));
  }
  // Stages are cut last, on local shapes and with the collectives in place,
  // so that the cost model sees what each stage really runs.
  PipelineSplitPassOptions split;
  split.microbatches = options.microbatches;
  split.virtualStages = options.virtualStages;
  pm.addPass(createPipelineSplitPass(split));
  pm.addPass(createVerifyPipelinePass());
  // Last: collectives start as early and finish as late as their uses
  // allow, in every stage.
  if (overlap) {
    pm.addPass(createAsyncCollectivesPass());
    pm.addPass(createSchedulePass());
  }
}

void mlir::partita::buildExecPipeline(OpPassManager &pm,
                                      const ExecPipelineOptions &options) {
  // First, so that nothing after it depends on the rank: the rank's stage,
  // constant axis indices (and the compares and wheres they decide), its
  // blocks of replicated weights, global ranks for groups and peers.
  SpecializeRankPassOptions specialize;
  specialize.rank = options.rank;
  pm.addPass(createSpecializeRankPass(specialize));
  OpPassManager &func = pm.nest<func::FuncOp>();
  // A rank multiplies by its packed int4 blocks, never by a float weight.
  func.addPass(createFuseDequantizePass());
  // Fusion before the plan: a fused chain is one kernel and one buffer.
  if (options.fuse)
    func.addPass(createFusePass());
  // The receive order is part of the program the plan's lifetimes count.
  func.addPass(createPrefetchReceivesPass());
  // Last: buffers, lifetimes and arena offsets of the final op order.
  PlanBuffersPassOptions plan;
  plan.maxInlineConstantBytes = options.maxInlineConstantBytes;
  func.addPass(createPlanBuffersPass(plan));
}

void mlir::partita::registerPartitaPipelines() {
  PassPipelineRegistration<ExecPipelineOptions>(
      "partita-exec-pipeline",
      "Specialize to one rank, fuse and plan buffers (the IR partita-compile "
      "--emit exec writes for rank `rank`)",
      buildExecPipeline);
  PassPipelineRegistration<PipelineOptions>(
      "partita-nn-pipeline",
      "Clean up and raise imported nn IR, store it as dtype "
      "(partita-compile --emit nn, on --emit import's output)",
      buildNNPipeline);
  PassPipelineRegistration<PipelineOptions>(
      "partita-plan-mesh-pipeline",
      "Choose the mesh and the parallel options for `devices` devices "
      "(partita-compile --mesh auto, on --emit nn's output)",
      [](OpPassManager &pm, const PipelineOptions &options) {
        buildPlanMeshPipeline(pm, options);
      });
  PassPipelineRegistration<PipelineOptions>(
      "partita-plan-pipeline",
      "Annotate and propagate shardings (partita-compile --emit dist, on "
      "--emit nn's output)",
      buildPlanPipeline);
  PassPipelineRegistration<PipelineOptions>(
      "partita-partition-pipeline",
      "Partition, cut stages and overlap collectives (partita-compile --emit "
      "local, on --emit dist's output)",
      buildPartitionPipeline);
  PassPipelineRegistration<PipelineOptions>(
      "partita-shard-pipeline",
      "Plan, propagate and partition (partita-compile --mesh ... --emit "
      "local, on --emit nn's output)",
      [](OpPassManager &pm, const PipelineOptions &options) {
        buildPlanPipeline(pm, options);
        buildPartitionPipeline(pm, options);
      });
  PassPipelineRegistration<PipelineOptions>(
      "partita-pipeline",
      "Every pass stage (partita-compile --mesh ... --emit local, on --emit "
      "import's output)",
      [](OpPassManager &pm, const PipelineOptions &options) {
        buildNNPipeline(pm, options);
        buildPlanPipeline(pm, options);
        buildPartitionPipeline(pm, options);
      });
}
