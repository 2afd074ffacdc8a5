//===- partita-compile.cpp - the Partita compiler driver ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// partita-compile MODEL.onnx -o ART [--mesh dp=2,tp=2] [--bind name=value,...]
//                 [--target host|cuda] [--dtype fp32|bf16|fp16]
//                 [--cuda-arch sm_80,sm_90a] [--report FILE.json] [--explain]
// partita-compile MODEL.onnx --emit import|nn|dist|local|exec|cuda [-o FILE]
// partita-compile MODEL.onnx [options] --dump-pipeline
//
// Imports an ONNX model (binary or textual syntax), runs the pipeline up to
// the requested stage, and writes the artifact or prints the stage. Errors
// are diagnostics on stderr located at the ONNX node; the exit status is 1
// on any error, and nothing is left at -o. --dump-pipeline prints the pass
// pipelines the options select, which partita-opt replays.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "partita/Driver/Driver.h"
#include "partita/Pipelines/OptionParser.h"
#include "partita/Support/Version.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cmath>
#include <optional>

using namespace mlir;
using namespace mlir::partita;
namespace cl = llvm::cl;

namespace {

/// The options --help shows: Partita's own. LLVM's and MLIR's (code
/// generation targets, IR printing, pass timing) stay usable, e.g.
/// --mlir-timing, and --help-hidden lists them.
cl::OptionCategory partitaCategory("Partita options");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                               cl::Required, cl::cat(partitaCategory));
cl::opt<std::string>
    outputFile("o",
               cl::desc("The artifact directory, or with --emit the file to "
                        "print to (default: stdout)"),
               cl::value_desc("path"), cl::init(""), cl::cat(partitaCategory));
cl::opt<EmitStage> emit(
    "emit", cl::desc("Stop after a stage and print it"),
    cl::values(clEnumValN(EmitStage::Import, "import", "nn IR as imported"),
               clEnumValN(EmitStage::NN, "nn", "raised nn IR"),
               clEnumValN(EmitStage::Plan, "plan",
                          "the plan --mesh auto chooses (no compilation)"),
               clEnumValN(EmitStage::Dist, "dist", "nn with shardings"),
               clEnumValN(EmitStage::Local, "local", "per-rank local programs"),
               clEnumValN(EmitStage::Exec, "exec", "executable programs"),
               clEnumValN(EmitStage::CUDA, "cuda", "generated CUDA"),
               clEnumValN(EmitStage::Artifact, "artifact", "the artifact")),
    cl::init(EmitStage::Artifact), cl::cat(partitaCategory));
cl::opt<Target> target("target", cl::desc("Back end"), optionValues<Target>(),
                       cl::init(Target::Host), cl::cat(partitaCategory));
cl::opt<StorageType>
    dtype("dtype",
          cl::desc("Storage type of the model's fp32 tensors (weights, "
                   "activations, transfers); arithmetic accumulates in fp32 "
                   "whatever it is"),
          optionValues<StorageType>(), cl::init(StorageType::FP32),
          cl::cat(partitaCategory));
cl::opt<std::string>
    cudaArch("cuda-arch",
             cl::desc("GPU architectures the fatbin holds code for "
                      "(--target cuda)"),
             cl::value_desc("sm_80,sm_90a"), cl::init("sm_80,sm_90a"),
             cl::cat(partitaCategory));
cl::list<std::string>
    bindings("bind", cl::desc("Values of symbolic dimensions: name=value,..."),
             cl::value_desc("name=value"), cl::CommaSeparated,
             cl::cat(partitaCategory));
cl::opt<std::string> reportFile("report",
                                cl::desc("Write the plan (partita-report/1) as "
                                         "JSON to this file"),
                                cl::value_desc("FILE.json"), cl::init(""),
                                cl::cat(partitaCategory));
cl::opt<std::string>
    meshText("mesh",
             cl::desc("Mesh axes, sizes and roles (dp, tp, pp, sp; implied "
                      "by those names), e.g. dp=2,tp=4 or model=4:tp, or "
                      "auto: the planner chooses for --devices on --cluster "
                      "(default: one device)"),
             cl::value_desc("axis=size[:role],...|auto"), cl::init(""),
             cl::cat(partitaCategory));
cl::opt<int64_t> devices("devices",
                         cl::desc("With --mesh auto: how many devices "
                                  "(default: the cluster's)"),
                         cl::init(0), cl::cat(partitaCategory));
