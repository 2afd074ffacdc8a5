//===- Runner.h - every rank of an artifact in one process ------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Runner runs all the ranks of an artifact in the calling process on global
// tensors: it cuts each sharded input into the ranks' blocks, runs the ranks
// concurrently and assembles each output from the ranks that produce it. A
// host artifact's ranks are threads sharing a HostWorld; a cuda artifact's
// run on GPU 0 (CudaRankWorld). It is what partita-run does in process and
// what an embedding API calls.
//
// A serving artifact's KV cache stays in the ranks between runs: run()
// is its prefill, runDecode() its decode step (Generation.h drives both).
//
// The building blocks below it (RankRun, prepareRank, bindRankInputs,
// runRanks, planOutput, assembleOutput) serve runs that hold only some
// ranks, such as partita-run joined as one NCCL rank of a multi-process run.
//
// The runner's library (PartitaRunner) links the CUDA device (PartitaCuda,
// which loads CUDA with dlopen) on top of PartitaRuntime.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_RUNNER_H
#define PARTITA_RUNTIME_RUNNER_H

#include "partita/runtime/Executor.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

class Communicator;
class CudaDevice;
class Device;
class ThreadPool;
struct RankEnvironment;

/// The most kernel threads a rank may ask for (RunnerOptions, partita-run
/// --threads, the C and Python session options).
inline constexpr unsigned kMaxThreadsPerRank = 1024;

struct RunnerOptions {
  /// Threads per host rank, at most kMaxThreadsPerRank; 0:
  /// hardware_concurrency / ranks (at least 1). A rank runs with fewer
  /// when the system gives fewer.
  unsigned threadsPerRank = 0;
  /// Deadline of every wait between ranks.
  double timeoutSeconds = 120;
  /// cuda artifacts: run every rank as threads sharing GPU 0 (a one-rank
  /// cuda artifact runs on GPU 0 regardless).
  bool singleGpu = false;
  /// cuda artifacts: run rank r on devices[r] (one per rank) instead of
  /// GPUs, over a HostWorld: devices the caller owns, has loaded the
  /// rank's modules into (prefill and decode), and whose memory host
  /// threads can address (an emulator in tests). They must outlive the
  /// runner.
  std::vector<Device *> devices;
};

class Runner {
public:
  /// Every rank of `artifact` in this process: a host artifact's as threads
  /// on a HostWorld; a cuda artifact's on GPU 0 (one rank, or all with
  /// singleGpu, via CudaRankWorld); anything else (a multi-rank cuda
  /// artifact without singleGpu) is an error saying to use partita-run (one
  /// process per GPU). Creates each rank's executor once (weights loaded
  /// once). The artifact must outlive the runner. Refuses outputs holding
  /// partial sums (compiler bug), as partita-run does.
  static Status create(const LoadedArtifact &artifact,
                       const RunnerOptions &options,
                       std::unique_ptr<Runner> &runner);
  ~Runner();
  Runner(const Runner &) = delete;
  Runner &operator=(const Runner &) = delete;

  /// This process as the one rank of a multi-process run of a cuda
  /// artifact that `environment` names (readRankEnvironment): the GPU of
  /// its local rank, a TCP store served by rank 0 at the environment's
  /// master address and port, NCCL over the whole world. Every rank of the
  /// world calls join with the same artifact.
  static Status join(const LoadedArtifact &artifact,
                     const RunnerOptions &options,
                     const RankEnvironment &environment,
                     std::unique_ptr<Runner> &runner);

