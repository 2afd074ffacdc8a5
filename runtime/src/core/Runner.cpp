//===- Runner.cpp - every rank of an artifact in one process --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Runner.h"

#include "partita/runtime/CudaDevice.h"
#include "partita/runtime/CudaMultiRankCommunicator.h"
#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/HostKernels.h"
#include "partita/runtime/Sharding.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

std::string specString(const TensorSpec &spec) {
  return dtypeName(spec.dtype) + " " + shapeString(spec.shape);
}

const TensorSpec *findSpec(const std::vector<TensorSpec> &specs,
                           const std::string &name) {
  auto it = std::find_if(
      specs.begin(), specs.end(),
      [&](const TensorSpec &candidate) { return candidate.name == name; });
  return it == specs.end() ? nullptr : &*it;
}

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
    if (!spec) {
      std::string known;
      for (const TensorSpec &candidate : specs)
        known += (known.empty() ? "" : ", ") + candidate.name + " (" +
                 specString(candidate) + ")";
      return Status::error("the model has no " + kind + " '" + named.name +
                           "'; its " + kind + "s are: " + known);
    }
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

} // namespace

//===----------------------------------------------------------------------===//
// Building blocks
//===----------------------------------------------------------------------===//

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

Status partita::runtime::prepareRank(const Artifact &artifact, int32_t rank,
                                     Communicator &communicator,
                                     unsigned threads, RankRun &run) {
  const Manifest &manifest = artifact.manifest();
  const program::Program &program = artifact.program(rank);
  std::string where = "rank " + std::to_string(rank);
  if (run.externalDevice) {
    PARTITA_RETURN_IF_ERROR(Executor::create(program, artifact.weights(),
                                             communicator, *run.externalDevice,
                                             run.executor));
  } else if (run.device) {
    std::string image;
    Status loaded = readCudaModule(artifact, rank, image);
    if (loaded)
      loaded = run.device->loadModule(image);
    if (!loaded)
      return Status::error(where + ": " + loaded.message());
    PARTITA_RETURN_IF_ERROR(Executor::create(
        program, artifact.weights(), communicator, *run.device, run.executor));
  } else {
    if (threads == 0)
      threads = std::max(1u, std::thread::hardware_concurrency() /
                                 unsigned(std::max(manifest.worldSize, 1)));
    run.pool = std::make_unique<ThreadPool>(threads);
    PARTITA_RETURN_IF_ERROR(Executor::create(
        program, artifact.weights(), communicator, *run.pool, run.executor));
  }
  for (const program::Binding &binding : program.inputs()) {
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

Status partita::runtime::bindRankInputs(const Artifact &artifact, int32_t rank,
                                        const std::vector<NamedTensor> &inputs,
                                        RankRun &run) {
  const Manifest &manifest = artifact.manifest();
  const program::Program &program = artifact.program(rank);
  run.inputs.clear();
  run.inputMemory.clear();
  run.inputMemory.reserve(size_t(program.inputs_size()));
  for (const program::Binding &binding : program.inputs()) {
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

struct Runner::Impl {
  explicit Impl(const Artifact &artifact) : artifact(artifact) {}
  /// Executors first, then the communicators, then the devices they use.
  ~Impl() {
    for (RankRun &run : runs)
      run.executor.reset();
    cudaRanks.reset();
    host.reset();
    for (RankRun &run : runs)
      run.device.reset();
  }

  Status setUpHost(const RunnerOptions &options);
  Status setUpCuda(const RunnerOptions &options);

  const Artifact &artifact;
  std::unique_ptr<HostWorld> host;
  std::unique_ptr<CudaRankWorld> cudaRanks;
  std::vector<RankRun> runs;
  /// One per manifest output, in its order.
  std::vector<OutputPlan> plans;
  /// For each replicated output (null for a sharded one), the tensor its
  /// source rank writes, rebound to the caller's memory on every run.
  std::vector<Tensor *> replicatedSources;
  std::mutex running;
};

Status Runner::Impl::setUpHost(const RunnerOptions &options) {
  int32_t worldSize = artifact.manifest().worldSize;
  host =
      std::make_unique<HostWorld>(worldSize, timeoutOf(options.timeoutSeconds));
  for (int32_t rank = 0; rank < worldSize; ++rank)
    PARTITA_RETURN_IF_ERROR(
        prepareRank(artifact, rank, host->communicator(rank),
                    options.threadsPerRank, runs[size_t(rank)]));
  return Status::ok();
}

Status Runner::Impl::setUpCuda(const RunnerOptions &options) {
  int32_t worldSize = artifact.manifest().worldSize;
  std::string compiled = artifact.path() + " was compiled for --target cuda";
  if (worldSize > 1 && !options.singleGpu)
    return Status::error(compiled + " with " + std::to_string(worldSize) +
                         " ranks, one process per GPU: run it with "
                         "partita-run, or run every rank on GPU 0 with "
                         "singleGpu");
  if (!CudaDevice::available())
    return Status::error(compiled +
                         ", but this build of the Partita runtime has no CUDA "
                         "support (it was configured without the CUDA "
                         "toolkit)");
  int32_t gpus = 0;
  Status counted = CudaDevice::deviceCount(gpus);
  if (!counted)
    return Status::error(compiled + ": " + counted.message());
  std::chrono::milliseconds timeout = timeoutOf(options.timeoutSeconds);
  CudaDeviceOptions deviceOptions;
  deviceOptions.timeout = timeout;
  // Every rank as a thread with a device (streams) of its own on GPU 0.
  std::vector<CudaDevice *> devices;
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &run = runs[size_t(rank)];
    Status created = CudaDevice::create(0, deviceOptions, run.device);
    if (!created)
      return Status::error("rank " + std::to_string(rank) + ": " +
                           created.message());
    devices.push_back(run.device.get());
  }
  PARTITA_RETURN_IF_ERROR(CudaRankWorld::create(devices, timeout, cudaRanks));
  for (int32_t rank = 0; rank < worldSize; ++rank)
    PARTITA_RETURN_IF_ERROR(
        prepareRank(artifact, rank, cudaRanks->communicator(rank),
                    options.threadsPerRank, runs[size_t(rank)]));
  return Status::ok();
}

Runner::Runner() = default;
Runner::~Runner() = default;

Status Runner::create(const Artifact &artifact, const RunnerOptions &options,
                      std::unique_ptr<Runner> &runner) {
  const Manifest &manifest = artifact.manifest();
  if (!(options.timeoutSeconds > 0) || options.timeoutSeconds > 1e6)
    return Status::error("the timeout must be a positive number of seconds "
                         "(at most 1e6), not " +
                         std::to_string(options.timeoutSeconds));
  if (manifest.worldSize < 1)
    return Status::error(artifact.path() + " has no ranks");
  PARTITA_RETURN_IF_ERROR(checkOutputsAssemblable(manifest));

  std::unique_ptr<Runner> created(new Runner());
  created->impl = std::make_unique<Impl>(artifact);
  Impl &impl = *created->impl;
  impl.runs.resize(size_t(manifest.worldSize));
  if (manifest.target == "host") {
    if (options.singleGpu)
      return Status::error("singleGpu runs cuda artifacts; " + artifact.path() +
                           " was compiled for --target host");
    PARTITA_RETURN_IF_ERROR(impl.setUpHost(options));
  } else if (manifest.target == "cuda") {
    PARTITA_RETURN_IF_ERROR(impl.setUpCuda(options));
  } else {
    return Status::error(artifact.path() +
                         " was compiled for an unknown target '" +
                         manifest.target + "'");
  }
  // The ranks' output memory lives as long as the runner, so each output's
  // sources (and the coverage of a sharded one) are checked once, here.
  impl.plans.resize(manifest.outputs.size());
  impl.replicatedSources.assign(manifest.outputs.size(), nullptr);
  for (size_t i = 0; i < manifest.outputs.size(); ++i) {
    OutputPlan &plan = impl.plans[i];
    PARTITA_RETURN_IF_ERROR(
        planOutput(manifest, manifest.outputs[i], impl.runs, plan));
    if (plan.sharded)
      continue;
    for (NamedTensor &named : impl.runs[size_t(plan.shards[0].first)].outputs)
      if (&named.tensor == plan.shards[0].second)
        impl.replicatedSources[i] = &named.tensor;
  }
  runner = std::move(created);
  return Status::ok();
}

const Manifest &Runner::manifest() const { return impl->artifact.manifest(); }

Status Runner::run(const std::vector<NamedTensor> &inputs,
                   const std::vector<NamedTensor> &outputs) {
  std::lock_guard<std::mutex> lock(impl->running);
  const Manifest &manifest = impl->artifact.manifest();
  std::vector<const Tensor *> globalInputs, globalOutputs;
  PARTITA_RETURN_IF_ERROR(
      matchTensors(manifest.inputs, inputs, "input", globalInputs));
  PARTITA_RETURN_IF_ERROR(
      matchTensors(manifest.outputs, outputs, "output", globalOutputs));
  for (size_t rank = 0; rank < impl->runs.size(); ++rank)
    PARTITA_RETURN_IF_ERROR(bindRankInputs(impl->artifact, int32_t(rank),
                                           inputs, impl->runs[rank]));
  // A replicated output is written straight into the caller's memory by the
  // rank it comes from; the rank's own memory is used otherwise.
  for (size_t i = 0; i < impl->replicatedSources.size(); ++i)
    if (Tensor *source = impl->replicatedSources[i])
      source->data = globalOutputs[i]->data;
  PARTITA_RETURN_IF_ERROR(runRanks(impl->runs));
  for (size_t i = 0; i < impl->plans.size(); ++i)
    PARTITA_RETURN_IF_ERROR(
        assembleOutput(manifest, impl->plans[i], *globalOutputs[i]));
  return Status::ok();
}
