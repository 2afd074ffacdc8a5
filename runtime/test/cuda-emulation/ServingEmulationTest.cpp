//===- ServingEmulationTest.cpp - decoding on the emulated CUDA device ----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Serving artifacts (--max-seq) compiled for --target cuda, their prefill
// and decode modules built for the emulator and loaded into one
// EmulatedCudaDevice per rank, which claims memory of its own so that the
// executors stage what they stage: a Generation over a Runner on those
// devices against a Generation over the same model compiled for the host,
// step by step (logits within fp32's rtol 1e-4, equal greedy tokens). Each
// decode step copies exactly the decode programs' non-cache bindings: the
// KV cache stays resident on the device. Skipped without nvcc.
//
//===----------------------------------------------------------------------===//

#include "EmulatedDevice.h"
#include "TestSupport.h"

#include "partita/runtime/Generation.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/Runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

using namespace partita::runtime;

namespace {

struct ServingCase {
  std::string name;
  std::string model;
  std::string flags;
  int64_t maxSeq;
};

std::ostream &operator<<(std::ostream &os, const ServingCase &c) {
  return os << c.name;
}

class ServingEmulation : public ::testing::TestWithParam<ServingCase> {};

/// The argmax of each row of `logits` [batch, vocab] (lowest index on ties).
std::vector<int64_t> argmaxRows(const std::vector<float> &logits, int64_t batch,
                                int64_t vocab) {
  std::vector<int64_t> tokens(size_t(batch), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t v = 1; v < vocab; ++v)
      if (logits[size_t(b * vocab + v)] >
          logits[size_t(b * vocab + tokens[size_t(b)])])
        tokens[size_t(b)] = v;
  return tokens;
}

/// The worst error over the allowed error (rtol 1e-4, atol 1e-5).
double worstRatio(const std::vector<float> &got,
                  const std::vector<float> &want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double error = std::fabs(double(got[i]) - double(want[i]));
    if (!(error == error))
      return INFINITY;
    worst = std::max(worst, error / (1e-5 + 1e-4 * std::fabs(double(want[i]))));
  }
  return worst;
}

