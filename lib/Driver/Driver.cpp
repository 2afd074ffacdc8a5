//===- Driver.cpp - The compiler, from a model to an artifact -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Driver/Driver.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "partita/Analysis/Cluster.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Artifact/Artifact.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Dist/Transforms/Passes.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/Transforms/Training.h"
#include "partita/Frontend/ONNX/Import.h"
#include "partita/InitAllDialects.h"
#include "partita/Pipelines/Pipelines.h"
#include "partita/Target/CUDA/CodeGen.h"
#include "partita/Target/CUDA/Nvcc.h"
#include "partita/Target/ExecProgram/ExecProgram.h"
#include "partita/proto/DType.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/text_format.h>

#include <chrono>
#include <functional>

using namespace mlir;
using namespace mlir::partita;
namespace cudatarget = ::partita::target::cuda;

namespace {

/// An error in the options (no place in the model): reported at an unknown
/// location, which partita-compile prints as `partita-compile: error: ...`.
LogicalResult fail(MLIRContext &context, const llvm::Twine &message) {
  emitError(UnknownLoc::get(&context)) << message.str();
  return failure();
}

/// Adds the wall time of its scope to the phase `name` of `result`
/// (partita-compile --time-phases prints them).
class PhaseClock {
public:
  PhaseClock(DriverResult &result, StringRef name)
      : result(result), name(name.str()),
        start(std::chrono::steady_clock::now()) {}
  ~PhaseClock() {
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    result.addPhaseTime(name, elapsed.count());
  }

private:
  DriverResult &result;
  std::string name;
  std::chrono::steady_clock::time_point start;
};

/// Runs the passes `build` adds on `module`, timed as `name` under `root`.
LogicalResult runStage(ModuleOp module, const DriverOptions &options,
                       TimingScope &root, StringRef name,
                       llvm::function_ref<void(PassManager &)> build) {
  PassManager pm(module.getContext(), ModuleOp::getOperationName());
  if (options.passManagerCommandLine && failed(applyPassManagerCLOptions(pm)))
    return failure();
  TimingScope timing = root.nest(name);
  pm.enableTiming(timing);
  build(pm);
  return pm.run(module);
}

/// One line per weight of the planned (global) function: name, type and
/// sharding.
std::vector<std::string> describeWeights(func::FuncOp main) {
  std::vector<std::string> lines;
  dist::MeshOp mesh;
  if (auto module = main->getParentOfType<ModuleOp>())
    for (auto m : module.getOps<dist::MeshOp>())
      mesh = m;
  if (!mesh)
    return lines;
  main.walk([&](nn::ConstantOp constant) {
    StringRef name = nn::getWeightName(constant.getValue());
    if (name.empty())
      return;
    std::string line;
    llvm::raw_string_ostream os(line);
    os << "  " << name << "  " << constant.getType() << "  "
       << dist::formatSharding(
              dist::getValueSharding(constant.getResult(), mesh));
    lines.push_back(line);
  });
  return lines;
}

/// The bytes of `value` on one rank of the axes other than `tp` that its
/// `sharding` splits it over (what the tp group shares).
double bytesOverOtherAxes(Value value, dist::ShardingAttr sharding,
                          dist::MeshOp mesh, StringRef tp) {
  double bytes = static_cast<double>(tensorBytes(value.getType()));
  for (int64_t d = 0; d < sharding.getRank(); ++d)
    for (StringRef axis : sharding.getAxesOfDim(d))
      if (axis != tp)
        bytes /= static_cast<double>(mesh.getAxisSize(axis).value_or(1));
  return bytes;
}

/// Where the strategy's split search placed `op`'s weight: the estimated
/// step of each candidate, the others as chosen (`dist.split_costs`).
void printSplitCosts(raw_ostream &os, Operation *op) {
  auto costs = op->getAttrOfType<DictionaryAttr>(dist::kSplitCostsAttr);
  if (!costs)
    return;
  os << "  {chosen by the estimated step on one device:";
  for (NamedAttribute cost : costs)
    if (auto seconds = dyn_cast<FloatAttr>(cost.getValue()))
      os << " " << cost.getName().getValue() << " "
         << llvm::formatv("{0:e3}", seconds.getValueAsDouble()) << " s;";
  os << "}";
}

/// The tensor-parallel split of each matmul weight and the splits the
/// strategy did not choose, each with its cost on one rank: the weight's
/// bytes, and the collective bytes the matmul needs to read its input as
/// it arrives and to leave its result as the plan holds it (the
/// report's ring convention: an all-gather (n-1)/n of the whole, an
/// all-reduce 2(n-1)/n, a reduce-scatter (n-1)/n). Columns read the input
/// whole and give a result split on its columns; rows read it split on
/// the reduced dimension and give a partial sum; whole reads it whole.
/// Empty without a tp axis.
std::vector<std::string> describeSplitChoices(func::FuncOp main,
                                              dist::MeshOp mesh) {
  std::vector<std::string> lines;
  std::optional<StringRef> tpAxis =
      mesh.getAxisWithRole(dist::AxisRole::Tensor);
  int64_t n = tpAxis ? mesh.getAxisSize(*tpAxis).value_or(1) : 1;
  if (n <= 1)
    return lines;
  StringRef tp = *tpAxis;
  double gather = double(n - 1) / double(n), reduce = 2 * gather;
  auto has = [&](dist::ShardingAttr s, int64_t d) {
    return llvm::is_contained(s.getAxesOfDim(d), tp);
  };
  main.walk([&](nn::MatmulOp matmul) {
    nn::ConstantOp weight =
        dist::getWeightConstant(matmul.getRhs(), /*throughDequantize=*/false);
    if (!weight)
      return;
    dist::ShardingAttr rhs = dist::getValueSharding(matmul.getRhs(), mesh);
    dist::ShardingAttr lhs = dist::getValueSharding(matmul.getLhs(), mesh);
    dist::ShardingAttr out = dist::getValueSharding(matmul.getResult(), mesh);
    auto rhsType = matmul.getRhs().getType();
    int64_t k = rhsType.getRank() - 2, cols = rhsType.getRank() - 1;
    int64_t lhsK = lhs.getRank() - 1, outN = out.getRank() - 1;
    bool batch = false;
    for (int64_t d = 0; d < k; ++d)
      batch |= has(rhs, d);
    std::string chosen = has(rhs, cols) ? "columns"
                         : has(rhs, k)  ? "rows"
                         : batch        ? "batch"
                                        : "whole";
    std::string line;
    llvm::raw_string_ostream os(line);
    os << "  " << nn::getWeightName(weight.getValue()) << "  " << chosen;
    auto searched = [&] { printSplitCosts(os, matmul); };
    // An input or a result split over tp on another dimension than the
    // reduced one and the columns (Megatron-SP's sequence) is not
    // estimated here.
    bool elsewhere = false;
    for (int64_t d = 0; d < lhsK; ++d)
      elsewhere |= has(lhs, d);
    for (int64_t d = 0; d < outN; ++d)
      elsewhere |= has(out, d);
    // Users of its shape (the residual add) that split the sequence over
    // tp reduce-scatter a partial result onto it.
    for (Operation *user : matmul->getUsers())
      for (Value result : user->getResults()) {
        if (result.getType() != matmul.getType())
          continue;
        dist::ShardingAttr taken = dist::getValueSharding(result, mesh);
        for (int64_t d = 0; d < outN; ++d)
          elsewhere |= has(taken, d);
      }
    if (elsewhere) {
      os << "  (it or its users split another dimension over " << tp
         << " (the sequence, or a stacked weight's batch): not estimated "
            "here)";
      searched();
      lines.push_back(line);
      return;
    }
    double weightBytes = static_cast<double>(tensorBytes(rhsType));
    double lhsBytes = bytesOverOtherAxes(matmul.getLhs(), lhs, mesh, tp);
    double outBytes = bytesOverOtherAxes(matmul.getResult(), out, mesh, tp);
    bool lhsPartial = llvm::is_contained(lhs.getPartialAxisNames(), tp);
    bool lhsSplit = has(lhs, lhsK);
    // The plan holds the result split on its columns (a column-parallel
    // output, read by the next matmul's rows) or whole; resharding after
    // that is its users' (the LM head's logits gathered by the slice).
    bool usersSplit = has(out, outN);
    struct Candidate {
      const char *name;
      int64_t dim; // -1: whole
    };
    for (Candidate c : {Candidate{"columns", cols}, Candidate{"rows", k},
                        Candidate{"whole", -1}}) {
      os << (llvm::StringRef(c.name) == "columns" ? "  [" : "; ") << c.name
         << ": ";
      if (c.dim >= 0 && rhsType.getDimSize(c.dim) % n != 0) {
        os << rhsType.getDimSize(c.dim) << " not divisible by " << n;
        continue;
      }
      double bytes = c.dim >= 0 ? weightBytes / double(n) : weightBytes;
      SmallVector<std::string> moves;
      auto move = [&](StringRef kind, double amount) {
        moves.push_back((kind + " " + Twine(int64_t(amount)) + " B").str());
      };
      bool rows = c.dim == k;
      if (lhsPartial)
        move("all_reduce", reduce * lhsBytes);
      else if (lhsSplit && !rows)
        move("all_gather", gather * lhsBytes);
      if (rows)
        move(usersSplit ? "reduce_scatter" : "all_reduce",
             (usersSplit ? gather : reduce) * outBytes);
      else if (c.dim == cols && !usersSplit)
        move("all_gather", gather * outBytes);
      os << int64_t(bytes) << " B";
      for (const std::string &m : moves)
        os << ", " << m;
      if (moves.empty())
        os << ", no collective";
    }
    os << "]";
    searched();
    lines.push_back(line);
  });
  // A mixture of experts' weights: split by experts, by each expert's
  // features, or whole; with the split search's estimates.
  main.walk([&](nn::MoeOp moe) {
    for (Value operand : moe->getOperands().drop_front(3)) {
      nn::ConstantOp weight =
          dist::getWeightConstant(operand, /*throughDequantize=*/false);
      if (!weight)
        continue;
      dist::ShardingAttr held = dist::getValueSharding(operand, mesh);
      std::string chosen = "whole";
      for (int64_t d = 0; d < held.getRank(); ++d)
        if (has(held, d))
          chosen = d == 0 ? "experts" : "features";
      std::string line;
      llvm::raw_string_ostream os(line);
      os << "  " << nn::getWeightName(weight.getValue()) << "  " << chosen
         << "  (an expert weight of nn.moe)";
      printSplitCosts(os, moe);
      lines.push_back(line);
    }
  });
  return lines;
}

/// The --explain listing: weights, the splits of matmul weights with their
/// candidates, then rank 0's collectives in program order with the op that
/// needed each.
std::string explanation(ArrayRef<std::string> weights,
                        ArrayRef<std::string> choices,
                        const ExecProgram &rank0) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "weights (name, global type, sharding):\n";
  for (const std::string &line : weights)
    os << line << "\n";
  if (!choices.empty()) {
    os << "matmul weights over tp (name, chosen split, [each candidate: "
          "weight bytes per rank, the collective bytes per rank it needs "
          "at the matmul]):\n";
    for (const std::string &line : choices)
      os << line << "\n";
  }
  os << "collectives of rank 0 (kind, axes, payload bytes, reason):\n";
  for (const ExecCollectiveStat &c : rank0.collectives) {
    os << "  " << c.kind << " [";
    llvm::interleaveComma(c.axes, os);
    os << "]  " << c.payload << "  " << c.reason << "\n";
  }
  return text;
}

