//===- partita-compile.cpp - the Partita compiler driver ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// partita-compile MODEL.onnx -o ART [--mesh dp=2,tp=2] [--bind name=value,...]
//                 [--target host|cuda] [--dtype fp32|bf16|fp16]
//                 [--cuda-arch sm_80,sm_90a] [--report FILE.json] [--explain]
// partita-compile MODEL.onnx --emit nn|dist|local|exec|cuda [-o FILE]
//
// Imports an ONNX model (binary or textual syntax), runs the pipeline up to
// the requested stage, and writes the artifact or prints the stage. Errors
// are diagnostics on stderr located at the ONNX node; the exit status is 1
// on any error, and nothing is left at -o.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "partita/Artifact/Artifact.h"
#include "partita/Conversion/NNToExec/NNToExec.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/Transforms/Passes.h"
#include "partita/Frontend/ONNX/Import.h"
#include "partita/InitAllDialects.h"
#include "partita/Pipelines/Pipelines.h"
#include "partita/Target/CUDA/CodeGen.h"
#include "partita/Target/CUDA/Nvcc.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <google/protobuf/text_format.h>

using namespace mlir;
using namespace mlir::partita;
namespace cl = llvm::cl;
namespace cudatarget = ::partita::target::cuda;

namespace {

enum class EmitStage { NN, Dist, Local, Exec, CUDA, Artifact };

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                               cl::Required);
cl::opt<std::string>
    outputFile("o",
               cl::desc("The artifact directory, or with --emit the file to "
                        "print to (default: stdout)"),
               cl::value_desc("path"), cl::init(""));
cl::opt<EmitStage> emit(
    "emit", cl::desc("Stop after a stage and print it"),
    cl::values(clEnumValN(EmitStage::NN, "nn", "imported, raised nn IR"),
               clEnumValN(EmitStage::Dist, "dist", "nn with shardings"),
               clEnumValN(EmitStage::Local, "local", "per-rank local programs"),
               clEnumValN(EmitStage::Exec, "exec", "executable programs"),
               clEnumValN(EmitStage::CUDA, "cuda", "generated CUDA"),
               clEnumValN(EmitStage::Artifact, "artifact", "the artifact")),
    cl::init(EmitStage::Artifact));
enum class Target { Host, CUDA };
cl::opt<Target>
    target("target", cl::desc("Back end"),
           cl::values(clEnumValN(Target::Host, "host", "CPU ranks"),
                      clEnumValN(Target::CUDA, "cuda", "NVIDIA GPUs")),
           cl::init(Target::Host));
cl::opt<std::string>
    dtype("dtype",
          cl::desc("Storage type of the model's fp32 tensors (weights, "
                   "activations, transfers); arithmetic accumulates in fp32 "
                   "whatever it is"),
          cl::value_desc("fp32|bf16|fp16"), cl::init("fp32"));
cl::opt<std::string>
    cudaArch("cuda-arch",
             cl::desc("GPU architectures the fatbin holds code for "
                      "(--target cuda)"),
             cl::value_desc("sm_80,sm_90a"), cl::init("sm_80,sm_90a"));
cl::list<std::string>
    bindings("bind", cl::desc("Values of symbolic dimensions: name=value,..."),
             cl::value_desc("name=value"), cl::CommaSeparated);
cl::opt<std::string> reportFile("report",
                                cl::desc("Write the plan (partita-report/1) as "
                                         "JSON to this file"),
                                cl::value_desc("FILE.json"), cl::init(""));
cl::opt<std::string>
    meshSpec("mesh",
             cl::desc("Mesh axes and sizes, e.g. dp=2,tp=4 (default: one "
                      "device)"),
             cl::value_desc("axis=size,..."), cl::init(""));
cl::opt<std::string>
    strategy("strategy",
             cl::desc("How the mesh is used: megatron (tp: Megatron tensor "
                      "parallelism, dp: batch) or none (only annotations "
                      "in the IR)"),
             cl::init("megatron"));
cl::opt<std::string>
    spMode("sp-mode",
           cl::desc("Sequence parallelism: megatron (sequence over tp "
                    "outside the tensor-parallel matmuls), ulysses "
                    "(all-to-all around attention over sp) or ring (ring "
                    "attention over sp)"),
           cl::value_desc("megatron|ulysses|ring"), cl::init(""));
cl::opt<int64_t>
    microbatches("microbatches",
                 cl::desc("Microbatches each pipeline stage runs in turn "
                          "(needs a pp axis; divides the batch)"),
                 cl::init(1));
cl::opt<int64_t> virtualStages(
    "virtual-stages",
    cl::desc("Pipeline chunks per rank: the interleaved schedule (microbatches "
             "a multiple of pp)"),
    cl::init(1));
