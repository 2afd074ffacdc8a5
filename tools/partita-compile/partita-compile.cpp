//===- partita-compile.cpp - the Partita compiler driver ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// partita-compile MODEL.onnx -o ART [--bind name=value,...] [--target host]
// partita-compile MODEL.onnx --emit nn|exec [-o FILE]
//
// Imports an ONNX model (binary or textual syntax), runs the pipeline up to
// the requested stage, and writes the artifact or prints the stage. Errors
// are diagnostics on stderr located at the ONNX node; the exit status is 1
// on any error, and nothing is left at -o.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "partita/Artifact/Artifact.h"
#include "partita/Conversion/NNToExec/NNToExec.h"
#include "partita/Frontend/ONNX/Import.h"
#include "partita/InitAllDialects.h"
#include "partita/Pipelines/Pipelines.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

#include <google/protobuf/text_format.h>

using namespace mlir;
using namespace mlir::partita;
namespace cl = llvm::cl;

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
cl::list<std::string>
    bindings("bind", cl::desc("Values of symbolic dimensions: name=value,..."),
             cl::value_desc("name=value"), cl::CommaSeparated);
cl::opt<std::string> reportFile("report",
                                cl::desc("Write the plan (partita-report/1) as "
                                         "JSON to this file"),
                                cl::value_desc("FILE.json"), cl::init(""));
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

StringRef stageName(EmitStage stage) {
  return emit.getParser().getOption(static_cast<int>(stage));
}

int compile(MLIRContext &context) {
  OnnxImportOptions options;
  if (failed(parseBindings(options)))
    return 1;
  if (target == Target::CUDA) {
    llvm::errs() << "partita-compile: error: --target cuda is not implemented "
                    "yet; this build compiles for --target host\n";
    return 1;
  }
  if (emit != EmitStage::NN && emit != EmitStage::Exec &&
      emit != EmitStage::Artifact) {
    llvm::errs() << "partita-compile: error: --emit " << stageName(emit)
                 << " is not implemented yet; this build provides --emit nn, "
                    "--emit exec and artifacts\n";
    return 1;
  }
  if (emit == EmitStage::Artifact && outputFile.empty()) {
    llvm::errs() << "partita-compile: error: give the artifact directory with "
                    "-o ART, or print a stage with --emit nn|exec\n";
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

  PassManager pm(&context);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  TimingScope pipelineTiming = root.nest("Pipeline");
  pm.enableTiming(pipelineTiming);
  NNPipelineOptions nnOptions;
  nnOptions.raise = !noRaise;
  buildNNPipeline(pm, nnOptions);
  if (failed(pm.run(*module)))
    return 1;
  pipelineTiming.stop();

  if (emit == EmitStage::NN && reportFile.empty()) {
    TimingScope printTiming = root.nest("Output");
    return printStage([&](llvm::raw_ostream &os) { module->print(os); });
  }

  auto main = module->lookupSymbol<func::FuncOp>("main");
  FailureOr<ExecProgram> exec;
  {
    TimingScope lowerTiming = root.nest("Exec lowering");
    exec = lowerToExecProgram(main, /*rank=*/0, /*worldSize=*/1,
                              ExecLoweringOptions());
  }
  if (failed(exec))
    return 1;
  SmallVector<ExecProgram, 1> programs;
  programs.push_back(std::move(*exec));
  if (!reportFile.empty() &&
      failed(writeReport(main, programs, reportFile.getValue())))
    return 1;
  if (emit == EmitStage::NN)
    return printStage([&](llvm::raw_ostream &os) { module->print(os); });
  if (emit == EmitStage::Exec) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(programs.front().program,
                                                &text);
    return printStage([&](llvm::raw_ostream &os) { os << text; });
  }

  TimingScope writeTiming = root.nest("Artifact");
  ArtifactOptions artifact;
  artifact.target = "host";
  artifact.compileOptions["source"] = inputFile;
  artifact.compileOptions["target"] = "host";
  std::string bound;
  for (const std::string &entry : bindings)
    bound += (bound.empty() ? "" : ",") + entry;
  if (!bound.empty())
    artifact.compileOptions["bind"] = bound;
  if (noRaise)
    artifact.compileOptions["no-raise"] = "true";
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
