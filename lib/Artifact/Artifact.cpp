//===- Artifact.cpp - writing the sharded binary and its report -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Artifact/Artifact.h"

#include "partita/Support/OutputStream.h"

#include "partita/Analysis/Cluster.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/PipelineSimulator/PipelineSimulator.h"
#include "partita/Support/OutputStream.h"
#include "partita/runtime/ArtifactWriter.h"
#include "partita/runtime/Sha256.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

using namespace mlir;
using namespace mlir::partita;
namespace rt = ::partita::runtime;

namespace {

std::string modelName(func::FuncOp global) {
  if (auto module = global->getParentOfType<ModuleOp>())
    if (auto name = module->getAttrOfType<StringAttr>("partita.model_name"))
      return name.str();
  return "model";
}

/// The global inputs or outputs of the model, replicated on every rank
/// until sharding places them.
/// The module's mesh, if the function was partitioned.
dist::MeshOp meshOf(func::FuncOp func) {
  if (auto module = func->getParentOfType<ModuleOp>())
    for (auto mesh : module.getOps<dist::MeshOp>())
      return mesh;
  return {};
}

/// The coordinates of `rank` on the mesh, first axis major.
std::vector<std::pair<std::string, int64_t>> coordsOf(dist::MeshOp mesh,
                                                      int64_t rank) {
  std::vector<std::pair<std::string, int64_t>> coords;
  if (!mesh)
    return coords;
  SmallVector<StringRef> names = mesh.getAxisNameRefs();
  ArrayRef<int64_t> sizes = mesh.getAxisSizes();
  coords.resize(names.size());
  for (int64_t i = static_cast<int64_t>(names.size()) - 1; i >= 0; --i) {
    coords[i] = {names[i].str(), rank % sizes[i]};
    rank /= sizes[i];
  }
  return coords;
}

/// The role of axis `index` as the manifest and the report spell it, or
/// empty when it is the default of the axis name (as the IR prints it).
std::string roleName(dist::MeshOp mesh, unsigned index) {
  dist::AxisRole role = mesh.getAxisRole(index);
  StringRef name = mesh.getAxisNameRefs()[index];
  return role == dist::getDefaultAxisRole(name)
             ? ""
             : dist::stringifyAxisRole(role).str();
}

/// The pipeline stage of the rank at `coords`: its coordinate on the axis
/// of the pipeline role, 0 when the mesh has none.
int64_t stageOf(dist::MeshOp mesh,
                ArrayRef<std::pair<std::string, int64_t>> coords) {
  std::optional<StringRef> axis =
      mesh ? mesh.getAxisWithRole(dist::AxisRole::Pipeline) : std::nullopt;
  for (const auto &[name, coord] : coords)
    if (axis && name == *axis)
      return coord;
  return 0;
}

/// Which of the function's arguments or results to list.
enum class Listed { All, Interface, Cache, Parameters, State };

/// What an argument or result of a step is: a tensor the runtime keeps on
/// the ranks (a KV cache, a training parameter or optimizer state, or its
/// update), or the model's interface.
Listed classify(func::FuncOp func, unsigned i, bool result) {
  auto has = [&](StringRef name) {
    return static_cast<bool>(result ? func.getResultAttr(i, name)
                                    : func.getArgAttr(i, name));
  };
  if (has(nn::NNDialect::kKvCacheAttrName))
    return Listed::Cache;
  if (has(nn::NNDialect::kParameterAttrName))
    return Listed::Parameters;
  if (has(nn::NNDialect::kOptimizerStateAttrName))
    return Listed::State;
  if (result && has(nn::NNDialect::kUpdateAttrName)) {
    // The update of the argument of its name.
    StringAttr name =
        func.getResultAttrOfType<StringAttr>(i, nn::NNDialect::kUpdateAttrName);
    for (unsigned a = 0; a < func.getNumArguments(); ++a)
      if (func.getArgAttr(a, nn::NNDialect::kOptimizerStateAttrName) &&
          func.getArgAttrOfType<StringAttr>(a, "onnx.name") == name)
        return Listed::State;
    return Listed::Parameters;
  }
  return Listed::Interface;
}

/// The function's inputs or outputs with their global shapes and
/// shardings (a partitioned function's types are the local ones): all of
/// them, the model's interface (without the KV cache), or the cache.
std::vector<rt::TensorSpec> tensorSpecs(func::FuncOp func, bool results,
                                        Listed listed = Listed::All) {
  std::vector<rt::TensorSpec> specs;
  dist::MeshOp mesh = meshOf(func);
  ArrayRef<Type> types = results ? func.getFunctionType().getResults()
                                 : func.getFunctionType().getInputs();
  for (auto [i, type] : llvm::enumerate(types)) {
    if (listed != Listed::All && classify(func, i, results) != listed)
      continue;
    auto tensor = cast<RankedTensorType>(type);
    StringAttr name = results
                          ? func.getResultAttrOfType<StringAttr>(i, "onnx.name")
                          : func.getArgAttrOfType<StringAttr>(i, "onnx.name");
    auto sharding =
        results
            ? func.getResultAttrOfType<dist::ShardingAttr>(i,
                                                           dist::kShardingAttr)
            : func.getArgAttrOfType<dist::ShardingAttr>(i, dist::kShardingAttr);
    rt::TensorSpec spec;
    spec.name =
        name ? name.str() : (results ? "output" : "input") + std::to_string(i);
    spec.dtype = getExecDType(tensor.getElementType());
    spec.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
    spec.sharding.dims.resize(tensor.getRank());
    if (sharding && mesh) {
      SmallVector<int64_t> global =
          sharding.getGlobalShape(tensor.getShape(), mesh);
      spec.shape.assign(global.begin(), global.end());
      for (int64_t d = 0; d < tensor.getRank(); ++d)
        for (StringRef axis : sharding.getAxesOfDim(d))
          spec.sharding.dims[d].push_back(axis.str());
      for (StringRef axis : sharding.getPartialAxisNames())
        spec.sharding.partial.push_back(axis.str());
    }
    if (!results)
      if (auto shape = func.getArgAttrOfType<DenseI64ArrayAttr>(
              i, nn::NNDialect::kParameterShapeAttrName))
        spec.onnxShape.assign(shape.asArrayRef().begin(),
                              shape.asArrayRef().end());
    specs.push_back(std::move(spec));
  }
  return specs;
}

bool sameSpec(const rt::TensorSpec &a, const rt::TensorSpec &b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
         a.sharding.dims == b.sharding.dims &&
         a.sharding.partial == b.sharding.partial;
}

/// A serving artifact's manifest entries: the prefill function's interface
/// at top level, the decode function's under `serving`, and the cache,
/// which both must hold alike.
LogicalResult describeServing(func::FuncOp prefill,
                              const ServingPrograms &serving,
                              rt::Manifest &manifest) {
  manifest.inputs = tensorSpecs(prefill, false, Listed::Interface);
  manifest.outputs = tensorSpecs(prefill, true, Listed::Interface);
  rt::ServingSpec spec;
  spec.maxSeq = serving.maxSeq;
  spec.decodeInputs = tensorSpecs(serving.decode, false, Listed::Interface);
  spec.decodeOutputs = tensorSpecs(serving.decode, true, Listed::Interface);
  spec.cache = tensorSpecs(prefill, false, Listed::Cache);
  std::vector<rt::TensorSpec> decodeCache =
      tensorSpecs(serving.decode, false, Listed::Cache);
  auto sameCache = [&](const std::vector<rt::TensorSpec> &other) {
    return other.size() == spec.cache.size() &&
           llvm::all_of(other, [&](const rt::TensorSpec &s) {
             const rt::TensorSpec *found = rt::findSpec(spec.cache, s.name);
             return found && sameSpec(*found, s);
           });
  };
  if (!sameCache(decodeCache) ||
      !sameCache(tensorSpecs(prefill, true, Listed::Cache)) ||
      !sameCache(tensorSpecs(serving.decode, true, Listed::Cache)))
    return prefill.emitError()
           << "the prefill and decode programs hold the KV cache "
              "differently (shapes or shardings): a compiler bug";
  const rt::TensorSpec *ids = rt::findSpec(manifest.inputs, "input_ids");
  if (!ids || ids->shape.size() != 2)
    return prefill.emitError()
           << "--max-seq: the model has no input_ids [batch, sequence]";
  spec.batch = ids->shape[0];
  spec.promptLength = ids->shape[1];
  spec.rightPadded = prefill->hasAttr(nn::NNDialect::kRightPaddedAttrName);
  spec.attentionMask =
      rt::findSpec(manifest.inputs, "attention_mask") ? "attention_mask" : "";
  spec.positionIds =
      rt::findSpec(manifest.inputs, "position_ids") ? "position_ids" : "";
  const rt::TensorSpec *logits = rt::findSpec(manifest.outputs, "logits");
  if (!logits || logits->shape.size() != 3)
    return prefill.emitError()
           << "--max-seq: the model has no logits output [batch, sequence, "
              "vocab]";
  manifest.serving = std::move(spec);
  return success();
}

/// A training artifact's manifest entries: the batch and the scalars as
/// inputs, the loss (and gradients) as outputs, and the parameters and
/// state, whose updates each rank writes over them in place and must hold
/// as the arguments they replace.
LogicalResult describeTraining(func::FuncOp step, const rt::TrainingSpec &given,
                               rt::Manifest &manifest) {
  manifest.inputs = tensorSpecs(step, false, Listed::Interface);
  manifest.outputs = tensorSpecs(step, true, Listed::Interface);
  rt::TrainingSpec spec = given;
  if (auto classes =
          step->getAttrOfType<IntegerAttr>(nn::NNDialect::kLossClassesAttrName))
    spec.classes = classes.getInt();
  spec.parameters = tensorSpecs(step, false, Listed::Parameters);
  spec.state = tensorSpecs(step, false, Listed::State);
  for (Listed kind : {Listed::Parameters, Listed::State}) {
    const std::vector<rt::TensorSpec> &held =
        kind == Listed::Parameters ? spec.parameters : spec.state;
    std::vector<rt::TensorSpec> updates = tensorSpecs(step, true, kind);
    for (const rt::TensorSpec &update : updates) {
      const rt::TensorSpec *arg = rt::findSpec(held, update.name);
      if (!arg || !sameSpec(*arg, update))
        return step.emitError()
               << "the update of '" << update.name
               << "' is not laid out as the value it replaces: a compiler "
                  "bug";
    }
    if (updates.size() != held.size())
      return step.emitError() << "a parameter or state of the training step "
                                 "has no update: a compiler bug";
  }
  manifest.training = std::move(spec);
  return success();
}

} // namespace