/// The training options: all or none of them with --train, spelled as
/// docs/training.md says, on a mesh training supports.
LogicalResult checkTrainingOptions(MLIRContext &context,
                                   const DriverOptions &options) {
  if (!options.train) {
    for (auto [given, flag] :
         {std::pair<bool, StringRef>{!options.loss.empty(), "--loss"},
          {!options.optimizer.empty(), "--optimizer"},
          {!options.freeze.empty(), "--freeze"},
          {options.clipGradNorm != 0, "--clip-grad-norm"},
          {options.outputGradients, "--output-gradients"},
          {options.gradBucketBytes != CompilerOptions().gradBucketBytes,
           "--grad-bucket-bytes"}})
      if (given)
        return fail(context, flag + " needs --train");
    return success();
  }
  if (options.loss.empty() || options.optimizer.empty())
    return fail(context, "--train needs --loss cross_entropy:OUTPUT|mse:OUTPUT "
                         "and --optimizer sgd:lr=L|adamw:lr=L");
  std::string error;
  if (!parseLossSpec(options.loss, error) ||
      !parseOptimizerSpec(options.optimizer, error))
    return fail(context, error);
  if (!options.freeze.empty() && !llvm::Regex(options.freeze).isValid(error))
    return fail(context, "--freeze '" + options.freeze +
                             "' is not a regular expression: " + error);
  if (!(options.clipGradNorm >= 0) || !std::isfinite(options.clipGradNorm))
    return fail(context, "--clip-grad-norm must be 0 or more");
  if (options.maxSeq > 0)
    return fail(context, "--train compiles a training step; --max-seq a "
                         "serving artifact: give one of them");
  if (options.dtype != StorageType::FP32)
    return fail(context, "--train trains fp32 parameters; --dtype " +
                             std::string(::partita::optionName(options.dtype)) +
                             " is for inference");
  if (options.autoMesh)
    return fail(context, "--mesh auto plans inference; give --train a mesh "
                         "of dp, tp, sp and ep axes");
  if (options.mesh.roleSize("pp") > 1)
    return fail(context,
                "--train with a pp axis: pipeline-parallel training is not "
                "supported yet; use dp, tp and sp");
  return success();
}

