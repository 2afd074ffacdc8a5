//===- ServingTest.cpp - serving artifacts, their KV cache, generation ----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The serving model of ServingModel.h on one rank and on tp=2 with its
// cache split: the manifest's `serving` and decode programs written and
// read back, what the writer and the loader refuse, the runner's resident
// cache across runs, and Generation against Hugging Face's rules, computed
// here independently.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/ArtifactWriter.h"
#include "partita/runtime/Generation.h"
#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/Runner.h"
#include "partita/runtime/Sha256.h"
#include "partita/runtime/distributed/Launcher.h"

#include "ServingModel.h"
#include "TestUtil.h"

#include <google/protobuf/util/message_differencer.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <numeric>

using namespace partita::runtime;
using namespace partita::runtime::test;
namespace program = partita::program;
using google::protobuf::util::MessageDifferencer;

namespace {

constexpr int64_t kB = kServingBatch, kP = kServingPrompt, kL = kServingMaxSeq,
                  kV = kServingVocab;

nlohmann::json readManifest(const std::string &artifact) {
  return nlohmann::json::parse(test::readBytes(artifact + "/manifest.json"));
}

/// Writes an edited manifest with its digest recomputed (docs/artifact.md),
/// so that only the checks of its contents can refuse it.
void writeRehashedManifest(const std::string &artifact,
                           nlohmann::json manifest) {
  manifest.erase("manifest_sha256");
  std::string canonical = manifest.dump();
  manifest["manifest_sha256"] =
      "sha256:" + Sha256::hexDigest(canonical.data(), canonical.size());
  test::writeBytes(artifact + "/manifest.json", manifest.dump(2));
}

/// Replaces a file of the artifact and its digest in the manifest.
void replaceFile(const std::string &artifact, const std::string &relative,
                 const std::string &bytes) {
  test::writeBytes(artifact + "/" + relative, bytes);
  nlohmann::json manifest = readManifest(artifact);
  manifest["files"][relative] =
      "sha256:" + Sha256::hexDigest(bytes.data(), bytes.size());
  writeRehashedManifest(artifact, manifest);
}

RunnerOptions patient() {
  RunnerOptions options;
  options.threadsPerRank = 1;
  options.timeoutSeconds = 60;
  return options;
}

Tensor i64(std::vector<int64_t> &data, std::vector<int64_t> shape) {
  return Tensor{data.data(), program::I64, std::move(shape)};
}
Tensor f32(std::vector<float> &data, std::vector<int64_t> shape) {
  return Tensor{data.data(), program::F32, std::move(shape)};
}

//===----------------------------------------------------------------------===//
// The manifest and the artifact
//===----------------------------------------------------------------------===//

TEST(ServingArtifact, RoundTrip) {
  TemporaryDirectory directory;
  ServingModelOptions options;
  options.tp = 2;
  options.positionIds = false;
  std::string path = directory.path("art");
  ASSERT_OK(writeServingModel(path, options));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));

  const Manifest &manifest = artifact->manifest();
  ASSERT_TRUE(manifest.serving.has_value());
  const ServingSpec &serving = *manifest.serving;
  EXPECT_EQ(serving.maxSeq, kL);
  EXPECT_EQ(serving.promptLength, kP);
  EXPECT_EQ(serving.batch, kB);
  EXPECT_EQ(serving.inputIds, "input_ids");
  EXPECT_EQ(serving.attentionMask, "attention_mask");
  EXPECT_EQ(serving.positionIds, "");
  EXPECT_EQ(serving.cachePosition, "cache_position");
  EXPECT_EQ(serving.logits, "logits");
  ASSERT_EQ(serving.cache.size(), 1u);
  EXPECT_EQ(serving.cache[0].name, "past");
  EXPECT_EQ(serving.cache[0].shape, (std::vector<int64_t>{kB, 2, kL, 2}));
  EXPECT_EQ(serving.cache[0].sharding.dims[1], std::vector<std::string>{"tp"});
  ASSERT_EQ(serving.decodeInputs.size(), 3u);
  EXPECT_EQ(serving.decodeInputs[1].shape, (std::vector<int64_t>{kB, kL}));
  ASSERT_EQ(serving.decodeOutputs.size(), 1u);
  EXPECT_EQ(manifest.ranks[1].decodeProgram, "programs/rank1.decode.pb");
  EXPECT_EQ(manifest.files.size(), 5u);
  EXPECT_TRUE(MessageDifferencer::Equals(*artifact->decodeProgram(1),
                                         servingProgram(1, true, options)));
  EXPECT_TRUE(MessageDifferencer::Equals(artifact->program(1),
                                         servingProgram(1, false, options)));

  // The decode entry: its own inputs, outputs and programs over the same
  // weights, not a copy of them.
  const LoadedArtifact *decode = artifact->decodeEntry();
  ASSERT_NE(decode, nullptr);
  EXPECT_EQ(decode->path(), artifact->path());
  EXPECT_EQ(&decode->weights(), &artifact->weights());
  EXPECT_EQ(specList(decode->manifest().inputs),
            specList(serving.decodeInputs));
  EXPECT_EQ(specList(decode->manifest().outputs),
            specList(serving.decodeOutputs));
  EXPECT_EQ(&decode->program(0), artifact->decodeProgram(0));
  EXPECT_EQ(decode->decodeEntry(), nullptr);
  EXPECT_TRUE(decode->manifest().serving.has_value());

  nlohmann::json json = readManifest(path);
  EXPECT_EQ(json["format_version"], 1);
  const nlohmann::json &written = json["serving"];
  EXPECT_EQ(written["max_seq"], kL);
  EXPECT_EQ(written["prompt_length"], kP);
  EXPECT_EQ(written["batch"], kB);
  EXPECT_EQ(written["attention_mask"], "attention_mask");
  EXPECT_TRUE(written["position_ids"].is_null());
  EXPECT_EQ(written["padding"], "left");
  EXPECT_FALSE(serving.rightPadded);
  EXPECT_EQ(written["cache"][0]["sharding"]["dims"][1],
            nlohmann::json::array({"tp"}));
  EXPECT_EQ(written["decode"]["inputs"].size(), 3u);
  EXPECT_EQ(json["ranks"][0]["decode_program"], "programs/rank0.decode.pb");
  EXPECT_EQ(json["files"]["programs/rank0.decode.pb"].get<std::string>().rfind(
                "sha256:", 0),
            0u);
}