cl::opt<std::string>
    clusterFile("cluster",
                cl::desc("The machine: device rate and bandwidth, link "
                         "latency and bandwidth per class or mesh axis "
                         "(JSON; defaults: H100-class devices, NVLink within "
                         "a node for tp/sp, InfiniBand across for dp/pp)"),
                cl::value_desc("FILE.json"), cl::init(""));
cl::opt<std::string> collectiveMatmul(
    "collective-matmul",
    cl::desc("Pipeline tensor-parallel matmuls with their all-gather / "
             "reduce-scatter: auto (where the cost model says it pays), "
             "always or never"),
    cl::init("auto"));
cl::opt<bool> noOverlap("no-overlap",
                        cl::desc("Keep collectives synchronous (to compare "
                                 "with the default async start/wait)"),
                        cl::init(false));
cl::opt<std::string>
    traceFile("trace",
              cl::desc("Write the pipeline schedule, timed by the schedule "
                       "simulator with the cost model, as Chrome trace-event "
                       "JSON (Perfetto opens it)"),
              cl::value_desc("FILE.json"), cl::init(""));
cl::opt<bool> explain("explain",
                      cl::desc("Print each weight's sharding and each "
                               "collective with the reason it was inserted"),
                      cl::init(false));
cl::opt<bool> noRaise("no-raise",
                      cl::desc("Print the nn ops as imported, unraised"),
                      cl::init(false));

/// Parses --bind into `options`; reports malformed entries.
LogicalResult parseBindings(OnnxImportOptions &options) {
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
    if (!options.bindings.try_emplace(name, n).second) {
      llvm::errs() << "partita-compile: error: --bind gives '" << name
                   << "' twice\n";
      return failure();
    }
  }
  return success();
}

/// Prints `text` to the --emit output (stdout by default).
int printStage(llvm::function_ref<void(llvm::raw_ostream &)> print) {
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFile.empty() ? "-" : outputFile.getValue(), &error);
  if (!output) {
    llvm::errs() << "partita-compile: error: " << error << "\n";
    return 1;
  }
  print(output->os());
  output->keep();
  return 0;
}

/// Runs the passes `build` adds on `module`, timed as `name` under `root`
/// (--mlir-timing) and with MLIR's pass manager flags applied.
LogicalResult runStage(ModuleOp module, TimingScope &root, StringRef name,
                       llvm::function_ref<void(PassManager &)> build) {
  PassManager pm(module.getContext());
  if (failed(applyPassManagerCLOptions(pm)))
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
    auto resource = dyn_cast<DenseResourceElementsAttr>(constant.getValue());
    if (!resource)
      return;
    std::string line;
    llvm::raw_string_ostream os(line);
    os << "  " << resource.getRawHandle().getKey() << "  " << constant.getType()
       << "  "
       << dist::formatSharding(
              dist::getValueSharding(constant.getResult(), mesh));
    lines.push_back(line);
  });
  return lines;
}

/// The --explain listing: weights, then rank 0's collectives in program
/// order with the op that needed each.
void printExplanation(ArrayRef<std::string> weights, const ExecProgram &rank0) {
  llvm::raw_ostream &os = llvm::outs();
  os << "weights (name, global type, sharding):\n";
  for (const std::string &line : weights)
    os << line << "\n";
  os << "collectives of rank 0 (kind, axes, payload bytes, reason):\n";
  for (const ExecCollectiveStat &c : rank0.collectives) {
    os << "  " << c.kind << " [";
    llvm::interleaveComma(c.axes, os);
    os << "]  " << c.payload << "  " << c.reason << "\n";
  }
}

