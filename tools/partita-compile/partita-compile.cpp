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
// pipelines the options select, which partita-opt replays. Its flags are
// the declared options (partita/Options/CompilerOptions.def), bound by
// CompilerCommandLine; only the model, -o and --dump-pipeline are its own.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "partita/Driver/Driver.h"
#include "partita/Options/CommandLine.h"
#include "partita/Support/OutputStream.h"
#include "partita/Support/Version.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

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
cl::opt<bool> dumpPipeline(
    "dump-pipeline",
    cl::desc("Print the pass pipeline of each stage these options run "
             "(partita-opt --pass-pipeline=... replays it) and exit"),
    cl::init(false), cl::cat(partitaCategory));

int compile(MLIRContext &context, const CompilerCommandLine &commandLine) {
  DriverOptions options;
  std::string error;
  if (!commandLine.apply(options, error)) {
    llvm::errs() << "partita-compile: error: " << error << "\n";
    return 1;
  }
  options.input = inputFile;
  options.output =
      options.emit == EmitStage::Artifact ? outputFile.getValue() : "";
  options.passManagerCommandLine = true;
  // Flags that only --mesh auto reads are refused without it when given at
  // all, even at their defaults.
  if ((options.explainPlan || commandLine.occurrences("objective") ||
       commandLine.occurrences("device-memory")) &&
      !options.autoMesh) {
    llvm::errs() << "partita-compile: error: --explain-plan, --objective and "
                    "--device-memory need --mesh auto\n";
    return 1;
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
  if (options.emit != EmitStage::Artifact) {
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
  if (options.explainPlan && options.emit != EmitStage::Plan)
    llvm::outs() << result.planExplanation;
  if (options.explain)
    llvm::outs() << result.explanation;
  if (options.timePhases) {
    double total = 0;
    llvm::errs() << "partita-compile: phase wall times:\n";
    for (const auto &[phase, seconds] : result.phaseSeconds) {
      llvm::errs() << llvm::formatv("  {0,-10} {1,8:f3} s\n", phase, seconds);
      total += seconds;
    }
    llvm::errs() << llvm::formatv("  {0,-10} {1,8:f3} s\n", "total", total);
  }
  if (output) {
    if (std::optional<std::string> failed =
            ::partita::finishWriting(output->os())) {
      llvm::errs() << "partita-compile: error: cannot write "
                   << (outputFile.empty() ? "standard output"
                                          : outputFile.getValue())
                   << ": " << *failed << "\n";
      return 1;
    }
    output->keep();
  }
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
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "partita-compile " << ::partita::versionString() << "\n";
  });
  optionErrorTool() = "partita-compile";
  // Every declared option the command line reads
  // (partita/Options/CompilerOptions.def).
  static CompilerCommandLine commandLine(partitaCategory);
  hideOtherOptions();
  cl::ParseCommandLineOptions(argc, argv,
                              "Partita: ONNX transformers to sharded "
                              "programs\n");

  MLIRContext context;
  loadCompilerDialects(context);
  // Users read diagnostics against their ONNX model, not our IR.
  context.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler handler(&context, printDiagnostic);
  int status = compile(context, commandLine);
  // --dump-pipeline, --explain and --explain-plan print to standard output.
  if (std::optional<std::string> failed =
          ::partita::finishWriting(llvm::outs())) {
    llvm::errs() << "partita-compile: error: cannot write standard output: "
                 << *failed << "\n";
    return 1;
  }
  return status;
}