/// An artifact without `serving` is written as before: the same members in
/// the same order, nothing of serving.
TEST(ServingArtifact, OrdinaryArtifactsAreUnchanged) {
  TemporaryDirectory directory;
  std::string path = directory.path("plain");
  ASSERT_OK(writePlainModel(path));
  std::string text = test::readBytes(path + "/manifest.json");
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys, rankKeys;
  for (auto it = json.begin(); it != json.end(); ++it)
    keys.push_back(it.key());
  for (auto it = json["ranks"][0].begin(); it != json["ranks"][0].end(); ++it)
    rankKeys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "format", "format_version", "model", "target", "mesh",
                      "ranks", "weights", "inputs", "outputs", "schedule",
                      "compile_options", "files", "manifest_sha256"}));
  EXPECT_EQ(rankKeys,
            (std::vector<std::string>{"rank", "coords", "stage", "program"}));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  EXPECT_FALSE(artifact->manifest().serving.has_value());
  EXPECT_EQ(artifact->decodeEntry(), nullptr);
  EXPECT_EQ(artifact->decodeProgram(0), nullptr);
}

/// What commit refuses of a serving artifact, before writing anything.
TEST(ServingArtifact, WriterRefusesInconsistentPrograms) {
  TemporaryDirectory directory;
  auto commit = [&](const ServingModelOptions &options,
                    const std::function<void(ArtifactWriter &)> &edit) {
    ArtifactWriter writer;
    std::vector<std::vector<float>> scales;
    Status filled = fillServingModel(writer, options, scales);
    if (!filled)
      return filled;
    if (edit)
      edit(writer);
    return writer.commit(directory.path("art"));
  };
  ServingModelOptions tp2;
  tp2.tp = 2;
  ASSERT_OK(commit(tp2, nullptr));
  std::filesystem::remove_all(directory.path("art"));

  ServingModelOptions onlyInput = tp2;
  onlyInput.cacheOnlyAsInput = true;
  EXPECT_ERROR_CONTAINS(
      commit(onlyInput, nullptr),
      "rank 0's program binds cache 'past' as an input only; it is bound as "
      "both an input and an output, to one memory");
  ServingModelOptions unsplit = tp2;
  unsplit.unsplitCache = true;
  EXPECT_ERROR_CONTAINS(
      commit(unsplit, nullptr),
      "cache 'past' is f32 [2, 2, 8, 2] split over the mesh, so rank 0's "
      "block is [2, 1, 8, 2], but rank 0's program binds f32 [2, 2, 8, 2]");
  ServingModelOptions noDecode = tp2;
  noDecode.noDecodePrograms = true;
  EXPECT_ERROR_CONTAINS(
      commit(noDecode, nullptr),
      "no decode program was added for rank 0 (a serving artifact has one "
      "per rank)");

  struct Case {
    std::function<void(ArtifactWriter &)> edit;
    const char *message;
  };
  auto serving = [](ArtifactWriter &writer) -> ServingSpec & {
    return *writer.manifest().serving;
  };
  std::vector<Case> cases = {
      {[](ArtifactWriter &w) { w.manifest().serving.reset(); },
       "decode programs were added, but the manifest has no serving spec"},
      {[&](ArtifactWriter &w) { serving(w).maxSeq = 0; },
       "serving: max_seq 0, prompt_length 4 and batch 2 must all be positive"},
      {[&](ArtifactWriter &w) { serving(w).promptLength = 9; },
       "serving: the prompt length 9 exceeds max_seq 8"},
      {[&](ArtifactWriter &w) { serving(w).cache.clear(); },
       "serving lists no cache tensors"},
      {[&](ArtifactWriter &w) {
         serving(w).cache[0].sharding.dims[1] = {"dp"};
       },
       "cache 'past': sharding names 'dp', which is not a mesh axis"},
      {[&](ArtifactWriter &w) {
         w.manifest().inputs.push_back(serving(w).cache[0]);
       },
       "cache 'past' is also an input; the runtime binds the cache, so it is "
       "neither"},
      {[&](ArtifactWriter &w) {
         serving(w).decodeOutputs.push_back(serving(w).cache[0]);
       },
       "cache 'past' is also a decode output"},
      {[&](ArtifactWriter &w) { serving(w).inputIds = "tokens"; },
       "serving.input_ids names 'tokens', which the inputs do not list"},
      {[&](ArtifactWriter &w) { serving(w).decodeInputs[0].name = "ids"; },
       "serving.input_ids names 'input_ids', which the decode inputs do not "
       "list"},
      {[&](ArtifactWriter &w) { w.manifest().outputs[0].name = "scores"; },
       "serving.logits names 'logits', which the outputs do not list"},
      {[&](ArtifactWriter &w) { serving(w).positionIds = "positions"; },
       "serving.position_ids names 'positions', which neither the inputs nor "
       "the decode inputs list"},
      {[&](ArtifactWriter &w) { serving(w).decodeInputs[1].shape = {kB, kP}; },
       "decode input 'attention_mask' is i64 [2, 4], but rank 0's decode "
       "program binds i64 [2, 8]"},
      {[&](ArtifactWriter &w) { serving(w).decodeInputs.pop_back(); },
       "rank 0's decode program binds decode input 'cache_position', which "
       "the manifest does not list"},
      {[&](ArtifactWriter &w) {
         TensorSpec extra = serving(w).decodeOutputs[0];
         extra.name = "extra";
         serving(w).decodeOutputs.push_back(extra);
       },
       "decode output 'extra' is produced by no rank's decode program"},
      {[&](ArtifactWriter &w) {
         ProgramBuilder b(0, 2);
         (void)w.addDecodeProgram(1, b.p);
         EXPECT_ERROR_CONTAINS(w.addDecodeProgram(1, b.p),
                               "the decode program added for rank 1 says it "
                               "is rank 0");
         EXPECT_ERROR_CONTAINS(
             w.addDecodeProgram(1, servingProgram(1, true, {})),
             "a decode program for rank 1 was already added");
         ProgramBuilder far(3, 4);
         EXPECT_OK(w.addDecodeProgram(3, far.p));
       },
       "a decode program was added for rank 3 of a world of 2"},
  };
  for (const Case &c : cases)
    EXPECT_ERROR_CONTAINS(commit(tp2, c.edit), c.message);
  EXPECT_TRUE(directory.entries().empty());
}

