//===- Generation.cpp - prefill, decode steps, greedy generation ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The inputs follow Hugging Face's generate() over an optimum decoder
// export with past key values: a prompt left-padded with zero ids and a
// zero mask, position ids `cumsum(mask) - 1` with 1 where the mask is 0
// (`position_ids.masked_fill_(attention_mask == 0, 1)`), and per generated
// token one more valid mask slot, the position after the row's last valid
// one, and the cache slot it is written to. The whole mask lives here, one
// row of max_seq slots per sequence; the prefill reads its first prompt
// length slots, a decode step all of them.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Generation.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

/// What generation puts into an input of a serving program.
enum class Feed { InputIds, AttentionMask, PositionIds, CachePosition };

/// The tensors of one entry's runs (the prefill's or the decode step's):
/// memory for every input, in the entry's order, with what fills it, and
/// for every output; the logits among them.
struct EntryIo {
  std::vector<HostTensor> inputMemory;
  std::vector<Feed> feeds;
  std::vector<NamedTensor> inputs;
  std::vector<HostTensor> outputMemory;
  std::vector<NamedTensor> outputs;
  const HostTensor *logits = nullptr;

  /// The input that `feed` fills, or null where the entry takes none.
  int64_t *input(Feed feed) {
    for (size_t i = 0; i < feeds.size(); ++i)
      if (feeds[i] == feed)
        return inputMemory[i].tensor().as<int64_t>();
    return nullptr;
  }
};

std::string typeString(DType dtype, const std::vector<int64_t> &shape) {
  return dtypeName(dtype) + " " + shapeString(shape);
}

/// Matches `entry`'s inputs and outputs to what generation feeds and
/// reads: `sequence` tokens per run (the prompt length or 1), a mask of
/// `maskSlots`, logits of `vocab` entries (found here when 0).
Status prepareIo(const ServingSpec &serving,
                 const std::vector<TensorSpec> &inputs,
                 const std::vector<TensorSpec> &outputs,
                 const std::string &entry, int64_t sequence, int64_t maskSlots,
                 int64_t &vocab, EntryIo &io) {
  int64_t batch = serving.batch;
  io.inputMemory.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec &spec = inputs[i];
    Feed feed;
    std::vector<int64_t> shape;
    if (spec.name == serving.inputIds) {
      feed = Feed::InputIds;
      shape = {batch, sequence};
    } else if (!serving.attentionMask.empty() &&
               spec.name == serving.attentionMask) {
      feed = Feed::AttentionMask;
      shape = {batch, maskSlots};
    } else if (!serving.positionIds.empty() &&
               spec.name == serving.positionIds) {
      feed = Feed::PositionIds;
      shape = {batch, sequence};
    } else if (spec.name == serving.cachePosition) {
      feed = Feed::CachePosition;
      shape = {1};
    } else {
      return Status::error(
          "the " + entry + " input '" + spec.name +
          "' is none of those generation feeds (the serving spec's "
          "input_ids, attention_mask, position_ids and cache_position)");
    }
    if (spec.dtype != program::I64 || spec.shape != shape)
      return Status::error("the " + entry + " input '" + spec.name + "' is " +
                           typeString(spec.dtype, spec.shape) +
                           ", but generation feeds it as " +
                           typeString(program::I64, shape));
    PARTITA_RETURN_IF_ERROR(io.inputMemory[i].allocate(spec.dtype, shape));
    io.feeds.push_back(feed);
    io.inputs.push_back({spec.name, io.inputMemory[i].tensor()});
  }
  io.outputMemory.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSpec &spec = outputs[i];
    if (spec.name == serving.logits) {
      bool valid = spec.dtype == program::F32 && spec.shape.size() == 3 &&
                   spec.shape[0] == batch && spec.shape[1] == sequence &&
                   spec.shape[2] > 0 && (vocab == 0 || spec.shape[2] == vocab);
      if (!valid)
        return Status::error(
            "the " + entry + " output '" + spec.name + "' is " +
            typeString(spec.dtype, spec.shape) +
            ", but generation reads f32 [" + std::to_string(batch) + ", " +
            std::to_string(sequence) + ", " +
            (vocab ? std::to_string(vocab) : std::string("vocab")) + "]");
      vocab = spec.shape[2];
      io.logits = &io.outputMemory[i];
    }
    PARTITA_RETURN_IF_ERROR(
        io.outputMemory[i].allocate(spec.dtype, spec.shape));
    io.outputs.push_back({spec.name, io.outputMemory[i].tensor()});
  }
  if (!io.logits)
    return Status::error("the " + entry + " has no output '" + serving.logits +
                         "' (the serving spec's logits)");
  return Status::ok();
}