  /// Runs all ranks once: execute(), then gatherOutputs(). `inputs` names
  /// every manifest input exactly once with its dtype and GLOBAL shape;
  /// sharded inputs are split per rank on every call. `outputs` names
  /// every manifest output exactly once with its dtype and global shape and
  /// caller-owned memory, which receives the output assembled from the
  /// ranks (replicated: from the first rank binding it, written in place by
  /// an in-process run; sharded: every shard inserted, coverage checked).
  /// One run at a time. A run refused before it starts (names, dtypes,
  /// shapes) changes nothing; one that fails while the ranks run leaves the
  /// runner unusable (its ranks have aborted their world).
  Status run(const std::vector<NamedTensor> &inputs,
             const std::vector<NamedTensor> &outputs);
  /// Runs the ranks this process holds once on `inputs` (as run() takes
  /// them), leaving their outputs in the ranks: what a timed loop repeats.
  Status execute(const std::vector<NamedTensor> &inputs);
  /// Assembles the last execute()'s outputs into `outputs` (as run() takes
  /// them). A joined rank other than 0 sends its outputs to rank 0 instead
  /// and leaves `outputs` alone (see holdsOutputs); every rank of the world
  /// calls it equally often.
  Status gatherOutputs(const std::vector<NamedTensor> &outputs);
  /// Whether gatherOutputs fills the caller's outputs: true except on a
  /// joined rank other than 0.
  bool holdsOutputs() const;
  const Manifest &manifest() const;

  /// Serving artifacts (Manifest::serving): run() and execute() run the
  /// prefill programs; runDecode runs the decode programs once on the
  /// decode entry's inputs and outputs (as run() takes them, from
  /// `serving->decodeInputs` and `decodeOutputs`). Both bind each rank's KV
  /// cache, which the runner allocates at create (the rank's block of
  /// every cache tensor its programs bind; on a cuda rank in its device's
  /// memory), zeroed, and which never leaves the rank: each program updates
  /// it in place, run after run, and no run stages it. An error for an
  /// artifact without `serving`; joined runs refuse serving artifacts.
  Status runDecode(const std::vector<NamedTensor> &inputs,
                   const std::vector<NamedTensor> &outputs);
  /// Zeroes every rank's KV cache (a new generation).
  Status resetCache();
  /// Copies `rank`'s block of resident tensor `name` (a KV cache tensor,
  /// a training parameter or optimizer state) into `out`, or `in` into
  /// it. Only for ranks this process holds, between runs.
  Status readResident(int32_t rank, const std::string &name,
                      HostTensor &out) const;
  Status writeResident(int32_t rank, const std::string &name, const Tensor &in);
  /// Bytes of KV cache this process holds, summed over its ranks (0
  /// without `serving`).
  uint64_t cacheBytes() const;
  /// What each rank of this process moved in token dispatches (a mixture
  /// of experts over ep), prefill and decode together, over the runner's
  /// runs: (global rank, stats), in rank order; ranks that dispatched
  /// nothing are left out.
  std::vector<std::pair<int32_t, Executor::DispatchStats>>
  dispatchStats() const;

private:
  Runner();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

//===----------------------------------------------------------------------===//
// Building blocks, for runs that hold only some of the ranks.
//===----------------------------------------------------------------------===//

/// What one rank of this process runs with: its executor (on `device`, or
/// on the host with `pool`), its inputs (replicated ones in the caller's
/// memory, its blocks of sharded ones in `inputMemory`) and its outputs (in
/// `outputMemory`, unless rebound).
struct RankRun {
  RankRun();
  ~RankRun();
  RankRun(RankRun &&);
  RankRun &operator=(RankRun &&);

