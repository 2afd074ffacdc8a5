//===- Runner.cpp - every rank of an artifact in one process --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Runner.h"

#include "partita/runtime/CudaDevice.h"
#include "partita/runtime/CudaMultiRankCommunicator.h"
#include "partita/runtime/Device.h"
#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/HostKernels.h"
#include "partita/runtime/NcclCommunicator.h"
#include "partita/runtime/TensorShards.h"
#include "partita/runtime/distributed/Groups.h"
#include "partita/runtime/distributed/Launcher.h"
#include "partita/runtime/distributed/TcpStore.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

/// Matches the caller's tensors against the manifest's inputs or outputs
/// (`kind`): each named once, with the spec's dtype and global shape.
/// `ordered[i]` receives the tensor of `specs[i]`.
Status matchTensors(const std::vector<TensorSpec> &specs,
                    const std::vector<NamedTensor> &given,
                    const std::string &kind,
                    std::vector<const Tensor *> &ordered) {
  ordered.assign(specs.size(), nullptr);
  for (const NamedTensor &named : given) {
    const TensorSpec *spec = findSpec(specs, named.name);
    if (!spec)
      return Status::error("the model has no " + kind + " '" + named.name +
                           "'; its " + kind + "s are: " + specList(specs));
    const Tensor *&slot = ordered[size_t(spec - specs.data())];
    if (slot)
      return Status::error(kind + " '" + named.name + "' is given twice");
    const Tensor &tensor = named.tensor;
    if (tensor.dtype != spec->dtype || tensor.shape != spec->shape)
      return Status::error(
          kind + " '" + named.name + "': expected " + specString(*spec) +
          ", got " + dtypeName(tensor.dtype) + " " + shapeString(tensor.shape));
    if (!tensor.data && tensor.byteSize() > 0)
      return Status::error(kind + " '" + named.name + "' has no memory");
    slot = &tensor;
  }
  for (size_t i = 0; i < specs.size(); ++i)
    if (!ordered[i])
      return Status::error("missing " + kind + " '" + specs[i].name + "' (" +
                           specString(specs[i]) + ")");
  return Status::ok();
}

std::chrono::milliseconds timeoutOf(double seconds) {
  return std::chrono::milliseconds(int64_t(std::ceil(seconds * 1000)));
}

/// Whether `name` is a tensor the ranks keep between runs: a serving
/// artifact's KV cache, a training artifact's parameters and state.
bool isResident(const Manifest &manifest, const std::string &name) {
  for (const TensorSpec *spec : residentSpecs(manifest))
    if (spec->name == name)
      return true;
  return false;
}

/// The weight holding the rank's block of resident tensor `name` before
/// the first run (a training parameter's initializer), or empty: zeros.
std::string initialWeightOf(const program::Program &program,
                            const std::string &name) {
  for (const program::Binding &binding : program.inputs())
    if (binding.name() == name)
      return binding.initial_weight();
  return "";
}

/// Reads the weight `weight` that `name`'s block starts as, of `block`'s
/// dtype and shape.
Status initialValue(const LoadedArtifact &artifact, int32_t rank,
                    const std::string &name, const std::string &weight,
                    const Tensor &block, const Tensor *&initial) {
  return artifact.weights().find(
      weight, block.dtype, block.shape,
      "rank " + std::to_string(rank) + ": '" + name + "'", initial);
}

/// The tensor named `name` in `states`, or null.
const Tensor *stateOf(const std::vector<NamedTensor> &states,
                      const std::string &name) {
  for (const NamedTensor &state : states)
    if (state.name == name)
      return &state.tensor;
  return nullptr;
}

/// The memory `run` holds for cache tensor `name` (allocateRankCache), or
/// null.
const Tensor *stateOf(const RankRun &run, const std::string &name) {
  return stateOf(run.states, name);
}

/// Checks that `run` holds memory for the cache tensor `binding` binds,
/// of the buffer's type.
Status checkState(const program::Program &program,
                  const program::Binding &binding, const std::string &where,
                  const RankRun &run, const Tensor *&state) {
  state = stateOf(run, binding.name());
  if (!state)
    return Status::error(where + " binds cache '" + binding.name() +
                         "', which it holds no memory for");
  if (binding.buffer() < 0 || binding.buffer() >= program.buffers_size())
    return Status::error(where + ": cache '" + binding.name() +
                         "' has no buffer");
  const program::TensorType &type = program.buffers(binding.buffer()).type();
  std::vector<int64_t> shape(type.shape().begin(), type.shape().end());
  if (type.dtype() != state->dtype || shape != state->shape)
    return Status::error(where + ": cache '" + binding.name() + "' is " +
                         dtypeName(state->dtype) + " " +
                         shapeString(state->shape) +
                         ", but its program binds " + dtypeName(type.dtype()) +
                         " " + shapeString(shape));
  return Status::ok();
}

} // namespace

//===----------------------------------------------------------------------===//
// Building blocks
//===----------------------------------------------------------------------===//

std::string partita::runtime::specString(const TensorSpec &spec) {
  return dtypeName(spec.dtype) + " " + shapeString(spec.shape);
}

std::string partita::runtime::specList(const std::vector<TensorSpec> &specs) {
  std::string list;
  for (const TensorSpec &spec : specs)
    list +=
        (list.empty() ? "" : ", ") + spec.name + " (" + specString(spec) + ")";
  return list;
}

RankRun::RankRun() = default;
RankRun::~RankRun() = default;
RankRun::RankRun(RankRun &&) = default;
RankRun &RankRun::operator=(RankRun &&) = default;

Status partita::runtime::checkOutputsAssemblable(const Manifest &manifest) {
  for (const TensorSpec &spec : manifest.outputs)
    if (!spec.sharding.partial.empty())
      return Status::error("output '" + spec.name +
                           "' holds partial sums (sharding " +
                           shardingString(spec.sharding) +
                           "): the program should have reduced them (a "
                           "compiler bug)");
  return Status::ok();
}

