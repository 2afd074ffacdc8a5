//===- Planner.h - Choosing the mesh for a cluster --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// `--mesh auto`: given the model's nn IR (shapes only; no weight is read)
// and a cluster, every way to spread N devices over data, tensor, pipeline
// and sequence parallelism (with the sequence mode, pipeline microbatches
// and collective matmul) is checked against the model's divisibility and
// the device's memory, and timed with the roofline cost model and the
// cluster's alpha-beta links. docs/planning.md has the model and its
// limits.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_ANALYSIS_PLANNER_H
#define PARTITA_ANALYSIS_PLANNER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Analysis/Cluster.h"
#include "partita/Options/Options.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::partita {

/// The largest batch decode-throughput serves: TensorRT-LLM's and vLLM's
/// schedulers cap their batches of sequences in the same range.
constexpr int64_t kMaxServingBatch = 1024;

struct PlanRequest {
  int64_t devices = 1;
  PlanObjective objective = PlanObjective::Latency;
  /// The budget of one device; unset: the cluster's memory.
  std::optional<double> deviceMemoryBytes;
  /// Whether ep may split the batch and dispatch tokens to their experts
  /// (the annotation's expert-dispatch: host targets); else its ranks run
  /// every token and the experts' outputs are all-reduced.
  bool expertDispatch = true;
};

/// What the planner reads of a model: per op, its roofline work and how
/// tensor parallelism splits it; and the sizes the axes must divide.
struct ModelShape {
  struct Op {
    double flops = 0;
    double bytes = 0;
    /// Of `bytes`, the weights the op reads: every data-parallel replica
    /// and microbatch reads them whole (tp splits a split op's), which is
    /// what bounds a decode step.
    double weightBytes = 0;
    /// Tensor parallelism splits its work (Megatron's projections,
    /// attention, what lies between them, the vocabulary-parallel
    /// embedding and LM head); otherwise every tp rank repeats it, unless
    /// the sequence is split over tp (Megatron-SP).
    bool tensorSplit = false;
    /// Attention: Ulysses exchanges its operands, ring attention its keys
    /// and values.
    bool attention = false;
    /// Row-parallel projections and the embedding: an all-reduce of the
    /// result under tp (a reduce-scatter and an all-gather under
    /// Megatron-SP). The LM head: an all-gather of the logits.
    enum class Collective {
      None,
      AllReduce,
      AllGather
    } collective = Collective::None;
    /// Bytes of the tensor that collective (or attention's exchange)
    /// moves, for the whole batch and sequence.
    double collectiveBytes = 0;
    /// Attention: the bytes of its keys and values.
    double keyValueBytes = 0;
    /// Tensor bytes live around the op (operands and results, weights
    /// aside).
    double liveBytes = 0;
    /// The op is the LM head or computes from its logits, which tp gathers
    /// whole onto every rank: its live set is not split over tp.
    bool gathered = false;
    /// A key or value projection, or what computes from it before
    /// attention: split over at most kvHeads tp ranks (GQA replication).
    bool keyValueSplit = false;
    /// A row-parallel projection: collective matmul can decompose its
    /// reduce-scatter against it (the embedding's cannot be).
    bool decomposable = false;
    /// A mixture of experts (nn.moe): ep splits its experts, its work and
    /// its expert weights; its tokens travel to their experts and back
    /// (each of its topK rows of collectiveBytes / tokens), or its result
    /// (collectiveBytes) is all-reduced.
    bool experts = false;
    int64_t topK = 0;
    /// For an all-reduce op: the work of the column-parallel projections
    /// its all-gather feeds under Megatron-SP (up to the next all-reduce).
    double nextFlops = 0, nextBytes = 0;
    /// Outside the transformer layers (the embedding, the final norm, the
    /// LM head): a pipeline's first or last stage runs it whole, so it
    /// weighs on the slowest stage undivided.
    bool outside = false;
    /// How many times the op occurs (folded() merges equal ops: a
    /// transformer's layers repeat).
    int64_t count = 1;

    bool operator==(const Op &other) const;
  };
  std::vector<Op> ops;
  int64_t batch = 1;
  int64_t sequence = 1;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  /// The widths tp splits besides heads: each MLP's hidden width (of the
  /// up and gate projections' outputs, the down projection's input; each
  /// half of a fused gate/up), which the partitioner refuses to split
  /// unevenly.
  std::vector<int64_t> splitWidths;
  /// The residual stream's bytes per token (hidden size times the element
  /// size): what a pipeline stage sends.
  double tokenBytes = 0;
  /// Weight bytes (in the storage type) split by tp, and repeated on every
  /// tp rank; both spread over pipeline stages.
  double splitWeightBytes = 0;
  double replicatedWeightBytes = 0;
  /// Of those, the weights outside the transformer layers (embeddings, the
  /// final norm, the LM head): a pipeline stage holds them whole.
  double splitOutsideWeightBytes = 0;
  double replicatedOutsideWeightBytes = 0;
  /// Of the split weights, the key and value projections': split over at
  /// most kvHeads tp ranks.
  double keyValueWeightBytes = 0;
  /// A decoder export's present keys and values (results of the function
  /// that attention reads as its keys and values): the KV cache, live
  /// until the end of the step and split like the key/value heads.
  double keyValueCacheBytes = 0;
  /// The function's other results (the logits).
  double outputBytes = 0;
  /// The mixtures of experts' expert weights (counted among the replicated
  /// weights, in the layers), which ep splits, and each one's number of
  /// experts, which ep must divide.
  double expertWeightBytes = 0;
  /// Of those, the ones counted outside the layers (a model of experts
  /// alone has no layers).
  double expertOutsideWeightBytes = 0;
  std::vector<int64_t> expertCounts;