TEST_P(ServingEmulation, DecodesLikeTheHost) {
  const ServingCase &c = GetParam();
  std::string compiler =
      envOr("PARTITA_EMULATION_COMPILE", PARTITA_EMU_COMPILE);
  std::string nvcc = envOr("PARTITA_NVCC", PARTITA_EMU_NVCC);
  if (!exists(compiler))
    GTEST_SKIP() << compiler << " is not built";
  if (nvcc.empty() || !exists(nvcc))
    GTEST_SKIP() << "no nvcc (a cuda artifact holds a fatbin)";

  std::string root = ::testing::TempDir() + "partita-serving-emulation-" +
                     std::to_string(getpid()) + "-" + c.name;
  std::string output;
  ASSERT_EQ(
      runCommand("rm -rf '" + root + "' && mkdir -p '" + root + "'", output),
      0);
  // An optimum KV-cache fixture by name, or a path under test/models (an
  // onnxruntime-genai builder directory).
  std::string model = c.model.find('/') != std::string::npos
                          ? std::string(PARTITA_EMU_MODELS) + "/" + c.model
                          : std::string(PARTITA_EMU_MODELS) + "/hf/" + c.model +
                                ".optimum.onnx";
  std::string common = "'" + compiler + "' '" + model +
                       "' --bind batch_size=2,sequence_length=8 --max-seq " +
                       std::to_string(c.maxSeq) + " " + c.flags;
  ASSERT_EQ(runCommand(common + " -o '" + root + "/host'", output), 0)
      << output;
  ASSERT_EQ(runCommand("PARTITA_NVCC='" + nvcc + "' PARTITA_CACHE_DIR='" +
                           root + "/nvcc-cache' " + common +
                           " --target cuda --cuda-arch sm_80 -o '" + root +
                           "/cuda'",
                       output),
            0)
      << output;

  std::unique_ptr<LoadedArtifact> hostArtifact, cudaArtifact;
  Status opened = LoadedArtifact::open(root + "/host", hostArtifact);
  ASSERT_TRUE(opened) << opened.message();
  opened = LoadedArtifact::open(root + "/cuda", cudaArtifact);
  ASSERT_TRUE(opened) << opened.message();
  const Manifest &manifest = cudaArtifact->manifest();
  ASSERT_EQ(manifest.target, "cuda");
  ASSERT_TRUE(manifest.serving);
  int32_t worldSize = manifest.worldSize;

  // Each rank's device: the prefill and the decode module, built once per
  // distinct source.
  std::map<std::string, std::string> libraries;
  auto library = [&](const std::string &source, std::string &path) -> Status {
    auto found = libraries.find(source);
    if (found != libraries.end()) {
      path = found->second;
      return Status::ok();
    }
    path = root + "/lib" + std::to_string(libraries.size()) + ".so";
    PARTITA_RETURN_IF_ERROR(buildEmulatedModule(
        envOr("CXX", PARTITA_EMU_CXX), PARTITA_EMU_SHIM,
        PARTITA_EMU_CUDA_INCLUDE, root + "/cuda/" + source, path));
    libraries[source] = path;
    return Status::ok();
  };
  std::vector<std::unique_ptr<EmulatedCudaDevice>> devices(
      static_cast<size_t>(worldSize));
  RunnerOptions cudaOptions;
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    const RankEntry &entry = manifest.ranks[size_t(rank)];
    ASSERT_FALSE(entry.decodeCudaSource.empty());
    std::string prefillLibrary, decodeLibrary;
    Status built = library(entry.cudaSource, prefillLibrary);
    if (built)
      built = library(entry.decodeCudaSource, decodeLibrary);
    ASSERT_TRUE(built) << built.message();
    Status created =
        EmulatedCudaDevice::create(prefillLibrary, devices[size_t(rank)]);
    if (created)
      created = devices[size_t(rank)]->addModule(decodeLibrary);
    ASSERT_TRUE(created) << created.message();
    devices[size_t(rank)]->setSeparateMemory(true);
    cudaOptions.devices.push_back(devices[size_t(rank)].get());
  }

  RunnerOptions hostOptions;
  hostOptions.threadsPerRank = 1;
  std::unique_ptr<Runner> hostRunner, cudaRunner;
  std::unique_ptr<Generation> hostGeneration, cudaGeneration;
  Status ready = Runner::create(*hostArtifact, hostOptions, hostRunner);
  if (ready)
    ready = Generation::create(*hostRunner, hostGeneration);
  ASSERT_TRUE(ready) << ready.message();
  ready = Runner::create(*cudaArtifact, cudaOptions, cudaRunner);
  if (ready)
    ready = Generation::create(*cudaRunner, cudaGeneration);
  ASSERT_TRUE(ready) << ready.message();
  EXPECT_EQ(cudaRunner->cacheBytes(), hostRunner->cacheBytes());

  // What one decode step stages: each rank's decode program's bindings
  // but the cache.
  int64_t stagedPerStep = 0;
  const LoadedArtifact &decode = *cudaArtifact->decodeEntry();
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    const partita::program::Program &program = decode.program(rank);
    for (const auto *bindings : {&program.inputs(), &program.outputs()})
      for (const partita::program::Binding &binding : *bindings) {
        if (findSpec(manifest.serving->cache, binding.name()))
          continue;
        const partita::program::TensorType &type =
            program.buffers(binding.buffer()).type();
        Tensor tensor{
            nullptr, type.dtype(), {type.shape().begin(), type.shape().end()}};
        stagedPerStep += int64_t(tensor.byteSize());
      }
  }
  auto copiedBytes = [&] {
    int64_t bytes = 0;
    for (const auto &device : devices)
      bytes += device->copiedBytes();
    return bytes;
  };

  const int64_t batch = manifest.serving->batch;
  const TensorSpec *logitsSpec = findSpec(manifest.outputs, "logits");
  ASSERT_TRUE(logitsSpec);
  const int64_t vocab = logitsSpec->shape[2];
  // A prompt of 8 with the second row left-padded by 3.
  std::vector<int64_t> ids(size_t(batch * 8)), mask(size_t(batch * 8), 1);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int64_t((i * 37 + 11) % size_t(vocab));
  for (int64_t b = 1; b < batch; ++b)
    for (int64_t t = 0; t < 3; ++t)
      mask[size_t(b * 8 + t)] = 0;
  Tensor idsTensor{ids.data(), partita::program::I64, {batch, 8}};
  Tensor maskTensor{mask.data(), partita::program::I64, {batch, 8}};
  std::vector<float> hostLogits(size_t(batch * vocab)),
      cudaLogits(size_t(batch * vocab));
  Tensor hostOut{hostLogits.data(), partita::program::F32, {batch, vocab}};
  Tensor cudaOut{cudaLogits.data(), partita::program::F32, {batch, vocab}};

  Status ran = hostGeneration->prefill(idsTensor, &maskTensor, hostOut);
  ASSERT_TRUE(ran) << ran.message();
  ran = cudaGeneration->prefill(idsTensor, &maskTensor, cudaOut);
  ASSERT_TRUE(ran) << ran.message();
  double worst = worstRatio(cudaLogits, hostLogits);
  EXPECT_LE(worst, 1.0) << "prefill logits";
  std::vector<int64_t> tokens = argmaxRows(hostLogits, batch, vocab);
  EXPECT_EQ(argmaxRows(cudaLogits, batch, vocab), tokens) << "prefill";

  const int steps = 6;
  for (int step = 1; step <= steps; ++step) {
    Tensor tokenTensor{tokens.data(), partita::program::I64, {batch}};
    ran = hostGeneration->step(tokenTensor, hostOut);
    ASSERT_TRUE(ran) << ran.message();
    int64_t before = copiedBytes();
    ran = cudaGeneration->step(tokenTensor, cudaOut);
    ASSERT_TRUE(ran) << "step " << step << ": " << ran.message();
    EXPECT_EQ(copiedBytes() - before, stagedPerStep)
        << "step " << step << " staged more than its non-cache bindings";
    double ratio = worstRatio(cudaLogits, hostLogits);
    worst = std::max(worst, ratio);
    EXPECT_LE(ratio, 1.0) << "step " << step << " logits";
    std::vector<int64_t> next = argmaxRows(hostLogits, batch, vocab);
    EXPECT_EQ(argmaxRows(cudaLogits, batch, vocab), next) << "step " << step;
    tokens = next;
  }
  EXPECT_EQ(cudaGeneration->position(), hostGeneration->position());
  int64_t launches = 0;
  for (const auto &device : devices)
    launches += device->launches();
  std::printf("[ %s ] %d rank(s), max-seq %lld, %d decode steps, %lld "
              "launches, %lld bytes staged per step (cache %llu bytes "
              "resident), worst error / tolerance %.3g\n",
              c.name.c_str(), int(worldSize), (long long)c.maxSeq, steps,
              (long long)launches, (long long)stagedPerStep,
              (unsigned long long)cudaRunner->cacheBytes(), worst);

  // Executors before the devices they use.
  cudaGeneration.reset();
  cudaRunner.reset();
  if (!std::getenv("PARTITA_EMULATION_KEEP"))
    (void)runCommand("rm -rf '" + root + "'", output);
}