Status partita::runtime::prepareRank(const LoadedArtifact &artifact,
                                     int32_t rank, Communicator &communicator,
                                     unsigned threads, RankRun &run) {
  const Manifest &manifest = artifact.manifest();
  const program::Program &program = artifact.program(rank);
  std::string where = "rank " + std::to_string(rank);
  // The cache is resident in the executors: bound once, to the memory the
  // holder allocated (on the rank's device when it has memory of its own),
  // never staged around a run.
  std::vector<NamedTensor> resident;
  for (const auto *bindings : {&program.inputs(), &program.outputs()})
    for (const program::Binding &binding : *bindings) {
      if (!isResident(manifest, binding.name()))
        continue;
      const Tensor *state = nullptr;
      PARTITA_RETURN_IF_ERROR(checkState(program, binding, where, run, state));
      if (!stateOf(resident, binding.name()))
        resident.push_back({binding.name(), *state});
    }
  if (run.externalDevice) {
    PARTITA_RETURN_IF_ERROR(Executor::create(program, artifact.weights(),
                                             communicator, *run.externalDevice,
                                             run.executor, resident));
  } else if (run.device) {
    std::string image;
    Status loaded = readCudaModule(artifact, rank, image);
    if (loaded)
      loaded = run.device->loadModule(image);
    if (!loaded)
      return Status::error(where + ": " + loaded.message());
    PARTITA_RETURN_IF_ERROR(Executor::create(program, artifact.weights(),
                                             communicator, *run.device,
                                             run.executor, resident));
  } else {
    if (threads == 0)
      threads = std::max(1u, std::thread::hardware_concurrency() /
                                 unsigned(std::max(manifest.worldSize, 1)));
    run.pool = std::make_unique<ThreadPool>(threads);
    PARTITA_RETURN_IF_ERROR(Executor::create(program, artifact.weights(),
                                             communicator, *run.pool,
                                             run.executor, resident));
  }
  for (const program::Binding &binding : program.inputs()) {
    if (isResident(manifest, binding.name()))
      continue;
    const TensorSpec *spec = findSpec(manifest.inputs, binding.name());
    if (!spec)
      return Status::error(where + " reads input '" + binding.name() +
                           "', which the manifest does not list");
    std::string what = "input '" + binding.name() + "'";
    std::vector<int64_t> shape;
    Status located = localShape(*spec, manifest, rank, shape);
    if (!located)
      return Status::error(what + ": " + located.message());
    if (binding.buffer() < 0 || binding.buffer() >= program.buffers_size())
      return Status::error(where + ": " + what + " has no buffer");
    const program::TensorType &type = program.buffers(binding.buffer()).type();
    std::vector<int64_t> read(type.shape().begin(), type.shape().end());
    if (type.dtype() != spec->dtype || read != shape)
      return Status::error(what + " is " + specString(*spec) +
                           " in the manifest with sharding " +
                           shardingString(spec->sharding) + ", so " + where +
                           " should read " + dtypeName(spec->dtype) + " " +
                           shapeString(shape) + ", but its program reads " +
                           dtypeName(type.dtype()) + " " + shapeString(read));
  }
  run.outputs.clear();
  run.outputMemory.clear();
  run.outputMemory.resize(size_t(program.outputs_size()));
  for (int i = 0; i < program.outputs_size(); ++i) {
    const program::Binding &binding = program.outputs(i);
    // A cache tensor's output is its input's memory, resident in the
    // executor: the program updates the cache in place.
    if (isResident(manifest, binding.name()))
      continue;
    if (binding.buffer() < 0 || binding.buffer() >= program.buffers_size())
      return Status::error(where + ": output '" + binding.name() +
                           "' has no buffer");
    const program::TensorType &type = program.buffers(binding.buffer()).type();
    HostTensor &memory = run.outputMemory[size_t(i)];
    Status allocated = memory.allocate(
        type.dtype(), {type.shape().begin(), type.shape().end()});
    if (!allocated)
      return Status::error(where + ": output '" + binding.name() +
                           "': " + allocated.message());
    run.outputs.push_back({binding.name(), memory.tensor()});
  }
  return Status::ok();
}

Status partita::runtime::bindRankInputs(const LoadedArtifact &artifact,
                                        int32_t rank,
                                        const std::vector<NamedTensor> &inputs,
                                        RankRun &run) {
  const Manifest &manifest = artifact.manifest();
  const program::Program &program = artifact.program(rank);
  run.inputs.clear();
  run.inputMemory.clear();
  run.inputMemory.reserve(size_t(program.inputs_size()));
  for (const program::Binding &binding : program.inputs()) {
    if (isResident(manifest, binding.name()))
      continue; // Resident in the executor (prepareRank).
    const TensorSpec *spec = findSpec(manifest.inputs, binding.name());
    auto given = std::find_if(
        inputs.begin(), inputs.end(),
        [&](const NamedTensor &named) { return named.name == binding.name(); });
    if (!spec || given == inputs.end())
      return Status::error("rank " + std::to_string(rank) + " reads input '" +
                           binding.name() + "', which was not given");
    if (spec->sharding.isReplicated()) {
      run.inputs.push_back({binding.name(), given->tensor});
      continue;
    }
    HostTensor shard;
    Status extracted =
        extractShard(given->tensor, spec->sharding, manifest, rank, shard);
    if (!extracted)
      return Status::error("input '" + binding.name() +
                           "': " + extracted.message());
    run.inputs.push_back({binding.name(), shard.tensor()});
    run.inputMemory.push_back(std::move(shard));
  }
  return Status::ok();
}

namespace {

/// The cache tensors `rank`'s programs bind, each with the rank's block
/// shape: a pipeline stage holds the cache of its own layers.
Status rankCacheBlocks(
    const LoadedArtifact &artifact, int32_t rank,
    std::vector<std::pair<const TensorSpec *, std::vector<int64_t>>> &blocks) {
  const Manifest &manifest = artifact.manifest();
  blocks.clear();
  std::set<std::string> bound;
  for (const program::Program *program :
       {&artifact.program(rank), artifact.decodeProgram(rank)})
    for (int i = 0; program && i < program->inputs_size(); ++i)
      bound.insert(program->inputs(i).name());
  for (const TensorSpec *residentSpec : residentSpecs(manifest)) {
    const TensorSpec &spec = *residentSpec;
    if (!bound.count(spec.name))
      continue;
    std::vector<int64_t> shape;
    Status located = localShape(spec, manifest, rank, shape);
    if (!located)
      return Status::error("rank " + std::to_string(rank) + ": cache '" +
                           spec.name + "': " + located.message());
    blocks.emplace_back(&spec, std::move(shape));
  }
  return Status::ok();
}

/// Zeroes `bytes` of `device`'s memory at `memory` (through copies of a
/// zero block: the Device interface has no fill) and waits for it.
Status zeroOnDevice(Device &device, void *memory, size_t bytes) {
  static const std::vector<char> zeros(size_t(1) << 20, 0);
  for (size_t done = 0; done < bytes; done += zeros.size())
    PARTITA_RETURN_IF_ERROR(
        device.copyToDevice(static_cast<char *>(memory) + done, zeros.data(),
                            std::min(zeros.size(), bytes - done)));
  return device.synchronize();
}

} // namespace