/// The manifest's record of a training step's loss and optimizer (the
/// options were checked).
::partita::runtime::TrainingSpec
describeTrainingStep(const DriverOptions &options) {
  std::string error;
  LossSpec loss = *parseLossSpec(options.loss, error);
  OptimizerSpec optimizer = *parseOptimizerSpec(options.optimizer, error);
  ::partita::runtime::TrainingSpec spec;
  spec.lossKind = loss.kind;
  spec.optimizer = optimizer.kindName().str();
  spec.hyperparameters["lr"] = optimizer.lr;
  spec.hyperparameters["weight_decay"] = optimizer.weightDecay;
  if (optimizer.kind == OptimizerKind::SGD) {
    spec.hyperparameters["momentum"] = optimizer.momentum;
  } else {
    spec.hyperparameters["beta1"] = optimizer.beta1;
    spec.hyperparameters["beta2"] = optimizer.beta2;
    spec.hyperparameters["eps"] = optimizer.eps;
  }
  spec.clipGradNorm = options.clipGradNorm;
  return spec;
}

/// Checks every option against its declaration (the API's fields were
/// set without a parser), then the rules between options.
LogicalResult checkOptions(MLIRContext &context, DriverOptions &options) {
  std::string error;
  if (!::partita::checkOptions(options, error))
    return fail(context, error);
  if (!(options.moeCapacityFactor >= 0) ||
      !std::isfinite(options.moeCapacityFactor))
    return fail(context, "--moe-capacity-factor must be 0 (dropless) or more");
  if (isDecodeObjective(options.objective) && options.maxSeq == 0)
    return fail(context,
                "--objective " +
                    std::string(::partita::optionName(options.objective)) +
                    " plans the decode step: it needs --max-seq");
  // One device runs no pipeline and no sequence parallelism: options that
  // ask for them say so, rather than being ignored (with a mesh, the
  // passes check them against its axes).
  if (!options.autoMesh && options.mesh.empty()) {
    if (options.microbatches > 1 || options.virtualStages > 1)
      return fail(
          context,
          (options.microbatches > 1
               ? "--microbatches " + std::to_string(options.microbatches)
               : "--virtual-stages " + std::to_string(options.virtualStages)) +
              " needs pipeline stages: give the mesh a pp axis "
              "larger than 1");
    if (options.spMode != SequenceMode::None)
      return fail(context,
                  "--sp-mode " +
                      std::string(::partita::optionName(options.spMode)) +
                      " needs a mesh with an sp (or, for megatron, tp) axis "
                      "larger than 1");
  }
  if (failed(checkTrainingOptions(context, options)))
    return failure();
  if (!options.autoMesh && options.devices != 0)
    return fail(context, "--devices needs --mesh auto");
  if (!options.autoMesh && options.emit == EmitStage::Plan)
    return fail(context, "--emit plan needs --mesh auto");
  return success();
}

/// The architectures of --cuda-arch, checked by the CUDA target.
LogicalResult parseCudaArchs(MLIRContext &context, const DriverOptions &options,
                             cudatarget::NvccOptions &nvcc) {
  std::string archs = llvm::join(options.cudaArchs, ",");
  if (llvm::Error error = cudatarget::parseCudaArchs(archs, nvcc.archs))
    return fail(context, "--cuda-arch " + archs + ": " +
                             llvm::toString(std::move(error)));
  return success();
}

/// The cluster of --cluster (the default preset without one).
LogicalResult readCluster(MLIRContext &context, const DriverOptions &options,
                          ClusterModel &cluster) {
  if (options.clusterJson.empty())
    return success();
  llvm::Expected<ClusterModel> parsed =
      ClusterModel::fromJson(options.clusterJson);
  if (!parsed)
    return fail(context,
                "--cluster " +
                    (options.clusterSource.empty() ? std::string("(JSON text)")
                                                   : options.clusterSource) +
                    ": " + llvm::toString(parsed.takeError()));
  cluster = std::move(*parsed);
  return success();
}

