//===- ArtifactWriter.h - writing an artifact to disk -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// ArtifactWriter is what partita-compile calls (lib/Artifact/Artifact.cpp):
// plain structs in, Status out, no exceptions and no JSON types in this
// header, so code built without exceptions can use it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_ARTIFACTWRITER_H
#define PARTITA_RUNTIME_ARTIFACTWRITER_H

#include "partita/runtime/Manifest.h"
#include "partita/runtime/Status.h"
#include "partita/runtime/WeightView.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace partita::runtime {

/// Builds an artifact in memory and writes it to disk in one step.
class ArtifactWriter {
public:
  ArtifactWriter();
  ~ArtifactWriter();
  ArtifactWriter(const ArtifactWriter &) = delete;
  ArtifactWriter &operator=(const ArtifactWriter &) = delete;

  /// The manifest to fill in; commit() fills `ranks[i].program`,
  /// `weightFiles` and `files`.
  Manifest &manifest();

  /// Records a weight: its bytes are read only by commit(), which streams
  /// them into the weights file (the view keeps its source alive). A name
  /// added again is stored once (replicated tensors) when the views are
  /// equal or, failing that, hold equal bytes (compared a piece at a time);
  /// otherwise it is an error.
  Status addWeight(const std::string &name, const WeightView &view);
  /// The same for `bytes` bytes at `data`, row-major, which is not copied:
  /// it must stay valid until commit() returns.
  Status addWeight(const std::string &name, DType dtype,
                   const std::vector<int64_t> &shape, const void *data,
                   size_t bytes);
  /// Records the program of `rank` (serialized now, so `program` may be
  /// released afterwards). Its `rank` field must equal `rank`.
  Status addProgram(int32_t rank, const program::Program &program);
  /// Records the decode program of `rank` of a serving artifact, as
  /// addProgram does; commit() then needs the manifest's `serving` and one
  /// decode program per rank.
  Status addDecodeProgram(int32_t rank, const program::Program &program);
  /// Records another file of the artifact (generated CUDA source, a
  /// fatbin), at a relative path outside manifest.json, programs/, weights/.
  Status addFile(const std::string &relativePath, std::string contents);
  /// Weights files are split when the next tensor would take one past this
  /// many bytes of data (default 2 GiB); a larger tensor gets its own file.
  void setMaxWeightFileBytes(uint64_t bytes);

  /// Validates the manifest against the programs (docs/artifact.md: the
  /// ranks' coordinates and every binding, a serving artifact's cache
  /// bound as both an input and an output), writes every file into a
  /// fresh temporary directory next to `path`, manifest.json last, fsyncs,
  /// and renames it to `path`. The weights files are written in parallel,
  /// one thread per file (at most one per core), each through a buffer of
  /// at most 16 MiB: memory does not grow with the model. An existing `path` is
  /// replaced only if it is an artifact (has manifest.json). On error nothing
  /// is left behind and a previous artifact at `path` is untouched.
  Status commit(const std::string &path);

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_ARTIFACTWRITER_H