LogicalResult mlir::partita::writeArtifact(func::FuncOp global,
                                           ArrayRef<ExecProgram> programs,
                                           const ArtifactOptions &options,
                                           StringRef path,
                                           const ServingPrograms *serving) {
  if (serving && serving->programs.size() != programs.size())
    return global.emitError()
           << "the decode step has " << serving->programs.size()
           << " ranks and the prefill " << programs.size();
  rt::ArtifactWriter writer;
  rt::Manifest &manifest = writer.manifest();
  manifest.modelName = modelName(global);
  manifest.target = options.target;
  manifest.worldSize = programs.size();
  if (dist::MeshOp mesh = meshOf(global))
    for (auto [index, name, size] :
         llvm::enumerate(mesh.getAxisNameRefs(), mesh.getAxisSizes()))
      manifest.meshAxes.push_back(
          {name.str(), size,
           dist::stringifyAxisRole(mesh.getAxisRole(index)).str()});
  if (serving) {
    if (failed(describeServing(global, *serving, manifest)))
      return failure();
  } else if (options.training) {
    if (failed(describeTraining(global, *options.training, manifest)))
      return failure();
  } else {
    manifest.inputs = tensorSpecs(global, /*results=*/false);
    manifest.outputs = tensorSpecs(global, /*results=*/true);
  }
  manifest.compileOptions = options.compileOptions;
  manifest.cudaArchs = options.cudaArchs;
  if (options.target == "cuda" && options.cudaModules.size() != programs.size())
    return global.emitError()
           << "the cuda artifact has " << options.cudaModules.size()
           << " CUDA modules for " << programs.size() << " ranks";
  if (options.target == "cuda" && serving &&
      options.decodeCudaModules.size() != programs.size())
    return global.emitError()
           << "the cuda serving artifact has "
           << options.decodeCudaModules.size() << " decode CUDA modules for "
           << programs.size() << " ranks";
  std::set<std::string> storedModules;
  // Code is specialised to shapes, not ranks, so many ranks have equal
  // sources: name the files by the source's hash and store them once.
  auto storeModule = [&](const CudaModule &module, std::string &source,
                         std::string &fatbin) -> LogicalResult {
    std::string hash =
        rt::Sha256::hexDigest(module.source.data(), module.source.size())
            .substr(0, 16);
    std::string stem = "cuda/" + hash;
    source = stem + ".cu";
    fatbin = stem + ".fatbin";
    if (storedModules.insert(hash).second)
      for (auto [suffix, contents] :
           {std::pair<const char *, const std::string *>{".cu", &module.source},
            {".fatbin", &module.fatbin},
            {".ptxas.txt", &module.ptxasLog}})
        if (rt::Status status = writer.addFile(stem + suffix, *contents);
            !status)
          return global.emitError() << status.message();
    return success();
  };
  for (auto [rank, exec] : llvm::enumerate(programs)) {
    rt::RankEntry entry;
    entry.rank = rank;
    if (options.target == "cuda") {
      if (failed(storeModule(options.cudaModules[rank], entry.cudaSource,
                             entry.cudaFatbin)))
        return failure();
      if (serving &&
          failed(storeModule(options.decodeCudaModules[rank],
                             entry.decodeCudaSource, entry.decodeCudaFatbin)))
        return failure();
    }
    entry.coords = coordsOf(meshOf(global), rank);
    entry.stage = static_cast<int32_t>(stageOf(meshOf(global), entry.coords));
    manifest.ranks.push_back(entry);
    for (const ExecWeight &w : exec.weights) {
      rt::Status status = writer.addWeight(w.name, w.view);
      if (!status)
        return global.emitError() << status.message();
    }
    if (rt::Status status = writer.addProgram(rank, exec.program); !status)
      return global.emitError() << status.message();
    if (!serving)
      continue;
    // The decode program reads the same weights: equal names are stored
    // once.
    const ExecProgram &decode = serving->programs[rank];
    for (const ExecWeight &w : decode.weights) {
      rt::Status status = writer.addWeight(w.name, w.view);
      if (!status)
        return global.emitError() << status.message();
    }
    if (rt::Status status = writer.addDecodeProgram(rank, decode.program);
        !status)
      return global.emitError() << status.message();
  }
  if (rt::Status status = writer.commit(path.str()); !status)
    return global.emitError()
           << "cannot write the artifact: " << status.message();
  return success();
}

