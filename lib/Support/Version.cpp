//===- Version.cpp - what --version prints --------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Support/Version.h"

#include "partita/Support/GitRevision.h"
#include "llvm/Config/llvm-config.h"

const char *partita::gitRevision() { return PARTITA_GIT_REVISION; }

std::string partita::versionString() {
  return std::string(PARTITA_VERSION) +
         " (MLIR/LLVM " LLVM_VERSION_STRING ", git " + gitRevision() + ")";
}