Status partita::runtime::allocateRankCache(const LoadedArtifact &artifact,
                                           int32_t rank,
                                           std::vector<HostTensor> &memory,
                                           std::vector<NamedTensor> &states) {
  memory.clear();
  states.clear();
  std::vector<std::pair<const TensorSpec *, std::vector<int64_t>>> blocks;
  PARTITA_RETURN_IF_ERROR(rankCacheBlocks(artifact, rank, blocks));
  memory.reserve(blocks.size());
  for (const auto &[spec, shape] : blocks) {
    Status allocated = memory.emplace_back().allocate(spec->dtype, shape);
    if (!allocated)
      return Status::error("rank " + std::to_string(rank) + ": cache '" +
                           spec->name + "': " + allocated.message());
    Tensor block = memory.back().tensor();
    std::string weight = initialWeightOf(artifact.program(rank), spec->name);
    if (!weight.empty()) {
      const Tensor *initial = nullptr;
      PARTITA_RETURN_IF_ERROR(
          initialValue(artifact, rank, spec->name, weight, block, initial));
      std::memcpy(block.data, initial->data, block.byteSize());
    }
    states.push_back({spec->name, block});
  }
  return Status::ok();
}

Status partita::runtime::allocateRankDeviceCache(
    const LoadedArtifact &artifact, int32_t rank, Device &device,
    std::vector<void *> &memory, std::vector<NamedTensor> &states) {
  states.clear();
  std::vector<std::pair<const TensorSpec *, std::vector<int64_t>>> blocks;
  PARTITA_RETURN_IF_ERROR(rankCacheBlocks(artifact, rank, blocks));
  for (const auto &[spec, shape] : blocks) {
    Tensor tensor{nullptr, spec->dtype, shape};
    size_t bytes = tensor.byteSize();
    void *block = nullptr;
    Status allocated =
        bytes == 0 ? Status::ok()
                   : device.allocate((bytes + 255) / 256 * 256, 256, &block);
    if (allocated && block)
      memory.push_back(block);
    std::string weight = initialWeightOf(artifact.program(rank), spec->name);
    if (allocated && block && weight.empty())
      allocated = zeroOnDevice(device, block, bytes);
    if (allocated && block && !weight.empty()) {
      const Tensor *initial = nullptr;
      allocated = initialValue(artifact, rank, spec->name, weight,
                               Tensor{block, spec->dtype, shape}, initial);
      if (allocated)
        allocated = device.copyToDevice(block, initial->data, bytes);
      if (allocated)
        allocated = device.synchronize();
    }
    if (!allocated)
      return Status::error("rank " + std::to_string(rank) + ": cache '" +
                           spec->name + "' on " + device.name() + ": " +
                           allocated.message());
    tensor.data = block;
    states.push_back({spec->name, tensor});
  }
  return Status::ok();
}

Status partita::runtime::runRanks(std::vector<RankRun> &runs) {
  std::vector<std::thread> threads;
  for (RankRun &run : runs)
    if (run.executor)
      threads.emplace_back(
          [&run] { run.status = run.executor->run(run.inputs, run.outputs); });
  for (std::thread &thread : threads)
    thread.join();
  std::string messages;
  for (const RankRun &run : runs)
    if (!run.status)
      messages += (messages.empty() ? "" : "\n  ") + run.status.message();
  return messages.empty() ? Status::ok() : Status::error(messages);
}

Status partita::runtime::planOutput(const Manifest &manifest,
                                    const TensorSpec &spec,
                                    const std::vector<RankRun> &runs,
                                    OutputPlan &plan) {
  std::string what = "output '" + spec.name + "'";
  plan.spec = &spec;
  plan.sharded = !spec.sharding.isReplicated();
  plan.shards.clear();
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const NamedTensor &named : runs[r].outputs)
      if (named.name == spec.name)
        plan.shards.emplace_back(int32_t(r), &named.tensor);
    if (!plan.sharded && !plan.shards.empty())
      break;
  }
  if (plan.shards.empty())
    return Status::error(what + " is produced by no rank");
  if (!plan.sharded) {
    const Tensor &found = *plan.shards[0].second;
    if (found.dtype != spec.dtype || found.shape != spec.shape)
      return Status::error(what + " is " + specString(spec) +
                           " in the manifest, but its rank produces " +
                           dtypeName(found.dtype) + " " +
                           shapeString(found.shape));
    return Status::ok();
  }

  // Every distinct shard must come from some rank, or part of the output
  // would silently stay zero.
  std::set<int64_t> covered;
  int64_t count = 1;
  for (const auto &[rank, tensor] : plan.shards) {
    std::vector<int64_t> shape;
    Status located = localShape(spec, manifest, rank, shape);
    if (!located)
      return Status::error(what + ": " + located.message());
    if (tensor->dtype != spec.dtype || tensor->shape != shape)
      return Status::error(
          what + " is " + specString(spec) + " in the manifest with sharding " +
          shardingString(spec.sharding) + ", so rank " + std::to_string(rank) +
          " should produce " + dtypeName(spec.dtype) + " " +
          shapeString(shape) + ", but it produces " + dtypeName(tensor->dtype) +
          " " + shapeString(tensor->shape));
    int64_t index = 0;
    Status indexed = shardIndex(spec.sharding, manifest, rank, index, count);
    if (!indexed)
      return Status::error(what + ": " + indexed.message());
    covered.insert(index);
  }
  if (int64_t(covered.size()) != count)
    return Status::error(what + " (sharding " + shardingString(spec.sharding) +
                         ") is split into " + std::to_string(count) +
                         " shards, but the ranks that produce it hold only " +
                         std::to_string(covered.size()) + " of them");
  return Status::ok();
}