/// The pipeline plan as the schedule simulator sees it: the stages'
/// estimated forward times (from the cost model) and the schedule. False
/// when the program has no pipeline.
static bool simulatePipeline(func::FuncOp main,
                             ::partita::pipesim::Simulation &simulation,
                             ::partita::pipesim::Options &options) {
  auto module = main->getParentOfType<ModuleOp>();
  auto plan =
      module ? module->getAttrOfType<dist::PipelineAttr>(dist::kPipelineAttr)
             : dist::PipelineAttr();
  if (!plan)
    return false;
  options.stages = plan.getStages();
  options.microbatches = plan.getMicrobatches();
  options.virtualStages = plan.getVirtualStages();
  options.kind = plan.getSchedule() == dist::PipelineSchedule::Interleaved
                     ? ::partita::pipesim::ScheduleKind::Interleaved
                     : ::partita::pipesim::ScheduleKind::GPipe;
  ArrayRef<double> perRank = plan.getStageSeconds().asArrayRef();
  // Chunk c runs on rank c % P; a rank's time is shared by its chunks. Per
  // microbatch, in the simulator's unit, the microsecond.
  for (int c = 0; c < options.stages * options.virtualStages; ++c) {
    ::partita::pipesim::Costs costs;
    costs.forward = perRank[c % options.stages] * 1e6 / options.microbatches /
                    options.virtualStages;
    options.chunkCosts.push_back(costs);
  }
  std::string error;
  return ::partita::pipesim::simulate(options, simulation, error);
}