/// A decode program changed on disk is refused like any program: by its
/// digest, and when the digest was updated too, by what it says.
TEST(ServingArtifact, LoaderRefusesTamperedDecodePrograms) {
  TemporaryDirectory directory;
  ServingModelOptions options;
  options.tp = 2;
  std::string path = directory.path("art");
  ASSERT_OK(writeServingModel(path, options));
  std::string relative = "programs/rank1.decode.pb";
  std::string bytes = test::readBytes(path + "/" + relative);
  std::unique_ptr<LoadedArtifact> artifact;

  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 1;
  test::writeBytes(path + "/" + relative, flipped);
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "programs/rank1.decode.pb: hash mismatch (tampered or "
                        "truncated)");
  std::filesystem::remove(path + "/" + relative);
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "programs/rank1.decode.pb: missing (manifest.json "
                        "lists it)");

  replaceFile(path, relative,
              servingProgram(0, true, options).SerializeAsString());
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "programs/rank1.decode.pb: the program is for rank 0 "
                        "of 2, the manifest says rank 1 of 2");
  program::Program empty = servingProgram(1, true, options);
  empty.clear_instructions();
  replaceFile(path, relative, empty.SerializeAsString());
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        ": the decode programs: rank ");
  // The prefill programs do not stand in for the decode programs.
  replaceFile(path, relative,
              servingProgram(1, false, options).SerializeAsString());
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "manifest.json: decode input 'input_ids' is i64 [2, "
                        "1], but rank 1's decode program binds i64 [2, 4]");
  replaceFile(path, relative, bytes);
  EXPECT_OK(LoadedArtifact::open(path, artifact));
}

TEST(ServingArtifact, LoaderRefusesInconsistentManifests) {
  TemporaryDirectory directory;
  ServingModelOptions options;
  options.tp = 2;
  std::string path = directory.path("art");
  ASSERT_OK(writeServingModel(path, options));
  nlohmann::json original = readManifest(path);
  std::unique_ptr<LoadedArtifact> artifact;
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    const char *message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["ranks"][1].erase("decode_program"); },
       "manifest.json.ranks[1]: missing 'decode_program' (a serving artifact "
       "has one per rank)"},
      {[](auto &m) { m.erase("serving"); },
       "manifest.json.ranks[0].decode_program: a decode program in a "
       "manifest without 'serving'"},
      {[](auto &m) { m["files"].erase("programs/rank1.decode.pb"); },
       "'programs/rank1.decode.pb' has no entry in 'files'"},
      {[](auto &m) { m["serving"]["attention_mask"] = 5; },
       "serving.attention_mask: neither a string nor null"},
      {[](auto &m) { m["serving"].erase("decode"); },
       "manifest.json.serving: missing 'decode'"},
      {[](auto &m) { m["serving"] = 3; },
       "manifest.json.serving: not a JSON object"},
      {[](auto &m) { m["serving"]["max_seq"] = "eight"; },
       "serving.max_seq: not an integer"},
      {[](auto &m) { m["serving"]["cache"][0]["dtype"] = "f64"; },
       "serving.cache[0].dtype: unknown dtype 'f64'"},
      {[](auto &m) { m["serving"]["cache"][0]["shape"][2] = 16; },
       "manifest.json: cache 'past' is f32 [2, 2, 16, 2] split over the "
       "mesh, so rank 0's block is [2, 1, 16, 2], but rank 0's program binds "
       "f32 [2, 1, 8, 2]"},
      {[](auto &m) { m["serving"]["cache"][0]["name"] = "present"; },
       "manifest.json: rank 0's program binds input 'past', which the "
       "manifest does not list"},
      {[](auto &m) {
         m["serving"]["decode"]["outputs"] = nlohmann::json::array();
       },
       "serving.logits names 'logits', which the decode outputs do not list"},
      {[](auto &m) { m["serving"]["batch"] = 0; }, "must all be positive"},
      {[](auto &m) { m["serving"]["padding"] = "middle"; },
       "manifest.json.serving.padding: 'middle' is neither 'left' nor "
       "'right'"},
      {[](auto &m) { m["serving"]["padding"] = 1; },
       "serving.padding: not a string"},
  };
  for (const Case &c : cases) {
    nlohmann::json manifest = original;
    c.edit(manifest);
    writeRehashedManifest(path, manifest);
    EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact), c.message);
  }
  writeRehashedManifest(path, original);
  EXPECT_OK(LoadedArtifact::open(path, artifact));
}