Status partita::runtime::assembleOutput(const Manifest &manifest,
                                        const OutputPlan &plan,
                                        const Tensor &global) {
  const TensorSpec &spec = *plan.spec;
  if (global.dtype != spec.dtype || global.shape != spec.shape)
    return Status::error("output '" + spec.name + "': expected " +
                         specString(spec) + ", got " + dtypeName(global.dtype) +
                         " " + shapeString(global.shape));
  if (!plan.sharded) {
    const Tensor &source = *plan.shards[0].second;
    if (source.data != global.data)
      std::memcpy(global.data, source.data, global.byteSize());
    return Status::ok();
  }
  Tensor destination = global;
  for (const auto &[rank, tensor] : plan.shards) {
    Status inserted =
        insertShard(*tensor, spec.sharding, manifest, rank, destination);
    if (!inserted)
      return Status::error("output '" + spec.name + "': " + inserted.message());
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Runner
//===----------------------------------------------------------------------===//

Status partita::runtime::countGpus(const LoadedArtifact &artifact,
                                   int32_t &gpus) {
  std::string compiled = artifact.path() + " was compiled for --target cuda";
  if (!CudaDevice::available())
    return Status::error(compiled +
                         ", but this build of the Partita runtime has no CUDA "
                         "support (it was configured without the CUDA "
                         "toolkit)");
  Status counted = CudaDevice::deviceCount(gpus);
  if (!counted)
    return Status::error(compiled + ": " + counted.message());
  return Status::ok();
}

struct Runner::Impl {
  explicit Impl(const LoadedArtifact &artifact) : artifact(artifact) {
    prefill.artifact = &artifact;
    decode.artifact = artifact.decodeEntry();
  }
  /// Executors first, then the communicators, then the devices they use,
  /// then the store the communicators bootstrapped through.
  ~Impl() {
    for (Entry *entry : {&decode, &prefill})
      for (RankRun &run : entry->runs)
        run.executor.reset();
    for (size_t rank = 0; rank < deviceCache.size(); ++rank)
      for (void *block : deviceCache[rank])
        cacheDevices[rank]->deallocate(block);
    decodeDevices.clear();
    nccl.reset();
    cudaRanks.reset();
    host.reset();
    for (RankRun &run : prefill.runs)
      run.device.reset();
    store.reset();
  }

  /// One program per rank and what runs them: the artifact's programs (a
  /// serving artifact's prefill), or a serving artifact's decode programs.
  struct Entry {
    /// The artifact, or its decode entry (LoadedArtifact::decodeEntry).
    const LoadedArtifact *artifact = nullptr;
    std::vector<RankRun> runs;
    /// One per output of the entry, in its order (every rank in this
    /// process).
    std::vector<OutputPlan> plans;
    /// For each replicated output (null for a sharded one), the tensor its
    /// source rank writes, rebound to the caller's memory by a run, and the
    /// rank's own memory it writes otherwise.
    std::vector<Tensor *> replicatedSources;
    std::vector<void *> replicatedMemory;

    const Manifest &manifest() const { return artifact->manifest(); }
  };

  Status setUpHost(const RunnerOptions &options);
  Status setUpCuda(const RunnerOptions &options);
  /// A cuda artifact on the caller's devices (RunnerOptions::devices) over
  /// a HostWorld.
  Status setUpDevices(const RunnerOptions &options);
  /// The decode entry of a cuda artifact, on the prefill's devices and
  /// communicators (`communicator(rank)`), after the prefill's set-up.
  Status
  setUpCudaDecode(const RunnerOptions &options,
                  const std::function<Communicator &(int32_t)> &communicator);
  Status setUpJoined(const RunnerOptions &options,
                     const RankEnvironment &environment);
  /// Gives `run` of `rank` its KV cache (serving artifacts; a no-op
  /// otherwise): allocated here, once, in host memory, or in the memory
  /// of `device` when it has memory of its own (zeroed there, and never
  /// staged).
  Status allocateCache(int32_t rank, RankRun &run, Device *device = nullptr);
  /// Plans the entry's outputs from the ranks' bound outputs (all in this
  /// process).
  Status planOutputs(Entry &entry);
  /// Binds `inputs`, already matched against the entry's manifest, and runs
  /// the ranks this process holds.
  Status bindAndRun(Entry &entry, const std::vector<NamedTensor> &inputs);
  /// Runs every rank of `entry` in this process on the global tensors.
  Status runInProcess(Entry &entry, const std::vector<NamedTensor> &inputs,
                      const std::vector<NamedTensor> &outputs);
  Status gatherOutputs(const std::vector<NamedTensor> &outputs);
  /// A joined rank's part of gatherOutputs: rank 0 receives every other
  /// rank's outputs into its runs, the others send theirs.
  Status exchangeOutputs();

  const LoadedArtifact &artifact;
  std::unique_ptr<HostWorld> host;
  std::unique_ptr<CudaRankWorld> cudaRanks;
  std::unique_ptr<TcpStore> store;
  std::unique_ptr<NcclCommunicator> nccl;
  /// This process's rank in a joined run; -1 when it holds every rank.
  int32_t joinedRank = -1;
  /// gatherOutputs calls so far, so a joined rank 0 never reads an earlier
  /// call's outputs from the store.
  int64_t gathers = 0;
  Entry prefill;
  /// A serving artifact's decode programs on a host target (empty
  /// otherwise), run on the prefill's communicators and thread pools
  /// (through `decodeDevices`): the two never run at once.
  Entry decode;
  std::vector<std::unique_ptr<HostDevice>> decodeDevices;
  /// Each rank's KV cache (serving artifacts), bound by both entries: in
  /// host memory, or in device memory of `cacheDevices[rank]`.
  std::vector<std::vector<HostTensor>> cacheMemory;
  std::vector<std::vector<void *>> deviceCache;
  std::vector<Device *> cacheDevices;
  /// The views of each rank's cache (RankRun::states of both entries).
  std::vector<std::vector<NamedTensor>> cacheViews;
  std::mutex running;
};

Status Runner::Impl::allocateCache(int32_t rank, RankRun &run, Device *device) {
  size_t r = size_t(rank);
  if (deviceCache.size() < cacheMemory.size()) {
    deviceCache.resize(cacheMemory.size());
    cacheDevices.resize(cacheMemory.size(), nullptr);
    cacheViews.resize(cacheMemory.size());
  }
  if (device && !device->sharesHostMemory()) {
    cacheDevices[r] = device;
    PARTITA_RETURN_IF_ERROR(allocateRankDeviceCache(
        artifact, rank, *device, deviceCache[r], run.states));
  } else {
    PARTITA_RETURN_IF_ERROR(
        allocateRankCache(artifact, rank, cacheMemory[r], run.states));
  }
  cacheViews[r] = run.states;
  return Status::ok();
}

Status Runner::Impl::setUpCudaDecode(
    const RunnerOptions &options,
    const std::function<Communicator &(int32_t)> &communicator) {
  if (!decode.artifact)
    return Status::ok();
  int32_t worldSize = artifact.manifest().worldSize;
  decode.runs.resize(size_t(worldSize));
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &first = prefill.runs[size_t(rank)];
    RankRun &run = decode.runs[size_t(rank)];
    if (first.device) {
      // The decode module beside the prefill's (its functions are named
      // apart): both programs run on the rank's one device and cache.
      std::string image;
      Status loaded = readCudaModule(artifact, rank, image, /*decode=*/true);
      if (loaded)
        loaded = first.device->loadModule(image);
      if (!loaded)
        return Status::error("rank " + std::to_string(rank) +
                             ": decode: " + loaded.message());
      run.externalDevice = first.device.get();
    } else {
      run.externalDevice = first.externalDevice;
    }
    run.states = first.states;
    PARTITA_RETURN_IF_ERROR(prepareRank(*decode.artifact, rank,
                                        communicator(rank),
                                        options.threadsPerRank, run));
  }
  return Status::ok();
}

Status Runner::Impl::setUpDevices(const RunnerOptions &options) {
  int32_t worldSize = artifact.manifest().worldSize;
  if (options.devices.size() != size_t(worldSize))
    return Status::error("RunnerOptions::devices has " +
                         std::to_string(options.devices.size()) +
                         " devices for the " + std::to_string(worldSize) +
                         " ranks of " + artifact.path());
  host =
      std::make_unique<HostWorld>(worldSize, timeoutOf(options.timeoutSeconds));
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &run = prefill.runs[size_t(rank)];
    run.externalDevice = options.devices[size_t(rank)];
    if (!run.externalDevice)
      return Status::error("RunnerOptions::devices: rank " +
                           std::to_string(rank) + " has no device");
    PARTITA_RETURN_IF_ERROR(allocateCache(rank, run, run.externalDevice));
    PARTITA_RETURN_IF_ERROR(prepareRank(
        artifact, rank, host->communicator(rank), options.threadsPerRank, run));
  }
  return setUpCudaDecode(options, [&](int32_t rank) -> Communicator & {
    return host->communicator(rank);
  });
}

