//===- Options.h - the compiler's enum options, defined once ----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Every option that names one of a few choices (--target, --strategy,
// --sp-mode, --dtype, --collective-matmul, --objective) is an enum here, with
// the one table of its spellings. partita-compile's flags, the pass and
// pipeline options (through partita/Pipelines/OptionParser.h), the driver, the
// C++, C and Python APIs and the artifact's manifest all read that table, so a
// value is parsed once, at the edge, and spelled the same everywhere.
//
// This header includes only the standard library: the embedding API
// (partita/Partita.h) exposes these enums.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PIPELINES_OPTIONS_H
#define PARTITA_PIPELINES_OPTIONS_H

#include <iterator>
#include <optional>
#include <string>
#include <string_view>

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
/// is then filled by the next batch).
/// What --mesh auto minimizes. The decode objectives (with --max-seq) plan
/// on the decode program: one token per sequence against the KV cache.
enum class PlanObjective {
  Latency,
  Throughput,
  DecodeLatency,
  DecodeThroughput
};

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

} // namespace partita

namespace mlir::partita {
using ::partita::CollectiveMatmulMode;
using ::partita::isDecodeObjective;
using ::partita::PlanObjective;
using ::partita::SequenceMode;
using ::partita::StorageType;
using ::partita::Strategy;
using ::partita::Target;
} // namespace mlir::partita

#endif // PARTITA_PIPELINES_OPTIONS_H