// max-seq 300 with the default split of 256 keys: two blocks per (batch,
// head), the second partial (44 keys) and wholly masked until the cache
// fills past slot 256.
INSTANTIATE_TEST_SUITE_P(
    Models, ServingEmulation,
    ::testing::Values(
        ServingCase{"gpt2_kv", "gpt2_kv", "", 300},
        ServingCase{"gpt2_kv_tp2", "gpt2_kv", "--mesh tp=2", 24},
        ServingCase{"llama_kv", "llama_kv", "", 24},
        ServingCase{"llama_kv_tp2", "llama_kv", "--mesh tp=2", 300},
        // 2 kv heads at tp=4: one cache slot per rank.
        ServingCase{"llama_kv_tp4", "llama_kv", "--mesh tp=4", 24},
        // Two microbatches per stage: each one's rows of the cache are
        // views of it, read and written in place on the device.
        ServingCase{"gpt2_kv_pp2_mb2", "gpt2_kv",
                    "--mesh pp=2 --microbatches 2", 24},
        // onnxruntime-genai's Llama export: rows right-padded, each decode
        // step's keys and values written at the row's own slot.
        ServingCase{"genai_llama", "genai/llama.fp32", "", 24},
        ServingCase{"genai_llama_tp2", "genai/llama.fp32", "--mesh tp=2", 24}),
    [](const ::testing::TestParamInfo<ServingCase> &info) {
      return info.param.name;
    });

} // namespace