/// The report's pipeline section: the plan pipeline splitting recorded, and
/// what the schedule simulator makes of it with the cost model's stage
/// times (for equal stages GPipe's bubble is (P-1)/(M+P-1)).
static llvm::json::Object pipelineReport(func::FuncOp main) {
  ::partita::pipesim::Simulation simulation;
  ::partita::pipesim::Options options;
  if (!simulatePipeline(main, simulation, options))
    return llvm::json::Object{{"stages", 1},
                              {"microbatches", 1},
                              {"schedule", "none"},
                              {"bubble_fraction", 0.0}};
  llvm::json::Array seconds, alive;
  for (int r = 0; r < options.stages; ++r) {
    double rank = 0;
    for (size_t c = r; c < options.chunkCosts.size(); c += options.stages)
      rank += options.chunkCosts[c].forward * options.microbatches * 1e-6;
    seconds.push_back(rank);
  }
  for (int peak : simulation.peakAlive)
    alive.push_back(peak);
  return llvm::json::Object{
      {"stages", options.stages},
      {"microbatches", options.microbatches},
      {"virtual_stages", options.virtualStages},
      {"schedule",
       std::string(::partita::pipesim::scheduleKindName(options.kind))},
      {"stage_seconds", std::move(seconds)},
      {"makespan_seconds", simulation.makespan * 1e-6},
      {"bubble_fraction", simulation.bubbleFraction},
      {"peak_microbatches_alive", std::move(alive)}};
}

