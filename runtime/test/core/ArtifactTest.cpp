//===- ArtifactTest.cpp - artifact writer and loader ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/ArtifactWriter.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/Sha256.h"

#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstring>
#include <functional>
#include <sys/resource.h>
#include <sys/stat.h>

using namespace partita::runtime;
namespace program = partita::program;
using test::TemporaryDirectory;

namespace {

/// Rank `rank` of the tp=2 test artifact: its block of `logits` is its
/// weight shard broadcast; it reads nothing of `ids`.
program::Program rankProgram(int32_t rank, int32_t worldSize) {
  program::Program p;
  p.set_format_version(1);
  p.set_rank(rank);
  p.set_world_size(worldSize);
  program::Buffer *buffer = p.add_buffers();
  buffer->set_id(0);
  buffer->set_kind(program::Buffer::WEIGHT);
  buffer->set_weight("w.shard" + std::to_string(rank));
  buffer->mutable_type()->set_dtype(program::F32);
  buffer->mutable_type()->add_shape(4);
  program::Buffer *ids = p.add_buffers();
  ids->set_id(1);
  ids->set_kind(program::Buffer::INPUT);
  ids->mutable_type()->set_dtype(program::I64);
  for (int64_t dim : {2, 8})
    ids->mutable_type()->add_shape(dim);
  program::Buffer *logits = p.add_buffers();
  logits->set_id(2);
  logits->set_kind(program::Buffer::OUTPUT);
  logits->mutable_type()->set_dtype(program::F32);
  for (int64_t dim : {2, 8, 4})
    logits->mutable_type()->add_shape(dim);
  p.add_inputs()->set_name("ids");
  p.mutable_inputs(0)->set_buffer(1);
  p.add_outputs()->set_name("logits");
  p.mutable_outputs(0)->set_buffer(2);
  program::Kernel *kernel = p.add_instructions()->mutable_kernel();
  kernel->set_op("broadcast_to");
  kernel->add_operands(0);
  kernel->add_results(2);
  return p;
}

/// A tp=2 artifact: a replicated weight stored once, one shard per rank.
class ArtifactTest : public ::testing::Test {
protected:
  void SetUp() override {
    for (int i = 0; i < 4; ++i) {
      replicated[i] = float(i) + 0.5f;
      shards[0][i] = float(i);
      shards[1][i] = float(-i);
    }
  }

  void fill(ArtifactWriter &writer, const std::string &modelName = "tiny") {
    Manifest &manifest = writer.manifest();
    manifest.modelName = modelName;
    manifest.meshAxes = {{"dp", 1}, {"tp", 2}};
    manifest.worldSize = 2;
    for (int32_t rank = 0; rank < 2; ++rank) {
      RankEntry entry;
      entry.rank = rank;
      entry.coords = {{"dp", 0}, {"tp", rank}};
      manifest.ranks.push_back(entry);
      ASSERT_OK(writer.addProgram(rank, rankProgram(rank, 2)));
      ASSERT_OK(writer.addWeight("w.replicated", program::F32, {4}, replicated,
                                 sizeof(replicated)));
      ASSERT_OK(writer.addWeight("w.shard" + std::to_string(rank), program::F32,
                                 {4}, shards[rank], sizeof(shards[rank])));
    }
    TensorSpec input{"ids", program::I64, {2, 8}, {}};
    TensorSpec output{"logits", program::F32, {2, 8, 8}, {}};
    output.sharding.dims = {{}, {}, {"tp"}};
    manifest.inputs = {input};
    manifest.outputs = {output};
    manifest.scheduleJson = R"({"kind": "gpipe", "microbatches": 2})";
    manifest.compileOptions = {{"mesh", "dp=1,tp=2"}};
  }

  std::string commitTo(const TemporaryDirectory &directory,
                       const std::string &modelName = "tiny") {
    ArtifactWriter writer;
    fill(writer, modelName);
    std::string path = directory.path("art");
    Status status = writer.commit(path);
    EXPECT_TRUE(status.isOk()) << status.message();
    return path;
  }