/// --mesh auto, once the chosen plan is compiled: records the largest
/// rank's weights, buffer-plan peak and outputs in `plan`, and refuses the
/// plan if a rank's, with the reserve, exceed the device's memory (the
/// planner's estimate was too low).
LogicalResult checkCompiledPlan(MLIRContext &context, Plan &plan,
                                ArrayRef<ExecProgram> programs) {
  const PlanCandidate *best = plan.best();
  double weights = 0, peak = 0, outputs = 0, needs = 0;
  for (const ExecProgram &program : programs) {
    double weightBytes = 0, outputBytes = 0;
    for (const ExecWeight &w : program.weights)
      weightBytes += static_cast<double>(w.view.byteSize());
    for (const ::partita::program::Buffer &buffer : program.program.buffers()) {
      if (buffer.kind() != ::partita::program::Buffer::OUTPUT)
        continue;
      double elements = 1;
      for (int64_t dim : buffer.type().shape())
        elements *= static_cast<double>(dim);
      outputBytes +=
          elements * ::partita::program::dtypeBytes(buffer.type().dtype());
    }
    double activations = static_cast<double>(program.peakActivationBytes);
    weights = std::max(weights, weightBytes);
    peak = std::max(peak, activations);
    outputs = std::max(outputs, outputBytes);
    needs = std::max(needs, weightBytes + activations + outputBytes);
  }
  plan.compiledWeightBytes = weights;
  plan.compiledActivationBytes = peak;
  plan.compiledOutputBytes = outputs;
  // A decoder's KV cache is among its outputs.
  needs += plan.reserveBytes;
  if (needs <= plan.deviceMemoryBytes)
    return success();
  return fail(context,
              llvm::formatv("--mesh auto: the chosen plan ({0}) compiled to "
                            "{1:f1} GB of weights, a {2:f1} GB activation "
                            "peak and {3:f1} GB of outputs per device; with "
                            "the reserve that is {4:f1} GB, more than the "
                            "{5:f1} GB a device has (the planner estimated "
                            "{6:f1} GB)",
                            best->flags(), weights / 1e9, peak / 1e9,
                            outputs / 1e9, needs / 1e9,
                            plan.deviceMemoryBytes / 1e9,
                            best->memoryBytes / 1e9)
                  .str());
}

/// A phase of the compiler that is a pass pipeline: its name (for
/// --time-phases and --dump-pipeline), the --emit stage that prints what it
/// makes, its name in --mlir-timing, and its pipeline.
struct PassPhase {
  StringRef name;
  EmitStage emit;
  StringRef timing;
  std::function<void(OpPassManager &, const PipelineOptions &)> build;
};

/// The pass phases a compile with `options` runs, in order, up to
/// `options.emit`: raise; plan with --mesh auto; shard and partition with
/// a mesh (which planning may have chosen). `sink` receives the plan.
SmallVector<PassPhase> passPhases(const DriverOptions &options, Plan *sink) {
  bool requireFit = options.emit != EmitStage::Plan;
  PassPhase all[] = {
      {"raise", EmitStage::NN, "Pipeline", buildNNPipeline},
      {"plan", EmitStage::Plan, "Parallel planning",
       [sink, requireFit](OpPassManager &pm, const PipelineOptions &pipeline) {
         buildPlanMeshPipeline(pm, pipeline, sink, requireFit);
       }},
      {"shard", EmitStage::Dist, "Sharding plan", buildPlanPipeline},
      {"partition", EmitStage::Local, "Partition", buildPartitionPipeline},
  };
  SmallVector<PassPhase> phases;
  for (PassPhase &phase : all) {
    if (options.emit < phase.emit)
      break;
    if (phase.emit == EmitStage::Plan && !options.autoMesh)
      continue;
    if (phase.emit > EmitStage::Plan &&
        (options.autoMesh || options.mesh.empty()))
      break;
    phases.push_back(std::move(phase));
  }
  return phases;
}

/// What partita-plan-mesh chose, as the later phases compile with it: the
/// module's dist.mesh (none: one device) and its partita.plan.
LogicalResult adoptPlan(ModuleOp module, DriverOptions &options) {
  auto plan = module->getAttrOfType<DictionaryAttr>(kPlanAttrName);
  FailureOr<dist::MeshOp> mesh = dist::getModuleMesh(module);
  if (!plan || failed(mesh))
    return module.emitError() << "the planned module has no " << kPlanAttrName;
  options.mesh.axes.clear();
  if (*mesh)
    for (unsigned index = 0; index < mesh->getNumAxes(); ++index)
      options.mesh.axes.push_back(
          {cast<StringAttr>(mesh->getAxisNames()[index]).str(),
           mesh->getAxisSizes()[index],
           dist::stringifyAxisRole(mesh->getAxisRole(index)).str()});
  auto text = [&](StringRef key) {
    auto value = plan.getAs<StringAttr>(key);
    return value ? value.getValue() : StringRef();
  };
  auto integer = [&](StringRef key) {
    auto value = plan.getAs<IntegerAttr>(key);
    return value ? value.getInt() : int64_t(1);
  };
  options.spMode = ::partita::parseOption<SequenceMode>(text("sp_mode"))
                       .value_or(SequenceMode::None);
  options.microbatches = integer("microbatches");
  options.virtualStages = integer("virtual_stages");
  auto matmul = plan.getAs<BoolAttr>("collective_matmul");
  options.collectiveMatmul = matmul && matmul.getValue()
                                 ? CollectiveMatmulMode::Always
                                 : CollectiveMatmulMode::Never;
  // The mesh is chosen: a second program (decode) compiles on it.
  options.autoMesh = false;
  return success();
}

/// The flags the artifact was compiled with, for its manifest: the
/// declared options' records, and the model.
std::map<std::string, std::string>
recordedOptions(const DriverOptions &options) {
  std::map<std::string, std::string> recorded =
      ::partita::recordedOptions(options);
  recorded["source"] = options.input;
  return recorded;
}

/// The module as partita-opt prints it (a newline after the module), so
/// that a stage and its replay compare equal.
void printModule(ModuleOp module, llvm::raw_ostream &os) {
  module.print(os);
  os << "\n";
}

} // namespace

