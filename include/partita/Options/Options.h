//===- Options.h - the compiler's options, declared once --------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Every option of the compiler is declared once, in CompilerOptions.def
// (name, kind, default, range, help, where it is read). From that one
// declaration come the fields of CompilerOptions, partita-compile's flag
// (partita/Options/CommandLine.h), the pass pipelines' option
// (partita/Pipelines/Pipelines.h), the C API's setter by name
// (partita_compile_options_set), the Python keyword argument and the
// record in the artifact's manifest. Every interface checks a value
// against the declaration through setOption (text) or checkOptions (typed
// fields), so a value is refused with the same message everywhere.
//
// The options that name one of a few choices are enums here, with the one
// table of their spellings; the mesh is one typed value (Mesh), parsed
// once at the edge.
//
// This header includes only the standard library: the embedding API
// (partita/Partita.h) exposes it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_OPTIONS_OPTIONS_H
#define PARTITA_OPTIONS_OPTIONS_H

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace partita {

/// The back end (--target).
enum class Target { Host, CUDA };
/// How the strategy uses the mesh (--strategy).
enum class Strategy { Megatron, None };
/// Sequence parallelism (--sp-mode).
enum class SequenceMode { None, Megatron, Ulysses, Ring };
/// The storage type of the model's fp32 tensors (--dtype).
enum class StorageType { FP32, BF16, FP16 };
/// Where tensor-parallel matmuls are pipelined with their collective
/// (--collective-matmul).
enum class CollectiveMatmulMode { Auto, Always, Never };
/// What `--mesh auto` minimizes (--objective): one batch's forward time, or
/// the time per batch when batches follow each other (a pipeline's bubble
/// is then filled by the next batch). The decode objectives (with
/// --max-seq) plan on the decode program: one token per sequence against
/// the KV cache.
enum class PlanObjective {
  Latency,
  Throughput,
  DecodeLatency,
  DecodeThroughput
};
/// Where partita-compile stops and prints (--emit): the nn module as the
/// importer built it, after each pass phase, the plan --mesh auto chose
/// (its --explain-plan table), an exec program per rank, the generated
/// CUDA, or the artifact (nothing printed); in the order the compiler
/// reaches them.
enum class EmitStage { Import, NN, Plan, Dist, Local, Exec, CUDA, Artifact };

/// Whether `objective` plans on the decode program.
inline bool isDecodeObjective(PlanObjective objective) {
  return objective == PlanObjective::DecodeLatency ||
         objective == PlanObjective::DecodeThroughput;
}

/// One accepted spelling of an enum option.
template <typename Enum> struct OptionCase {
  Enum value;
  const char *name;
  const char *description;
};

/// The flag of each enum option and its spellings, in the order help
/// lists them.
template <typename Enum> struct OptionSpelling;

template <> struct OptionSpelling<Target> {
  static constexpr const char *flag = "target";
  static constexpr OptionCase<Target> cases[] = {
      {Target::Host, "host", "CPU ranks"},
      {Target::CUDA, "cuda", "NVIDIA GPUs"},
  };
};

template <> struct OptionSpelling<Strategy> {
  static constexpr const char *flag = "strategy";
  static constexpr OptionCase<Strategy> cases[] = {
      {Strategy::Megatron, "megatron",
       "tp: Megatron tensor parallelism, dp: batch"},
      {Strategy::None, "none", "only the annotations in the IR"},
  };
};

template <> struct OptionSpelling<SequenceMode> {
  static constexpr const char *flag = "sp-mode";
  static constexpr OptionCase<SequenceMode> cases[] = {
      {SequenceMode::None, "none", "no sequence parallelism"},
      {SequenceMode::Megatron, "megatron",
       "sequence over tp outside the tensor-parallel matmuls"},
      {SequenceMode::Ulysses, "ulysses", "all-to-all around attention over sp"},
      {SequenceMode::Ring, "ring", "ring attention over sp"},
  };
};

template <> struct OptionSpelling<StorageType> {
  static constexpr const char *flag = "dtype";
  static constexpr OptionCase<StorageType> cases[] = {
      {StorageType::FP32, "fp32", "32-bit IEEE floats"},
      {StorageType::BF16, "bf16", "bfloat16"},
      {StorageType::FP16, "fp16", "16-bit IEEE floats"},
  };
};

template <> struct OptionSpelling<CollectiveMatmulMode> {
  static constexpr const char *flag = "collective-matmul";
  static constexpr OptionCase<CollectiveMatmulMode> cases[] = {
      {CollectiveMatmulMode::Auto, "auto", "where the cost model says it pays"},
      {CollectiveMatmulMode::Always, "always", "every candidate"},
      {CollectiveMatmulMode::Never, "never", "none"},
  };
};

template <> struct OptionSpelling<PlanObjective> {
  static constexpr const char *flag = "objective";
  static constexpr OptionCase<PlanObjective> cases[] = {
      {PlanObjective::Latency, "latency", "one batch's forward time"},
      {PlanObjective::Throughput, "throughput",
       "the time per batch, batches following each other"},
      {PlanObjective::DecodeLatency, "decode-latency",
       "one decode step's time (--max-seq)"},
      {PlanObjective::DecodeThroughput, "decode-throughput",
       "tokens per second of decode steps following each other "
       "(--max-seq)"},
  };
};

template <> struct OptionSpelling<EmitStage> {
  static constexpr const char *flag = "emit";
  static constexpr OptionCase<EmitStage> cases[] = {
      {EmitStage::Import, "import", "nn IR as imported"},
      {EmitStage::NN, "nn", "raised nn IR"},
      {EmitStage::Plan, "plan",
       "the plan --mesh auto chooses (no compilation)"},
      {EmitStage::Dist, "dist", "nn with shardings"},
      {EmitStage::Local, "local", "per-rank local programs"},
      {EmitStage::Exec, "exec", "executable programs"},
      {EmitStage::CUDA, "cuda", "generated CUDA"},
      {EmitStage::Artifact, "artifact", "the artifact"},
  };
};

/// The spelling of `value`.
template <typename Enum> const char *optionName(Enum value) {
  for (const OptionCase<Enum> &c : OptionSpelling<Enum>::cases)
    if (c.value == value)
      return c.name;
  return "";
}

/// The value spelled `text`, if any.
template <typename Enum>
std::optional<Enum> parseOption(std::string_view text) {
  for (const OptionCase<Enum> &c : OptionSpelling<Enum>::cases)
    if (text == c.name)
      return c.value;
  return std::nullopt;
}

/// `a`, `a or b`, `a, b or c`: the accepted spellings, for messages.
template <typename Range> std::string listChoices(const Range &names) {
  std::string text;
  size_t count = std::size(names), index = 0;
  for (const auto &name : names) {
    if (index > 0)
      text += index + 1 == count ? " or " : ", ";
    text += name;
    ++index;
  }
  return text;
}

/// `--flag expects a, b or c, got 'text'`: the message for a value of no
/// case, as every parser of the option words it.
inline std::string badChoiceMessage(std::string_view flag,
                                    const std::string &choices,
                                    std::string_view text) {
  return "--" + std::string(flag) + " expects " + choices + ", got '" +
         std::string(text) + "'";
}

template <typename Enum> std::string badOptionMessage(std::string_view text) {
  std::string names[std::size(OptionSpelling<Enum>::cases)];
  size_t index = 0;
  for (const OptionCase<Enum> &c : OptionSpelling<Enum>::cases)
    names[index++] = c.name;
  return badChoiceMessage(OptionSpelling<Enum>::flag, listChoices(names), text);
}

//===----------------------------------------------------------------------===//
// The mesh
//===----------------------------------------------------------------------===//

/// One axis of the mesh (one `name=size[:role]` of --mesh).
struct MeshAxis {
  std::string name;
  int64_t size = 1;
  /// `dp`, `tp`, `pp`, `sp`, `ep` or `none`; empty: the role the name implies
  /// (dp, tp, pp, sp and ep imply themselves, other names none). A checked
  /// mesh (Mesh::parse, checkOptions) has every role spelled out.
  std::string role;
};

/// The mesh axes in order (--mesh dp=2,tp=4 or model=4:tp); empty: one
/// device. It is parsed once, where the option is given, and flows as it
/// is to the pass pipelines, the driver and the artifact's manifest.
struct Mesh {
  std::vector<MeshAxis> axes;

  Mesh() = default;
  Mesh(std::initializer_list<MeshAxis> axes) : axes(axes) {}
  Mesh(std::vector<MeshAxis> axes) : axes(std::move(axes)) {}

  bool empty() const { return axes.empty(); }
  /// The number of devices: the product of the sizes.
  int64_t deviceCount() const;
  /// The size of the axis whose role is `role` (1 when none has it).
  int64_t roleSize(std::string_view role) const;
  /// `name=size[:role],...`, a role only where the name does not imply it:
  /// what parse reads back to the same mesh.
  std::string str() const;

  /// Parses `name=size[:role][,name=size[:role]...]` (empty: one device).
  /// On error returns nullopt and sets `error` to a message naming the
  /// offending part.
  static std::optional<Mesh> parse(std::string_view text, std::string &error);
  /// Checks the axes as parse does (names given once, sizes at least 1,
  /// known roles, no role twice) and spells out every implied role.
  bool check(std::string &error);
};
bool operator==(const Mesh &a, const Mesh &b);

/// The role an axis named `name` has unless the mesh says otherwise.
std::string_view impliedAxisRole(std::string_view name);

//===----------------------------------------------------------------------===//
// The declared options
//===----------------------------------------------------------------------===//

/// Values of the model's symbolic dimensions (--bind batch=2,seq=128).
using Bindings = std::map<std::string, int64_t>;

/// Where a declared option is read; a bit set (CompilerOptions.def).
enum OptionUse : unsigned {
  /// A flag of partita-compile.
  kCommandLine = 1u << 0,
  /// Set by name through the C and Python APIs.
  kEmbedding = 1u << 1,
  /// An option of every pass pipeline (partita-opt replays it).
  kPipeline = 1u << 2,
  /// Recorded in the manifest's compile options when not the default...
  kRecorded = 1u << 3,
  /// ...or always...
  kRecordedAlways = 1u << 4,
  /// ...but only when the artifact has a mesh.
  kRecordedWithMesh = 1u << 5,
  /// A boolean spelled `--no-NAME` on the command line (and recorded as
  /// `no-NAME: true`), true by default.
  kNegatedFlag = 1u << 6,
  /// Python's None means the default.
  kNullable = 1u << 7,
  /// Both APIs and the command line.
  kEverywhere = kCommandLine | kEmbedding,
};

/// The kind of value an option takes, which fixes how it is parsed from
/// text, printed, and accepted from Python.
enum class OptionKind {
  Flag,     // bool: true or false
  Integer,  // int64_t within [min, max]
  Real,     // double
  Text,     // std::string
  Choice,   // an enum with an OptionSpelling
  MeshAxes, // Mesh, or `auto` (--mesh auto)
  Bindings, // name=value,...
  List,     // a,b,... (std::vector<std::string>)
  Bytes,    // double bytes: 80e9, 80GB, 80GiB; 0: unset
  Cluster,  // JSON text: a preset, a file, or the JSON itself
};

/// The options of one compilation, one field per declaration of
/// CompilerOptions.def (the embedding API's CompileOptions). Unset fields
/// hold the declared defaults.
struct CompilerOptions {
#define PARTITA_OPTION(FIELD, KIND, TYPE, NAME, DEFAULT, USES, VALUE, HELP)    \
  TYPE FIELD = DEFAULT;
#include "partita/Options/CompilerOptions.def"

  /// Where `clusterJson` came from (a file or a preset), for messages;
  /// setOption sets it with the cluster.
  std::string clusterSource;
};

/// One declaration, as data: what the command line, the C API, Python and
/// the manifest read.
struct OptionInfo {
  /// `sp-mode`: the flag without dashes, the C API's name, the pipeline
  /// option and the manifest key (Python spells it `sp_mode`).
  const char *name;
  OptionKind kind;
  unsigned uses;
  const char *valueName;
  const char *help;
  /// For Choice: the spellings, in the order help lists them.
  std::vector<std::string> choices;
  /// For Integer: the range.
  int64_t min, max;
  /// Parses `text` into the field (checking the range); on error returns
  /// false with `error` set to the message.
  bool (*set)(CompilerOptions &options, std::string_view text,
              std::string &error);
  /// The field as text that `set` reads back.
  std::string (*get)(const CompilerOptions &options);
  /// Whether the field holds its default.
  bool (*isDefault)(const CompilerOptions &options);
  /// Checks the field as `set` checks a value it parsed (its range): for
  /// fields set directly (checkOptions).
  bool (*check)(const CompilerOptions &options, std::string &error);

  bool has(unsigned use) const { return (uses & use) != 0; }
  /// The Python keyword: the name with `_` for `-`.
  std::string pythonName() const;
};

/// Every declared option, in declaration order.
const std::vector<OptionInfo> &compilerOptionTable();
/// The declaration named `name` (or its Python spelling), or null.
const OptionInfo *findCompilerOption(std::string_view name);

/// Sets the option named `name` from `text` as the command line spells it
/// (`--mesh auto`, `--bind a=1,b=2`, `--cluster h100-80g`); on error
/// returns false with `error` set (an unknown name, a value out of range or
/// of the wrong kind, named as `--NAME`).
bool setOption(CompilerOptions &options, std::string_view name,
               std::string_view text, std::string &error);

/// Checks every field against its declaration (ranges, the mesh), as
/// setOption would have; a caller that filled the fields itself calls it
/// once. Spells out the mesh's implied roles.
bool checkOptions(CompilerOptions &options, std::string &error);

/// The manifest's record of `options`: each recorded option that is not
/// its default (or always, as declared), keyed by its flag.
std::map<std::string, std::string>
recordedOptions(const CompilerOptions &options);

/// `80e9`, `80GB` (10^9) or `80GiB` (2^30), and k/M/G/T, Ki/Mi/Gi/Ti with
/// or without B; unset unless positive and finite.
std::optional<double> parseByteCount(std::string_view text);

} // namespace partita

namespace mlir::partita {
// The declarations of CompilerOptions.def read the same inside the
// compiler's namespace.
using ::partita::Bindings;
using ::partita::CollectiveMatmulMode;
using ::partita::CompilerOptions;
using ::partita::EmitStage;
using ::partita::isDecodeObjective;
using ::partita::kCommandLine;
using ::partita::kEmbedding;
using ::partita::kEverywhere;
using ::partita::kNegatedFlag;
using ::partita::kNullable;
using ::partita::kPipeline;
using ::partita::kRecorded;
using ::partita::kRecordedAlways;
using ::partita::kRecordedWithMesh;
using ::partita::Mesh;
using ::partita::PlanObjective;
using ::partita::SequenceMode;
using ::partita::StorageType;
using ::partita::Strategy;
using ::partita::Target;
} // namespace mlir::partita

#endif // PARTITA_OPTIONS_OPTIONS_H