  float replicated[4];
  float shards[2][4];
};

nlohmann::json readManifest(const std::string &artifact) {
  return nlohmann::json::parse(test::readBytes(artifact + "/manifest.json"));
}

void writeManifest(const std::string &artifact, const nlohmann::json &json) {
  test::writeBytes(artifact + "/manifest.json", json.dump(2));
}

/// The manifest's own digest as docs/artifact.md defines it: SHA-256 of the
/// manifest without `manifest_sha256`, keys sorted, no whitespace.
std::string manifestDigest(nlohmann::json manifest) {
  manifest.erase("manifest_sha256");
  std::string canonical = manifest.dump();
  return "sha256:" + Sha256::hexDigest(canonical.data(), canonical.size());
}

/// Writes an edited manifest with its digest recomputed, as a tamperer who
/// knows the format would: only checks of the contents can refuse it.
void writeRehashedManifest(const std::string &artifact,
                           nlohmann::json manifest) {
  manifest["manifest_sha256"] = manifestDigest(manifest);
  writeManifest(artifact, manifest);
}

TEST_F(ArtifactTest, RoundTrip) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  const Manifest &manifest = artifact->manifest();
  EXPECT_EQ(manifest.modelName, "tiny");
  EXPECT_EQ(manifest.target, "host");
  ASSERT_EQ(manifest.meshAxes.size(), 2u);
  EXPECT_EQ(manifest.meshAxes[1].name, "tp");
  EXPECT_EQ(manifest.meshAxes[1].size, 2);
  EXPECT_EQ(manifest.worldSize, 2);
  ASSERT_EQ(manifest.ranks.size(), 2u);
  EXPECT_EQ(manifest.ranks[1].program, "programs/rank1.pb");
  EXPECT_EQ(manifest.ranks[1].coords[1].second, 1);
  ASSERT_EQ(manifest.outputs.size(), 1u);
  EXPECT_EQ(manifest.outputs[0].sharding.dims[2],
            std::vector<std::string>{"tp"});
  EXPECT_FALSE(manifest.outputs[0].sharding.isReplicated());
  EXPECT_TRUE(manifest.inputs[0].sharding.isReplicated());
  EXPECT_EQ(manifest.inputs[0].sharding.dims.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(manifest.scheduleJson)["microbatches"], 2);
  EXPECT_EQ(manifest.compileOptions.at("mesh"), "dp=1,tp=2");
  EXPECT_EQ(
      manifest.weightFiles,
      std::vector<std::string>{"weights/model-00001-of-00001.safetensors"});
  EXPECT_EQ(manifest.files.size(), 3u);

  EXPECT_EQ(artifact->program(1).SerializeAsString(),
            rankProgram(1, 2).SerializeAsString());
  // The replicated weight is stored once.
  EXPECT_EQ(artifact->weights().size(), 3u);
  const Tensor *shard = artifact->weights().find("w.shard1");
  ASSERT_NE(shard, nullptr);
  EXPECT_EQ(std::memcmp(shard->data, shards[1], sizeof(shards[1])), 0);
  EXPECT_EQ(readManifest(path)["format"], "partita-artifact");
  EXPECT_EQ(readManifest(path)["format_version"], 1);
  EXPECT_TRUE(
      readManifest(path)["files"]["programs/rank0.pb"].get<std::string>().rfind(
          "sha256:", 0) == 0);
}

TEST_F(ArtifactTest, SameNameDifferentContentsIsAnError) {
  ArtifactWriter writer;
  ASSERT_OK(writer.addWeight("w", program::F32, {4}, shards[0], 16));
  EXPECT_OK(writer.addWeight("w", program::F32, {4}, shards[0], 16));
  float copy[4];
  std::memcpy(copy, shards[0], sizeof(copy));
  EXPECT_OK(writer.addWeight("w", program::F32, {4}, copy, 16));
  EXPECT_ERROR_CONTAINS(writer.addWeight("w", program::F32, {4}, shards[1], 16),
                        "'w' is added twice with different contents");
  EXPECT_ERROR_CONTAINS(writer.addWeight("w", program::F32, {2, 2}, copy, 16),
                        "different contents");
  EXPECT_ERROR_CONTAINS(writer.addWeight("v", program::F32, {3}, copy, 16),
                        "needs 12");
}