int compile(MLIRContext &context) {
  OnnxImportOptions options;
  if (failed(parseBindings(options)))
    return 1;
  bool cuda = target == Target::CUDA || emit == EmitStage::CUDA;
  cudatarget::NvccOptions nvcc;
  if (llvm::Error error = cudatarget::parseCudaArchs(cudaArch, nvcc.archs)) {
    llvm::errs() << "partita-compile: error: --cuda-arch " << cudaArch << ": "
                 << llvm::toString(std::move(error)) << "\n";
    return 1;
  }
  if (emit == EmitStage::Artifact && outputFile.empty()) {
    llvm::errs() << "partita-compile: error: give the artifact directory with "
                    "-o ART, or print a stage with --emit "
                    "nn|dist|local|exec|cuda\n";
    return 1;
  }
  if (!meshSpec.empty()) {
    std::string error;
    if (failed(dist::parseMeshAxes(meshSpec, error))) {
      llvm::errs() << "partita-compile: error: --mesh " << meshSpec << ": "
                   << error << "\n";
      return 1;
    }
  }
  if (collectiveMatmul != "auto" && collectiveMatmul != "always" &&
      collectiveMatmul != "never") {
    llvm::errs() << "partita-compile: error: --collective-matmul expects "
                    "auto, always or never, got '"
                 << collectiveMatmul << "'\n";
    return 1;
  }
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16") {
    llvm::errs() << "partita-compile: error: --dtype expects fp32, bf16 or "
                    "fp16, got '"
                 << dtype << "'\n";
    return 1;
  }
  if (strategy != "megatron" && strategy != "none") {
    llvm::errs() << "partita-compile: error: --strategy expects megatron or "
                    "none, got '"
                 << strategy << "'\n";
    return 1;
  }

  DefaultTimingManager timing;
  applyDefaultTimingManagerCLOptions(timing);
  TimingScope root = timing.getRootScope();

  OwningOpRef<ModuleOp> module;
  {
    TimingScope importTiming = root.nest("ONNX import");
    module = importOnnxFile(&context, inputFile, options);
  }
  if (!module)
    return 1;

  NNPipelineOptions nnOptions;
  nnOptions.raise = !noRaise;
  if (failed(runStage(*module, root, "Pipeline", [&](PassManager &pm) {
        buildNNPipeline(pm, nnOptions);
        if (dtype != "fp32") {
          ConvertFloatPassOptions convert;
          convert.to = dtype == "bf16" ? "bf16" : "f16";
          pm.nest<func::FuncOp>().addPass(createConvertFloatPass(convert));
        }
      })))
    return 1;

  if (emit == EmitStage::NN)
    return printStage([&](llvm::raw_ostream &os) { module->print(os); });

  auto main = module->lookupSymbol<func::FuncOp>("main");
  ModelSummary model = summarizeModel(main);
  std::vector<std::string> weightLines;
  int64_t worldSize = 1;
  if (!meshSpec.empty()) {
    ShardPipelineOptions shardOptions;
    shardOptions.mesh = meshSpec;
    shardOptions.strategy = strategy;
    shardOptions.spMode = spMode;
    if (failed(runStage(*module, root, "Sharding plan", [&](PassManager &pm) {
          buildPlanPipeline(pm, shardOptions);
        })))
      return 1;
    if (emit == EmitStage::Dist)
      return printStage([&](llvm::raw_ostream &os) { module->print(os); });
    if (explain)
      weightLines = describeWeights(main);

    if (failed(runStage(*module, root, "Partition", [](PassManager &pm) {
          buildPartitionPipeline(pm, microbatches, virtualStages, !noOverlap,
                                 collectiveMatmul);
        })))
      return 1;
    for (auto mesh : module->getOps<dist::MeshOp>())
      worldSize = mesh.getNumDevices();
  } else if (emit == EmitStage::Dist) {
    return printStage([&](llvm::raw_ostream &os) { module->print(os); });
  }
  if (emit == EmitStage::Local)
    return printStage([&](llvm::raw_ostream &os) { module->print(os); });

  ClusterModel cluster;
  if (!clusterFile.empty()) {
    auto text = llvm::MemoryBuffer::getFile(clusterFile);
    if (!text) {
      llvm::errs() << "partita-compile: error: cannot read --cluster "
                   << clusterFile << ": " << text.getError().message() << "\n";
      return 1;
    }
    llvm::Expected<ClusterModel> parsed =
        ClusterModel::fromJson((*text)->getBuffer());
    if (!parsed) {
      llvm::errs() << "partita-compile: error: --cluster " << clusterFile
                   << ": " << llvm::toString(parsed.takeError()) << "\n";
      return 1;
    }
    cluster = std::move(*parsed);
  }
  ExecLoweringOptions lowering;
  lowering.cluster = &cluster;
  std::vector<ExecProgram> programs;
  {
    TimingScope lowerTiming = root.nest("Exec lowering");
    for (int64_t rank = 0; rank < worldSize; ++rank) {
      FailureOr<ExecProgram> exec = lowerToExecProgram(
          main, static_cast<int>(rank), static_cast<int>(worldSize), lowering);
      if (failed(exec))
        return 1;
      programs.push_back(std::move(*exec));
    }
  }
  if (explain)
    printExplanation(weightLines, programs.front());
  if (!reportFile.empty() &&
      failed(writeReport(model, main, programs, reportFile.getValue())))
    return 1;
  if (!traceFile.empty() &&
      failed(writeTrace(main, programs, traceFile.getValue())))
    return 1;
  // CUDA: kernels for every rank (filling in how each instruction runs on
  // the device), then one nvcc build per distinct source.
  std::vector<std::string> cudaSources;
  if (cuda) {
    TimingScope cudaTiming = root.nest("CUDA code generation");
    for (auto [rank, exec] : llvm::enumerate(programs)) {
      llvm::Expected<std::string> source =
          cudatarget::generateCudaSource(exec.program, {});
      if (!source) {
        llvm::errs() << "partita-compile: error: rank " << rank << ": "
                     << llvm::toString(source.takeError()) << "\n";
        return 1;
      }
      cudaSources.push_back(std::move(*source));
    }
  }
  if (emit == EmitStage::CUDA) {
    std::string text;
    for (auto [rank, source] : llvm::enumerate(cudaSources)) {
      auto same = llvm::find(cudaSources, source);
      if (cudaSources.size() > 1)
        text += "// ===== rank " + std::to_string(rank) + " =====\n";
      if (same != cudaSources.begin() + rank)
        text += "// the module of rank " +
                std::to_string(same - cudaSources.begin()) + "\n";
      else
        text += source;
    }
    return printStage([&](llvm::raw_ostream &os) { os << text; });
  }
  if (emit == EmitStage::Exec) {
    std::string text;
    for (auto [rank, exec] : llvm::enumerate(programs)) {
      std::string one;
      google::protobuf::TextFormat::PrintToString(exec.program, &one);
      if (programs.size() > 1)
        text += "# rank " + std::to_string(rank) + "\n";
      text += one;
    }
    return printStage([&](llvm::raw_ostream &os) { os << text; });
  }

  TimingScope writeTiming = root.nest("Artifact");
  ArtifactOptions artifact;
  artifact.target = cuda ? "cuda" : "host";
  artifact.compileOptions["source"] = inputFile;
  artifact.compileOptions["target"] = artifact.target;
  if (cuda) {
    artifact.compileOptions["cuda-arch"] = llvm::join(nvcc.archs, ",");
    artifact.cudaArchs = nvcc.archs;
    std::map<std::string, CudaModule> built;
    for (const std::string &source : cudaSources) {
      auto [it, fresh] = built.try_emplace(source);
      if (fresh) {
        llvm::Expected<cudatarget::Fatbin> fatbin =
            cudatarget::buildFatbin(source, nvcc);
        if (!fatbin) {
          llvm::errs() << "partita-compile: error: "
                       << llvm::toString(fatbin.takeError()) << "\n";
          return 1;
        }
        it->second = {source, std::move(fatbin->bytes),
                      std::move(fatbin->ptxasLog)};
      }
      artifact.cudaModules.push_back(it->second);
    }
  }
  std::string bound;
  for (const std::string &entry : bindings)
    bound += (bound.empty() ? "" : ",") + entry;
  if (!bound.empty())
    artifact.compileOptions["bind"] = bound;
  if (noRaise)
    artifact.compileOptions["no-raise"] = "true";
  if (dtype != "fp32")
    artifact.compileOptions["dtype"] = dtype;
  if (!meshSpec.empty()) {
    artifact.compileOptions["mesh"] = meshSpec;
    artifact.compileOptions["strategy"] = strategy;
    if (!spMode.empty())
      artifact.compileOptions["sp-mode"] = spMode;
    if (microbatches > 1)
      artifact.compileOptions["microbatches"] = std::to_string(microbatches);
    if (virtualStages > 1)
      artifact.compileOptions["virtual-stages"] = std::to_string(virtualStages);
    if (noOverlap)
      artifact.compileOptions["no-overlap"] = "true";
    if (collectiveMatmul != "auto")
      artifact.compileOptions["collective-matmul"] = collectiveMatmul;
  }
  return failed(writeArtifact(main, programs, artifact, outputFile)) ? 1 : 0;
}