cl::opt<std::string> objective(
    "objective",
    cl::desc("With --mesh auto: minimize one batch's time "
             "(latency) or the time per batch of a stream of "
             "batches (throughput); with --max-seq, a decode "
             "step's time (decode-latency) or maximize tokens per "
             "second at the largest batch that fits "
             "(decode-throughput)"),
    cl::value_desc("latency|throughput|decode-latency|decode-throughput"),
    cl::init("latency"), cl::cat(partitaCategory));
cl::opt<std::string> deviceMemory(
    "device-memory",
    cl::desc("With --mesh auto: the memory of one device in bytes, e.g. "
             "80e9, 80GB or 80GiB (default: the cluster's)"),
    cl::value_desc("BYTES"), cl::init(""), cl::cat(partitaCategory));
cl::opt<bool> explainPlan("explain-plan",
                          cl::desc("With --mesh auto: print the ten best "
                                   "plans and why the others lost"),
                          cl::cat(partitaCategory));
cl::opt<Strategy> strategy("strategy", cl::desc("How the mesh is used"),
                           optionValues<Strategy>(),
                           cl::init(Strategy::Megatron),
                           cl::cat(partitaCategory));
cl::opt<SequenceMode> spMode("sp-mode", cl::desc("Sequence parallelism"),
                             optionValues<SequenceMode>(),
                             cl::init(SequenceMode::None),
                             cl::cat(partitaCategory));
cl::opt<int64_t>
    microbatches("microbatches",
                 cl::desc("Microbatches each pipeline stage runs in turn "
                          "(needs a pp axis; divides the batch)"),
                 cl::init(1), cl::cat(partitaCategory));
cl::opt<int64_t> maxSeq(
    "max-seq",
    cl::desc("A decoder export with past key values: compile a prefill "
             "(--bind's sequence) and a decode program over one KV cache of "
             "this many tokens per sequence, for partita-run --generate"),
    cl::value_desc("L"), cl::init(0), cl::cat(partitaCategory));
cl::opt<int64_t> virtualStages(
    "virtual-stages",
    cl::desc("Pipeline chunks per rank: the interleaved schedule (microbatches "
             "a multiple of pp)"),
    cl::init(1), cl::cat(partitaCategory));
cl::opt<std::string>
    clusterFile("cluster",
                cl::desc("The machine: a preset (a100-80g, h100-80g, "
                         "h200-141g or default, with an optional "
                         ":NODESxGPUS suffix) or a JSON file of device rate "
                         "and memory, link latency and bandwidth per class "
                         "or mesh axis (default: the 'default' preset, "
                         "H100-class devices, NVLink within a node for "
                         "tp/sp, InfiniBand across for dp/pp)"),
                cl::value_desc("PRESET[:NODESxGPUS]|FILE.json"), cl::init(""),
                cl::cat(partitaCategory));
cl::opt<CollectiveMatmulMode> collectiveMatmul(
    "collective-matmul",
    cl::desc("Pipeline tensor-parallel matmuls with their all-gather / "
             "reduce-scatter"),
    optionValues<CollectiveMatmulMode>(), cl::init(CollectiveMatmulMode::Auto),
    cl::cat(partitaCategory));
cl::opt<bool> noOverlap("no-overlap",
                        cl::desc("Keep collectives synchronous (to compare "
                                 "with the default async start/wait)"),
                        cl::init(false), cl::cat(partitaCategory));
cl::opt<std::string>
    traceFile("trace",
              cl::desc("Write the pipeline schedule, timed by the schedule "
                       "simulator with the cost model, as Chrome trace-event "
                       "JSON (Perfetto opens it)"),
              cl::value_desc("FILE.json"), cl::init(""),
              cl::cat(partitaCategory));
cl::opt<bool> explain("explain",
                      cl::desc("Print each weight's sharding and each "
                               "collective with the reason it was inserted"),
                      cl::init(false), cl::cat(partitaCategory));
cl::opt<bool> noRaise("no-raise",
                      cl::desc("Print the nn ops as imported, unraised"),
                      cl::init(false), cl::cat(partitaCategory));
cl::opt<bool> dumpPipeline(
    "dump-pipeline",
    cl::desc("Print the pass pipeline of each stage these options run "
             "(partita-opt --pass-pipeline=... replays it) and exit"),
    cl::init(false), cl::cat(partitaCategory));

