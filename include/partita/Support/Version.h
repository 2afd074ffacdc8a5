//===- Version.h - what --version prints ------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The version line of every Partita tool, from one place: Partita's
// version, the LLVM/MLIR it was built with and the git revision of the
// tree (written at build time; "unknown" when the tree is no git checkout).
// PartitaVersion links neither LLVM nor MLIR, so partita-run can use it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_SUPPORT_VERSION_H
#define PARTITA_SUPPORT_VERSION_H

#include <string>

namespace partita {

/// `0.1.0 (MLIR/LLVM 22.1.8, git 2e8bbf3c1d2e)`; a tool prints its name
/// before it.
std::string versionString();

/// The git revision the tree was built from (12 hex digits), or `unknown`.
const char *gitRevision();

} // namespace partita

#endif // PARTITA_SUPPORT_VERSION_H