TEST_F(ArtifactTest, ViewsAddedTwiceAreStoredOnceWhenTheyAgree) {
  std::vector<float> matrix(8 * 6), copy(8 * 6), other(8 * 6);
  for (size_t i = 0; i < matrix.size(); ++i)
    matrix[i] = copy[i] = other[i] = float(i);
  other[47] = -1.0f;
  auto viewOf = [](std::vector<float> &data) {
    return WeightView::of(data.data(), data.size() * 4, program::F32, {8, 6},
                          nullptr);
  };
  ArtifactWriter writer;
  ASSERT_OK(writer.addWeight("w", viewOf(matrix).block(1, 2, 1)));
  // The same view, and another view of equal bytes (a copy of the source).
  EXPECT_OK(writer.addWeight("w", viewOf(matrix).block(1, 2, 1)));
  EXPECT_OK(writer.addWeight("w", viewOf(copy).slice(1, 3, 3)));
  // The raw form of the same bytes is a whole view of them.
  float block[8 * 3];
  viewOf(matrix).block(1, 2, 1).copyTo(block);
  EXPECT_OK(writer.addWeight("w", program::F32, {8, 3}, block, sizeof(block)));
  EXPECT_ERROR_CONTAINS(writer.addWeight("w", viewOf(other).block(1, 2, 1)),
                        "'w' is added twice with different contents (f32 "
                        "[8, 3], then f32 [8, 3])");
  EXPECT_ERROR_CONTAINS(
      writer.addWeight("w",
                       viewOf(matrix).block(1, 2, 1).convert(program::BF16)),
      "(f32 [8, 3], then bf16 [8, 3])");
  EXPECT_ERROR_CONTAINS(writer.addWeight("v", viewOf(matrix).slice(0, 7, 2)),
                        "weight 'v' is an invalid view");
  EXPECT_ERROR_CONTAINS(writer.addWeight("", viewOf(matrix)),
                        "invalid weight name ''");
}

/// Views of every kind, spread over many weights files (written in
/// parallel), load back as their bytes, each file under its digest.
TEST_F(ArtifactTest, CommitsViewsIntoParallelFiles) {
  TemporaryDirectory directory;
  std::vector<float> matrix(64 * 40);
  for (size_t i = 0; i < matrix.size(); ++i)
    matrix[i] = float(i) * 0.5f - 100.0f;
  auto owner = std::make_shared<std::vector<float>>(matrix);
  WeightView source =
      WeightView::of(owner->data(), owner->size() * 4, program::F32, {64, 40},
                     std::shared_ptr<const void>(owner));
  owner.reset();
  std::vector<int64_t> reversed(40);
  for (int64_t j = 0; j < 40; ++j)
    reversed[size_t(j)] = 39 - j;
  std::vector<std::pair<std::string, WeightView>> views;
  for (int64_t rank = 0; rank < 8; ++rank) {
    views.push_back({"col" + std::to_string(rank), source.block(1, 8, rank)});
    views.push_back({"row" + std::to_string(rank),
                     source.block(0, 8, rank).convert(program::BF16)});
  }
  views.push_back({"reversed", source.permute(1, reversed)});
  views.push_back({"half", source.slice(0, 3, 5).convert(program::F16)});
  ArtifactWriter writer;
  fill(writer);
  for (const auto &[name, view] : views)
    ASSERT_OK(writer.addWeight(name, view));
  writer.setMaxWeightFileBytes(600);
  std::string path = directory.path("art");
  ASSERT_OK(writer.commit(path));

  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  EXPECT_GE(artifact->manifest().weightFiles.size(), 10u);
  for (const std::string &file : artifact->manifest().weightFiles) {
    std::string digest;
    ASSERT_OK(sha256File(path + "/" + file, digest));
    EXPECT_EQ(artifact->manifest().files.at(file), "sha256:" + digest);
  }
  for (const auto &[name, view] : views) {
    const Tensor *tensor = artifact->weights().find(name);
    ASSERT_NE(tensor, nullptr) << name;
    EXPECT_EQ(tensor->dtype, view.dtype()) << name;
    EXPECT_EQ(tensor->shape, view.shape()) << name;
    std::vector<uint8_t> expected(view.byteSize());
    view.copyTo(expected.data());
    ASSERT_EQ(tensor->byteSize(), expected.size()) << name;
    EXPECT_EQ(std::memcmp(tensor->data, expected.data(), expected.size()), 0)
        << name;
  }
}

TEST_F(ArtifactTest, SplitsWeightFiles) {
  TemporaryDirectory directory;
  ArtifactWriter writer;
  fill(writer);
  writer.setMaxWeightFileBytes(20);
  ASSERT_OK(writer.commit(directory.path("art")));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(directory.path("art"), artifact));
  EXPECT_EQ(artifact->manifest().weightFiles.size(), 3u);
  EXPECT_EQ(artifact->manifest().weightFiles[2],
            "weights/model-00003-of-00003.safetensors");
  for (const char *name : {"w.replicated", "w.shard0", "w.shard1"})
    EXPECT_NE(artifact->weights().find(name), nullptr) << name;
}