//===----------------------------------------------------------------------===//
// The runner's resident cache
//===----------------------------------------------------------------------===//

/// One run's tensors, fed by hand.
struct Feed {
  Feed(int64_t sequence, int64_t maskSlots)
      : sequence(sequence), maskSlots(maskSlots), ids(size_t(kB * sequence), 0),
        mask(size_t(kB * maskSlots), 0), positions(size_t(kB * sequence), 0),
        slot{0}, logits(size_t(kB * sequence * kV), -1) {}
  std::vector<NamedTensor> inputs() {
    return {{"input_ids", i64(ids, {kB, sequence})},
            {"attention_mask", i64(mask, {kB, maskSlots})},
            {"position_ids", i64(positions, {kB, sequence})},
            {"cache_position", i64(slot, {1})}};
  }
  std::vector<NamedTensor> outputs() {
    return {{"logits", f32(logits, {kB, sequence, kV})}};
  }
  /// Feature `v` of row `b` at sequence position `s`.
  float at(int64_t b, int64_t v, int64_t s = 0) const {
    return logits[size_t((b * sequence + s) * kV + v)];
  }
  int64_t sequence, maskSlots;
  std::vector<int64_t> ids, mask, positions, slot;
  std::vector<float> logits;
};

/// A decode step's tensors: `tokens` at `slot`, `valid` slots of mask.
Feed decodeFeed(std::vector<int64_t> tokens, int64_t slot, int64_t valid) {
  Feed feed(1, kL);
  feed.ids = std::move(tokens);
  feed.slot = {slot};
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t i = 0; i < valid; ++i)
      feed.mask[size_t(b * kL + i)] = 1;
  feed.positions = {valid - 1, valid - 1};
  return feed;
}

class ServingRunnerTest : public ::testing::TestWithParam<int32_t> {
protected:
  void SetUp() override {
    ServingModelOptions options;
    options.tp = GetParam();
    std::string path = directory.path("art");
    ASSERT_OK(writeServingModel(path, options));
    ASSERT_OK(LoadedArtifact::open(path, artifact));
    ASSERT_OK(Runner::create(*artifact, patient(), runner));
  }
  TemporaryDirectory directory;
  std::unique_ptr<LoadedArtifact> artifact;
  std::unique_ptr<Runner> runner;
};

/// The cache stays in the ranks between runs (prefill and decode alike)
/// and is written in place at the slot each run names, until resetCache.
TEST_P(ServingRunnerTest, CachePersistsAcrossRunsUntilReset) {
  // Every rank holds its block: 2 x 2 x 8 x 2 f32 in all.
  EXPECT_EQ(runner->cacheBytes(), uint64_t(kB * 2 * kL * 2 * 4));

  Feed prompt(kP, kP);
  prompt.ids = {1, 2, 3, 0, 0, 0, 2, 1};
  prompt.mask.assign(prompt.mask.size(), 1);
  prompt.positions = {0, 1, 2, 3, 0, 1, 2, 3};
  ASSERT_OK(runner->run(prompt.inputs(), prompt.outputs()));
  for (int64_t s = 0; s < kP; ++s) {
    EXPECT_EQ(prompt.at(0, 0, s), 1);
    EXPECT_EQ(prompt.at(0, 1, s), float(s));
    EXPECT_EQ(prompt.at(0, 2, s), 0);
  }
  EXPECT_EQ(prompt.at(0, 3), 10 * 6);
  EXPECT_EQ(prompt.at(1, 3), 10 * 3);

  Feed first = decodeFeed({2, 3}, kP, kP + 1);
  ASSERT_OK(runner->runDecode(first.inputs(), first.outputs()));
  EXPECT_EQ(first.at(0, 0), 5);
  EXPECT_EQ(first.at(1, 1), 4);
  EXPECT_EQ(first.at(0, 2), 4);
  EXPECT_EQ(first.at(0, 3), 80);
  EXPECT_EQ(first.at(1, 3), 60);
  Feed second = decodeFeed({1, 1}, kP + 1, kP + 2);
  ASSERT_OK(runner->runDecode(second.inputs(), second.outputs()));
  EXPECT_EQ(second.at(0, 3), 90);
  EXPECT_EQ(second.at(1, 3), 70);
  // The same slot again: overwritten, not added.
  Feed again = decodeFeed({0, 5}, kP + 1, kP + 2);
  ASSERT_OK(runner->runDecode(again.inputs(), again.outputs()));
  EXPECT_EQ(again.at(0, 3), 80);
  EXPECT_EQ(again.at(1, 3), 110);
  // The prefill writes its slots only: the decoded ones stay.
  ASSERT_OK(runner->run(prompt.inputs(), prompt.outputs()));
  EXPECT_EQ(prompt.at(0, 3), 80);

  ASSERT_OK(runner->resetCache());
  Feed fresh = decodeFeed({1, 2}, 0, 1);
  ASSERT_OK(runner->runDecode(fresh.inputs(), fresh.outputs()));
  EXPECT_EQ(fresh.at(0, 3), 10);
  EXPECT_EQ(fresh.at(1, 3), 20);

  // A refused run changes nothing.
  EXPECT_ERROR_CONTAINS(runner->runDecode(prompt.inputs(), fresh.outputs()),
                        "input 'input_ids': expected i64 [2, 1], got i64 [2, "
                        "4]");
  EXPECT_ERROR_CONTAINS(runner->runDecode(fresh.inputs(), prompt.outputs()),
                        "output 'logits': expected f32 [2, 1, 4], got f32 [2, "
                        "4, 4]");
  Feed next = decodeFeed({0, 0}, 1, 2);
  ASSERT_OK(runner->runDecode(next.inputs(), next.outputs()));
  EXPECT_EQ(next.at(1, 3), 20);

  // A slot past the cache fails in the kernel, on every rank.
  Feed overflow = decodeFeed({1, 1}, kL, kL);
  Status status = runner->runDecode(overflow.inputs(), overflow.outputs());
  EXPECT_ERROR_CONTAINS(status, "rank 0: /write: kv_cache_write: writing 1 "
                                "tokens at slot 8 overflows the cache of 8 "
                                "slots");
  if (GetParam() == 2)
    EXPECT_ERROR_CONTAINS(status, "rank 1: /write: kv_cache_write");
}