Status Runner::Impl::setUpHost(const RunnerOptions &options) {
  int32_t worldSize = artifact.manifest().worldSize;
  host =
      std::make_unique<HostWorld>(worldSize, timeoutOf(options.timeoutSeconds));
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &run = prefill.runs[size_t(rank)];
    PARTITA_RETURN_IF_ERROR(allocateCache(rank, run));
    PARTITA_RETURN_IF_ERROR(prepareRank(
        artifact, rank, host->communicator(rank), options.threadsPerRank, run));
  }
  if (!decode.artifact)
    return Status::ok();
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &first = prefill.runs[size_t(rank)];
    RankRun &run = decode.runs[size_t(rank)];
    decodeDevices.push_back(std::make_unique<HostDevice>(*first.pool));
    run.externalDevice = decodeDevices.back().get();
    run.states = first.states;
    PARTITA_RETURN_IF_ERROR(prepareRank(*decode.artifact, rank,
                                        host->communicator(rank),
                                        options.threadsPerRank, run));
  }
  return Status::ok();
}

Status Runner::Impl::setUpCuda(const RunnerOptions &options) {
  int32_t worldSize = artifact.manifest().worldSize;
  if (worldSize > 1 && !options.singleGpu)
    return Status::error(artifact.path() +
                         " was compiled for --target cuda "
                         "with " +
                         std::to_string(worldSize) +
                         " ranks, one process per GPU: run it with "
                         "partita-run, or run every rank on GPU 0 with "
                         "singleGpu");
  int32_t gpus = 0;
  PARTITA_RETURN_IF_ERROR(countGpus(artifact, gpus));
  std::chrono::milliseconds timeout = timeoutOf(options.timeoutSeconds);
  CudaDeviceOptions deviceOptions;
  deviceOptions.timeout = timeout;
  // Every rank as a thread with a device (streams) of its own on GPU 0.
  std::vector<CudaDevice *> devices;
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &run = prefill.runs[size_t(rank)];
    Status created = CudaDevice::create(0, deviceOptions, run.device);
    if (!created)
      return Status::error("rank " + std::to_string(rank) + ": " +
                           created.message());
    devices.push_back(run.device.get());
  }
  PARTITA_RETURN_IF_ERROR(CudaRankWorld::create(devices, timeout, cudaRanks));
  // The cache lives in each rank's GPU memory, shared by its prefill and
  // decode executors and never staged.
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &run = prefill.runs[size_t(rank)];
    PARTITA_RETURN_IF_ERROR(allocateCache(rank, run, run.device.get()));
    PARTITA_RETURN_IF_ERROR(prepareRank(artifact, rank,
                                        cudaRanks->communicator(rank),
                                        options.threadsPerRank, run));
  }
  return setUpCudaDecode(options, [&](int32_t rank) -> Communicator & {
    return cudaRanks->communicator(rank);
  });
}