LogicalResult mlir::partita::writeTrace(func::FuncOp main,
                                        ArrayRef<ExecProgram> programs,
                                        StringRef path) {
  // Each rank's program: compute (thread 0) and communication (thread 1),
  // in microseconds.
  llvm::json::Array events;
  for (auto [rank, exec] : llvm::enumerate(programs)) {
    int64_t pid = static_cast<int64_t>(rank);
    events.push_back(llvm::json::Object{
        {"name", "process_name"},
        {"ph", "M"},
        {"pid", pid},
        {"args",
         llvm::json::Object{{"name", "rank " + std::to_string(rank)}}}});
    for (auto [tid, name] :
         {std::pair<int64_t, const char *>{0, "compute"}, {1, "communication"}})
      events.push_back(
          llvm::json::Object{{"name", "thread_name"},
                             {"ph", "M"},
                             {"pid", pid},
                             {"tid", tid},
                             {"args", llvm::json::Object{{"name", name}}}});
    for (const ExecTimeline::Event &e : exec.timeline.events)
      events.push_back(llvm::json::Object{{"name", e.name},
                                          {"ph", "X"},
                                          {"pid", pid},
                                          {"tid", e.communication ? 1 : 0},
                                          {"ts", e.start * 1e6},
                                          {"dur", (e.end - e.start) * 1e6}});
  }
  // The pipeline schedule as the simulator times it, as processes of their
  // own after the ranks.
  ::partita::pipesim::Simulation simulation;
  ::partita::pipesim::Options options;
  if (simulatePipeline(main, simulation, options)) {
    llvm::Expected<llvm::json::Value> schedule =
        llvm::json::parse(::partita::pipesim::toChromeTrace(simulation));
    const llvm::json::Array *list =
        schedule ? schedule->getAsObject()->getArray("traceEvents") : nullptr;
    if (!schedule)
      llvm::consumeError(schedule.takeError());
    if (list)
      for (llvm::json::Value event : *list) {
        llvm::json::Object *object = event.getAsObject();
        if (auto pid = object->getInteger("pid"))
          (*object)["pid"] = static_cast<int64_t>(programs.size()) + *pid;
        if (auto *args = object->getObject("args"))
          if (auto name = args->getString("name"))
            if (name->starts_with("rank "))
              (*args)["name"] =
                  "stage " + name->drop_front(5).str() + " (pipeline schedule)";
        events.push_back(std::move(event));
      }
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return main.emitError()
           << "cannot write the trace '" << path << "': " << ec.message();
  os << llvm::formatv("{0}", llvm::json::Value(llvm::json::Object{
                                 {"traceEvents", std::move(events)},
                                 {"displayTimeUnit", "ns"}}))
     << "\n";
  if (std::optional<std::string> failed = ::partita::finishWriting(os))
    return main.emitError()
           << "cannot write the trace '" << path << "': " << *failed;
  return success();
}

ModelSummary mlir::partita::summarizeModel(func::FuncOp global) {
  // The model's size as the global function states it: parameters are the
  // elements of floating-point constants, flops 2mnk per matmul.
  ModelSummary summary;
  summary.name = modelName(global);
  global.walk([&](Operation *op) {
    if (!isa<nn::NNDialect>(op->getDialect()))
      return;
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      auto type = cast<RankedTensorType>(constant.getType());
      if (isa<FloatType>(type.getElementType()))
        summary.params += type.getNumElements();
      return;
    }
    ++summary.nnOps;
    if (auto matmul = dyn_cast<nn::MatmulOp>(op)) {
      auto result = cast<RankedTensorType>(matmul.getType());
      summary.flops += 2 * result.getNumElements() *
                       matmul.getLhs().getType().getShape().back();
    }
    // A mixture of experts' products: the routed experts' only.
    if (auto moe = dyn_cast<nn::MoeOp>(op))
      summary.flops += static_cast<int64_t>(moe.getProductFlops());
  });
  return summary;
}

