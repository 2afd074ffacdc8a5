//===- PartitaRunTest.cpp - partita-run --generate ------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// partita-run, run as a program on the serving model of ServingModel.h:
// what --generate writes (the tokens and logits an in-process Generation
// gives) and prints, the prefill it runs without --generate, and each of
// its errors with its message and exit status.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaDevice.h"
#include "partita/runtime/Generation.h"
#include "partita/runtime/Runner.h"
#include "partita/runtime/tooling/TensorFile.h"

#include "ServingModel.h"
#include "TestUtil.h"

#include <sys/wait.h>

using namespace partita::runtime;
using namespace partita::runtime::test;
namespace program = partita::program;

namespace {

struct ToolRun {
  int status = -1;
  std::string out, err;
};

class PartitaRunTest : public ::testing::Test {
protected:
  void SetUp() override {
    art = directory.path("art");
    ServingModelOptions options;
    options.tp = 2;
    ASSERT_OK(writeServingModel(art, options));
    prompt = {3, 1, 2, 0, 0, 3};
    mask = {1, 1, 1, 0, 1, 1};
    ASSERT_OK(save("prompt.npy", prompt, {kServingBatch, 3}));
    ASSERT_OK(save("mask.npy", mask, {kServingBatch, 3}));
  }

  Status save(const std::string &name, std::vector<int64_t> &values,
              std::vector<int64_t> shape) {
    return writeNpy(directory.path(name),
                    Tensor{values.data(), program::I64, std::move(shape)});
  }

  /// partita-run with `arguments` (relative paths resolve in the test's
  /// directory); its exit status and what it printed.
  ToolRun run(const std::string &arguments) {
    std::string out = directory.path("stdout.txt");
    std::string err = directory.path("stderr.txt");
    std::string command = "cd '" + directory.path() +
                          "' && '" PARTITA_RUN "' " + arguments + " >'" + out +
                          "' 2>'" + err + "'";
    int raw = std::system(command.c_str());
    ToolRun result;
    result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    result.out = test::readBytes(out);
    result.err = test::readBytes(err);
    return result;
  }

  /// Expects partita-run to fail with `message` on stderr.
  void expectError(const std::string &arguments, const std::string &message) {
    SCOPED_TRACE(arguments);
    ToolRun result = run(arguments);
    EXPECT_EQ(result.status, 1);
    EXPECT_NE(result.err.find("partita-run: error: " + message),
              std::string::npos)
        << result.err;
  }

  TemporaryDirectory directory;
  std::string art;
  std::vector<int64_t> prompt, mask;
};

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// What the tool writes is what Generation gives in process; it prints the
/// latencies and the cache's size.
TEST_F(PartitaRunTest, GenerateWritesTokensAndLogits) {
  ToolRun result = run("art --generate 5 --input input_ids=prompt.npy --input "
                       "attention_mask=mask.npy --dump-logits --output-dir out "
                       "--threads 1");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_TRUE(contains(result.out, "tokens: i64 [2, 5] min ")) << result.out;
  EXPECT_TRUE(contains(result.out, "-> out/tokens.npy")) << result.out;
  EXPECT_TRUE(contains(result.out, "logits: f32 [5, 2, 4] min ")) << result.out;
  EXPECT_TRUE(contains(result.out, "-> out/logits.npy")) << result.out;
  EXPECT_TRUE(contains(result.out, "time to first token: ")) << result.out;
  EXPECT_TRUE(contains(result.out, "per-token latency: mean ")) << result.out;
  EXPECT_TRUE(contains(result.out, " ms over 4 decode steps")) << result.out;
  EXPECT_TRUE(contains(result.out, " p50 ") && contains(result.out, " p99 "))
      << result.out;
  EXPECT_TRUE(contains(result.out, "decode throughput: ")) << result.out;
  EXPECT_TRUE(contains(result.out, " tokens/s (batch 2 x 4 steps in "))
      << result.out;
  EXPECT_TRUE(contains(result.out, "kv cache: 256 bytes")) << result.out;

  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(art, artifact));
  std::unique_ptr<Runner> runner;
  ASSERT_OK(Runner::create(*artifact, RunnerOptions(), runner));
  std::unique_ptr<Generation> generation;
  ASSERT_OK(Generation::create(*runner, generation));
  GenerateOptions options;
  options.maxNewTokens = 5;
  options.keepLogits = true;
  GenerateResult expected;
  Tensor maskTensor{mask.data(), program::I64, {kServingBatch, 3}};
  ASSERT_OK(generation->generate(
      Tensor{prompt.data(), program::I64, {kServingBatch, 3}}, &maskTensor,
      options, expected));

  HostTensor tokens, logits;
  ASSERT_OK(readNpy(directory.path("out/tokens.npy"), tokens));
  ASSERT_OK(readNpy(directory.path("out/logits.npy"), logits));
  ASSERT_EQ(tokens.dtype(), program::I64);
  ASSERT_EQ(tokens.shape(), (std::vector<int64_t>{kServingBatch, 5}));
  EXPECT_EQ(std::vector<int64_t>(tokens.tensor().as<int64_t>(),
                                 tokens.tensor().as<int64_t>() + 10),
            expected.tokens);
  ASSERT_EQ(logits.dtype(), program::F32);
  ASSERT_EQ(logits.shape(),
            (std::vector<int64_t>{5, kServingBatch, kServingVocab}));
  EXPECT_EQ(std::vector<float>(logits.tensor().as<float>(),
                               logits.tensor().as<float>() + 40),
            expected.logits);
}

