//===- partita-opt.cpp - Partita's optimizer driver -----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// mlir-opt for Partita: parses IR of the project's dialects, runs any of its
// passes or pipelines (plus the upstream passes they use), prints the result.
// The lit suite drives every pass through it.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "partita/InitAllDialects.h"
#include "partita/InitAllPasses.h"
#include "partita/Options/CommandLine.h"
#include "partita/Support/OutputStream.h"
#include "partita/Support/Version.h"
#include "llvm/Support/CommandLine.h"

namespace mlir::partita::test {
void registerTestPasses();
} // namespace mlir::partita::test

int main(int argc, char **argv) {
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "partita-opt " << partita::versionString() << "\n";
  });
  mlir::partita::optionErrorTool() = "partita-opt";
  partita::installOutputFailureHandler("partita-opt");
  mlir::partita::registerAllPasses();
  mlir::partita::test::registerTestPasses();
  mlir::DialectRegistry registry;
  mlir::partita::registerAllDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Partita optimizer driver\n", registry));
}
