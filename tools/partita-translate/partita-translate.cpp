//===- partita-translate.cpp - Partita's translation driver ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// mlir-translate for Partita: `--exec-to-proto` writes a planned rank
// program (the output of `partita-opt --partita-exec-pipeline`) as the exec
// program's textproto, as `partita-compile --emit exec` prints it.
//
//===----------------------------------------------------------------------===//

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "partita/Support/OutputStream.h"
#include "partita/Target/ExecProgram/ExecProgram.h"

int main(int argc, char **argv) {
  partita::installOutputFailureHandler("partita-translate");
  mlir::partita::registerToExecProgramTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "Partita translation driver\n"));
}
