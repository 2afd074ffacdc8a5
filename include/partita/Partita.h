//===- Partita.h - Partita's C++ embedding API ------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Compile an ONNX model for a device mesh and run the result, from C++. This
// header is the whole API: it includes only the standard library (and the
// compiler's declared options, partita/Options/Options.h, which does too),
// reports errors as values (no exceptions cross it), and its types are
// stable. The options are the flags of `partita-compile`, typed (the enums
// spell as the flags do: partita::optionName, partita::parseOption), the
// artifact is the directory
// it writes (held in memory here until saved), the report is `--report`'s
// JSON (DESIGN.md), and a session runs an artifact like `partita-run`.
//
//   partita::CompileOptions options;
//   options.mesh = {{"tp", 2}};
//   partita::CompileResult compiled = partita::compileFile("model.onnx",
//                                                          options);
//   if (!compiled.ok()) { std::cerr << compiled.errorText(); return 1; }
//   std::unique_ptr<partita::Session> session;
//   partita::Status loaded = partita::Session::load(*compiled.artifact,
//                                                   {}, session);
//   ...
//   session->run({{"input_ids", partita::DType::I64, {2, 16}, ids}},
//                {{"logits", partita::DType::F32, {2, 16, 128}, logits}});
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PARTITA_H
#define PARTITA_PARTITA_H

#include "partita/Options/Options.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace partita {

/// The outcome of an operation: ok, or an error with a message.
class Status {
public:
  Status() = default;
  static Status error(std::string message) {
    Status status;
    status.failed = true;
    status.text = std::move(message);
    return status;
  }
  bool ok() const { return !failed; }
  explicit operator bool() const { return ok(); }
  const std::string &message() const { return text; }

private:
  bool failed = false;
  std::string text;
};

/// What `partita-compile` prints as a diagnostic, as data.
struct Diagnostic {
  enum class Severity { Error, Warning, Note, Remark };
  Severity severity = Severity::Error;
  /// `model.onnx: node '/h.0/attn/MatMul'`, or empty when the diagnostic
  /// concerns no place in the model (an option, the machine).
  std::string location;
  std::string message;
  /// `location: error: message`, as the compiler prints it.
  std::string str() const;
};

/// The flags of partita-compile, typed: one field per declared option
/// (partita/Options/CompilerOptions.def lists each with its flag, default
/// and help; docs/sharding.md, docs/cuda.md, docs/planning.md say what they
/// do). `mesh` holds the axes in order, e.g. `options.mesh = {{"dp", 2},
/// {"tp", 4}}` or `{{"model", 4, "tp"}}`; `autoMesh` is `--mesh auto`,
/// which chooses the mesh, the sequence mode, the microbatches, the
/// virtual stages and collective matmul (the fields that set them are then
/// ignored). The command-line-only fields (emit, reportFile, traceFile,
/// explain, explainPlan) are not read here: a compile always makes an
/// artifact and its report. setOption(options, "mesh", "dp=2,tp=2") sets
/// any field by its flag's name, as the C API and Python do.
using CompileOptions = CompilerOptions;

/// A compiled model: the files of the artifact directory, in memory.
class Artifact {
public:
  Artifact(std::map<std::string, std::string> files, std::string report);
  /// Files by path relative to the artifact (`manifest.json`,
  /// `programs/rank0.pb`, `weights/...`, `cuda/...`).
  const std::map<std::string, std::string> &files() const { return contents; }
  /// The plan, as `--report` writes it (partita-report/1 JSON).
  const std::string &report() const { return reportJson; }
  /// Writes the artifact directory at `path`, with the report as
  /// `report.json` beside `manifest.json` (replacing an artifact there,
  /// refusing any other existing path); nothing is left on failure.
  Status save(const std::string &path) const;
  /// Reads the artifact directory at `path` (and its `report.json`, if
  /// any) into memory.
  static Status load(const std::string &path,
                     std::shared_ptr<const Artifact> &artifact);

private:
  std::map<std::string, std::string> contents;
  std::string reportJson;
};

