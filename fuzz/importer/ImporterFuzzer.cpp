//===- ImporterFuzzer.cpp - libFuzzer target for the ONNX importer --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Feeds each input (a binary ModelProto or ONNX's textual syntax) to
// importOnnxBuffer; a module that imports is verified and goes through the
// nn pipeline that `partita-compile --emit nn` runs. Diagnostics are
// counted, never printed. Findings: any crash or sanitizer report, and a
// failure that emitted no error (the user would see exit 1 with nothing on
// stderr), which aborts with a message naming it.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "partita/Dialect/NN/Transforms/Passes.h"
#include "partita/Frontend/ONNX/Import.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace mlir;
using namespace mlir::partita;

namespace {

/// Aborts with `what`: libFuzzer records the input as a crash.
[[noreturn]] void finding(const char *what) {
  std::fprintf(stderr, "partita-fuzz-importer: %s\n", what);
  std::abort();
}

const DialectRegistry &registry() {
  static const DialectRegistry *r = [] {
    auto *registry = new DialectRegistry();
    registerOnnxImportDialects(*registry);
    return registry;
  }();
  return *r;
}

/// buildNNPipeline (lib/Pipelines) with the default options. It is spelled
/// out here because PartitaPipelines links the dist passes, which use C++20
/// lambda captures of structured bindings that clang-14 rejects.
void buildNNPipeline(PassManager &pm) {
  OpPassManager &func = pm.nest<func::FuncOp>();
  func.addPass(createCanonicalizerPass());
  func.addPass(createRaisePass());
  func.addPass(createCSEPass());
  func.addPass(createCanonicalizerPass());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A fresh context per input: nothing interned by one input (types,
  // attributes, resource blobs) survives into the next.
  MLIRContext context(registry(), MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  int errors = 0;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      ++errors;
    return success();
  });

  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  OnnxImportOptions options;
  OwningOpRef<ModuleOp> module =
      importOnnxBuffer(&context, bytes, "fuzz.onnx", /*modelDir=*/"", options);
  if (!module) {
    if (errors == 0)
      finding("the import failed without a diagnostic");
    return 0;
  }
  if (failed(verify(*module)))
    finding("the imported module does not verify");

  PassManager pm(&context);
  buildNNPipeline(pm);
  if (failed(pm.run(*module)) && errors == 0)
    finding("the nn pipeline failed without a diagnostic");
  return 0;
}