/// `subject` names the tensor with its verb: "the logits are".
Status expectType(const Tensor &tensor, DType dtype,
                  const std::vector<int64_t> &shape,
                  const std::string &subject) {
  if (tensor.dtype == dtype && tensor.shape == shape)
    return Status::ok();
  return Status::error(subject + " " + typeString(tensor.dtype, tensor.shape) +
                       ", expected " + typeString(dtype, shape));
}

/// The index of the largest of `n` logits, the lowest on ties.
int64_t argmax(const float *logits, int64_t n) {
  int64_t best = 0;
  for (int64_t v = 1; v < n; ++v)
    if (logits[v] > logits[best])
      best = v;
  return best;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

struct Generation::Impl {
  Runner *runner = nullptr;
  ServingSpec serving;
  int64_t batch = 0, promptLength = 0, maxSeq = 0, vocab = 0;
  EntryIo prefill, decode;
  /// [batch, maxSeq]: 1 where a slot holds a valid token.
  std::vector<int64_t> mask;
  /// Slots filled: 0 before the first prefill (or after a failed one).
  int64_t filled = 0;
  /// Right padding (ServingSpec::rightPadded): each row's tokens so far,
  /// which start at slot 0.
  std::vector<int64_t> rowTokens;

  /// Copies the logits of sequence position `at[b]` of row b of `io`'s run
  /// into `logits` ([batch, vocab]).
  void copyLogits(const EntryIo &io, const std::vector<int64_t> &at,
                  const Tensor &logits) const {
    const Tensor &all = io.logits->tensor();
    int64_t sequence = all.shape[1];
    for (int64_t b = 0; b < batch; ++b)
      std::memcpy(logits.as<float>() + b * vocab,
                  all.as<float>() + (b * sequence + at[size_t(b)]) * vocab,
                  size_t(vocab) * sizeof(float));
  }
};

Generation::Generation() : impl(std::make_unique<Impl>()) {}
Generation::~Generation() = default;

Status Generation::create(Runner &runner, std::unique_ptr<Generation> &out) {
  const Manifest &manifest = runner.manifest();
  if (!manifest.serving)
    return Status::error("model '" + manifest.modelName +
                         "' was not compiled with --max-seq: it has no decode "
                         "program to generate with");
  PARTITA_RETURN_IF_ERROR(checkDecodeTarget(manifest));
  std::unique_ptr<Generation> created(new Generation());
  Impl &impl = *created->impl;
  impl.runner = &runner;
  impl.serving = *manifest.serving;
  impl.batch = impl.serving.batch;
  impl.promptLength = impl.serving.promptLength;
  impl.maxSeq = impl.serving.maxSeq;
  PARTITA_RETURN_IF_ERROR(prepareIo(
      impl.serving, manifest.inputs, manifest.outputs, "prefill",
      impl.promptLength, impl.promptLength, impl.vocab, impl.prefill));
  PARTITA_RETURN_IF_ERROR(prepareIo(impl.serving, impl.serving.decodeInputs,
                                    impl.serving.decodeOutputs, "decode step",
                                    1, impl.maxSeq, impl.vocab, impl.decode));
  impl.mask.assign(size_t(impl.batch * impl.maxSeq), 0);
  out = std::move(created);
  return Status::ok();
}

int64_t Generation::position() const { return impl->filled; }

int64_t Generation::remaining() const { return impl->maxSeq - impl->filled; }

/// Refuses a token id outside the vocabulary of the logits, before any
/// rank runs, so that every mesh refuses it alike. The rule is a plain
/// run's (the model's embedding Gather): ids from -vocab to vocab - 1, a
/// negative one counting from the end of the table.
static Status checkTokenIds(const Tensor &ids, int64_t vocab,
                            const std::string &what) {
  const int64_t *values = ids.as<int64_t>();
  for (int64_t i = 0, n = ids.numElements(); i < n; ++i)
    if (values[i] < -vocab || values[i] >= vocab)
      return Status::error(
          what + " holds token id " + std::to_string(values[i]) +
          ", outside the vocabulary of " + std::to_string(vocab) + " (ids -" +
          std::to_string(vocab) + " to " + std::to_string(vocab - 1) +
          ", negative ones counting from the end)");
  return Status::ok();
}

Status Generation::prefill(const Tensor &inputIds, const Tensor *attentionMask,
                           const Tensor &logits) {
  Impl &g = *impl;
  int64_t batch = g.batch, prompt = g.promptLength;
  if (inputIds.dtype != program::I64 || inputIds.shape.size() != 2)
    return Status::error("the prompt's input ids are " +
                         typeString(inputIds.dtype, inputIds.shape) +
                         ", expected i64 [batch, tokens]");
  int64_t tokens = inputIds.shape[1];
  if (inputIds.shape[0] != batch)
    return Status::error("the prompt is a batch of " +
                         std::to_string(inputIds.shape[0]) +
                         ", but the artifact was compiled for a batch of " +
                         std::to_string(batch));
  if (tokens < 1 || tokens > prompt)
    return Status::error("the prompt has " + std::to_string(tokens) +
                         " tokens; the prefill takes 1 to " +
                         std::to_string(prompt) +
                         " (the prompt length compiled into the artifact)");
  PARTITA_RETURN_IF_ERROR(checkTokenIds(inputIds, g.vocab, "the prompt"));
  if (attentionMask) {
    PARTITA_RETURN_IF_ERROR(expectType(
        *attentionMask, program::I64, inputIds.shape, "the attention mask is"));
    const int64_t *values = attentionMask->as<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      int64_t valid = 0;
      for (int64_t i = 0; i < tokens; ++i) {
        int64_t value = values[b * tokens + i];
        if (value != 0 && value != 1)
          return Status::error(
              "the attention mask holds " + std::to_string(value) + " at [" +
              std::to_string(b) + ", " + std::to_string(i) + "], not 0 or 1");
        valid += value;
      }
      if (valid == 0)
        return Status::error("row " + std::to_string(b) +
                             " of the attention mask masks every token of "
                             "the prompt");
    }
  }
  PARTITA_RETURN_IF_ERROR(
      expectType(logits, program::F32, {batch, g.vocab}, "the logits are"));

  // A new generation: nothing of the previous one stays in the cache.
  g.filled = 0;
  PARTITA_RETURN_IF_ERROR(g.runner->resetCache());
  std::fill(g.mask.begin(), g.mask.end(), 0);
  auto given = [&](int64_t b, int64_t i) {
    return attentionMask ? attentionMask->as<int64_t>()[b * tokens + i] : 1;
  };
  // The logits that give each row's first token: its last prompt position.
  std::vector<int64_t> last(size_t(batch), prompt - 1);
  int64_t *ids = g.prefill.input(Feed::InputIds);
  if (g.serving.rightPadded) {
    // Each row's valid tokens from slot 0, in order, the padding after
    // them: what a masked token of the prompt would have been is skipped
    // as the mask skips it.
    g.rowTokens.assign(size_t(batch), 0);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t &n = g.rowTokens[size_t(b)];
      for (int64_t i = 0; i < tokens; ++i)
        if (given(b, i)) {
          if (ids)
            ids[b * prompt + n] = inputIds.as<int64_t>()[b * tokens + i];
          g.mask[size_t(b * g.maxSeq + n++)] = 1;
        }
      if (ids)
        std::fill(ids + b * prompt + n, ids + (b + 1) * prompt, 0);
      last[size_t(b)] = n - 1;
    }
  } else {
    int64_t pad = prompt - tokens;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < tokens; ++i)
        g.mask[size_t(b * g.maxSeq + pad + i)] = given(b, i);
    if (ids)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < prompt; ++i)
          ids[b * prompt + i] =
              i < pad ? 0 : inputIds.as<int64_t>()[b * tokens + i - pad];
  }
  if (int64_t *mask = g.prefill.input(Feed::AttentionMask))
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(&g.mask[size_t(b * g.maxSeq)], prompt, mask + b * prompt);
  if (int64_t *positions = g.prefill.input(Feed::PositionIds))
    for (int64_t b = 0; b < batch; ++b) {
      int64_t ones = 0;
      for (int64_t i = 0; i < prompt; ++i) {
        int64_t valid = g.mask[size_t(b * g.maxSeq + i)];
        ones += valid;
        positions[b * prompt + i] = valid ? ones - 1 : 1;
      }
    }
  if (int64_t *slot = g.prefill.input(Feed::CachePosition))
    *slot = 0;
  PARTITA_RETURN_IF_ERROR(g.runner->run(g.prefill.inputs, g.prefill.outputs));
  g.copyLogits(g.prefill, last, logits);
  g.filled = prompt;
  return Status::ok();
}

