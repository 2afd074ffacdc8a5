//===- ManifestCheck.h - a manifest against its programs --------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_ARTIFACT_MANIFESTCHECK_H
#define PARTITA_RUNTIME_ARTIFACT_MANIFESTCHECK_H

#include "partita/runtime/Manifest.h"
#include "partita/runtime/Status.h"

#include <string>
#include <vector>

namespace partita::runtime {

/// What the writer and the loader check of the manifest against the
/// programs (docs/artifact.md, Loading, 4): the ranks' coordinates and
/// stages, and each entry's bindings. `where` prefixes messages.
Status checkManifestAgainstPrograms(
    const Manifest &manifest,
    const std::vector<const program::Program *> &programs,
    const std::vector<const program::Program *> &decodePrograms,
    const std::string &where);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_ARTIFACT_MANIFESTCHECK_H