TEST_F(PartitaRunTest, GenerateOneTokenHasNoDecodeSteps) {
  ToolRun result = run("art --generate 1 --input input_ids=prompt.npy");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_TRUE(contains(result.out, "tokens: i64 [2, 1]")) << result.out;
  EXPECT_TRUE(contains(result.out, "per-token latency: no decode steps "
                                   "(--generate 1 takes its token from the "
                                   "prefill)"))
      << result.out;
}

/// Without --generate, a serving artifact's prefill runs once, its inputs
/// and outputs the manifest's top-level ones.
TEST_F(PartitaRunTest, WithoutGenerateThePrefillRuns) {
  std::vector<int64_t> ids = {1, 2, 3, 0, 0, 0, 2, 1};
  std::vector<int64_t> ones(8, 1), positions = {0, 1, 2, 3, 0, 1, 2, 3},
                                   slot = {0};
  ASSERT_OK(save("ids.npy", ids, {kServingBatch, kServingPrompt}));
  ASSERT_OK(save("ones.npy", ones, {kServingBatch, kServingPrompt}));
  ASSERT_OK(save("positions.npy", positions, {kServingBatch, kServingPrompt}));
  ASSERT_OK(save("slot.npy", slot, {1}));
  ToolRun result = run("art --input input_ids=ids.npy --input "
                       "attention_mask=ones.npy --input "
                       "position_ids=positions.npy --input "
                       "cache_position=slot.npy --output-dir prefill");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_TRUE(contains(result.out, "logits: f32 [2, 4, 4]")) << result.out;
  HostTensor logits;
  ASSERT_OK(readNpy(directory.path("prefill/logits.npy"), logits));
  const float *values = logits.tensor().as<float>();
  EXPECT_EQ(values[3], 60);
  EXPECT_EQ(values[kServingPrompt * kServingVocab + 3], 30);
}

TEST_F(PartitaRunTest, GenerateErrors) {
  std::string plain = directory.path("plain");
  ASSERT_OK(writePlainModel(plain));
  expectError("plain --generate 2 --input input_ids=prompt.npy",
              "plain was not compiled with --max-seq: --generate needs a "
              "serving artifact (partita-compile --max-seq L), which has a "
              "decode program and a KV cache");
  expectError("art --generate 0 --input input_ids=prompt.npy",
              "--generate takes a positive number of tokens, not '0'");
  expectError("art --generate many --input input_ids=prompt.npy",
              "--generate takes a positive number of tokens, not 'many'");
  expectError("art --generate 2 --input attention_mask=mask.npy",
              "missing input 'input_ids' (i64 [2, at most 4]), the prompt: "
              "pass --input input_ids=FILE");
  expectError("art --generate 2 --input input_ids=prompt.npy --input "
              "position_ids=prompt.npy",
              "--generate takes no input 'position_ids': it reads "
              "'input_ids' and 'attention_mask' and computes the model's "
              "other inputs");
  expectError("art --generate 2 --input input_ids=prompt.npy --input "
              "input_ids=prompt.npy",
              "input 'input_ids' is given twice");
  expectError("art --dump-logits --input input_ids=prompt.npy",
              "--dump-logits writes the logits of --generate; give "
              "--generate N");
  expectError("art --generate 2 --dump-logits --input input_ids=prompt.npy",
              "--dump-logits writes DIR/logits.npy: give --output-dir DIR");
  expectError("art --generate 2 --repeat 3 --input input_ids=prompt.npy",
              "--repeat and --warmup time runs of the program; --generate "
              "times its prefill and every step itself");
  // What Generation refuses reaches the user as it says it.
  expectError("art --generate 6 --input input_ids=prompt.npy",
              "a prompt (padded to 4 tokens) and 6 new tokens need 9 cache "
              "slots, but the KV cache holds 8 (compile with a larger "
              "--max-seq)");
  std::vector<int64_t> longer(10, 1);
  ASSERT_OK(save("long.npy", longer, {kServingBatch, 5}));
  expectError("art --generate 2 --input input_ids=long.npy",
              "the prompt has 5 tokens; the prefill takes 1 to 4");

  ServingModelOptions cuda;
  cuda.target = "cuda";
  ASSERT_OK(writeServingModel(directory.path("cuda"), cuda));
  // cuda decodes (the cache resident on the device): without a GPU the
  // run gets as far as opening the device.
  int32_t gpus = 0;
  if (!CudaDevice::deviceCount(gpus))
    expectError("cuda --generate 2 --input input_ids=prompt.npy",
                "cuda was compiled for --target cuda");
  // A model without an attention mask takes only the ids.
  ServingModelOptions unmasked;
  unmasked.attentionMask = false;
  ASSERT_OK(writeServingModel(directory.path("unmasked"), unmasked));
  expectError("unmasked --generate 2 --input input_ids=prompt.npy --input "
              "attention_mask=mask.npy",
              "--generate takes no input 'attention_mask': it reads "
              "'input_ids' only and computes the model's other inputs");
}

} // namespace