Status Runner::Impl::setUpJoined(const RunnerOptions &options,
                                 const RankEnvironment &environment) {
  int32_t worldSize = artifact.manifest().worldSize;
  if (environment.worldSize != worldSize)
    return Status::error("the environment (" + environment.source + ") runs " +
                         std::to_string(environment.worldSize) +
                         " ranks, but " + artifact.path() + " has " +
                         std::to_string(worldSize));
  int32_t rank = environment.rank;
  if (rank < 0 || rank >= worldSize)
    return Status::error("the environment (" + environment.source +
                         ") names rank " + std::to_string(rank) + " of " +
                         std::to_string(worldSize));
  int32_t gpus = 0;
  PARTITA_RETURN_IF_ERROR(countGpus(artifact, gpus));
  if (environment.localRank >= gpus)
    return Status::error("rank " + std::to_string(rank) + " is local rank " +
                         std::to_string(environment.localRank) +
                         " on its node, which has " + std::to_string(gpus) +
                         " GPU" + (gpus == 1 ? "" : "s"));
  joinedRank = rank;
  std::chrono::milliseconds timeout = timeoutOf(options.timeoutSeconds);
  CudaDeviceOptions deviceOptions;
  deviceOptions.timeout = timeout;
  RankRun &run = prefill.runs[size_t(rank)];
  std::string where = "rank " + std::to_string(rank) + ": ";
  Status created =
      CudaDevice::create(environment.localRank, deviceOptions, run.device);
  if (!created)
    return Status::error(where + created.message());
  Status stored =
      rank == 0 ? TcpStore::serve(environment.masterPort, timeout, store)
                : TcpStore::connect(environment.masterAddress,
                                    environment.masterPort, timeout, store);
  if (!stored)
    return Status::error(where + stored.message());
  std::vector<const program::Program *> programs;
  for (int32_t r = 0; r < worldSize; ++r)
    programs.push_back(&artifact.program(r));
  PARTITA_RETURN_IF_ERROR(
      NcclCommunicator::create(*run.device, *store, rank, worldSize,
                               collectGroups(programs), timeout, nccl));
  return prepareRank(artifact, rank, *nccl, options.threadsPerRank, run);
}

Status Runner::Impl::planOutputs(Entry &entry) {
  const Manifest &manifest = entry.manifest();
  // The ranks' output memory lives as long as the runner, so each output's
  // sources (and the coverage of a sharded one) are checked once, here.
  entry.plans.resize(manifest.outputs.size());
  entry.replicatedSources.assign(manifest.outputs.size(), nullptr);
  entry.replicatedMemory.assign(manifest.outputs.size(), nullptr);
  for (size_t i = 0; i < manifest.outputs.size(); ++i) {
    OutputPlan &plan = entry.plans[i];
    PARTITA_RETURN_IF_ERROR(
        planOutput(manifest, manifest.outputs[i], entry.runs, plan));
    if (plan.sharded)
      continue;
    for (NamedTensor &named : entry.runs[size_t(plan.shards[0].first)].outputs)
      if (&named.tensor == plan.shards[0].second) {
        entry.replicatedSources[i] = &named.tensor;
        entry.replicatedMemory[i] = named.tensor.data;
      }
  }
  return Status::ok();
}

namespace {

std::string outputKey(int64_t gather, int32_t rank, const std::string &name) {
  return "partita/output/" + std::to_string(gather) + "/" +
         std::to_string(rank) + "/" + name;
}

} // namespace

Status Runner::Impl::exchangeOutputs() {
  int64_t gather = gathers++;
  std::vector<RankRun> &runs = prefill.runs;
  if (joinedRank > 0) {
    for (const NamedTensor &output : runs[size_t(joinedRank)].outputs)
      PARTITA_RETURN_IF_ERROR(
          store->set(outputKey(gather, joinedRank, output.name),
                     std::string(static_cast<const char *>(output.tensor.data),
                                 output.tensor.byteSize())));
    return Status::ok();
  }
  // Rank 0 receives into runs shaped as each rank's program binds them.
  for (int32_t rank = 1; rank < int32_t(runs.size()); ++rank) {
    const program::Program &program = artifact.program(rank);
    RankRun &run = runs[size_t(rank)];
    if (run.outputs.empty() && program.outputs_size() > 0) {
      run.outputMemory.resize(size_t(program.outputs_size()));
      for (int i = 0; i < program.outputs_size(); ++i) {
        const program::Binding &binding = program.outputs(i);
        if (binding.buffer() < 0 || binding.buffer() >= program.buffers_size())
          return Status::error("rank " + std::to_string(rank) + ": output '" +
                               binding.name() + "' has no buffer");
        const program::TensorType &type =
            program.buffers(binding.buffer()).type();
        HostTensor &memory = run.outputMemory[size_t(i)];
        PARTITA_RETURN_IF_ERROR(memory.allocate(
            type.dtype(), {type.shape().begin(), type.shape().end()}));
        run.outputs.push_back({binding.name(), memory.tensor()});
      }
    }
    for (NamedTensor &output : run.outputs) {
      std::string bytes;
      PARTITA_RETURN_IF_ERROR(
          store->get(outputKey(gather, rank, output.name), bytes));
      if (bytes.size() != output.tensor.byteSize())
        return Status::error(
            "rank " + std::to_string(rank) + " sent " +
            std::to_string(bytes.size()) + " bytes for output '" + output.name +
            "', expected " + std::to_string(output.tensor.byteSize()));
      std::memcpy(output.tensor.data, bytes.data(), bytes.size());
    }
  }
  return Status::ok();
}

Status Runner::Impl::bindAndRun(Entry &entry,
                                const std::vector<NamedTensor> &inputs) {
  for (size_t rank = 0; rank < entry.runs.size(); ++rank)
    if (entry.runs[rank].executor)
      PARTITA_RETURN_IF_ERROR(bindRankInputs(*entry.artifact, int32_t(rank),
                                             inputs, entry.runs[rank]));
  return runRanks(entry.runs);
}

Status Runner::Impl::runInProcess(Entry &entry,
                                  const std::vector<NamedTensor> &inputs,
                                  const std::vector<NamedTensor> &outputs) {
  const Manifest &manifest = entry.manifest();
  std::vector<const Tensor *> globalInputs, globalOutputs;
  PARTITA_RETURN_IF_ERROR(
      matchTensors(manifest.inputs, inputs, "input", globalInputs));
  PARTITA_RETURN_IF_ERROR(
      matchTensors(manifest.outputs, outputs, "output", globalOutputs));
  // A replicated output is written straight into the caller's memory by the
  // rank it comes from; the rank's own memory is used otherwise.
  for (size_t i = 0; i < entry.replicatedSources.size(); ++i)
    if (Tensor *source = entry.replicatedSources[i])
      source->data = globalOutputs[i]->data;
  PARTITA_RETURN_IF_ERROR(bindAndRun(entry, inputs));
  for (size_t i = 0; i < entry.plans.size(); ++i)
    PARTITA_RETURN_IF_ERROR(
        assembleOutput(manifest, entry.plans[i], *globalOutputs[i]));
  return Status::ok();
}

