//===- Checkpoint.h - a training run's saved state --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A checkpoint (partita-run --save, docs/training.md) is a directory:
// checkpoint.json and one safetensors file per rank holding the rank's
// block of every parameter and optimizer state tensor. The JSON records
// the step, the mesh, each tensor's global dtype, shape and sharding, and
// for each rank its coordinates, its file's SHA-256 and the slice of the
// global tensor each of its blocks is. Loading it continues the run bit
// for bit on the same mesh.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CHECKPOINT_H
#define PARTITA_RUNTIME_CHECKPOINT_H

#include "partita/runtime/Manifest.h"
#include "partita/runtime/Status.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

class Runner;
class Trainer;

/// `checkpoint.json`'s `format`.
inline constexpr const char *kCheckpointFormat = "partita-checkpoint/1";

/// One rank's file.
struct CheckpointShard {
  int32_t rank = 0;
  std::vector<std::pair<std::string, int64_t>> coords;
  /// `rank<N>.safetensors`, relative to the checkpoint.
  std::string file;
  /// `sha256:<hex>` of the file.
  std::string sha256;
  /// For each tensor, the [start, stop) of each dimension of the global
  /// tensor that the rank's block covers.
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> slices;
};

/// checkpoint.json.
struct CheckpointManifest {
  /// Steps taken: a run continuing from it takes step `step + 1` next.
  int64_t step = 0;
  std::vector<MeshAxis> meshAxes;
  std::string optimizer;
  std::vector<TensorSpec> parameters;
  std::vector<TensorSpec> state;
  std::vector<CheckpointShard> shards;
};

Status checkpointToJson(const CheckpointManifest &checkpoint,
                        std::string &text);
/// Parses checkpoint.json; `where` prefixes messages.
Status checkpointFromJson(const std::string &text, const std::string &where,
                          CheckpointManifest &checkpoint);

/// Writes `runner`'s parameters and optimizer state after `trainer`'s
/// steps into a new directory `path` (which must not exist; nothing is
/// left there on failure).
Status saveCheckpoint(const Runner &runner, const Trainer &trainer,
                      const std::string &path);

/// Loads the checkpoint at `path` into `runner`'s ranks and continues
/// `trainer`'s step count. The checkpoint must come from an artifact of
/// the same mesh, parameters and state (loading onto another mesh is not
/// supported yet and is refused); every file's hash is checked first.
Status loadCheckpoint(Runner &runner, Trainer &trainer,
                      const std::string &path);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_CHECKPOINT_H