void mlir::partita::loadCompilerDialects(MLIRContext &context) {
  DialectRegistry registry;
  registerAllDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

std::string mlir::partita::formatLocation(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    std::string parent = formatLocation(name.getChildLoc());
    return (parent.empty() ? "" : parent + ": ") + "node '" +
           name.getName().getValue().str() + "'";
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    std::string text = file.getFilename().getValue().str();
    if (file.getLine())
      text += ":" + std::to_string(file.getLine()) + ":" +
              std::to_string(file.getColumn());
    return text;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    return fused.getLocations().empty()
               ? ""
               : formatLocation(fused.getLocations().front());
  if (auto callSite = dyn_cast<CallSiteLoc>(loc))
    return formatLocation(callSite.getCallee());
  return "";
}

namespace {

/// A context for a model's second import (its decode program), whose
/// diagnostics go to `parent`'s handlers. A second import into the parent
/// would rename every weight's resource (`name_1`), and the artifact would
/// store the weights twice.
struct ChildContext {
  explicit ChildContext(MLIRContext &parent)
      : context(parent.isMultithreadingEnabled()
                    ? MLIRContext::Threading::ENABLED
                    : MLIRContext::Threading::DISABLED),
        forward(&context, [&parent](Diagnostic &diag) {
          parent.getDiagEngine().emit(std::move(diag));
          return success();
        }) {
    loadCompilerDialects(context);
  }
  MLIRContext context;
  ScopedDiagnosticHandler forward;
};

/// One program of the model compiled down to its ranks' exec programs.
struct CompiledModule {
  OwningOpRef<ModuleOp> module;
  func::FuncOp main;
  /// The report's model: the global one, before any sharding.
  ModelSummary model;
  std::vector<std::string> weightLines, choiceLines;
  std::vector<ExecProgram> programs;
};

/// Compiles one program of the model (the model's own, or a decoder's
/// prefill or decode program) phase by phase: import, then the pass phases
/// (raise, plan, shard, partition), then exec once per rank. `options` are
/// what the phases compile with: planning (--mesh auto) fills in what it
/// chose, which a second program then compiles with too.
class ProgramCompiler {
public:
  ProgramCompiler(MLIRContext &context, DriverOptions &options,
                  ClusterModel &cluster, DriverResult &result,
                  TimingScope &root)
      : context(context), options(options), cluster(cluster), result(result),
        root(root) {}

  /// Runs the phases up to `options.emit` on the model imported as `form`
  /// binds it. Sets `stopped` when what was printed is all there is to do
  /// (--emit plan), or after planning with `stopAfterPlanning`.
  LogicalResult run(KvCacheForm form, CompiledModule &compiled, bool &stopped);

  /// Stop once the plan is chosen (--dump-pipeline reads it).
  bool stopAfterPlanning = false;

private:
  LogicalResult importModel(KvCacheForm form, CompiledModule &compiled);
  LogicalResult runPassPhase(ModuleOp module, const PassPhase &phase);
  LogicalResult finishPlanning(ModuleOp module, bool &stopped);
  LogicalResult lowerRanks(CompiledModule &compiled);

  MLIRContext &context;
  DriverOptions &options;
  ClusterModel &cluster;
  DriverResult &result;
  TimingScope &root;
};

LogicalResult ProgramCompiler::importModel(KvCacheForm form,
                                           CompiledModule &compiled) {
  TimingScope importTiming = root.nest("ONNX import");
  PhaseClock clock(result, "import");
  OnnxImportOptions import;
  for (const auto &[name, value] : options.bind)
    import.bindings[name] = value;
  import.kvCache = form;
  import.maxSeq = options.maxSeq;
  import.train = options.train;
  import.freeze = options.freeze;
  compiled.module =
      options.inputBuffer
          ? importOnnxBuffer(&context, *options.inputBuffer, options.input,
                             /*modelDir=*/"", import)
          : importOnnxFile(&context, options.input, import);
  if (!compiled.module)
    return failure();
  compiled.main = compiled.module->lookupSymbol<func::FuncOp>("main");
  // The passes that weigh communication read the cluster from the module.
  if (!options.clusterJson.empty())
    (*compiled.module)
        ->setAttr(ClusterModel::kAttributeName,
                  StringAttr::get(&context, options.clusterJson));
  return success();
}

LogicalResult ProgramCompiler::runPassPhase(ModuleOp module,
                                            const PassPhase &phase) {
  PhaseClock clock(result, phase.name);
  PipelineOptions pipeline;
  pipeline.assign(options);
  if (options.emit == EmitStage::CUDA)
    pipeline.target.assign(Target::CUDA);
  return runStage(module, options, root, phase.timing,
                  [&](PassManager &pm) { phase.build(pm, pipeline); });
}

/// After partita-plan-mesh: the cluster as planning grew it, the
/// --explain-plan table, and the options the later phases compile with.
LogicalResult ProgramCompiler::finishPlanning(ModuleOp module, bool &stopped) {
  FailureOr<ClusterModel> grown = ClusterModel::of(module);
  if (failed(grown))
    return failure();
  cluster = std::move(*grown);
  // A second program (decode) compiles for the cluster as planning grew it.
  if (auto grownJson =
          module->getAttrOfType<StringAttr>(ClusterModel::kAttributeName))
    options.clusterJson = grownJson.str();
  result.planExplanation = describePlan(*result.plan, cluster);
  if (options.emit == EmitStage::Plan) {
    if (options.emitStream)
      *options.emitStream << result.planExplanation;
    stopped = true;
    return success();
  }
  if (failed(adoptPlan(module, options)))
    return failure();
  stopped = stopAfterPlanning;
  return success();
}

LogicalResult ProgramCompiler::lowerRanks(CompiledModule &compiled) {
  TimingScope lowerTiming = root.nest("Exec lowering");
  PhaseClock clock(result, "exec");
  int64_t worldSize = 1;
  for (auto mesh : compiled.module->getOps<dist::MeshOp>())
    worldSize = mesh.getNumDevices();
  for (int64_t rank = 0; rank < worldSize; ++rank) {
    // Each rank's program is planned on a copy of the SPMD module; the
    // global one stays for the artifact's manifest and the report.
    OwningOpRef<ModuleOp> planned = compiled.module->clone();
    ExecPipelineOptions exec;
    exec.rank = rank;
    if (failed(runStage(*planned, options, lowerTiming,
                        "Rank " + std::to_string(rank),
                        [&](PassManager &pm) { buildExecPipeline(pm, exec); })))
      return failure();
    auto plannedMain = planned->lookupSymbol<func::FuncOp>("main");
    FailureOr<ExecProgram> program = translateToExecProgram(plannedMain);
    if (failed(program))
      return failure();
    program->timeline = estimateExecTimeline(plannedMain, cluster);
    compiled.programs.push_back(std::move(*program));
  }
  return success();
}

LogicalResult ProgramCompiler::run(KvCacheForm form, CompiledModule &compiled,
                                   bool &stopped) {
  stopped = false;
  if (failed(importModel(form, compiled)))
    return failure();
  if (options.emit == EmitStage::Import)
    return success();
  ModuleOp module = *compiled.module;
  // Planning changes the phases that follow (a mesh, or one device): the
  // next phase is looked up after each.
  std::optional<EmitStage> done;
  for (;;) {
    if (options.autoMesh && !result.plan)
      result.plan.emplace();
    SmallVector<PassPhase> phases =
        passPhases(options, result.plan ? &*result.plan : nullptr);
    const PassPhase *next = llvm::find_if(
        phases, [&](const PassPhase &p) { return !done || p.emit > *done; });
    if (next == phases.end())
      break;
    const PassPhase &phase = *next;
    done = phase.emit;
    if (failed(runPassPhase(module, phase)))
      return failure();
    if (phase.emit == EmitStage::NN)
      compiled.model = summarizeModel(compiled.main);
    if (phase.emit == EmitStage::Plan) {
      if (failed(finishPlanning(module, stopped)))
        return failure();
      if (stopped)
        return success();
    }
    if (phase.emit == EmitStage::Dist && options.explain) {
      compiled.weightLines = describeWeights(compiled.main);
      if (auto module = compiled.main->getParentOfType<ModuleOp>())
        for (auto mesh : module.getOps<dist::MeshOp>())
          compiled.choiceLines = describeSplitChoices(compiled.main, mesh);
    }
  }
  if (options.emit <= EmitStage::Local)
    return success();
  return lowerRanks(compiled);
}

/// Prints each rank's program as text, `# rank N` before each of several.
void printPrograms(ArrayRef<ExecProgram> programs, llvm::raw_ostream &os) {
  for (auto [rank, exec] : llvm::enumerate(programs)) {
    std::string one;
    google::protobuf::TextFormat::PrintToString(exec.program, &one);
    if (programs.size() > 1)
      os << "# rank " << rank << "\n";
    os << one;
  }
}

/// Prints each rank's CUDA module, `// ===== rank N =====` before each of
/// several, a rank whose module equals an earlier one's naming it instead.
void printCudaSources(ArrayRef<std::string> sources, llvm::raw_ostream &os) {
  for (auto [rank, source] : llvm::enumerate(sources)) {
    const std::string *same = llvm::find(sources, source);
    if (sources.size() > 1)
      os << "// ===== rank " << rank << " =====\n";
    if (same != sources.begin() + rank)
      os << "// the module of rank " << (same - sources.begin()) << "\n";
    else
      os << source;
  }
}

/// Builds each distinct source once (`built` keeps what was built) and
/// appends every rank's module to `modules`.
LogicalResult buildCudaModules(MLIRContext &context,
                               ArrayRef<std::string> sources,
                               const cudatarget::NvccOptions &nvcc,
                               std::map<std::string, CudaModule> &built,
                               std::vector<CudaModule> &modules) {
  for (const std::string &source : sources) {
    auto [it, fresh] = built.try_emplace(source);
    if (fresh) {
      llvm::Expected<cudatarget::Fatbin> fatbin =
          cudatarget::buildFatbin(source, nvcc);
      if (!fatbin)
        return fail(context, llvm::toString(fatbin.takeError()));
      it->second = {source, std::move(fatbin->bytes),
                    std::move(fatbin->ptxasLog)};
    }
    modules.push_back(it->second);
  }
  return success();
}

/// An If whose condition reads the sequence lengths (Phi-3.5's choice of
/// rotary tables past its original positions) folds once for the prompt's
/// length and once for the cache's: where the two programs picked
/// different branches, a decode step would compute every length with the
/// branch of the longest, a wrong answer for the others.
LogicalResult checkSameBranches(MLIRContext &context,
                                const DriverOptions &options, ModuleOp prefill,
                                ModuleOp decode) {
  auto prefillBranches =
      prefill->getAttrOfType<DictionaryAttr>(kIfBranchesAttrName);
  auto decodeBranches =
      decode->getAttrOfType<DictionaryAttr>(kIfBranchesAttrName);
  if (!prefillBranches || !decodeBranches)
    return success();
  for (NamedAttribute pick : prefillBranches) {
    auto other = decodeBranches.getAs<BoolAttr>(pick.getName().getValue());
    bool then = cast<BoolAttr>(pick.getValue()).getValue();
    if (!other || other.getValue() == then)
      continue;
    auto branch = [](bool picked) { return picked ? "then" : "else"; };
    return fail(context,
                "--max-seq " + std::to_string(options.maxSeq) + ": the If '" +
                    pick.getName().getValue().str() + "' picks its " +
                    branch(then) + " branch for the prompt and its " +
                    branch(!then) + " branch for a cache of " +
                    std::to_string(options.maxSeq) +
                    " positions, and a decode step computes every length "
                    "with one branch: choose --max-seq and the prompt "
                    "length on the same side of its condition");
  }
  return success();
}

/// --max-seq: the prefill and the decode program of a decoder export, in
/// one artifact over the same weights and KV cache.
LogicalResult runServingCompiler(MLIRContext &context, DriverOptions &options,
                                 DriverResult &result, TimingScope &root,
                                 ClusterModel &cluster) {
  bool cuda = options.target == Target::CUDA || options.emit == EmitStage::CUDA;
  if (options.spMode != SequenceMode::None || options.mesh.roleSize("sp") > 1)
    return fail(context, "--max-seq does not combine with sequence "
                         "parallelism: a decode step has one token");
  // The decode program in a context of its own (ChildContext).
  ChildContext child(context);
  MLIRContext &decodeContext = child.context;
  CompiledModule prefill, decode;
  // The decode objectives plan on the decode program: it compiles first,
  // and the prefill with what planning chose.
  bool decodeFirst = options.autoMesh && isDecodeObjective(options.objective);
  for (bool isDecode : {decodeFirst, !decodeFirst}) {
    TimingScope timing = root.nest(isDecode ? "Decode" : "Prefill");
    ProgramCompiler compiler(isDecode ? decodeContext : context, options,
                             cluster, result, timing);
    bool stopped = false;
    if (failed(
            compiler.run(isDecode ? KvCacheForm::Decode : KvCacheForm::Prefill,
                         isDecode ? decode : prefill, stopped)))
      return failure();
    if (stopped)
      return success();
  }
  if (failed(
          checkSameBranches(context, options, *prefill.module, *decode.module)))
    return failure();
  // CUDA: kernels for both programs of every rank. The decode module's
  // functions are named apart (partita_decode_*), so that both modules
  // load into the rank's one device.
  std::vector<std::string> prefillSources, decodeSources;
  if (cuda && options.emit >= EmitStage::Exec) {
    TimingScope cudaTiming = root.nest("CUDA code generation");
    PhaseClock clock(result, "cuda");
    for (auto [programs, sources, prefix] :
         {std::tuple(&prefill.programs, &prefillSources, "partita_"),
          std::tuple(&decode.programs, &decodeSources, "partita_decode_")}) {
      cudatarget::CodeGenOptions codegen;
      codegen.functionPrefix = prefix;
      for (auto [rank, exec] : llvm::enumerate(*programs)) {
        llvm::Expected<std::string> source =
            cudatarget::generateCudaSource(exec.program, codegen);
        if (!source)
          return fail(context,
                      "rank " + std::to_string(rank) + " (" +
                          (sources == &prefillSources ? "prefill" : "decode") +
                          "): " + llvm::toString(source.takeError()));
        sources->push_back(std::move(*source));
      }
    }
  }
  if (options.emit == EmitStage::CUDA) {
    llvm::raw_ostream &os = *options.emitStream;
    for (auto [title, sources] : {std::pair("prefill", &prefillSources),
                                  std::pair("decode", &decodeSources)}) {
      os << "// ----- " << title << " -----\n";
      printCudaSources(*sources, os);
    }
    return success();
  }
  if (options.emit <= EmitStage::Local || options.emit == EmitStage::Exec) {
    llvm::raw_ostream &os = *options.emitStream;
    os << "// ----- prefill -----\n";
    if (options.emit == EmitStage::Exec)
      printPrograms(prefill.programs, os);
    else
      printModule(*prefill.module, os);
    os << "// ----- decode -----\n";
    if (options.emit == EmitStage::Exec)
      printPrograms(decode.programs, os);
    else
      printModule(*decode.module, os);
    return success();
  }
  // Both programs must fit; the report keeps the prefill's figures (its
  // activations are the larger).
  if (result.plan &&
      (failed(checkCompiledPlan(context, *result.plan, decode.programs)) ||
       failed(checkCompiledPlan(context, *result.plan, prefill.programs))))
    return failure();
  if (options.explain)
    result.explanation = explanation(prefill.weightLines, prefill.choiceLines,
                                     prefill.programs.front());
  ServingPrograms serving{decode.main, decode.programs, options.maxSeq};
  if (!options.reportFile.empty() &&
      failed(writeReport(prefill.model, prefill.main, prefill.programs, cluster,
                         result.plan ? &*result.plan : nullptr,
                         options.reportFile, &serving)))
    return failure();
  if (!options.traceFile.empty() &&
      failed(writeTrace(prefill.main, prefill.programs, options.traceFile)))
    return failure();
  TimingScope writeTiming = root.nest("Artifact");
  PhaseClock clock(result, "emit");
  ArtifactOptions artifact;
  artifact.target = cuda ? "cuda" : "host";
  artifact.compileOptions = recordedOptions(options);
  if (cuda) {
    cudatarget::NvccOptions nvcc;
    if (failed(parseCudaArchs(context, options, nvcc)))
      return failure();
    artifact.compileOptions["cuda-arch"] = llvm::join(nvcc.archs, ",");
    artifact.cudaArchs = nvcc.archs;
    std::map<std::string, CudaModule> built;
    if (failed(buildCudaModules(context, prefillSources, nvcc, built,
                                artifact.cudaModules)) ||
        failed(buildCudaModules(context, decodeSources, nvcc, built,
                                artifact.decodeCudaModules)))
      return failure();
  }
  return writeArtifact(prefill.main, prefill.programs, artifact, options.output,
                       &serving);
}

} // namespace

LogicalResult mlir::partita::runCompiler(MLIRContext &context,
                                         const DriverOptions &given,
                                         DriverResult &result,
                                         TimingScope &root) {
  // Checked here, once: the mesh's roles are spelled out.
  DriverOptions options = given;
  if (options.emit == EmitStage::Artifact && options.output.empty())
    return fail(context, "give the artifact directory with -o ART, or print "
                         "a stage with --emit nn|dist|local|exec|cuda");
  if (options.emit != EmitStage::Artifact && !options.emitStream)
    return fail(context, "no stream to print the --emit stage to");
  if (failed(checkOptions(context, options)))
    return failure();
  bool cuda = options.target == Target::CUDA || options.emit == EmitStage::CUDA;
  cudatarget::NvccOptions nvcc;
  if (failed(parseCudaArchs(context, options, nvcc)))
    return failure();
  ClusterModel cluster;
  if (failed(readCluster(context, options, cluster)))
    return failure();
  if (options.maxSeq > 0 && options.emit != EmitStage::Import)
    return runServingCompiler(context, options, result, root, cluster);

  CompiledModule compiled;
  bool stopped = false;
  ProgramCompiler compiler(context, options, cluster, result, root);
  if (failed(compiler.run(options.maxSeq > 0 ? KvCacheForm::Prefill
                                             : KvCacheForm::None,
                          compiled, stopped)))
    return failure();
  if (stopped)
    return success();
  if (options.emit <= EmitStage::Local) {
    printModule(*compiled.module, *options.emitStream);
    return success();
  }
  func::FuncOp main = compiled.main;
  std::vector<ExecProgram> &programs = compiled.programs;
  std::optional<Plan> &plan = result.plan;
  if (plan && failed(checkCompiledPlan(context, *plan, programs)))
    return failure();
  if (options.explain)
    result.explanation = explanation(compiled.weightLines, compiled.choiceLines,
                                     programs.front());
  if (!options.reportFile.empty() &&
      failed(writeReport(compiled.model, main, programs, cluster,
                         plan ? &*plan : nullptr, options.reportFile)))
    return failure();
  if (!options.traceFile.empty() &&
      failed(writeTrace(main, programs, options.traceFile)))
    return failure();

  // CUDA: kernels for every rank (filling in how each instruction runs on
  // the device), then one nvcc build per distinct source.
  std::vector<std::string> cudaSources;
  if (cuda) {
    TimingScope cudaTiming = root.nest("CUDA code generation");
    PhaseClock clock(result, "cuda");
    for (auto [rank, exec] : llvm::enumerate(programs)) {
      llvm::Expected<std::string> source =
          cudatarget::generateCudaSource(exec.program, {});
      if (!source)
        return fail(context, "rank " + std::to_string(rank) + ": " +
                                 llvm::toString(source.takeError()));
      cudaSources.push_back(std::move(*source));
    }
  }
  if (options.emit == EmitStage::CUDA) {
    printCudaSources(cudaSources, *options.emitStream);
    return success();
  }
  if (options.emit == EmitStage::Exec) {
    printPrograms(programs, *options.emitStream);
    return success();
  }

  TimingScope writeTiming = root.nest("Artifact");
  PhaseClock clock(result, "emit");
  ArtifactOptions artifact;
  artifact.target = cuda ? "cuda" : "host";
  artifact.compileOptions = recordedOptions(options);
  if (options.train)
    artifact.training = describeTrainingStep(options);
  if (cuda) {
    artifact.compileOptions["cuda-arch"] = llvm::join(nvcc.archs, ",");
    artifact.cudaArchs = nvcc.archs;
    std::map<std::string, CudaModule> built;
    if (failed(buildCudaModules(context, cudaSources, nvcc, built,
                                artifact.cudaModules)))
      return failure();
  }
  return writeArtifact(main, programs, artifact, options.output);
}

FailureOr<std::string>
mlir::partita::describePipeline(MLIRContext &context,
                                const DriverOptions &given) {
  DriverOptions options = given;
  if (failed(checkOptions(context, options)))
    return failure();
  // --mesh auto: the phases up to planning run (they read shapes, never
  // weights), so that the later phases print with what the plan chose.
  DriverOptions planned = options;
  if (options.autoMesh) {
    ClusterModel cluster;
    if (failed(readCluster(context, options, cluster)))
      return failure();
    planned.emit = std::max(options.emit, EmitStage::Dist);
    DriverResult scratch;
    DefaultTimingManager timing;
    TimingScope root = timing.getRootScope();
    ChildContext child(context);
    ProgramCompiler compiler(child.context, planned, cluster, scratch, root);
    compiler.stopAfterPlanning = true;
    bool stopped = false;
    KvCacheForm form = isDecodeObjective(options.objective)
                           ? KvCacheForm::Decode
                       : options.maxSeq > 0 ? KvCacheForm::Prefill
                                            : KvCacheForm::None;
    CompiledModule compiled;
    if (failed(compiler.run(form, compiled, stopped)))
      return failure();
    planned.emit = options.emit;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  StringRef previous = "--emit import";
  auto print = [&](const PassPhase &phase, const DriverOptions &with) {
    PipelineOptions pipeline;
    pipeline.assign(with);
    if (with.emit == EmitStage::CUDA)
      pipeline.target.assign(Target::CUDA);
    PassManager pm(&context, ModuleOp::getOperationName());
    phase.build(pm, pipeline);
    std::string stage =
        phase.emit == EmitStage::Plan
            ? std::string("plan")
            : "--emit " + std::string(::partita::optionName(phase.emit));
    os << "// " << stage << ", on " << previous << "'s output\n";
    pm.printAsTextualPipeline(os);
    os << "\n";
    previous = phase.emit == EmitStage::Plan   ? "plan"
               : phase.emit == EmitStage::NN   ? "--emit nn"
               : phase.emit == EmitStage::Dist ? "--emit dist"
                                               : "--emit local";
  };
  for (const PassPhase &phase : passPhases(options, nullptr))
    print(phase, options);
  if (options.autoMesh)
    for (const PassPhase &phase : passPhases(planned, nullptr))
      if (phase.emit > EmitStage::Plan)
        print(phase, planned);
  if (options.emit < EmitStage::Exec)
    return text;
  // The exec stage plans each rank on its own copy of the previous stage's
  // output; partita-translate --exec-to-proto then writes the program.
  int64_t worldSize = planned.mesh.deviceCount();
  for (int64_t rank = 0; rank < worldSize; ++rank) {
    ExecPipelineOptions exec;
    exec.rank = rank;
    PassManager pm(&context, ModuleOp::getOperationName());
    buildExecPipeline(pm, exec);
    os << "// --emit exec of rank " << rank << ", on " << previous
       << "'s output, then partita-translate --exec-to-proto\n";
    pm.printAsTextualPipeline(os);
    os << "\n";
  }
  return text;
}