INSTANTIATE_TEST_SUITE_P(Ranks, ServingRunnerTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int32_t> &info) {
                           return "tp" + std::to_string(info.param);
                         });

/// The building blocks bind a rank's cache from RankRun::states, which
/// allocateRankCache fills: without them, or with other shapes, a cache
/// binding is an error.
TEST(ServingRunner, BuildingBlocksBindTheRanksCache) {
  TemporaryDirectory directory;
  std::string path = directory.path("art");
  ASSERT_OK(writeServingModel(path, {}));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  HostWorld world(1);

  RankRun bare;
  EXPECT_ERROR_CONTAINS(
      prepareRank(*artifact, 0, world.communicator(0), 1, bare),
      "rank 0 binds cache 'past', which it holds no memory for");
  RankRun narrow;
  HostTensor small;
  ASSERT_OK(small.allocate(program::F32, {kB, 2, kL, 1}));
  narrow.states = {{"past", small.tensor()}};
  EXPECT_ERROR_CONTAINS(
      prepareRank(*artifact, 0, world.communicator(0), 1, narrow),
      "rank 0: cache 'past' is f32 [2, 2, 8, 1], but its program binds f32 "
      "[2, 2, 8, 2]");

  std::vector<HostTensor> memory;
  RankRun run;
  ASSERT_OK(allocateRankCache(*artifact, 0, memory, run.states));
  ASSERT_EQ(run.states.size(), 1u);
  EXPECT_EQ(run.states[0].tensor.shape, (std::vector<int64_t>{kB, 2, kL, 2}));
  ASSERT_OK(prepareRank(*artifact, 0, world.communicator(0), 1, run));
  // The cache is resident in the executor: neither an output of the run
  // nor an input it binds.
  for (const NamedTensor &output : run.outputs)
    EXPECT_NE(output.name, "past");
  Feed prompt(kP, kP);
  std::fill(prompt.ids.begin(), prompt.ids.end(), 3);
  std::fill(prompt.mask.begin(), prompt.mask.end(), 1);
  std::vector<NamedTensor> inputs = prompt.inputs();
  ASSERT_OK(bindRankInputs(*artifact, 0, inputs, run));
  for (const NamedTensor &input : run.inputs)
    EXPECT_NE(input.name, "past");
  // The prefill writes its tokens into the rank's cache memory in place.
  std::vector<RankRun> runs;
  runs.push_back(std::move(run));
  ASSERT_OK(runRanks(runs));
  const float *cache = static_cast<const float *>(memory[0].data());
  EXPECT_TRUE(std::any_of(cache, cache + memory[0].tensor().numElements(),
                          [](float v) { return v != 0.0f; }));
  runs[0].executor.reset();
}

TEST(ServingRunner, OrdinaryArtifactsHaveNoDecodeOrCache) {
  TemporaryDirectory directory;
  std::string path = directory.path("plain");
  ASSERT_OK(writePlainModel(path));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  std::unique_ptr<Runner> runner;
  ASSERT_OK(Runner::create(*artifact, patient(), runner));
  EXPECT_EQ(runner->cacheBytes(), 0u);
  EXPECT_OK(runner->resetCache());
  EXPECT_ERROR_CONTAINS(runner->runDecode({}, {}),
                        path + " was not compiled with --max-seq: it has no "
                               "decode program");
  std::unique_ptr<Generation> generation;
  EXPECT_ERROR_CONTAINS(Generation::create(*runner, generation),
                        "model 'plain' was not compiled with --max-seq: it has "
                        "no decode program to generate with");
  EXPECT_FALSE(generation);
}

