//===- ServingModel.h - a hand-built serving artifact for tests -*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A "model" with the interface of a decoder compiled with --max-seq, small
// enough to check by hand. Its KV cache `past` is f32 [batch, heads,
// max_seq, head_dim], split over tp along the heads. Each program writes
// its tokens into the cache with kv_cache_write at cache_position:
// past[b, h, slot, d] = id * scale[h, d], scale[h, d] = 1 + h * head_dim + d
// (a weight, each rank holding its heads' block), and its logits are four
// features of the run, so that a test sees everything it was fed:
//
//   logits[b, s, 0] = the mask: attention_mask[b, s] (prefill), the
//                     number of valid slots of row b (decode)
//   logits[b, s, 1] = position_ids[b, s]
//   logits[b, s, 2] = cache_position
//   logits[b, s, 3] = the sum of the cache's row b after the write (an
//                     all-reduce over tp), i.e. 10 * the sum of the ids in
//                     the row's slots
//
// A model without attention_mask or position_ids has 0 for that feature.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TEST_CORE_SERVINGMODEL_H
#define PARTITA_RUNTIME_TEST_CORE_SERVINGMODEL_H

#include "ProgramBuilder.h"

#include "partita/runtime/ArtifactWriter.h"

#include <string>
#include <vector>

namespace partita::runtime::test {

constexpr int64_t kServingBatch = 2, kServingHeads = 2, kServingMaxSeq = 8,
                  kServingPrompt = 4, kServingHeadDim = 2, kServingVocab = 4;
/// The sum of scale[h, d] over the heads and the head dimension.
constexpr float kServingScaleSum = 10;

struct ServingModelOptions {
  int32_t tp = 1;
  std::string target = "host";
  bool attentionMask = true;
  bool positionIds = true;
  // Ways to break the artifact, for the writer's and loader's checks.
  /// Rank 0's prefill binds the cache as an input only.
  bool cacheOnlyAsInput = false;
  /// Every rank binds the whole cache, not its block.
  bool unsplitCache = false;
  bool noDecodePrograms = false;
  /// Ways to give Generation what it cannot feed or read.
  /// The decode step takes another input, `temperature` (f32 [1]).
  bool extraDecodeInput = false;
  /// The decode step's mask covers the prompt length, not max_seq.
  bool shortDecodeMask = false;
  /// The decode step's logits have a fifth feature (cache_position again).
  bool widerDecodeLogits = false;
};

inline float servingScale(int64_t head, int64_t d) {
  return float(1 + head * kServingHeadDim + d);
}

/// The program of `rank`: the prefill's, or with `decode` the decode
/// step's.
inline program::Program servingProgram(int32_t rank, bool decode,
                                       const ServingModelOptions &options) {
  using program::F32;
  using program::I64;
  int32_t tp = options.tp;
  int64_t batch = kServingBatch, slots = kServingMaxSeq;
  int64_t sequence = decode ? 1 : kServingPrompt;
  int64_t maskSlots =
      decode && !options.shortDecodeMask ? kServingMaxSeq : kServingPrompt;
  int64_t heads = options.unsplitCache ? kServingHeads : kServingHeads / tp;
  int64_t features = decode && options.widerDecodeLogits ? 5 : 4;
  std::vector<int64_t> cacheShape = {batch, heads, slots, kServingHeadDim};

  ProgramBuilder b(rank, tp);
  int32_t ids = b.input("input_ids", I64, {batch, sequence});
  int32_t mask = options.attentionMask
                     ? b.input("attention_mask", I64, {batch, maskSlots})
                     : -1;
  int32_t positions = options.positionIds
                          ? b.input("position_ids", I64, {batch, sequence})
                          : -1;
  int32_t slot = b.input("cache_position", I64, {1});
  if (decode && options.extraDecodeInput)
    b.input("temperature", F32, {1});
  int32_t cacheIn = b.input("past", F32, cacheShape);
  int32_t scale = b.weight("scale." + std::to_string(rank), F32,
                           {1, heads, 1, kServingHeadDim});
  int32_t cacheOut = options.cacheOnlyAsInput && rank == 0 && !decode
                         ? b.activation(F32, cacheShape)
                         : b.output("past", F32, cacheShape);
  int32_t logits = b.output("logits", F32, {batch, sequence, features});

  // The update: each token's id times its head's scale.
  int32_t idValues = b.activation(F32, {batch, sequence});
  b.kernel("cast", {ids}, {idValues}, "/ids");
  int32_t idColumns = b.alias(idValues, F32, {batch, 1, sequence, 1});
  int32_t update = b.activation(F32, {batch, heads, sequence, kServingHeadDim});
  b.kernel("mul", {idColumns, scale}, {update}, "/scale");
  program::Kernel *write =
      b.kernel("kv_cache_write", {cacheIn, update, slot}, {cacheOut}, "/write");
  (*write->mutable_attributes())["axis"].set_i(2);

  // The features, each [batch, sequence, 1].
  auto feature = [&](int32_t source, std::vector<int64_t> shape) {
    int32_t view = b.alias(source, F32, std::move(shape));
    int32_t spread = b.activation(F32, {batch, sequence, 1});
    b.kernel("broadcast_to", {view}, {spread}, "/feature");
    return spread;
  };
  auto zeros = [&] {
    return b.constant(std::vector<float>(size_t(batch * sequence), 0.0f),
                      {batch, sequence, 1});
  };
  int32_t maskFeature = -1;
  if (mask >= 0) {
    int32_t maskValues = b.activation(F32, {batch, maskSlots});
    b.kernel("cast", {mask}, {maskValues}, "/mask");
    if (decode) {
      int32_t valid = b.activation(F32, {batch});
      program::Kernel *count =
          b.kernel("reduce", {maskValues}, {valid}, "/mask/count");
      (*count->mutable_attributes())["kind"].set_s("sum");
      (*count->mutable_attributes())["axes"].mutable_ints()->add_values(1);
      maskFeature = feature(valid, {batch, 1, 1});
    } else {
      maskFeature = feature(maskValues, {batch, sequence, 1});
    }
  } else {
    maskFeature = zeros();
  }
  int32_t positionFeature = -1;
  if (positions >= 0) {
    int32_t positionValues = b.activation(F32, {batch, sequence});
    b.kernel("cast", {positions}, {positionValues}, "/positions");
    positionFeature = feature(positionValues, {batch, sequence, 1});
  } else {
    positionFeature = zeros();
  }
  int32_t slotValue = b.activation(F32, {1});
  b.kernel("cast", {slot}, {slotValue}, "/slot");
  int32_t slotFeature = feature(slotValue, {1, 1, 1});

  int32_t partial = b.activation(F32, {batch});
  program::Kernel *sum = b.kernel("reduce", {cacheOut}, {partial}, "/sum");
  (*sum->mutable_attributes())["kind"].set_s("sum");
  for (int64_t axis : {1, 2, 3})
    (*sum->mutable_attributes())["axes"].mutable_ints()->add_values(axis);
  int32_t total = partial;
  if (tp > 1) {
    total = b.activation(F32, {batch});
    std::vector<int32_t> group;
    for (int32_t r = 0; r < tp; ++r)
      group.push_back(r);
    b.collective(program::Collective::ALL_REDUCE, partial, total, group)
        ->set_reduction("sum");
  }
  int32_t sumFeature = feature(total, {batch, 1, 1});
  std::vector<int32_t> pieces = {maskFeature, positionFeature, slotFeature,
                                 sumFeature};
  if (features == 5)
    pieces.push_back(feature(slotValue, {1, 1, 1}));
  program::Kernel *concat = b.kernel("concat", pieces, {logits}, "/logits");
  (*concat->mutable_attributes())["axis"].set_i(2);
  return b.p;
}

/// The manifest of the model, without programs or files.
inline Manifest servingManifest(const ServingModelOptions &options) {
  using program::F32;
  using program::I64;
  int32_t tp = options.tp;
  int64_t batch = kServingBatch;
  Manifest manifest;
  manifest.modelName = "serving";
  manifest.target = options.target;
  manifest.worldSize = tp;
  if (tp > 1)
    manifest.meshAxes = {{"tp", tp}};
  if (options.target == "cuda")
    manifest.cudaArchs = {"sm_80"};
  for (int32_t rank = 0; rank < tp; ++rank) {
    RankEntry entry;
    entry.rank = rank;
    if (tp > 1)
      entry.coords = {{"tp", rank}};
    if (options.target == "cuda") {
      entry.cudaSource = "cuda/rank" + std::to_string(rank) + ".cu";
      entry.cudaFatbin = "cuda/rank" + std::to_string(rank) + ".fatbin";
      entry.decodeCudaSource =
          "cuda/rank" + std::to_string(rank) + ".decode.cu";
      entry.decodeCudaFatbin =
          "cuda/rank" + std::to_string(rank) + ".decode.fatbin";
    }
    manifest.ranks.push_back(entry);
  }
  auto interface = [&](int64_t sequence, int64_t maskSlots) {
    std::vector<TensorSpec> inputs = {
        {"input_ids", I64, {batch, sequence}, {}}};
    if (options.attentionMask)
      inputs.push_back({"attention_mask", I64, {batch, maskSlots}, {}});
    if (options.positionIds)
      inputs.push_back({"position_ids", I64, {batch, sequence}, {}});
    inputs.push_back({"cache_position", I64, {1}, {}});
    return inputs;
  };
  manifest.inputs = interface(kServingPrompt, kServingPrompt);
  manifest.outputs = {
      {"logits", F32, {batch, kServingPrompt, kServingVocab}, {}}};
  ServingSpec serving;
  serving.maxSeq = kServingMaxSeq;
  serving.promptLength = kServingPrompt;
  serving.batch = batch;
  serving.attentionMask = options.attentionMask ? "attention_mask" : "";
  serving.positionIds = options.positionIds ? "position_ids" : "";
  TensorSpec cache{
      "past", F32, {batch, kServingHeads, kServingMaxSeq, kServingHeadDim}, {}};
  if (tp > 1)
    cache.sharding.dims = {{}, {"tp"}, {}, {}};
  serving.cache = {cache};
  serving.decodeInputs =
      interface(1, options.shortDecodeMask ? kServingPrompt : kServingMaxSeq);
  if (options.extraDecodeInput)
    serving.decodeInputs.push_back({"temperature", F32, {1}, {}});
  serving.decodeOutputs = {
      {"logits",
       F32,
       {batch, 1, options.widerDecodeLogits ? 5 : kServingVocab},
       {}}};
  manifest.serving = serving;
  return manifest;
}

/// Fills `writer` with the whole artifact: manifest, weights (the scales,
/// which must stay alive until commit: `scales` holds them), programs.
inline Status fillServingModel(ArtifactWriter &writer,
                               const ServingModelOptions &options,
                               std::vector<std::vector<float>> &scales) {
  writer.manifest() = servingManifest(options);
  int32_t tp = options.tp;
  int64_t heads = options.unsplitCache ? kServingHeads : kServingHeads / tp;
  scales.assign(size_t(tp), {});
  for (int32_t rank = 0; rank < tp; ++rank) {
    const RankEntry &entry = writer.manifest().ranks[size_t(rank)];
    if (options.target == "cuda") {
      PARTITA_RETURN_IF_ERROR(writer.addFile(entry.cudaSource, "// none"));
      PARTITA_RETURN_IF_ERROR(writer.addFile(entry.cudaFatbin, "none"));
      PARTITA_RETURN_IF_ERROR(
          writer.addFile(entry.decodeCudaSource, "// none"));
      PARTITA_RETURN_IF_ERROR(writer.addFile(entry.decodeCudaFatbin, "none"));
    }
    std::vector<float> &scale = scales[size_t(rank)];
    int64_t first = options.unsplitCache ? 0 : rank * heads;
    for (int64_t h = first; h < first + heads; ++h)
      for (int64_t d = 0; d < kServingHeadDim; ++d)
        scale.push_back(servingScale(h, d));
    PARTITA_RETURN_IF_ERROR(
        writer.addWeight("scale." + std::to_string(rank), program::F32,
                         {1, heads, 1, kServingHeadDim}, scale.data(),
                         scale.size() * sizeof(float)));
    PARTITA_RETURN_IF_ERROR(
        writer.addProgram(rank, servingProgram(rank, false, options)));
    if (!options.noDecodePrograms)
      PARTITA_RETURN_IF_ERROR(
          writer.addDecodeProgram(rank, servingProgram(rank, true, options)));
  }
  return Status::ok();
}

/// Writes the artifact to `path`.
inline Status writeServingModel(const std::string &path,
                                const ServingModelOptions &options) {
  ArtifactWriter writer;
  std::vector<std::vector<float>> scales;
  PARTITA_RETURN_IF_ERROR(fillServingModel(writer, options, scales));
  return writer.commit(path);
}

/// An ordinary artifact, for contrast: y = -x on one rank, x f32 [2].
inline Status writePlainModel(const std::string &path) {
  ArtifactWriter writer;
  Manifest &manifest = writer.manifest();
  manifest.modelName = "plain";
  manifest.ranks = {RankEntry{}};
  manifest.inputs = {{"x", program::F32, {2}, {}}};
  manifest.outputs = {{"y", program::F32, {2}, {}}};
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2});
  int32_t y = b.output("y", program::F32, {2});
  b.kernel("neg", {x}, {y});
  PARTITA_RETURN_IF_ERROR(writer.addProgram(0, b.p));
  return writer.commit(path);
}

} // namespace partita::runtime::test

#endif // PARTITA_RUNTIME_TEST_CORE_SERVINGMODEL_H