TEST_F(ArtifactTest, ReplacesAPreviousArtifact) {
  TemporaryDirectory directory;
  commitTo(directory, "first");
  std::string path = commitTo(directory, "second");
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  EXPECT_EQ(artifact->manifest().modelName, "second");
  // Neither the temporary directory nor the old artifact is left behind.
  EXPECT_EQ(directory.entries(), std::vector<std::string>{"art"});
}

TEST_F(ArtifactTest, RefusesToReplaceOtherDirectories) {
  TemporaryDirectory directory;
  std::string path = directory.path("art");
  std::filesystem::create_directory(path);
  test::writeBytes(path + "/precious.txt", "keep me");
  ArtifactWriter writer;
  fill(writer);
  EXPECT_ERROR_CONTAINS(writer.commit(path),
                        "it exists and is not a Partita artifact");
  EXPECT_EQ(test::readBytes(path + "/precious.txt"), "keep me");

  test::writeBytes(directory.path("file"), "a file");
  EXPECT_ERROR_CONTAINS(writer.commit(directory.path("file")),
                        "is not a Partita artifact");
  EXPECT_EQ(directory.entries(), (std::vector<std::string>{"art", "file"}));
}

TEST_F(ArtifactTest, InvalidManifestWritesNothing) {
  TemporaryDirectory directory;
  ArtifactWriter missingProgram;
  fill(missingProgram);
  missingProgram.manifest().worldSize = 3;
  missingProgram.manifest().meshAxes[1].size = 3;
  missingProgram.manifest().ranks.push_back({2, {{"dp", 0}, {"tp", 2}}, 0, ""});
  EXPECT_ERROR_CONTAINS(missingProgram.commit(directory.path("art")),
                        "no program was added for rank 2");

  ArtifactWriter badMesh;
  fill(badMesh);
  badMesh.manifest().meshAxes[1].size = 4;
  EXPECT_ERROR_CONTAINS(badMesh.commit(directory.path("art")),
                        "the mesh holds 4 ranks, the world size is 2");

  ArtifactWriter badAxis;
  fill(badAxis);
  badAxis.manifest().outputs[0].sharding.dims[2] = {"pp"};
  EXPECT_ERROR_CONTAINS(badAxis.commit(directory.path("art")),
                        "'pp', which is not a mesh axis");

  ArtifactWriter badRole;
  fill(badRole);
  badRole.manifest().meshAxes[1].role = "xp";
  EXPECT_ERROR_CONTAINS(badRole.commit(directory.path("art")),
                        "mesh axis 'tp' has role 'xp'; roles are dp, tp, pp, "
                        "sp, ep and none");

  ArtifactWriter missingModule;
  fill(missingModule);
  missingModule.manifest().target = "cuda";
  missingModule.manifest().cudaArchs = {"sm_80"};
  for (RankEntry &entry : missingModule.manifest().ranks) {
    entry.cudaSource = "cuda/a.cu";
    entry.cudaFatbin = "cuda/a.fatbin";
  }
  EXPECT_ERROR_CONTAINS(missingModule.commit(directory.path("art")),
                        "rank 0 names 'cuda/a.cu', which was not added to the "
                        "artifact");

  ArtifactWriter badSchedule;
  fill(badSchedule);
  badSchedule.manifest().scheduleJson = "[1]";
  EXPECT_ERROR_CONTAINS(badSchedule.commit(directory.path("art")),
                        "schedule is not a JSON object");
  EXPECT_TRUE(directory.entries().empty());
}

/// An error while the files are written (here: the file size limit, which
/// makes write() fail with EFBIG) leaves nothing new behind.
TEST_F(ArtifactTest, FailureMidWriteLeavesNothing) {
  TemporaryDirectory directory;
  std::vector<float> big(1 << 18, 1.0f);
  auto failingCommit = [&](const std::string &path) {
    ArtifactWriter writer;
    fill(writer, "big");
    EXPECT_OK(writer.addWeight("big", program::F32, {int64_t(big.size())},
                               big.data(), big.size() * sizeof(float)));
    struct rlimit saved;
    ::getrlimit(RLIMIT_FSIZE, &saved);
    struct rlimit limited = saved;
    limited.rlim_cur = 64 << 10;
    auto previous = std::signal(SIGXFSZ, SIG_IGN);
    ::setrlimit(RLIMIT_FSIZE, &limited);
    Status status = writer.commit(path);
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous);
    return status;
  };
  EXPECT_ERROR_CONTAINS(failingCommit(directory.path("art")), "File too large");
  EXPECT_TRUE(directory.entries().empty());

  std::string path = commitTo(directory, "old");
  EXPECT_ERROR_CONTAINS(failingCommit(path), "File too large");
  EXPECT_EQ(directory.entries(), std::vector<std::string>{"art"});
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(path, artifact));
  EXPECT_EQ(artifact->manifest().modelName, "old");
}