/// cuda decodes (its executors keep the cache on the device), but a
/// multi-process run does not hold a cache.
TEST(ServingRunner, JoinedRunsRefuseDecoding) {
  TemporaryDirectory directory;
  ServingModelOptions options;
  options.tp = 2;
  options.target = "cuda";
  std::string path = directory.path("cuda");
  ASSERT_OK(writeServingModel(path, options));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  EXPECT_OK(checkDecodeTarget(artifact->manifest()));
  EXPECT_OK(checkDecodeTarget(servingManifest({})));

  RankEnvironment environment;
  environment.rank = 0;
  environment.worldSize = 2;
  environment.masterAddress = "127.0.0.1";
  environment.source = "torchrun";
  std::unique_ptr<Runner> runner;
  EXPECT_ERROR_CONTAINS(
      Runner::join(*artifact, patient(), environment, runner),
      path + " is a serving artifact (--max-seq), whose KV cache stays in the "
             "ranks of one process: a multi-process run does not hold it");
  EXPECT_FALSE(runner);
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

/// What Hugging Face's generate() feeds the model, worked out here from its
/// rules, and the model's logits (ServingModel.h) for it. Every logit is a
/// small integer (a mask, a position, a slot, ten times a sum of ids), exact
/// in f32 whatever the order of its sums, so the tests compare them
/// exactly.
class Reference {
public:
  explicit Reference(const ServingModelOptions &options) : options(options) {}

  /// Left-pads the prompt ([batch][tokens], mask empty: all ones) and
  /// returns the logits of its last position, [batch, vocab].
  std::vector<float> prefill(const std::vector<std::vector<int64_t>> &ids,
                             std::vector<std::vector<int64_t>> mask) {
    if (mask.empty())
      for (const auto &row : ids)
        mask.emplace_back(row.size(), 1);
    slots.assign(size_t(kB), std::vector<int64_t>(size_t(kL), 0));
    valid = slots;
    std::vector<float> logits;
    for (int64_t b = 0; b < kB; ++b) {
      size_t pad = size_t(kP) - ids[size_t(b)].size();
      for (size_t i = 0; i < ids[size_t(b)].size(); ++i) {
        slots[size_t(b)][pad + i] = ids[size_t(b)][i];
        valid[size_t(b)][pad + i] = mask[size_t(b)][i];
      }
      // position_ids = mask.cumsum(-1) - 1, masked_fill(mask == 0, 1).
      std::vector<int64_t> positions(static_cast<size_t>(kP));
      std::partial_sum(valid[size_t(b)].begin(), valid[size_t(b)].begin() + kP,
                       positions.begin());
      for (int64_t i = 0; i < kP; ++i)
        positions[size_t(i)] =
            valid[size_t(b)][size_t(i)] ? positions[size_t(i)] - 1 : 1;
      row(logits, b, float(valid[size_t(b)][size_t(kP - 1)]),
          float(positions[size_t(kP - 1)]), 0);
    }
    filled = kP;
    return logits;
  }

  /// Feeds one token per row at the next slot.
  std::vector<float> step(const std::vector<int64_t> &tokens) {
    std::vector<float> logits;
    int64_t t = filled++;
    for (int64_t b = 0; b < kB; ++b) {
      slots[size_t(b)][size_t(t)] = tokens[size_t(b)];
      valid[size_t(b)][size_t(t)] = 1;
      // The last of mask.cumsum(-1) - 1 over the slots so far.
      int64_t ones =
          std::accumulate(valid[size_t(b)].begin(),
                          valid[size_t(b)].begin() + t + 1, int64_t(0));
      int64_t mask = std::accumulate(valid[size_t(b)].begin(),
                                     valid[size_t(b)].end(), int64_t(0));
      row(logits, b, float(mask), float(ones - 1), float(t));
    }
    return logits;
  }

private:
  void row(std::vector<float> &logits, int64_t b, float mask, float position,
           float slot) const {
    int64_t sum = std::accumulate(slots[size_t(b)].begin(),
                                  slots[size_t(b)].end(), int64_t(0));
    logits.push_back(options.attentionMask ? mask : 0);
    logits.push_back(options.positionIds ? position : 0);
    logits.push_back(slot);
    logits.push_back(kServingScaleSum * float(sum));
  }

  ServingModelOptions options;
  std::vector<std::vector<int64_t>> slots, valid;
  int64_t filled = 0;
};

std::vector<int64_t> argmaxes(const std::vector<float> &logits) {
  std::vector<int64_t> tokens;
  for (int64_t b = 0; b < kB; ++b) {
    auto begin = logits.begin() + b * kV;
    tokens.push_back(std::max_element(begin, begin + kV) - begin);
  }
  return tokens;
}

struct GenerationCase {
  int32_t tp;
  bool attentionMask, positionIds;
};

/// For gtest's messages (which would print the padding bytes otherwise).
[[maybe_unused]] void PrintTo(const GenerationCase &c, std::ostream *os) {
  *os << "tp=" << c.tp << (c.attentionMask ? " mask" : "")
      << (c.positionIds ? " positions" : "");
}

class GenerationTest : public ::testing::TestWithParam<GenerationCase> {
protected:
  void SetUp() override {
    options.tp = GetParam().tp;
    options.attentionMask = GetParam().attentionMask;
    options.positionIds = GetParam().positionIds;
    std::string path = directory.path("art");
    ASSERT_OK(writeServingModel(path, options));
    ASSERT_OK(LoadedArtifact::open(path, artifact));
    ASSERT_OK(Runner::create(*artifact, patient(), runner));
    ASSERT_OK(Generation::create(*runner, generation));
  }
  ServingModelOptions options;
  TemporaryDirectory directory;
  std::unique_ptr<LoadedArtifact> artifact;
  std::unique_ptr<Runner> runner;
  std::unique_ptr<Generation> generation;
};

/// A left-padded batch (row 1 shorter than the prompt, and padded further
/// by its mask) generated until the cache is full, token for token and
/// logit for logit what the reference says; the first token of row 1 is a
/// tie the lowest index wins.
TEST_P(GenerationTest, MatchesHuggingFaceRules) {
  std::vector<std::vector<int64_t>> prompt = {{3, 1, 2}, {0, 0, 0}};
  std::vector<std::vector<int64_t>> mask = {{1, 1, 1}, {0, 1, 1}};
  std::vector<int64_t> ids, maskValues;
  for (int64_t b = 0; b < kB; ++b) {
    ids.insert(ids.end(), prompt[size_t(b)].begin(), prompt[size_t(b)].end());
    maskValues.insert(maskValues.end(), mask[size_t(b)].begin(),
                      mask[size_t(b)].end());
  }
  Tensor idsTensor = i64(ids, {kB, 3}), maskTensor = i64(maskValues, {kB, 3});
  const Tensor *maskGiven = options.attentionMask ? &maskTensor : nullptr;

  Reference reference(options);
  int64_t count = kL - kP + 1;
  std::vector<float> expectedLogits;
  std::vector<std::vector<int64_t>> expectedTokens;
  std::vector<float> logits = reference.prefill(
      prompt,
      options.attentionMask ? mask : std::vector<std::vector<int64_t>>{});
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0)
      logits = reference.step(expectedTokens.back());
    expectedLogits.insert(expectedLogits.end(), logits.begin(), logits.end());
    expectedTokens.push_back(argmaxes(logits));
  }
  if (options.attentionMask) {
    EXPECT_EQ(expectedTokens[0][1], 0); // [1, 1, 0, 0]: the tie.
  }

  for (int attempt = 0; attempt < 2; ++attempt) {
    SCOPED_TRACE("generation " + std::to_string(attempt));
    GenerateOptions generate;
    generate.maxNewTokens = count;
    generate.keepLogits = true;
    GenerateResult result;
    ASSERT_OK(generation->generate(idsTensor, maskGiven, generate, result));
    EXPECT_EQ(result.batch, kB);
    EXPECT_EQ(result.generated, count);
    EXPECT_EQ(result.vocab, kV);
    EXPECT_EQ(result.logits, expectedLogits);
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t i = 0; i < count; ++i)
        EXPECT_EQ(result.tokens[size_t(b * count + i)],
                  expectedTokens[size_t(i)][size_t(b)])
            << b << ", " << i;
    EXPECT_EQ(result.stepSeconds.size(), size_t(count - 1));
    EXPECT_GT(result.prefillSeconds, 0);
    EXPECT_EQ(generation->position(), kL);
    EXPECT_EQ(generation->remaining(), 0);
  }

  // The cache is full: another step is refused and changes nothing.
  std::vector<int64_t> tokens = {1, 1};
  std::vector<float> stepLogits(size_t(kB * kV), -1);
  EXPECT_ERROR_CONTAINS(
      generation->step(i64(tokens, {kB}), f32(stepLogits, {kB, kV})),
      "the KV cache holds 8 tokens (4 of prompt and 4 generated), all of them "
      "filled: no slot is left for another");
  EXPECT_EQ(generation->position(), kL);
  EXPECT_EQ(stepLogits, std::vector<float>(size_t(kB * kV), -1));
}