/// The report's `cluster`: the machine the times are estimated on.
static llvm::json::Object clusterJson(const ClusterModel &cluster) {
  auto link = [](const LinkModel &model) {
    return llvm::json::Object{
        {"latency_us", model.latencySeconds * 1e6},
        {"bandwidth_gb_per_s", model.bytesPerSecond / 1e9}};
  };
  return llvm::json::Object{
      {"name", cluster.name},
      {"nodes", cluster.nodes},
      {"devices_per_node", cluster.devicesPerNode},
      {"device",
       llvm::json::Object{{"flops_per_second", cluster.device.flopsPerSecond},
                          {"bytes_per_second", cluster.device.bytesPerSecond},
                          {"memory_bytes", cluster.deviceMemoryBytes}}},
      {"intra_node", link(cluster.intraNode)},
      {"inter_node", link(cluster.interNode)}};
}

/// The report's `ranks`: each program's weights, memory, collectives,
/// transfers and estimated times.
static llvm::json::Array rankReports(dist::MeshOp mesh,
                                     ArrayRef<ExecProgram> programs) {
  llvm::json::Array ranks;
  for (auto [rank, exec] : llvm::enumerate(programs)) {
    int64_t weightBytes = 0;
    for (const ExecWeight &w : exec.weights)
      weightBytes += w.view.byteSize();
    llvm::json::Object coords;
    for (auto &[axis, coord] : coordsOf(mesh, rank))
      coords[axis] = coord;
    // One entry per (kind, axes), summed over the program.
    std::vector<ExecCollectiveStat> merged;
    for (const ExecCollectiveStat &c : exec.collectives) {
      auto it = llvm::find_if(merged, [&](const ExecCollectiveStat &m) {
        return m.kind == c.kind && m.axes == c.axes;
      });
      if (it == merged.end()) {
        merged.push_back(c);
        continue;
      }
      it->count += c.count;
      it->payload += c.payload;
      it->bytes += c.bytes;
    }
    llvm::json::Array collectives;
    for (const ExecCollectiveStat &c : merged) {
      llvm::json::Array axes;
      for (const std::string &axis : c.axes)
        axes.push_back(axis);
      collectives.push_back(llvm::json::Object{{"kind", c.kind},
                                               {"axes", std::move(axes)},
                                               {"count", c.count},
                                               {"payload", c.payload},
                                               {"bytes", c.bytes}});
    }
    // Point-to-point transfers, one entry per (kind, peer).
    struct P2P {
      bool send;
      int32_t peer;
      int64_t count = 0, payload = 0;
    };
    std::vector<P2P> transfers;
    for (const ExecTransferStat &t : exec.transfers) {
      auto it = llvm::find_if(transfers, [&](const P2P &p) {
        return p.send == t.send && p.peer == t.peer;
      });
      if (it == transfers.end()) {
        transfers.push_back({t.send, t.peer});
        it = std::prev(transfers.end());
      }
      ++it->count;
      it->payload += t.bytes;
    }
    llvm::json::Array p2p;
    for (const P2P &p : transfers)
      p2p.push_back(llvm::json::Object{{"kind", p.send ? "send" : "recv"},
                                       {"peer", static_cast<int64_t>(p.peer)},
                                       {"count", p.count},
                                       {"payload", p.payload},
                                       {"bytes", p.send ? p.payload : 0}});
    int64_t stage = stageOf(mesh, coordsOf(mesh, rank));
    ranks.push_back(llvm::json::Object{
        {"rank", static_cast<int64_t>(rank)},
        {"coords", std::move(coords)},
        {"stage", stage},
        {"weight_bytes", weightBytes},
        {"peak_activation_bytes", exec.peakActivationBytes},
        {"activation_bytes_without_reuse", exec.totalActivationBytes},
        {"kernels", exec.numKernels},
        {"fused_elementwise_ops", exec.numFusedOps},
        {"collectives", std::move(collectives)},
        {"p2p", std::move(p2p)},
        {"time",
         llvm::json::Object{
             {"compute_seconds", exec.timeline.computeSeconds},
             {"communication_seconds", exec.timeline.communicationSeconds},
             {"exposed_communication_seconds", exec.timeline.exposedSeconds},
             {"step_seconds", exec.timeline.stepSeconds},
             {"exposed_fraction",
              exec.timeline.stepSeconds > 0
                  ? exec.timeline.exposedSeconds / exec.timeline.stepSeconds
                  : 0.0}}},
    });
  }
  return ranks;
}

