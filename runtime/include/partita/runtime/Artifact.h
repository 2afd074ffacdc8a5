//===- Artifact.h - the sharded binary on disk ------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// An artifact is a directory: manifest.json, one exec program per rank
// (programs/rank<N>.pb) and the weights in safetensors files, each distinct
// shard stored once (docs/artifact.md is the specification).
//
// ArtifactWriter is what partita-compile calls: plain structs in, Status
// out, no exceptions and no JSON types in this header, so code built without
// exceptions can use it. Artifact is the loader: it verifies the SHA-256 of
// the manifest and the programs before it reads them, bounds-checks the
// weights files' headers and maps the weights; it hashes the weight bytes
// only when asked (ArtifactOpenOptions::verifyWeights), so that opening
// costs the mapping, not a pass over the weights.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_ARTIFACT_H
#define PARTITA_RUNTIME_ARTIFACT_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"
#include "partita/runtime/WeightView.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

/// The manifest's `format_version` that this code writes and reads.
constexpr int64_t kArtifactFormatVersion = 1;

struct MeshAxis {
  std::string name;
  int64_t size = 1;
  /// The parallelism the axis carries: "dp", "tp", "pp", "sp" or "none".
  /// The manifest spells it only where it is not the default of the name
  /// (the name itself for dp, tp, pp and sp; none for other names).
  std::string role = "none";
};

/// One rank of the mesh and the program it runs.
struct RankEntry {
  int32_t rank = 0;
  /// The rank's coordinate along each mesh axis, in the mesh's axis order.
  std::vector<std::pair<std::string, int64_t>> coords;
  int32_t stage = 0;
  /// `programs/rank<N>.pb`; ArtifactWriter::commit fills it in.
  std::string program;
  /// For target `cuda`: the rank's generated CUDA source and the fatbin nvcc
  /// built from it (paths of files of the artifact; ranks with equal sources
  /// share both). Empty for target `host`.
  std::string cudaSource;
  std::string cudaFatbin;
  /// Serving artifacts: `programs/rank<N>.decode.pb`, the rank's decode
  /// program (ArtifactWriter::commit fills it in); empty otherwise.
  std::string decodeProgram;
  /// Serving artifacts of target `cuda`: the decode program's CUDA source
  /// and fatbin (functions named `partita_decode_*`, so the module loads
  /// beside the prefill's); empty otherwise.
  std::string decodeCudaSource;
  std::string decodeCudaFatbin;
};

/// How a global input or output is laid out over the mesh.
struct TensorSharding {
  /// For each tensor dimension, the mesh axes that split it (major first).
  /// Empty means no dimension is split.
  std::vector<std::vector<std::string>> dims;
  /// Mesh axes over which the tensor holds partial sums.
  std::vector<std::string> partial;

  /// Every rank holds the whole tensor.
  bool isReplicated() const;
};

/// A model input or output with its global shape.
struct TensorSpec {
  std::string name;
  DType dtype = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  TensorSharding sharding;
};

/// A serving artifact (partita-compile --max-seq): two programs per rank
/// over the same weights and the same KV cache. The manifest's top-level
/// inputs and outputs are the prefill program's (the prompt); `decode` is
/// the program of one generated token. The cache tensors are neither
/// inputs nor outputs: each rank holds its block of each, allocated once
/// and zeroed, and both programs bind it by name as an input and an output
/// of the same memory, which the `kv_cache_write` kernel updates in place.
struct ServingSpec {
  /// L: the cache's slots per sequence (prompt and generated tokens).
  int64_t maxSeq = 0;
  /// P: the prefill program's sequence length; shorter prompts are
  /// left-padded to it.
  int64_t promptLength = 0;
  int64_t batch = 0;
  /// The names of the model's token inputs and logits output, shared by
  /// both programs; `attentionMask` and `positionIds` are empty when the
  /// model does not take them. `cachePosition` (i64 [1], replicated) is the
  /// slot the program writes its first token's keys and values to.
  std::string inputIds = "input_ids";
  std::string attentionMask;
  std::string positionIds;
  std::string cachePosition = "cache_position";
  std::string logits = "logits";
  /// The cache tensors with their global shapes ([batch, heads, L, head
  /// dim] for the usual exports) and shardings.
  std::vector<TensorSpec> cache;
  /// The decode program's inputs and outputs (without the cache).
  std::vector<TensorSpec> decodeInputs;
  std::vector<TensorSpec> decodeOutputs;
};

/// The spec named `name`, or null.
const TensorSpec *findSpec(const std::vector<TensorSpec> &specs,
                           const std::string &name);

struct Manifest {
  std::string modelName;
  /// `host` or `cuda`.
  std::string target = "host";
  std::vector<MeshAxis> meshAxes;
  int32_t worldSize = 1;
  /// One entry per rank, ordered by rank.
  std::vector<RankEntry> ranks;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  /// The pipeline schedule as the text of a JSON object; empty for none
  /// (null in manifest.json).
  std::string scheduleJson;
  std::map<std::string, std::string> compileOptions;
  /// For target `cuda`: the architectures the fatbins hold code for
  /// (`sm_80`, `sm_90a`, ...).
  std::vector<std::string> cudaArchs;
  /// Set for a serving artifact; then every rank has a decode program.
  std::optional<ServingSpec> serving;
  /// Filled by ArtifactWriter::commit and by the loader: the weights files
  /// (paths relative to the artifact), and every file's `sha256:<hex>`.
  std::vector<std::string> weightFiles;
  std::map<std::string, std::string> files;
};

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

/// A loaded artifact: the manifest, each rank's program, the weights.
class Artifact {
public:
  /// Opens the artifact directory at `path`. Refuses an unknown format or
  /// version, a missing file, a malformed weights header and a file whose
  /// hash differs from the manifest's (weights files only with
  /// `options.verifyWeights`), with a message naming the file.
  static Status open(const std::string &path,
                     std::unique_ptr<Artifact> &artifact,
                     const ArtifactOpenOptions &options = {});
  ~Artifact();

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
  const Artifact *decodeEntry() const;
  const WeightStore &weights() const;

private:
  Artifact();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_ARTIFACT_H
