//===- Generation.h - prefill, decode steps, greedy generation --*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Generation drives a serving artifact's two programs (Manifest::serving)
// through a Runner: a prefill of the prompt, then one decode program run per
// token, with the KV cache resident in the runner's ranks. It computes what
// Hugging Face generation feeds a decoder export: prompts left-padded to the
// prefill length with a zero mask, position ids `cumsum(mask) - 1` (1 where
// the mask is 0), the mask extended by one valid slot per generated token,
// and the cache slot of each step. An artifact whose rows are right-padded
// (ServingSpec::rightPadded: onnxruntime-genai's exports) gets each row's
// tokens from slot 0, as onnxruntime-genai feeds them, and each step's
// token in the slot after its row's. The loop is in C++, so partita-run,
// the C API and Python generate the same way.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_GENERATION_H
#define PARTITA_RUNTIME_GENERATION_H

#include "partita/runtime/Runner.h"
#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace partita::runtime {

struct GenerateOptions {
  /// Tokens to generate after the prompt.
  int64_t maxNewTokens = 16;
  /// Keep every step's logits in GenerateResult::logits.
  bool keepLogits = false;
};

struct GenerateResult {
  /// [batch, generated], row-major: the greedy tokens (argmax of the
  /// logits of the last position, the lowest index on ties).
  std::vector<int64_t> tokens;
  int64_t batch = 0;
  int64_t generated = 0;
  /// With keepLogits: [generated, batch, vocab], step 0 being the
  /// prefill's last position.
  std::vector<float> logits;
  int64_t vocab = 0;
  /// Wall time of the prefill (time to first token) and of each decode
  /// step, in seconds.
  double prefillSeconds = 0;
  std::vector<double> stepSeconds;
};

/// One generation at a time over a runner of a serving artifact.
class Generation {
public:
  /// Checks that the runner's artifact is a serving one (host or cuda)
  /// whose programs take only what generation feeds (the serving spec's
  /// input_ids, attention_mask, position_ids and cache_position: i64
  /// [batch, sequence], [batch, sequence] for the prefill and [batch,
  /// max_seq] for a step, [batch, sequence], [1]) and give f32 logits
  /// [batch, sequence, vocab], sequence being the prompt length or 1. The
  /// runner must outlive the generation.
  static Status create(Runner &runner, std::unique_ptr<Generation> &out);
  ~Generation();
  Generation(const Generation &) = delete;
  Generation &operator=(const Generation &) = delete;

  /// Starts a generation: zeroes the cache, runs the prefill on
  /// `inputIds` (i64 [batch, p], p <= the prefill length; batch as
  /// compiled) with `attentionMask` (i64 [batch, p] of 0 and 1, null: all
  /// ones; rows left-padded as Hugging Face pads them, or each row's valid
  /// tokens moved to its start for a right-padded artifact) and writes the
  /// logits of each row's last prompt token to `logits` (f32 [batch,
  /// vocab]).
  Status prefill(const Tensor &inputIds, const Tensor *attentionMask,
                 const Tensor &logits);
  /// Feeds one token per row (`tokens`: i64 [batch]) at the next position
  /// and writes its logits (f32 [batch, vocab]). Refused, changing nothing,
  /// before prefill() or when the cache is full.
  Status step(const Tensor &tokens, const Tensor &logits);
  /// Cache slots filled so far (the prefill length plus the steps; 0
  /// before a prefill, or after one that failed).
  int64_t position() const;
  /// Cache slots left: max_seq - position().
  int64_t remaining() const;

  /// prefill() and then greedy steps until `options.maxNewTokens` tokens
  /// (the first comes from the prefill's logits, each step feeds the
  /// previous token). Refused before anything runs when the padded prompt
  /// and the new tokens do not fit the cache (prefill length +
  /// maxNewTokens - 1 > max_seq) or maxNewTokens < 1.
  Status generate(const Tensor &inputIds, const Tensor *attentionMask,
                  const GenerateOptions &options, GenerateResult &result);

private:
  Generation();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_GENERATION_H