/// Steps one at a time, as a caller of prefill() and step() drives them.
TEST_P(GenerationTest, PrefillAndSteps) {
  std::vector<int64_t> ids = {1, 1, 1, 1, 2, 2, 2, 2};
  std::vector<float> logits(size_t(kB * kV));
  EXPECT_EQ(generation->position(), 0);
  EXPECT_EQ(generation->remaining(), kL);
  ASSERT_OK(
      generation->prefill(i64(ids, {kB, kP}), nullptr, f32(logits, {kB, kV})));
  Reference reference(options);
  EXPECT_EQ(logits, reference.prefill({{1, 1, 1, 1}, {2, 2, 2, 2}}, {}));
  EXPECT_EQ(generation->position(), kP);
  EXPECT_EQ(generation->remaining(), kL - kP);
  std::vector<int64_t> tokens = {3, 0};
  ASSERT_OK(generation->step(i64(tokens, {kB}), f32(logits, {kB, kV})));
  EXPECT_EQ(logits, reference.step(tokens));
  EXPECT_EQ(generation->position(), kP + 1);
}

INSTANTIATE_TEST_SUITE_P(
    Models, GenerationTest,
    ::testing::Values(GenerationCase{1, true, true},
                      GenerationCase{2, true, true},
                      GenerationCase{2, false, false},
                      GenerationCase{1, true, false}),
    [](const ::testing::TestParamInfo<GenerationCase> &info) {
      return "tp" + std::to_string(info.param.tp) +
             (info.param.attentionMask ? "_mask" : "") +
             (info.param.positionIds ? "_positions" : "");
    });