Status Generation::step(const Tensor &tokens, const Tensor &logits) {
  Impl &g = *impl;
  if (g.filled == 0)
    return Status::error("step() before prefill(): a generation starts with "
                         "the prompt");
  int64_t slot = g.filled;
  if (slot >= g.maxSeq)
    return Status::error(
        "the KV cache holds " + std::to_string(g.maxSeq) + " tokens (" +
        std::to_string(g.promptLength) + " of prompt and " +
        std::to_string(slot - g.promptLength) +
        " generated), all of them filled: no slot is left for another");
  PARTITA_RETURN_IF_ERROR(
      expectType(tokens, program::I64, {g.batch}, "the tokens are"));
  PARTITA_RETURN_IF_ERROR(checkTokenIds(tokens, g.vocab, "the tokens"));
  PARTITA_RETURN_IF_ERROR(
      expectType(logits, program::F32, {g.batch, g.vocab}, "the logits are"));
  // The slot of each row's token: the step's, or with right padding the
  // one after the row's tokens.
  std::vector<int64_t> rowSlot(size_t(g.batch), slot);
  if (g.serving.rightPadded)
    rowSlot = g.rowTokens;
  for (int64_t b = 0; b < g.batch; ++b)
    g.mask[size_t(b * g.maxSeq + rowSlot[size_t(b)])] = 1;
  if (int64_t *ids = g.decode.input(Feed::InputIds))
    std::copy_n(tokens.as<int64_t>(), g.batch, ids);
  if (int64_t *mask = g.decode.input(Feed::AttentionMask))
    std::copy(g.mask.begin(), g.mask.end(), mask);
  // The token's position follows the row's last valid one: the count of
  // valid slots before it (padding included nowhere).
  if (int64_t *positions = g.decode.input(Feed::PositionIds))
    for (int64_t b = 0; b < g.batch; ++b) {
      const int64_t *row = &g.mask[size_t(b * g.maxSeq)];
      positions[b] = std::count(row, row + rowSlot[size_t(b)], int64_t(1));
    }
  if (int64_t *position = g.decode.input(Feed::CachePosition))
    *position = slot;
  Status ran = g.runner->runDecode(g.decode.inputs, g.decode.outputs);
  if (!ran) {
    for (int64_t b = 0; b < g.batch; ++b)
      g.mask[size_t(b * g.maxSeq + rowSlot[size_t(b)])] = 0;
    return ran;
  }
  g.copyLogits(g.decode, std::vector<int64_t>(size_t(g.batch), 0), logits);
  if (g.serving.rightPadded)
    for (int64_t &n : g.rowTokens)
      ++n;
  ++g.filled;
  return Status::ok();
}

