//===- partita-compile.cpp - the Partita compiler driver ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// partita-compile MODEL.onnx [--bind name=value,...] --emit nn
//
// Imports an ONNX model (binary or textual syntax), runs the pipeline of the
// requested stage and prints its IR. Errors are MLIR diagnostics on stderr
// located at the ONNX node; the exit status is 1 on any error.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "partita/Frontend/ONNX/Import.h"
#include "partita/InitAllDialects.h"
#include "partita/Pipelines/Pipelines.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
using namespace mlir::partita;
namespace cl = llvm::cl;

namespace {

enum class EmitStage { NN, Dist, Local, Exec, CUDA, Artifact };

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                               cl::Required);
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("path"), cl::init("-"));
cl::opt<EmitStage> emit(
    "emit", cl::desc("Stop after a stage and print it"),
    cl::values(clEnumValN(EmitStage::NN, "nn", "imported, raised nn IR"),
               clEnumValN(EmitStage::Dist, "dist", "nn with shardings"),
               clEnumValN(EmitStage::Local, "local", "per-rank local programs"),
               clEnumValN(EmitStage::Exec, "exec", "executable programs"),
               clEnumValN(EmitStage::CUDA, "cuda", "generated CUDA"),
               clEnumValN(EmitStage::Artifact, "artifact", "the artifact")),
    cl::init(EmitStage::NN));
cl::list<std::string>
    bindings("bind", cl::desc("Values of symbolic dimensions: name=value,..."),
             cl::value_desc("name=value"), cl::CommaSeparated);
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

int compile(MLIRContext &context) {
  OnnxImportOptions options;
  if (failed(parseBindings(options)))
    return 1;
  if (emit != EmitStage::NN) {
    llvm::errs() << "partita-compile: error: --emit "
                 << emit.getParser().getOption(
                        static_cast<int>(emit.getValue()))
                 << " is not implemented yet; this build stops at --emit nn\n";
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

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << "partita-compile: error: " << error << "\n";
    return 1;
  }
  TimingScope printTiming = root.nest("Output");
  module->print(output->os());
  output->keep();

  return 0;
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
  ScopedDiagnosticHandler handler(&context, printDiagnostic);
  return compile(context);
}
