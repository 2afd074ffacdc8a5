//===- Version.cpp - what --version prints --------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Support/Version.h"

#include "partita/Support/GitRevision.h"
#ifdef PARTITA_WITH_LLVM
#include "llvm/Config/llvm-config.h"
#endif

const char *partita::gitRevision() { return PARTITA_GIT_REVISION; }

std::string partita::versionString() {
#ifdef PARTITA_WITH_LLVM
  return std::string(PARTITA_VERSION) +
         " (MLIR/LLVM " LLVM_VERSION_STRING ", git " + gitRevision() + ")";
#else
  // A runtime-only build (PARTITA_BUILD_COMPILER=OFF) knows no LLVM.
  return std::string(PARTITA_VERSION) + " (runtime only, git " + gitRevision() +
         ")";
#endif
}