Status Generation::generate(const Tensor &inputIds, const Tensor *attentionMask,
                            const GenerateOptions &options,
                            GenerateResult &result) {
  Impl &g = *impl;
  int64_t count = options.maxNewTokens;
  if (count < 1)
    return Status::error("generation makes at least one new token, not " +
                         std::to_string(count));
  // The prompt takes the prefill length (padded), every new token but the
  // last a slot of its own.
  if (count - 1 > g.maxSeq - g.promptLength) {
    // The slots needed, counted without overflowing (a count near 2^63).
    int64_t need = 0;
    std::string needed =
        __builtin_add_overflow(g.promptLength, count - 1, &need)
            ? "more than " + std::to_string(INT64_MAX)
            : std::to_string(need);
    return Status::error(
        "a prompt (padded to " + std::to_string(g.promptLength) +
        " tokens) and " + std::to_string(count) + " new tokens need " + needed +
        " cache slots, but the KV cache holds " + std::to_string(g.maxSeq) +
        " (compile with a larger --max-seq)");
  }
  result = GenerateResult();
  result.batch = g.batch;
  result.vocab = g.vocab;
  result.tokens.assign(size_t(g.batch * count), 0);
  HostTensor logits, tokens;
  PARTITA_RETURN_IF_ERROR(logits.allocate(program::F32, {g.batch, g.vocab}));
  PARTITA_RETURN_IF_ERROR(tokens.allocate(program::I64, {g.batch}));
  auto record = [&](int64_t index) {
    const float *values = logits.tensor().as<float>();
    int64_t *next = tokens.tensor().as<int64_t>();
    for (int64_t b = 0; b < g.batch; ++b) {
      next[b] = argmax(values + b * g.vocab, g.vocab);
      result.tokens[size_t(b * count + index)] = next[b];
    }
    if (options.keepLogits)
      result.logits.insert(result.logits.end(), values,
                           values + g.batch * g.vocab);
    result.generated = index + 1;
  };

  auto start = std::chrono::steady_clock::now();
  PARTITA_RETURN_IF_ERROR(prefill(inputIds, attentionMask, logits.tensor()));
  result.prefillSeconds = secondsSince(start);
  record(0);
  for (int64_t index = 1; index < count; ++index) {
    start = std::chrono::steady_clock::now();
    PARTITA_RETURN_IF_ERROR(step(tokens.tensor(), logits.tensor()));
    result.stepSeconds.push_back(secondsSince(start));
    record(index);
  }
  return Status::ok();
}