/// Parses --bind into `options`; reports malformed entries.
LogicalResult parseBindings(std::map<std::string, int64_t> &parsed) {
  for (const std::string &entry : bindings) {
    StringRef text(entry);
    auto [name, value] = text.split('=');
    int64_t n;
    if (name.empty() || value.empty() || value.getAsInteger(10, n) || n <= 0) {
      llvm::errs() << "partita-compile: error: --bind expects name=value with "
                      "a positive integer value, got '"
                   << entry << "'\n";
      return failure();
    }
    if (!parsed.try_emplace(name.str(), n).second) {
      llvm::errs() << "partita-compile: error: --bind gives '" << name
                   << "' twice\n";
      return failure();
    }
  }
  return success();
}

/// `80e9`, `80GB` (10^9) or `80GiB` (2^30), and k/M/G/T, Ki/Mi/Gi/Ti with or
/// without B; unset unless positive and finite.
std::optional<double> parseByteCount(llvm::StringRef text) {
  text = text.trim();
  size_t digits = text.find_first_not_of("0123456789.eE+-");
  // An exponent's e must not swallow a suffix: 8e9 is a number, 8EiB is not.
  llvm::StringRef number = text.substr(0, digits), suffix = text.substr(digits);
  double value;
  if (number.empty() || number.getAsDouble(value) || !std::isfinite(value) ||
      value <= 0)
    return std::nullopt;
  suffix.consume_back("B");
  static const std::pair<llvm::StringRef, double> kUnits[] = {
      {"", 1},
      {"k", 1e3},
      {"K", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
      {"Ki", 1024.0},
      {"Mi", 1048576.0},
      {"Gi", 1073741824.0},
      {"Ti", 1099511627776.0}};
  for (auto [unit, scale] : kUnits)
    if (suffix == unit)
      return value * scale;
  return std::nullopt;
}

/// --cluster names a preset unless it names a file: an existing path, or
/// anything spelled like one (a '/' or a .json suffix), which is then read
/// and its error reported as a file's.
bool isClusterPreset(llvm::StringRef value) {
  return !llvm::sys::fs::exists(value) && !value.contains('/') &&
         !value.ends_with(".json");
}

int compile(MLIRContext &context) {
  DriverOptions options;
  if (failed(parseBindings(options.bindings)))
    return 1;
  options.input = inputFile;
  options.emit = emit;
  options.output = emit == EmitStage::Artifact ? outputFile.getValue() : "";
  options.target = target;
  if (llvm::StringRef(meshText).trim() == "auto") {
    options.autoMesh = true;
  } else if (!llvm::StringRef(meshText).trim().empty()) {
    std::string error;
    FailureOr<dist::MeshAxes> axes = dist::parseMeshAxes(meshText, error);
    if (failed(axes)) {
      llvm::errs() << "partita-compile: error: --mesh " << meshText << ": "
                   << error << "\n";
      return 1;
    }
    options.mesh.axes = std::move(*axes);
  }
  options.devices = devices;
  if (std::optional<PlanObjective> parsed =
          ::partita::parseOption<PlanObjective>(objective)) {
    options.objective = *parsed;
  } else {
    llvm::errs() << "partita-compile: error: "
                 << ::partita::badOptionMessage<PlanObjective>(objective)
                 << "\n";
    return 1;
  }
  if (!deviceMemory.empty()) {
    std::optional<double> bytes = parseByteCount(deviceMemory);
    if (!bytes) {
      llvm::errs() << "partita-compile: error: --device-memory expects a "
                      "positive byte count such as 80e9, 80GB or 80GiB, got '"
                   << deviceMemory << "'\n";
      return 1;
    }
    options.deviceMemoryBytes = bytes;
  }
  if ((explainPlan || objective.getNumOccurrences() || !deviceMemory.empty()) &&
      !options.autoMesh) {
    llvm::errs() << "partita-compile: error: --explain-plan, --objective and "
                    "--device-memory need --mesh auto\n";
    return 1;
  }
  options.strategy = strategy;
  options.spMode = spMode;
  options.microbatches = microbatches;
  options.virtualStages = virtualStages;
  options.maxSeq = maxSeq;
  options.dtype = dtype;
  options.cudaArch = cudaArch;
  options.overlap = !noOverlap;
  options.collectiveMatmul = collectiveMatmul;
  options.raise = !noRaise;
  options.explain = explain;
  options.reportFile = reportFile;
  options.traceFile = traceFile;
  options.passManagerCommandLine = true;
  if (!clusterFile.empty() && isClusterPreset(clusterFile)) {
    // A preset is a cluster file of one field.
    llvm::json::Object preset{{"preset", clusterFile.getValue()}};
    options.clusterJson =
        llvm::formatv("{0}", llvm::json::Value(std::move(preset)));
    options.clusterSource = clusterFile;
  } else if (!clusterFile.empty()) {
    auto text = llvm::MemoryBuffer::getFile(clusterFile);
    if (!text) {
      llvm::errs() << "partita-compile: error: cannot read --cluster "
                   << clusterFile << ": " << text.getError().message() << "\n";
      return 1;
    }
    options.clusterJson = (*text)->getBuffer().str();
    options.clusterSource = clusterFile;
  }

  if (dumpPipeline) {
    FailureOr<std::string> pipeline = describePipeline(context, options);
    if (failed(pipeline))
      return 1;
    llvm::outs() << *pipeline;
    return 0;
  }

  // The printed stage goes to -o, or stdout, as it is printed; the file is
  // removed if the compile fails.
  std::unique_ptr<llvm::ToolOutputFile> output;
  if (emit != EmitStage::Artifact) {
    std::string error;
    output = openOutputFile(outputFile.empty() ? "-" : outputFile.getValue(),
                            &error);
    if (!output) {
      llvm::errs() << "partita-compile: error: " << error << "\n";
      return 1;
    }
    options.emitStream = &output->os();
  }

  DefaultTimingManager timing;
  applyDefaultTimingManagerCLOptions(timing);
  TimingScope root = timing.getRootScope();
  DriverResult result;
  if (failed(runCompiler(context, options, result, root)))
    return 1;
  // --emit plan printed the table already.
  if (explainPlan && emit != EmitStage::Plan)
    llvm::outs() << result.planExplanation;
  if (explain)
    llvm::outs() << result.explanation;
  if (output)
    output->keep();
  return 0;
}

/// Diagnostics on stderr, one line each (notes indented), e.g.
/// `model.onnx: node '/h.0/attn/MatMul': error: ...`; errors in the options
/// (no location) as `partita-compile: error: ...`.
LogicalResult printDiagnostic(Diagnostic &diag) {
  auto print = [](Diagnostic &d, StringRef indent) {
    llvm::raw_ostream &os = llvm::errs();
    std::string location = formatLocation(d.getLocation());
    os << indent << (location.empty() ? "partita-compile" : location) << ": ";
    switch (d.getSeverity()) {
    case DiagnosticSeverity::Error:
      os << "error: ";
      break;
    case DiagnosticSeverity::Warning:
      os << "warning: ";
      break;
    case DiagnosticSeverity::Note:
      os << "note: ";
      break;
    case DiagnosticSeverity::Remark:
      os << "remark: ";
      break;
    }
    os << d.str() << "\n";
  };
  print(diag, "");
  for (Diagnostic &note : diag.getNotes())
    print(note, "  ");
  return success();
}

/// Hides LLVM's and MLIR's options from --help, as cl::HideUnrelatedOptions
/// does, but leaves them to --help-hidden (which that would not).
void hideOtherOptions() {
  llvm::SmallVector<cl::Option *> listed;
  for (auto &[name, option] : cl::getRegisteredOptions())
    if (option->getOptionHiddenFlag() != cl::ReallyHidden)
      listed.push_back(option);
  cl::HideUnrelatedOptions(partitaCategory);
  for (cl::Option *option : listed)
    if (option->getOptionHiddenFlag() == cl::ReallyHidden)
      option->setHiddenFlag(cl::Hidden);
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  hideOtherOptions();
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "partita-compile " << ::partita::versionString() << "\n";
  });
  optionErrorTool() = "partita-compile";
  cl::ParseCommandLineOptions(argc, argv,
                              "Partita: ONNX transformers to sharded "
                              "programs\n");

  MLIRContext context;
  loadCompilerDialects(context);
  // Users read diagnostics against their ONNX model, not our IR.
  context.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler handler(&context, printDiagnostic);
  return compile(context);
}