/// Bytes of the KV cache `exec` binds (its inputs named after the cache
/// arguments of `func`).
static int64_t cacheBytes(func::FuncOp func, const ExecProgram &exec) {
  std::set<std::string> names;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, nn::NNDialect::kKvCacheAttrName))
      if (auto name = func.getArgAttrOfType<StringAttr>(i, "onnx.name"))
        names.insert(name.str());
  int64_t bytes = 0;
  for (const ::partita::program::Binding &binding : exec.program.inputs()) {
    if (!names.count(binding.name()))
      continue;
    const ::partita::program::TensorType &type =
        exec.program.buffers(binding.buffer()).type();
    int64_t elements = 1;
    for (int64_t dim : type.shape())
      elements *= dim;
    bytes += elements * ::partita::program::dtypeBytes(type.dtype());
  }
  return bytes;
}

LogicalResult mlir::partita::writeReport(const ModelSummary &model,
                                         func::FuncOp main,
                                         ArrayRef<ExecProgram> programs,
                                         const ClusterModel &cluster,
                                         const Plan *plan, StringRef path,
                                         const ServingPrograms *serving) {
  dist::MeshOp mesh = meshOf(main);
  llvm::json::Array ranks = rankReports(mesh, programs);
  llvm::json::Array axes;
  if (mesh)
    for (auto [index, name, size] :
         llvm::enumerate(mesh.getAxisNameRefs(), mesh.getAxisSizes())) {
      llvm::json::Object axis{{"name", name}, {"size", size}};
      if (std::string role = roleName(mesh, index); !role.empty())
        axis["role"] = role;
      axes.push_back(std::move(axis));
    }
  llvm::json::Array remarks;
  if (auto module = main->getParentOfType<ModuleOp>())
    if (auto list = module->getAttrOfType<ArrayAttr>(dist::kRemarksAttr))
      for (auto remark : list.getAsValueRange<StringAttr>())
        remarks.push_back(remark);
  // The sequence-parallel plan, as the annotation pass recorded it.
  llvm::json::Value sequence = nullptr;
  if (auto module = main->getParentOfType<ModuleOp>())
    if (auto plan = module->getAttrOfType<dist::SequenceParallelAttr>(
            dist::kSequenceParallelAttr)) {
      llvm::json::Object fields{
          {"mode", dist::stringifySequenceParallelMode(plan.getMode())},
          {"axis", plan.getAxis().str()},
          {"ranks", plan.getRanks()}};
      for (auto [key, flag] : {std::pair{"causal", plan.getCausal()},
                               std::pair{"zigzag", plan.getZigzag()}})
        if (flag)
          fields[key] = flag.getValue();
      for (auto [key, real] :
           {std::pair{"imbalance", plan.getImbalance()},
            std::pair{"contiguous_imbalance", plan.getContiguousImbalance()}})
        if (real)
          fields[key] = real.getValueAsDouble();
      sequence = std::move(fields);
    }
  llvm::json::Object report{
      {"format", "partita-report/1"},
      {"model", llvm::json::Object{{"name", model.name},
                                   {"nn_ops", model.nnOps},
                                   {"params", model.params},
                                   {"flops", model.flops}}},
      {"mesh", llvm::json::Object{{"axes", std::move(axes)},
                                  {"world_size",
                                   static_cast<int64_t>(programs.size())}}},
      {"cluster", clusterJson(cluster)},
      {"ranks", std::move(ranks)},
      {"remarks", std::move(remarks)},
      {"sequence_parallel", std::move(sequence)},
      {"pipeline", pipelineReport(main)},
  };
  if (plan)
    report["plan"] = planToJson(*plan);
  if (serving) {
    llvm::json::Array perRank;
    double stepSeconds = 0;
    for (const ExecProgram &exec : serving->programs) {
      perRank.push_back(cacheBytes(serving->decode, exec));
      stepSeconds = std::max(stepSeconds, exec.timeline.stepSeconds);
    }
    report["serving"] = llvm::json::Object{
        {"max_seq", serving->maxSeq},
        {"kv_cache_bytes", std::move(perRank)},
        {"decode_step_seconds", stepSeconds},
        {"decode",
         llvm::json::Object{{"ranks", rankReports(meshOf(serving->decode),
                                                  serving->programs)}}}};
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return main.emitError()
           << "cannot write the report '" << path << "': " << ec.message();
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(report))) << "\n";
  if (std::optional<std::string> failed = ::partita::finishWriting(os))
    return main.emitError()
           << "cannot write the report '" << path << "': " << *failed;
  return success();
}