/// Prints a location as users of ONNX models read it: the model file, then
/// the node (or tensor) name for the importer's NameLocs.
void printLocation(llvm::raw_ostream &os, Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    printLocation(os, name.getChildLoc());
    os << "node '" << name.getName().getValue() << "': ";
    return;
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    os << file.getFilename().getValue();
    if (file.getLine())
      os << ":" << file.getLine() << ":" << file.getColumn();
    os << ": ";
    return;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    if (!fused.getLocations().empty())
      printLocation(os, fused.getLocations().front());
    return;
  }
  if (auto callSite = dyn_cast<CallSiteLoc>(loc)) {
    printLocation(os, callSite.getCallee());
    return;
  }
}

/// Diagnostics on stderr, one line each (notes indented), e.g.
/// `model.onnx: node '/h.0/attn/MatMul': error: ...`.
LogicalResult printDiagnostic(Diagnostic &diag) {
  auto print = [](Diagnostic &d, StringRef indent) {
    llvm::raw_ostream &os = llvm::errs();
    os << indent;
    printLocation(os, d.getLocation());
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

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  cl::ParseCommandLineOptions(argc, argv,
                              "Partita: ONNX transformers to sharded "
                              "programs\n");

  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Users read diagnostics against their ONNX model, not our IR.
  context.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler handler(&context, printDiagnostic);
  return compile(context);
}