/// Files are written in parallel, yet the error reported is always the one
/// of the first failing file, not of whichever thread failed first.
TEST_F(ArtifactTest, ParallelWritesReportTheFirstFailingFile) {
  TemporaryDirectory directory;
  std::vector<float> big(1 << 18, 1.0f);
  for (int attempt = 0; attempt < 4; ++attempt) {
    ArtifactWriter writer;
    fill(writer, "big");
    // Files 1-3 hold the small weights, 4 and 5 one big one each.
    writer.setMaxWeightFileBytes(20);
    for (const char *name : {"big1", "big2"})
      ASSERT_OK(writer.addWeight(name, program::F32, {int64_t(big.size())},
                                 big.data(), big.size() * sizeof(float)));
    struct rlimit saved;
    ::getrlimit(RLIMIT_FSIZE, &saved);
    struct rlimit limited = saved;
    limited.rlim_cur = 64 << 10;
    auto previous = std::signal(SIGXFSZ, SIG_IGN);
    ::setrlimit(RLIMIT_FSIZE, &limited);
    Status status = writer.commit(directory.path("art"));
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous);
    EXPECT_ERROR_CONTAINS(status,
                          "model-00004-of-00005.safetensors: File too large");
    EXPECT_TRUE(directory.entries().empty());
  }
}

TEST_F(ArtifactTest, RefusesUnknownFormatsAndVersions) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  std::unique_ptr<LoadedArtifact> artifact;

  nlohmann::json manifest = readManifest(path);
  manifest["format_version"] = 2;
  writeManifest(path, manifest);
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "artifact format version 2 is not supported: this "
                        "runtime reads version 1");

  manifest["format"] = "something-else";
  writeManifest(path, manifest);
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "not a Partita artifact manifest");

  test::writeBytes(path + "/manifest.json", "{ truncated");
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact), "not valid JSON");

  std::filesystem::remove(path + "/manifest.json");
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "not a Partita artifact (no manifest.json)");
  EXPECT_ERROR_CONTAINS(
      LoadedArtifact::open(directory.path("absent"), artifact),
      "no such artifact directory");
  EXPECT_EQ(artifact, nullptr);
}

TEST_F(ArtifactTest, RefusesMalformedManifestFields) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  nlohmann::json original = readManifest(path);
  std::unique_ptr<LoadedArtifact> artifact;
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    const char *message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["ranks"][1]["stage"] = "one"; },
       "ranks[1].stage: not an integer"},
      {[](auto &m) { m.erase("mesh"); }, "missing 'mesh'"},
      {[](auto &m) { m["inputs"][0]["dtype"] = "f64"; }, "unknown dtype 'f64'"},
      {[](auto &m) { m["inputs"][0]["onnx_shape"] = {3, 5}; },
       "inputs[0].onnx_shape: does not hold the elements of its shape"},
      {[](auto &m) { m["mesh"]["world_size"] = 4; },
       "the mesh holds 2 ranks, the world size is 4"},
      {[](auto &m) { m["ranks"][1]["coords"]["tp"] = 5; },
       "coordinate tp=5 is outside the axis"},
      {[](auto &m) {
         m["files"]["../escape"] = m["files"]["programs/rank0.pb"];
       },
       "'../escape', which is not a path inside the artifact"},
      {[](auto &m) { m["files"].erase("programs/rank1.pb"); },
       "'programs/rank1.pb' has no entry in 'files'"},
      {[](auto &m) { m["schedule"] = 3; }, "neither an object nor null"},
      // CUDA modules belong to cuda artifacts, and every rank of one has its
      // module, covered by a digest.
      {[](auto &m) { m["target"] = "cuda"; },
       "rank 0 of a cuda artifact names no CUDA source and fatbin"},
      {[](auto &m) {
         m["ranks"][0]["cuda"] = {{"source", "cuda/a.cu"},
                                  {"fatbin", "cuda/a.fatbin"}};
       },
       "rank 0 of a host artifact names CUDA files"},
      {[](auto &m) { m["cuda"] = {{"archs", {"sm_80"}}}; },
       "a host artifact lists CUDA architectures"},
      {[](auto &m) {
         m["target"] = "cuda";
         for (auto &rank : m["ranks"])
           rank["cuda"] = {{"source", "cuda/a.cu"},
                           {"fatbin", "cuda/a.fatbin"}};
       },
       "a cuda artifact lists no CUDA architectures"},
      {[](auto &m) {
         m["target"] = "cuda";
         m["cuda"] = {{"archs", {"sm_80"}}};
         for (auto &rank : m["ranks"])
           rank["cuda"] = {{"source", "cuda/a.cu"},
                           {"fatbin", "cuda/a.fatbin"}};
       },
       "'cuda/a.cu' has no entry in 'files'"},
  };
  for (const Case &c : cases) {
    nlohmann::json manifest = original;
    c.edit(manifest);
    writeRehashedManifest(path, manifest);
    EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact), c.message);
  }
}