  /// The rank's GPU (cuda artifacts); must outlive the executor, so a
  /// holder resets every executor and communicator before the devices.
  std::unique_ptr<CudaDevice> device;
  /// A device the caller owns and sets up (an emulator in tests), used
  /// instead of `device` and the pool when set; must outlive the executor.
  Device *externalDevice = nullptr;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Executor> executor;
  std::vector<NamedTensor> inputs;
  std::vector<NamedTensor> outputs;
  std::vector<HostTensor> inputMemory;
  std::vector<HostTensor> outputMemory;
  /// Serving artifacts: the rank's block of each KV cache tensor, in memory
  /// the holder owns (allocateRankCache), set before prepareRank. A cache
  /// binding is bound to it as both the input and the output of its name.
  std::vector<NamedTensor> states;
  /// The last run's outcome.
  Status status;
};

/// `i64 [2, 16]`: a manifest tensor's dtype and global shape, for messages.
std::string specString(const TensorSpec &spec);
/// `a (i64 [2, 16]), b (f32 [4])`: every spec with its type, for messages.
std::string specList(const std::vector<TensorSpec> &specs);

/// The GPUs this machine has for the cuda artifact `artifact`; an error
/// naming it when this build has no CUDA device or the driver finds none.
Status countGpus(const LoadedArtifact &artifact, int32_t &gpus);

/// Refuses a manifest whose outputs hold partial sums: no assembly of the
/// ranks' blocks gives the global tensor (the compiler should have reduced
/// them).
Status checkOutputsAssemblable(const Manifest &manifest);

/// Refuses decoding a serving artifact of a target other than host and
/// cuda (whose executors keep the cache resident on the device).
Status checkDecodeTarget(const Manifest &manifest);

/// Allocates `rank`'s KV cache of a serving artifact (nothing otherwise):
/// its block of each cache tensor its programs bind, zeroed, in `memory`,
/// and a view of each, by name, in `states` (RankRun::states).
Status allocateRankCache(const LoadedArtifact &artifact, int32_t rank,
                         std::vector<HostTensor> &memory,
                         std::vector<NamedTensor> &states);

/// The same in the memory of `device` (one with memory of its own): each
/// block allocated there and zeroed, its address in `memory` (the caller
/// deallocates them, before the device goes), a view of each in `states`.
Status allocateRankDeviceCache(const LoadedArtifact &artifact, int32_t rank,
                               Device &device, std::vector<void *> &memory,
                               std::vector<NamedTensor> &states);

/// Creates `rank`'s executor over `communicator`: on `run.externalDevice`
/// when set (as is), else on `run.device` when set (after loading the
/// rank's CUDA module into it), else on a fresh pool of
/// `threads` workers (0: hardware_concurrency / world size, at least 1).
/// Checks every input the program binds against the manifest's dtype and
/// sharding, and allocates the outputs' memory; the cache tensors of a
/// serving artifact are resident in the executor, in `run.states`' memory
/// (neither bound per run nor staged). `artifact` may be a decode entry
/// (LoadedArtifact::decodeEntry).
Status prepareRank(const LoadedArtifact &artifact, int32_t rank,
                   Communicator &communicator, unsigned threads, RankRun &run);

/// Binds the inputs of a prepared `rank` from the GLOBAL `inputs` (which
/// must match the manifest's): a replicated one is read in place, a
/// sharded one copied, the rank getting its block (cache tensors are
/// resident, prepareRank). A pipeline stage binds only the inputs it uses.
Status bindRankInputs(const LoadedArtifact &artifact, int32_t rank,
                      const std::vector<NamedTensor> &inputs, RankRun &run);

/// Runs every rank that has an executor once, concurrently; returns every
/// failure in rank order (each message names its rank).
Status runRanks(std::vector<RankRun> &runs);

/// Where an output comes from: the first rank that binds a replicated one
/// (rank 0, unless a pipeline puts the last stage elsewhere), every rank
/// that binds a sharded one. `shards` points into the runs' outputs.
struct OutputPlan {
  const TensorSpec *spec = nullptr;
  bool sharded = false;
  std::vector<std::pair<int32_t, const Tensor *>> shards;
};

/// Plans output `spec` from the ranks' bound outputs: checks each shard's
/// dtype and shape and that every distinct block is produced by some rank.
Status planOutput(const Manifest &manifest, const TensorSpec &spec,
                  const std::vector<RankRun> &runs, OutputPlan &plan);

/// Copies the planned output into `global` (the spec's dtype and shape):
/// the replicated tensor, or every rank's block of a sharded one (ranks that
/// differ only on replicating axes write the same block).
Status assembleOutput(const Manifest &manifest, const OutputPlan &plan,
                      const Tensor &global);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_RUNNER_H