struct CompileResult {
  /// Null when compilation failed.
  std::shared_ptr<const Artifact> artifact;
  /// Every diagnostic, errors and warnings alike, in order.
  std::vector<Diagnostic> diagnostics;
  bool ok() const { return artifact != nullptr; }
  /// The diagnostics, one per line, as partita-compile prints them.
  std::string errorText() const;
};

/// Compiles the ONNX model (binary protobuf or textual syntax) at `path`.
CompileResult compileFile(const std::string &path,
                          const CompileOptions &options);
/// The same for a model held in memory; `name` stands for its file name in
/// diagnostics.
CompileResult compileBuffer(const void *data, size_t size,
                            const CompileOptions &options,
                            const std::string &name = "model.onnx");

/// One plan of `plan()`: the mesh and options it compiles with, and what
/// the cost model predicts for it (docs/planning.md).
struct PlanCandidate {
  /// The axes of more than one device, in the order dp, pp, sp, tp.
  std::vector<MeshAxis> mesh;
  SequenceMode spMode = SequenceMode::None;
  int64_t microbatches = 1;
  int64_t virtualStages = 1;
  bool collectiveMatmul = false;
  /// The partita-compile flags that compile it (`--mesh tp=8 ...`).
  std::string flags;
  bool feasible = false;
  /// Why not, when not feasible (`memory: ... (short by 12.3 GB)`).
  std::string reason;
  /// Predicted seconds of one step (the objective's), and its parts.
  double stepSeconds = 0, computeSeconds = 0, communicationSeconds = 0,
         exposedCommunicationSeconds = 0, bubbleSeconds = 0;
  /// Bytes per device.
  double weightBytes = 0, activationBytes = 0, keyValueCacheBytes = 0,
         memoryBytes = 0;
  /// Tokens per second, at `batch`: the model's, or under
  /// decode-throughput the largest batch that fits the device.
  double tokensPerSecond = 0;
  int64_t batch = 0;
};

struct PlanResult {
  /// Every candidate searched: the feasible best first, then the others.
  std::vector<PlanCandidate> candidates;
  /// A line per parallelism family that lost, saying why.
  std::vector<std::string> rejected;
  /// The --explain-plan table.
  std::string table;
  /// The report's `plan` object, with every candidate (JSON text).
  std::string json;
  std::vector<Diagnostic> diagnostics;
  /// True when the model was planned (even if no candidate fits: see
  /// `best()`).
  bool ok() const { return !json.empty(); }
  /// The chosen plan; null when none is feasible.
  const PlanCandidate *best() const {
    return !candidates.empty() && candidates.front().feasible
               ? &candidates.front()
               : nullptr;
  }
  std::string errorText() const;
};

/// Plans the model at `path` as `--mesh auto` would for `options` (as if
/// `options.autoMesh` were set), without compiling it: the model's shapes
/// are read, never its weights.
PlanResult planFile(const std::string &path, const CompileOptions &options);
PlanResult planBuffer(const void *data, size_t size,
                      const CompileOptions &options,
                      const std::string &name = "model.onnx");

enum class DType { F32, F16, BF16, I64, I32, I8, Bool };
/// `f32`, `f16`, `bf16`, `i64`, `i32`, `i8`, `bool`.
const char *dtypeName(DType dtype);
size_t dtypeSize(DType dtype);

/// A model input or output: name, element type and global shape.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// Caller-owned memory holding (inputs) or receiving (outputs) one tensor,
/// row-major and dense.
struct TensorRef {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  void *data = nullptr;
};

struct SessionOptions {
  /// Threads per host rank; 0: the machine's cores shared among the ranks.
  unsigned threadsPerRank = 0;
  /// Deadline of every wait between ranks.
  double timeoutSeconds = 120;
  /// Also hash every weight byte against the manifest when loading (as
  /// `partita-run --verify`); the manifest and programs are always
  /// verified, the weights files' headers and bounds always checked.
  bool verifyWeights = false;
};