/// manifest.json carries the digest of its own canonical text: an edit is
/// refused unless the digest is recomputed, which reformatting does not
/// need.
TEST_F(ArtifactTest, TheManifestIsCoveredByItsDigest) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  nlohmann::json original = readManifest(path);
  std::unique_ptr<LoadedArtifact> artifact;
  EXPECT_EQ(original["manifest_sha256"], manifestDigest(original));

  nlohmann::json edited = original;
  edited["model"]["name"] = "other";
  writeManifest(path, edited);
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "manifest.json: 'manifest_sha256' does not match the "
                        "manifest's contents (edited or corrupted)");

  nlohmann::json undigested = original;
  undigested.erase("manifest_sha256");
  writeManifest(path, undigested);
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "manifest.json: no 'manifest_sha256' string");

  // Other whitespace and key order: the same canonical text.
  test::writeBytes(path + "/manifest.json", original.dump(7));
  EXPECT_OK(LoadedArtifact::open(path, artifact));
}

/// A manifest whose digest was recomputed after an edit is still checked
/// against the programs: what each rank binds, where it sits, and that the
/// model computes something.
TEST_F(ArtifactTest, RefusesManifestsThatDisagreeWithThePrograms) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  nlohmann::json original = readManifest(path);
  std::unique_ptr<LoadedArtifact> artifact;
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    const char *message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["outputs"] = nlohmann::json::array(); },
       "manifest.json: the model has no outputs"},
      {[](auto &m) {
         std::swap(m["ranks"][0]["coords"], m["ranks"][1]["coords"]);
       },
       "manifest.json: rank 0 has coordinates {dp: 0, tp: 1}, but rank 0 of "
       "this mesh is at {dp: 0, tp: 0}"},
      {[](auto &m) { m["ranks"][1]["stage"] = 1; },
       "manifest.json: rank 1 has stage 1, but its pp coordinate is 0"},
      // The stage is the coordinate on the axis of role pp, whatever its name.
      {[](auto &m) { m["mesh"]["axes"][1]["role"] = "pp"; },
       "manifest.json: rank 1 has stage 0, but its pp coordinate is 1"},
      {[](auto &m) { m["outputs"][0]["shape"][2] = 6; },
       "manifest.json: output 'logits' is f32 [2, 8, 6] split over the mesh, "
       "so rank 0's block is [2, 8, 3], but rank 0's program binds f32 [2, "
       "8, 4]"},
      {[](auto &m) { m["outputs"][0]["shape"][2] = 7; },
       "manifest.json: output 'logits': dimension 2 of [2, 8, 7] does not "
       "split into 2 blocks"},
      {[](auto &m) { m["inputs"][0]["dtype"] = "i32"; },
       "manifest.json: input 'ids' is i32 [2, 8], but rank 0's program binds "
       "i64 [2, 8]"},
      {[](auto &m) { m["inputs"][0]["name"] = "tokens"; },
       "manifest.json: rank 0's program binds input 'ids', which the manifest "
       "does not list"},
      {[](auto &m) {
         nlohmann::json extra = m["outputs"][0];
         extra["name"] = "extra";
         m["outputs"].push_back(extra);
       },
       "manifest.json: output 'extra' is produced by no rank's program"},
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