/// Every way to hand Generation what it cannot use is an error that runs
/// nothing.
TEST(Generation, RefusesBadPromptsAndRequests) {
  TemporaryDirectory directory;
  std::string path = directory.path("art");
  ASSERT_OK(writeServingModel(path, {}));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  std::unique_ptr<Runner> runner;
  ASSERT_OK(Runner::create(*artifact, patient(), runner));
  std::unique_ptr<Generation> generation;
  ASSERT_OK(Generation::create(*runner, generation));

  std::vector<float> logits(size_t(kB * kV));
  Tensor logitsTensor = f32(logits, {kB, kV});
  std::vector<int64_t> tokens = {1, 2};
  EXPECT_ERROR_CONTAINS(generation->step(i64(tokens, {kB}), logitsTensor),
                        "step() before prefill(): a generation starts with "
                        "the prompt");

  std::vector<int64_t> ids(size_t(3 * 5), 1);
  std::vector<int32_t> narrow(size_t(kB * 3), 1);
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {kB, 5}), nullptr, logitsTensor),
      "the prompt has 5 tokens; the prefill takes 1 to 4 (the prompt length "
      "compiled into the artifact)");
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {kB, 0}), nullptr, logitsTensor),
      "the prompt has 0 tokens; the prefill takes 1 to 4");
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {3, 4}), nullptr, logitsTensor),
      "the prompt is a batch of 3, but the artifact was compiled for a batch "
      "of 2");
  EXPECT_ERROR_CONTAINS(
      generation->prefill(Tensor{narrow.data(), program::I32, {kB, 3}}, nullptr,
                          logitsTensor),
      "the prompt's input ids are i32 [2, 3], expected i64 [batch, tokens]");
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {kB}), nullptr, logitsTensor),
      "the prompt's input ids are i64 [2], expected i64 "
      "[batch, tokens]");

  std::vector<int64_t> mask = {1, 1, 1, 2, 1, 1};
  Tensor maskTensor = i64(mask, {kB, 3});
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {kB, 3}), &maskTensor, logitsTensor),
      "the attention mask holds 2 at [1, 0], not 0 or 1");
  std::vector<int64_t> emptyRow = {0, 0, 0, 1, 1, 1};
  maskTensor = i64(emptyRow, {kB, 3});
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {kB, 3}), &maskTensor, logitsTensor),
      "row 0 of the attention mask masks every token of the prompt");
  Tensor shortMask = i64(mask, {kB, 2});
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {kB, 3}), &shortMask, logitsTensor),
      "the attention mask is i64 [2, 2], expected i64 [2, 3]");
  EXPECT_ERROR_CONTAINS(
      generation->prefill(i64(ids, {kB, 3}), nullptr, f32(logits, {kB, 2, 2})),
      "the logits are f32 [2, 2, 2], expected f32 [2, 4]");
  EXPECT_EQ(generation->position(), 0);

  ASSERT_OK(generation->prefill(i64(ids, {kB, 3}), nullptr, logitsTensor));
  EXPECT_ERROR_CONTAINS(generation->step(i64(tokens, {1, kB}), logitsTensor),
                        "the tokens are i64 [1, 2], expected i64 [2]");
  EXPECT_ERROR_CONTAINS(
      generation->step(i64(tokens, {kB}), f32(logits, {kB * kV})),
      "the logits are f32 [8], expected f32 [2, 4]");
  EXPECT_EQ(generation->position(), kP);

  GenerateOptions none;
  none.maxNewTokens = 0;
  GenerateResult result;
  EXPECT_ERROR_CONTAINS(
      generation->generate(i64(ids, {kB, 3}), nullptr, none, result),
      "generation makes at least one new token, not 0");
  GenerateOptions tooMany;
  tooMany.maxNewTokens = kL - kP + 2;
  EXPECT_ERROR_CONTAINS(
      generation->generate(i64(ids, {kB, 3}), nullptr, tooMany, result),
      "a prompt (padded to 4 tokens) and 6 new tokens need 9 cache slots, but "
      "the KV cache holds 8 (compile with a larger --max-seq)");
  // Refused before anything ran: the generation in progress goes on.
  EXPECT_EQ(generation->position(), kP);
  ASSERT_OK(generation->step(i64(tokens, {kB}), logitsTensor));
  EXPECT_EQ(generation->position(), kP + 1);

  GenerateOptions one;
  one.maxNewTokens = 1;
  ASSERT_OK(generation->generate(i64(ids, {kB, 3}), nullptr, one, result));
  EXPECT_EQ(result.generated, 1);
  EXPECT_TRUE(result.stepSeconds.empty());
  EXPECT_TRUE(result.logits.empty());
  EXPECT_EQ(generation->position(), kP);
}

/// A serving artifact whose programs take or give what generation cannot
/// feed or read.
TEST(Generation, RefusesProgramsItCannotFeed) {
  struct Case {
    std::function<void(ServingModelOptions &)> edit;
    const char *message;
  };
  std::vector<Case> cases = {
      {[](auto &o) { o.extraDecodeInput = true; },
       "the decode step input 'temperature' is none of those generation "
       "feeds (the serving spec's input_ids, attention_mask, position_ids and "
       "cache_position)"},
      {[](auto &o) { o.shortDecodeMask = true; },
       "the decode step input 'attention_mask' is i64 [2, 4], but generation "
       "feeds it as i64 [2, 8]"},
      {[](auto &o) { o.widerDecodeLogits = true; },
       "the decode step output 'logits' is f32 [2, 1, 5], but generation "
       "reads f32 [2, 1, 4]"},
  };
  for (const Case &c : cases) {
    TemporaryDirectory directory;
    ServingModelOptions options;
    c.edit(options);
    std::string path = directory.path("art");
    ASSERT_OK(writeServingModel(path, options));
    std::unique_ptr<LoadedArtifact> artifact;
    ASSERT_OK(LoadedArtifact::open(path, artifact));
    std::unique_ptr<Runner> runner;
    ASSERT_OK(Runner::create(*artifact, patient(), runner));
    std::unique_ptr<Generation> generation;
    EXPECT_ERROR_CONTAINS(Generation::create(*runner, generation), c.message);
    EXPECT_FALSE(generation);
  }
}

} // namespace