/// A loaded artifact, ready to run: all ranks in this process, as threads
/// for `host`; on GPU 0 for `cuda` (ranks sharing it).
class Session {
public:
  /// Loads the artifact directory at `path`.
  static Status load(const std::string &path, const SessionOptions &options,
                     std::unique_ptr<Session> &session);
  /// Loads an artifact held in memory.
  static Status load(const Artifact &artifact, const SessionOptions &options,
                     std::unique_ptr<Session> &session);
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  const std::vector<TensorInfo> &inputs() const;
  const std::vector<TensorInfo> &outputs() const;
  /// The artifact's target, `host` or `cuda`.
  const std::string &target() const;

  /// Runs the model once. `inputs` names every model input and `outputs`
  /// every output exactly once, with the dtype and global shape of
  /// inputs()/outputs(); the caller owns their memory. One run at a time.
  Status run(const std::vector<TensorRef> &inputs,
             const std::vector<TensorRef> &outputs);

  /// Serving artifacts (compiled with maxSeq): greedy generation, the loop
  /// in the runtime, the KV cache resident in the ranks. `inputIds` is i64
  /// [batch, p] (p at most the compiled prompt length; batch as compiled),
  /// `attentionMask` i64 [batch, p] or null (all ones); rows of different
  /// lengths are left-padded with a 0 mask, as Hugging Face pads them.
  struct Generated {
    /// [batch, generated] greedy tokens, row-major.
    std::vector<int64_t> tokens;
    int64_t batch = 0, generated = 0;
    /// With keepLogits: [generated, batch, vocab].
    std::vector<float> logits;
    int64_t vocab = 0;
    /// Time to first token and each decode step's time, in seconds.
    double prefillSeconds = 0;
    std::vector<double> stepSeconds;
  };
  Status generate(const TensorRef &inputIds, const TensorRef *attentionMask,
                  int64_t maxNewTokens, bool keepLogits, Generated &out);
  /// The step API, for callers who sample themselves: prefill() starts a
  /// generation and writes the last prompt position's logits (f32 [batch,
  /// vocab]); step() feeds one token per row (i64 [batch]) and writes its
  /// logits. step() before prefill() or with the cache full is refused.
  Status prefill(const TensorRef &inputIds, const TensorRef *attentionMask,
                 const TensorRef &logits);
  Status step(const TensorRef &tokens, const TensorRef &logits);
  /// Whether the artifact was compiled with maxSeq; its cache slots, and
  /// those filled by the current generation.
  bool serving() const;
  int64_t maxSeq() const;
  int64_t cachePosition() const;

  /// Training artifacts (compiled with `train`, docs/training.md): one
  /// optimizer step on `batch`, which names every input of batchInputs()
  /// (the model's and `labels` or `target`) once, at learning rate `lr`
  /// (NaN: the compiled one); `loss` receives the loss before the update.
  /// The ranks keep the parameters and the optimizer state. A label
  /// outside [0, classes) other than -100 is refused before the step.
  Status trainStep(const std::vector<TensorRef> &batch, double lr, float &loss);
  /// The inputs a training step's batch gives (inputs() without the
  /// scalars the runtime computes: lr and AdamW's bias corrections).
  std::vector<TensorInfo> batchInputs() const;
  /// Whether the artifact is a training one, and its steps taken.
  bool training() const;
  int64_t trainingSteps() const;
  /// Writes a checkpoint of the parameters and the optimizer state to a
  /// new directory `path`; loadCheckpoint continues from one saved on the
  /// same mesh, bit for bit.
  Status saveCheckpoint(const std::string &path) const;
  Status loadCheckpoint(const std::string &path);

private:
  Session();
  Status open(const std::string &path, const SessionOptions &options);
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// This library's version, `MAJOR.MINOR.PATCH`.
const char *version();

} // namespace partita

#endif // PARTITA_PARTITA_H