Status Runner::Impl::gatherOutputs(const std::vector<NamedTensor> &outputs) {
  const Manifest &manifest = artifact.manifest();
  std::vector<const Tensor *> ordered;
  if (joinedRank <= 0)
    PARTITA_RETURN_IF_ERROR(
        matchTensors(manifest.outputs, outputs, "output", ordered));
  if (joinedRank >= 0) {
    PARTITA_RETURN_IF_ERROR(exchangeOutputs());
    if (joinedRank > 0)
      return Status::ok();
    // Only now does rank 0 hold every rank's outputs to plan from.
    if (prefill.plans.empty())
      PARTITA_RETURN_IF_ERROR(planOutputs(prefill));
  }
  for (size_t i = 0; i < prefill.plans.size(); ++i)
    PARTITA_RETURN_IF_ERROR(
        assembleOutput(manifest, prefill.plans[i], *ordered[i]));
  return Status::ok();
}

Runner::Runner() = default;
Runner::~Runner() = default;

namespace {

/// What create and join check before setting anything up.
Status checkRunnable(const LoadedArtifact &artifact,
                     const RunnerOptions &options) {
  const Manifest &manifest = artifact.manifest();
  if (!(options.timeoutSeconds > 0) || options.timeoutSeconds > 1e6)
    return Status::error("the timeout must be a positive number of seconds "
                         "(at most 1e6), not " +
                         std::to_string(options.timeoutSeconds));
  if (options.threadsPerRank > kMaxThreadsPerRank)
    return Status::error("threads per rank must be at most " +
                         std::to_string(kMaxThreadsPerRank) + ", not " +
                         std::to_string(options.threadsPerRank));
  if (manifest.worldSize < 1)
    return Status::error(artifact.path() + " has no ranks");
  PARTITA_RETURN_IF_ERROR(checkOutputsAssemblable(manifest));
  if (const LoadedArtifact *decode = artifact.decodeEntry()) {
    Status assemblable = checkOutputsAssemblable(decode->manifest());
    if (!assemblable)
      return Status::error("decode " + assemblable.message());
  }
  return Status::ok();
}

} // namespace

Status Runner::create(const LoadedArtifact &artifact,
                      const RunnerOptions &options,
                      std::unique_ptr<Runner> &runner) {
  PARTITA_RETURN_IF_ERROR(checkRunnable(artifact, options));
  const Manifest &manifest = artifact.manifest();
  std::unique_ptr<Runner> created(new Runner());
  created->impl = std::make_unique<Impl>(artifact);
  Impl &impl = *created->impl;
  size_t worldSize = size_t(manifest.worldSize);
  impl.prefill.runs.resize(worldSize);
  impl.cacheMemory.resize(worldSize);
  if (manifest.target == "host") {
    if (!options.devices.empty())
      return Status::error("RunnerOptions::devices runs cuda artifacts; " +
                           artifact.path() + " was compiled for --target host");
    if (options.singleGpu)
      return Status::error("singleGpu runs cuda artifacts; " + artifact.path() +
                           " was compiled for --target host");
    if (impl.decode.artifact)
      impl.decode.runs.resize(worldSize);
    PARTITA_RETURN_IF_ERROR(impl.setUpHost(options));
  } else if (manifest.target == "cuda") {
    PARTITA_RETURN_IF_ERROR(options.devices.empty()
                                ? impl.setUpCuda(options)
                                : impl.setUpDevices(options));
  } else {
    return Status::error(artifact.path() +
                         " was compiled for an unknown target '" +
                         manifest.target + "'");
  }
  PARTITA_RETURN_IF_ERROR(impl.planOutputs(impl.prefill));
  if (impl.decode.artifact)
    PARTITA_RETURN_IF_ERROR(impl.planOutputs(impl.decode));
  runner = std::move(created);
  return Status::ok();
}

Status Runner::join(const LoadedArtifact &artifact,
                    const RunnerOptions &options,
                    const RankEnvironment &environment,
                    std::unique_ptr<Runner> &runner) {
  PARTITA_RETURN_IF_ERROR(checkRunnable(artifact, options));
  const Manifest &manifest = artifact.manifest();
  if (manifest.target != "cuda")
    return Status::error("a multi-process run needs a cuda artifact; " +
                         artifact.path() + " was compiled for --target " +
                         manifest.target);
  if (manifest.serving)
    return Status::error(artifact.path() +
                         " is a serving artifact (--max-seq), whose KV cache "
                         "stays in the ranks of one process: a multi-process "
                         "run does not hold it");
  if (options.singleGpu)
    return Status::error("singleGpu runs every rank in this process, but "
                         "the environment (" +
                         environment.source + ") makes it rank " +
                         std::to_string(environment.rank) + " of " +
                         std::to_string(environment.worldSize));
  std::unique_ptr<Runner> created(new Runner());
  created->impl = std::make_unique<Impl>(artifact);
  created->impl->prefill.runs.resize(size_t(manifest.worldSize));
  created->impl->cacheMemory.resize(size_t(manifest.worldSize));
  PARTITA_RETURN_IF_ERROR(created->impl->setUpJoined(options, environment));
  runner = std::move(created);
  return Status::ok();
}

const Manifest &Runner::manifest() const { return impl->artifact.manifest(); }

bool Runner::holdsOutputs() const { return impl->joinedRank <= 0; }

Status Runner::execute(const std::vector<NamedTensor> &inputs) {
  std::lock_guard<std::mutex> lock(impl->running);
  Impl::Entry &entry = impl->prefill;
  std::vector<const Tensor *> ordered;
  PARTITA_RETURN_IF_ERROR(
      matchTensors(manifest().inputs, inputs, "input", ordered));
  // Outputs land in the ranks' own memory, whatever an earlier run() bound.
  for (size_t i = 0; i < entry.replicatedSources.size(); ++i)
    if (Tensor *source = entry.replicatedSources[i])
      source->data = entry.replicatedMemory[i];
  return impl->bindAndRun(entry, inputs);
}

