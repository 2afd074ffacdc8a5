//===- Manifest.h - what an artifact holds ----------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// An artifact is a directory: manifest.json, one exec program per rank
// (programs/rank<N>.pb) and the weights in safetensors files, each distinct
// shard stored once (docs/artifact.md is the specification). These are the
// manifest's plain structs, which the writer (ArtifactWriter.h) fills and
// the loader (LoadedArtifact.h) reads; no JSON types, so code built without
// exceptions can use them.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_MANIFEST_H
#define PARTITA_RUNTIME_MANIFEST_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <map>
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
  /// The parallelism the axis carries: "dp", "tp", "pp", "sp", "ep" or
  /// "none".
  /// The manifest spells it only where it is not the default of the name
  /// (the name itself for dp, tp, pp, sp and ep; none for other names).
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
  /// A training parameter (or its optimizer state) held in another shape
  /// than its ONNX initializer's, the same elements in the same order
  /// (GPT-2's fused query/key/value, held as its segments): the
  /// initializer's shape, which checkpoint readers give it back; empty
  /// when it is `shape`.
  std::vector<int64_t> onnxShape;
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
  /// padded to it, on the left, or on the right where `rightPadded`.
  int64_t promptLength = 0;
  /// Rows hold their tokens from slot 0 with the padding after them
  /// (onnxruntime's GroupQueryAttention: each row's cache is written at its
  /// own length), rather than Hugging Face's left padding.
  bool rightPadded = false;
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

/// A training step (partita-compile --train, docs/training.md). The
/// parameters and the optimizer's state are neither inputs nor outputs:
/// each rank holds its block of each between steps, both bound by name as
/// an input and an output of the same memory, which the step's update
/// writes last. A parameter starts as the weight its program binding
/// names (the rank's block of the initializer), a state at zero. The
/// top-level inputs are the batch's (the model's, and `labels` or
/// `target`) and the scalars the runtime computes each step: `lr`, and for
/// AdamW `bias_correction1` and `bias_correction2` (1 - beta^t, t the
/// step's number from 1).
struct TrainingSpec {
  /// The output holding the loss.
  std::string loss = "loss";
  /// `cross_entropy` or `mse`.
  std::string lossKind;
  /// cross_entropy: the classes of the logits, so that a label outside
  /// [0, classes) other than -100 is refused before a step, as torch
  /// refuses it; 0 otherwise.
  int64_t classes = 0;
  /// `sgd` or `adamw`, and its hyperparameters by torch's names (lr,
  /// momentum, weight_decay, beta1, beta2, eps).
  std::string optimizer;
  std::map<std::string, double> hyperparameters;
  /// --clip-grad-norm; 0: none.
  double clipGradNorm = 0;
  /// By ONNX initializer name, with global shapes and shardings.
  std::vector<TensorSpec> parameters;
  /// `NAME/exp_avg`, `NAME/exp_avg_sq`, `NAME/momentum_buffer`.
  std::vector<TensorSpec> state;
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
  /// Set for a training artifact.
  std::optional<TrainingSpec> training;
  /// Filled by ArtifactWriter::commit and by the loader: the weights files
  /// (paths relative to the artifact), and every file's `sha256:<hex>`.
  std::vector<std::string> weightFiles;
  std::map<std::string, std::string> files;
};

/// The tensors each rank keeps between runs, bound by name as both an
/// input and an output of one memory: a serving artifact's KV cache, or a
/// training artifact's parameters and optimizer state.
std::vector<const TensorSpec *> residentSpecs(const Manifest &manifest);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_MANIFEST_H
