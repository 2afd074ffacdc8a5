//===- ManifestJson.h - manifest.json of an artifact ------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Conversion between the Manifest struct and its JSON text, and the checks
// that writer and loader share. JSON types stay behind this interface so
// the public Manifest.h needs no JSON library.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_ARTIFACT_MANIFESTJSON_H
#define PARTITA_RUNTIME_ARTIFACT_MANIFESTJSON_H

#include "partita/runtime/Manifest.h"

namespace partita::runtime {

/// Checks what the JSON schema cannot: the mesh against the world size and
/// the ranks, coordinates in range, sharding axes naming mesh axes.
Status validateManifest(const Manifest &manifest);

/// The manifest as JSON text (format, version and all fields).
Status manifestToJson(const Manifest &manifest, std::string &text);

/// Parses manifest.json; `where` prefixes messages. Refuses another format
/// or an unknown version before reading anything else.
Status manifestFromJson(const std::string &text, const std::string &where,
                        Manifest &manifest);

/// A relative path inside the artifact: no `..`, not absolute, no empty
/// components.
bool isSafeRelativePath(const std::string &path);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_ARTIFACT_MANIFESTJSON_H
