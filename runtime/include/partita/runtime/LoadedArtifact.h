//===- LoadedArtifact.h - an artifact opened from disk ----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// LoadedArtifact is the loader: it verifies the SHA-256 of the manifest
// and the programs before it reads them, bounds-checks the weights files'
// headers and maps the weights; it hashes the weight bytes only when asked
// (ArtifactOpenOptions::verifyWeights), so that opening costs the mapping,
// not a pass over the weights. (partita::Artifact, in Partita.h, is the
// embedding API's compiled artifact in memory; this is the runtime's view
// of one on disk.)
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LOADEDARTIFACT_H
#define PARTITA_RUNTIME_LOADEDARTIFACT_H

#include "partita/runtime/Manifest.h"
#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <memory>
#include <string>
#include <vector>

namespace partita::runtime {

/// The weights of an artifact: every tensor of its safetensors files, by
/// name, in read-only mapped memory.
class WeightStore {
public:
  WeightStore();
  ~WeightStore();
  WeightStore(WeightStore &&);
  WeightStore &operator=(WeightStore &&);

  /// Maps `path` and adds its tensors; `displayName` prefixes errors.
  Status addFile(const std::string &path, const std::string &displayName);
  /// The tensor named `name`, or null. Its memory must not be written.
  const Tensor *find(const std::string &name) const;
  /// The tensor named `name`, which a program's buffer `what` reads as
  /// `dtype` and `shape`: an error naming both when it is missing or of
  /// another type.
  Status find(const std::string &name, DType dtype,
              const std::vector<int64_t> &shape, const std::string &what,
              const Tensor *&tensor) const;
  size_t size() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

struct ArtifactOpenOptions {
  /// Also hash every weights file against the manifest (every byte read,
  /// one thread per file). Without it the weights files are checked for
  /// presence, type, header and bounds, and their bytes are trusted.
  bool verifyWeights = false;
};

/// An artifact opened from disk: the manifest, each rank's program, the
/// weights.
class LoadedArtifact {
public:
  /// Opens the artifact directory at `path`. Refuses an unknown format or
  /// version, a missing file, a malformed weights header and a file whose
  /// hash differs from the manifest's (weights files only with
  /// `options.verifyWeights`), with a message naming the file.
  static Status open(const std::string &path,
                     std::unique_ptr<LoadedArtifact> &artifact,
                     const ArtifactOpenOptions &options = {});
  ~LoadedArtifact();

  const std::string &path() const;
  const Manifest &manifest() const;
  /// The program of `rank`, 0 <= rank < manifest().worldSize.
  const program::Program &program(int32_t rank) const;
  /// A serving artifact's decode program of `rank`; null otherwise.
  const program::Program *decodeProgram(int32_t rank) const;
  /// A serving artifact's decode entry seen as an artifact of its own: its
  /// manifest's inputs and outputs are `serving->decodeInputs` and
  /// `decodeOutputs` (the rest as this one's), its programs the decode
  /// programs, its weights this artifact's (not copied), its path this
  /// one's. Null for an artifact without `serving`, and for a decode entry
  /// itself (whose manifest keeps `serving`). Lives as long as this
  /// artifact.
  const LoadedArtifact *decodeEntry() const;
  const WeightStore &weights() const;

private:
  LoadedArtifact();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_LOADEDARTIFACT_H