  /// The same shape with equal ops merged into one, counted: one layer's
  /// ops stand for all of them. Its predictions equal the unfolded
  /// shape's up to the order of floating-point sums.
  ModelShape folded() const;
  /// The same model at another batch: what each op computes, moves and
  /// keeps live for the batch, the cache and the outputs scale with it;
  /// the weights do not.
  ModelShape withBatch(int64_t newBatch) const;
};

/// Reads the shape of `main`, an nn function before sharding.
ModelShape readModelShape(func::FuncOp main);

/// One point of the search space, and what the cost model predicts for it.
struct PlanCandidate {
  int64_t dp = 1, tp = 1, pp = 1, sp = 1;
  /// Expert parallelism: a mixture of experts' experts split over ep; the
  /// batch too where `dispatch` (the rest of the model is data parallel
  /// over ep), else the rest is replicated over it.
  int64_t ep = 1;
  bool dispatch = false;
  /// None, Megatron (over tp), Ulysses or Ring (over sp).
  SequenceMode spMode = SequenceMode::None;
  int64_t microbatches = 1;
  /// Pipeline chunks per device (Megatron's interleaved schedule).
  int64_t virtualStages = 1;
  bool collectiveMatmul = false;

  bool feasible = false;
  /// Why not, when not feasible ("memory: ...", "divisibility: ...",
  /// "placement: ...").
  std::string reason;
  /// Predicted seconds: the objective's time, and its parts.
  double stepSeconds = 0;
  double computeSeconds = 0;
  double communicationSeconds = 0;
  double exposedCommunicationSeconds = 0;
  double bubbleSeconds = 0;
  /// Bytes per device.
  double weightBytes = 0;
  double activationBytes = 0;
  double outputBytes = 0;
  double keyValueCacheBytes = 0;
  double memoryBytes = 0;
  /// Tokens a step processes per second (batch x sequence / step time):
  /// with a decode objective, the tokens generated per second.
  double tokensPerSecond = 0;
  /// The batch the predictions are for: the model's, except under
  /// decode-throughput, which serves the largest batch that fits the
  /// device's memory (cache included), in steps of dp x microbatches and
  /// at most kMaxServingBatch.
  int64_t batch = 0;

  /// `--mesh` spelling (`dp=2,tp=4`; `1` for one device).
  std::string meshString() const;
  /// The partita-compile flags that compile this plan.
  std::string flags() const;
  /// The family the explanation groups it in (`tp`, `dp+tp`, `tp+sp:ring`).
  std::string family() const;
};

struct Plan {
  /// Feasible candidates best first, then the infeasible ones.
  std::vector<PlanCandidate> candidates;
  /// The shape planned (folded).
  ModelShape shape;
  PlanRequest request;
  /// The budget used and the reserve kept from it.
  double deviceMemoryBytes = 0;
  double reserveBytes = 0;
  /// Families with no feasible candidate, or whose best is slower than the
  /// chosen plan: a line each saying why.
  std::vector<std::string> rejected;
  /// Once the chosen plan is compiled: the largest weight bytes,
  /// buffer-plan peak of activations and output bytes of any of its ranks
  /// (what the estimates stood for).
  std::optional<double> compiledWeightBytes, compiledActivationBytes,
      compiledOutputBytes;

  /// The chosen plan; null when none is feasible.
  const PlanCandidate *best() const;
};

/// Every point of the search space for `request.devices` devices, in a
/// fixed order, evaluated: the brute force the planner is checked against.
std::vector<PlanCandidate> enumeratePlans(const ModelShape &shape,
                                          const ClusterModel &cluster,
                                          const PlanRequest &request);

/// Evaluates one candidate (sets its feasibility and predictions).
void evaluatePlan(PlanCandidate &candidate, const ModelShape &shape,
                  const ClusterModel &cluster, const PlanRequest &request);

/// The plan for `shape` on `cluster`: enumeratePlans on the folded shape,
/// ranked (best first; ties go to the simpler plan).
Plan planParallelism(const ModelShape &shape, const ClusterModel &cluster,
                     const PlanRequest &request);

/// The --explain-plan table: the ten best candidates, then the rejected
/// families.
std::string describePlan(const Plan &plan, const ClusterModel &cluster);

/// The report's `plan` (docs/planning.md): the request, the shape, the
/// chosen candidate, the `limit` best feasible ones (every candidate,
/// feasible first, with no limit) and the rejected families.
llvm::json::Object planToJson(const Plan &plan,
                              std::optional<size_t> limit = 10);

} // namespace mlir::partita

#endif // PARTITA_ANALYSIS_PLANNER_H