/// The programs are verified at load (ProgramVerifierTest has each rule):
/// a program changed along with its digest is refused.
TEST_F(ArtifactTest, RefusesProgramsTheVerifierRefuses) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  program::Program program = rankProgram(1, 2);
  program.clear_instructions();
  std::string bytes = program.SerializeAsString();
  test::writeBytes(path + "/programs/rank1.pb", bytes);
  nlohmann::json manifest = readManifest(path);
  manifest["files"]["programs/rank1.pb"] =
      "sha256:" + Sha256::hexDigest(bytes.data(), bytes.size());
  writeRehashedManifest(path, manifest);
  std::unique_ptr<LoadedArtifact> artifact;
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "rank 1: output 'logits' (buffer 2) is never written");
}

/// Files of the artifact that are not regular files (a FIFO would block
/// the loader) are refused.
TEST_F(ArtifactTest, RefusesFilesThatAreNotRegular) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  std::string program = path + "/programs/rank1.pb";
  std::filesystem::remove(program);
  ASSERT_EQ(::mkfifo(program.c_str(), 0600), 0);
  std::unique_ptr<LoadedArtifact> artifact;
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "programs/rank1.pb: a FIFO, not a regular file");
  std::filesystem::remove(path + "/manifest.json");
  std::filesystem::create_directory(path + "/manifest.json");
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "manifest.json: a directory, not a regular file");
}

TEST_F(ArtifactTest, RefusesTamperedTruncatedAndMissingFiles) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  std::string weights = path + "/weights/model-00001-of-00001.safetensors";
  std::string program = path + "/programs/rank1.pb";
  std::string weightBytes = test::readBytes(weights);
  std::string programBytes = test::readBytes(program);
  std::unique_ptr<LoadedArtifact> artifact;

  // Weight bytes are hashed only when asked; the bounds always hold.
  std::string tampered = weightBytes;
  tampered[tampered.size() - 1] ^= 1;
  test::writeBytes(weights, tampered);
  ArtifactOpenOptions verify;
  verify.verifyWeights = true;
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact, verify),
                        "weights/model-00001-of-00001.safetensors: hash "
                        "mismatch (tampered or truncated)");
  EXPECT_OK(LoadedArtifact::open(path, artifact));
  test::writeBytes(weights, weightBytes.substr(0, weightBytes.size() - 1));
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "weights/model-00001-of-00001.safetensors: tensor ");
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "lie outside the data section");
  test::writeBytes(weights, weightBytes);
  EXPECT_OK(LoadedArtifact::open(path, artifact, verify));

  test::writeBytes(program, programBytes.substr(0, programBytes.size() / 2));
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "programs/rank1.pb: hash mismatch (tampered or "
                        "truncated)");

  std::filesystem::remove(program);
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "programs/rank1.pb: missing (manifest.json lists it)");
  test::writeBytes(program, programBytes);
  EXPECT_OK(LoadedArtifact::open(path, artifact));
}

/// Files whose digests were updated along with them: the hash matches, the
/// contents are still refused.
TEST_F(ArtifactTest, RefusesMalformedFilesWithMatchingHashes) {
  TemporaryDirectory directory;
  std::string path = commitTo(directory);
  std::unique_ptr<LoadedArtifact> artifact;
  auto replace = [&](const std::string &relative, const std::string &bytes) {
    test::writeBytes(path + "/" + relative, bytes);
    nlohmann::json manifest = readManifest(path);
    manifest["files"][relative] =
        "sha256:" + Sha256::hexDigest(bytes.data(), bytes.size());
    writeRehashedManifest(path, manifest);
  };
  std::string programBytes = test::readBytes(path + "/programs/rank0.pb");
  replace("programs/rank0.pb", "\xff\xff\xff");
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "programs/rank0.pb: not a valid program");
  replace("programs/rank0.pb", rankProgram(1, 2).SerializeAsString());
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "the program is for rank 1 of 2, the manifest says "
                        "rank 0 of 2");
  replace("programs/rank0.pb", programBytes);

  std::string weights = "weights/model-00001-of-00001.safetensors";
  replace(weights, std::string("\x10\0\0\0\0\0\0\0{}", 10));
  EXPECT_ERROR_CONTAINS(LoadedArtifact::open(path, artifact),
                        "weights/model-00001-of-00001.safetensors: header "
                        "length 16 exceeds the file");
}

} // namespace