Status Runner::gatherOutputs(const std::vector<NamedTensor> &outputs) {
  std::lock_guard<std::mutex> lock(impl->running);
  return impl->gatherOutputs(outputs);
}

Status Runner::run(const std::vector<NamedTensor> &inputs,
                   const std::vector<NamedTensor> &outputs) {
  if (impl->joinedRank >= 0) {
    PARTITA_RETURN_IF_ERROR(execute(inputs));
    return gatherOutputs(outputs);
  }
  std::lock_guard<std::mutex> lock(impl->running);
  return impl->runInProcess(impl->prefill, inputs, outputs);
}

Status Runner::runDecode(const std::vector<NamedTensor> &inputs,
                         const std::vector<NamedTensor> &outputs) {
  const LoadedArtifact &artifact = impl->artifact;
  if (!artifact.manifest().serving)
    return Status::error(artifact.path() +
                         " was not compiled with --max-seq: it has no decode "
                         "program");
  PARTITA_RETURN_IF_ERROR(checkDecodeTarget(artifact.manifest()));
  std::lock_guard<std::mutex> lock(impl->running);
  return impl->runInProcess(impl->decode, inputs, outputs);
}

Status Runner::resetCache() {
  std::lock_guard<std::mutex> lock(impl->running);
  if (manifest().training)
    return Status::error("a training artifact's ranks hold its parameters, "
                         "not a KV cache: there is nothing to reset");
  for (std::vector<HostTensor> &cache : impl->cacheMemory)
    for (HostTensor &tensor : cache)
      if (tensor.byteSize() > 0)
        std::memset(tensor.data(), 0, tensor.byteSize());
  for (size_t rank = 0; rank < impl->cacheDevices.size(); ++rank)
    if (Device *device = impl->cacheDevices[rank])
      for (const NamedTensor &state : impl->cacheViews[rank])
        if (state.tensor.byteSize() > 0)
          PARTITA_RETURN_IF_ERROR(zeroOnDevice(*device, state.tensor.data,
                                               state.tensor.byteSize()));
  return Status::ok();
}

/// `rank`'s block of resident tensor `name`, and the device holding it
/// (null: host memory).
static Status findResident(const std::vector<std::vector<NamedTensor>> &views,
                           const std::vector<Device *> &devices, int32_t rank,
                           const std::string &name, const Tensor *&block,
                           Device *&device) {
  if (rank < 0 || size_t(rank) >= views.size())
    return Status::error("rank " + std::to_string(rank) +
                         " is not held by this process");
  block = stateOf(views[size_t(rank)], name);
  if (!block)
    return Status::error("rank " + std::to_string(rank) + " holds no '" + name +
                         "'");
  device = size_t(rank) < devices.size() ? devices[size_t(rank)] : nullptr;
  return Status::ok();
}

Status Runner::readResident(int32_t rank, const std::string &name,
                            HostTensor &out) const {
  std::lock_guard<std::mutex> lock(impl->running);
  const Tensor *block = nullptr;
  Device *device = nullptr;
  PARTITA_RETURN_IF_ERROR(findResident(impl->cacheViews, impl->cacheDevices,
                                       rank, name, block, device));
  PARTITA_RETURN_IF_ERROR(out.allocate(block->dtype, block->shape));
  if (block->byteSize() == 0)
    return Status::ok();
  if (!device) {
    std::memcpy(out.data(), block->data, block->byteSize());
    return Status::ok();
  }
  PARTITA_RETURN_IF_ERROR(
      device->copyToHost(out.data(), block->data, block->byteSize()));
  return device->synchronize();
}

Status Runner::writeResident(int32_t rank, const std::string &name,
                             const Tensor &in) {
  std::lock_guard<std::mutex> lock(impl->running);
  const Tensor *block = nullptr;
  Device *device = nullptr;
  PARTITA_RETURN_IF_ERROR(findResident(impl->cacheViews, impl->cacheDevices,
                                       rank, name, block, device));
  if (in.dtype != block->dtype || in.shape != block->shape)
    return Status::error("'" + name + "' of rank " + std::to_string(rank) +
                         " is " + dtypeName(block->dtype) + " " +
                         shapeString(block->shape) + ", not " +
                         dtypeName(in.dtype) + " " + shapeString(in.shape));
  if (block->byteSize() == 0)
    return Status::ok();
  if (!device) {
    std::memcpy(block->data, in.data, block->byteSize());
    return Status::ok();
  }
  PARTITA_RETURN_IF_ERROR(
      device->copyToDevice(block->data, in.data, block->byteSize()));
  return device->synchronize();
}

uint64_t Runner::cacheBytes() const {
  uint64_t bytes = 0;
  for (const std::vector<NamedTensor> &cache : impl->cacheViews)
    for (const NamedTensor &state : cache)
      bytes += state.tensor.byteSize();
  return bytes;
}

std::vector<std::pair<int32_t, Executor::DispatchStats>>
Runner::dispatchStats() const {
  std::map<int32_t, Executor::DispatchStats> byRank;
  for (const Impl::Entry *entry : {&impl->prefill, &impl->decode})
    for (size_t i = 0; i < entry->runs.size(); ++i) {
      const RankRun &run = entry->runs[i];
      if (!run.executor || run.executor->dispatchStats().exchanges == 0)
        continue;
      const Executor::DispatchStats &stats = run.executor->dispatchStats();
      // Runs are indexed by global rank, a joined process's too.
      Executor::DispatchStats &sum = byRank[int32_t(i)];
      sum.exchanges += stats.exchanges;
      sum.rowsReceived += stats.rowsReceived;
      sum.bytesSent += stats.bytesSent;
    }
  return {byRank.begin(), byRank.end()};
}

Status partita::runtime::checkDecodeTarget(const Manifest &manifest) {
  // The cuda executors hold the cache resident in device memory (the
  // Runner allocates it there), so it never moves between tokens.
  if (manifest.target == "host" || manifest.target == "cuda")
    return Status::ok();
  return Status::error("decoding runs serving artifacts of --target host or "
                       "cuda, not '" +
                       manifest.target + "'");
}
