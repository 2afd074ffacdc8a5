//===- CudaEmulationTest.cpp - generated CUDA checked on the CPU ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Compiles the committed models for --target cuda, builds each distinct
// generated module as a host library with Emulation.h, runs every rank on
// an EmulatedCudaDevice over a HostWorld (through the Runner's building
// blocks) and compares the outputs with onnxruntime's. Needs nvcc (the
// artifact holds a fatbin) and python3 with numpy (the references are
// .npz); skipped without them. PARTITA_EMULATION_COMPILE overrides the
// partita-compile it runs, CXX the host compiler of the modules.
//
//===----------------------------------------------------------------------===//

#include "EmulatedDevice.h"
#include "TestSupport.h"

#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/Runner.h"
#include "partita/runtime/Training.h"
#include "partita/runtime/tooling/TensorFile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace partita::runtime;

namespace {

/// Everything the cases share within one run of the test binary: the work
/// directory, the models' tensors as .npy, the emulator builds of the
/// modules by source hash.
struct Workspace {
  std::string root;
  std::map<std::string, std::string> libraries; // Source hash -> library.
  std::mutex mutex;

  static Workspace &get() {
    static Workspace workspace;
    return workspace;
  }
  Workspace() {
    root = ::testing::TempDir() + "partita-cuda-emulation-" +
           std::to_string(getpid());
    mkdir(root.c_str(), 0755);
  }
  /// PARTITA_EMULATION_KEEP=1 keeps the artifacts and builds for a look.
  ~Workspace() {
    if (!std::getenv("PARTITA_EMULATION_KEEP"))
      std::system(("rm -rf '" + root + "'").c_str());
  }

  /// The model's reference tensors (`inputs` or `outputs`) as .npy files
  /// in a folder, one per name.
  Status unpack(const std::string &models, const std::string &model,
                const std::string &which, std::string &folder) {
    folder = root + "/" + model + "." + which;
    if (exists(folder))
      return Status::ok();
    std::string npz = models + "/" + model + "." + which + ".npz";
    std::string output;
    int status = runCommand(
        "python3 -c 'import numpy as np, os, sys; os.makedirs(sys.argv[2]); "
        "[np.save(os.path.join(sys.argv[2], k + \".npy\"), v) for k, v in "
        "np.load(sys.argv[1]).items()]' '" +
            npz + "' '" + folder + "'",
        output);
    if (status != 0)
      return Status::error("unpacking " + npz + ": " + output);
    return Status::ok();
  }

  /// The emulator build of the artifact's module `source` (cuda/<hash>.cu).
  Status library(const std::string &artifact, const std::string &source,
                 std::string &path) {
    std::lock_guard<std::mutex> lock(mutex);
    std::string hash = source.substr(source.rfind('/') + 1);
    hash = hash.substr(0, hash.find('.'));
    auto found = libraries.find(hash);
    if (found != libraries.end()) {
      path = found->second;
      return Status::ok();
    }
    path = root + "/" + hash + ".so";
    PARTITA_RETURN_IF_ERROR(buildEmulatedModule(
        envOr("CXX", PARTITA_EMU_CXX), PARTITA_EMU_SHIM,
        PARTITA_EMU_CUDA_INCLUDE, artifact + "/" + source, path));
    libraries[hash] = path;
    return Status::ok();
  }
};

/// The partita-compile and nvcc the cases run; what is missing, or empty.
std::string findTools(std::string &compiler, std::string &nvcc) {
  compiler = envOr("PARTITA_EMULATION_COMPILE", PARTITA_EMU_COMPILE);
  nvcc = envOr("PARTITA_NVCC", PARTITA_EMU_NVCC);
  if (!exists(compiler))
    return compiler + " is not built";
  if (nvcc.empty() || !exists(nvcc))
    return "no nvcc (a cuda artifact holds a fatbin)";
  return "";
}

struct Case {
  std::string name;
  std::string model;
  std::string flags;
  bool bf16 = false;
  /// bench/gen_gpt.py flags of a generated model (make_case.py writes it
  /// and onnxruntime's outputs); empty: a committed model.
  std::string generate = "";
  /// Another generator script beside make_case.py, run with the models
  /// folder and the model's name (make_positions_case.py).
  std::string maker = "";
};

std::ostream &operator<<(std::ostream &os, const Case &c) {
  return os << c.name;
}

class CudaEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEmulation, MatchesOnnxRuntime) {
  const Case &c = GetParam();
  std::string compiler, nvcc;
  if (std::string missing = findTools(compiler, nvcc); !missing.empty())
    GTEST_SKIP() << missing;
  std::string probe;
  if (runCommand("python3 -c 'import numpy'", probe) != 0)
    GTEST_SKIP() << "no python3 with numpy to read the .npz references";

  Workspace &workspace = Workspace::get();
  std::string models = PARTITA_EMU_MODELS;
  if (!c.generate.empty() || !c.maker.empty()) {
    if (runCommand("python3 -c 'import onnx, onnxruntime'", probe) != 0)
      GTEST_SKIP() << "no python3 with onnx and onnxruntime to generate "
                   << c.model;
    models = workspace.root;
    std::string script = PARTITA_EMU_MAKE_CASE;
    if (!c.maker.empty())
      script = script.substr(0, script.rfind('/') + 1) + c.maker;
    std::string generated;
    ASSERT_EQ(runCommand("python3 '" + script + "' '" + models + "' '" +
                             c.model + "' " + c.generate,
                         generated),
              0)
        << generated;
  }
  std::string model = models + "/" + c.model;
  std::string artifactPath = workspace.root + "/" + c.name;
  std::string output;
  int status = runCommand(
      "PARTITA_NVCC='" + nvcc + "' PARTITA_CACHE_DIR='" + workspace.root +
          "/nvcc-cache' '" + compiler + "' '" + model + ".onnx' " + c.flags +
          " --target cuda --cuda-arch sm_80 -o '" + artifactPath + "'",
      output);
  ASSERT_EQ(status, 0) << output;

  std::unique_ptr<LoadedArtifact> artifact;
  Status opened = LoadedArtifact::open(artifactPath, artifact);
  ASSERT_TRUE(opened) << opened.message();
  const Manifest &manifest = artifact->manifest();
  ASSERT_EQ(manifest.target, "cuda");
  int32_t worldSize = manifest.worldSize;

  std::vector<std::unique_ptr<EmulatedCudaDevice>> devices(worldSize);
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    std::string library;
    Status built = workspace.library(
        artifactPath, manifest.ranks[size_t(rank)].cudaSource, library);
    ASSERT_TRUE(built) << built.message();
    Status created = EmulatedCudaDevice::create(library, devices[rank]);
    ASSERT_TRUE(created) << created.message();
  }

  std::string inputFolder, outputFolder;
  Status unpacked = workspace.unpack(models, c.model, "inputs", inputFolder);
  ASSERT_TRUE(unpacked) << unpacked.message();
  unpacked = workspace.unpack(models, c.model, "outputs", outputFolder);
  ASSERT_TRUE(unpacked) << unpacked.message();
  std::vector<HostTensor> inputMemory(manifest.inputs.size());
  std::vector<NamedTensor> inputs;
  for (size_t i = 0; i < manifest.inputs.size(); ++i) {
    const TensorSpec &spec = manifest.inputs[i];
    Status read =
        readNpy(inputFolder + "/" + spec.name + ".npy", inputMemory[i]);
    ASSERT_TRUE(read) << read.message();
    inputs.push_back({spec.name, inputMemory[i].tensor()});
  }

  HostWorld world(worldSize, std::chrono::seconds(60));
  std::vector<RankRun> runs(static_cast<size_t>(worldSize));
  // Executors go before the world and the devices they use.
  struct Reset {
    std::vector<RankRun> &runs;
    ~Reset() {
      for (RankRun &run : runs)
        run.executor.reset();
    }
  } reset{runs};
  for (int32_t rank = 0; rank < worldSize; ++rank) {
    RankRun &run = runs[size_t(rank)];
    run.externalDevice = devices[rank].get();
    Status prepared =
        prepareRank(*artifact, rank, world.communicator(rank), 1, run);
    ASSERT_TRUE(prepared) << prepared.message();
    Status bound = bindRankInputs(*artifact, rank, inputs, run);
    ASSERT_TRUE(bound) << bound.message();
  }
  Status ran = runRanks(runs);
  ASSERT_TRUE(ran) << ran.message();
  int64_t launches = 0, matmuls = 0;
  for (const auto &device : devices)
    launches += device->launches(), matmuls += device->matmuls();
  EXPECT_GT(launches, 0);
  EXPECT_GT(matmuls, 0);

  for (const TensorSpec &spec : manifest.outputs) {
    OutputPlan plan;
    Status planned = planOutput(manifest, spec, runs, plan);
    ASSERT_TRUE(planned) << planned.message();
    HostTensor global, expected;
    ASSERT_TRUE(global.allocate(spec.dtype, spec.shape));
    Status assembled = assembleOutput(manifest, plan, global.tensor());
    ASSERT_TRUE(assembled) << assembled.message();
    Status read = readNpy(outputFolder + "/" + spec.name + ".npy", expected);
    ASSERT_TRUE(read) << read.message();
    ASSERT_EQ(spec.dtype, partita::program::F32);
    ASSERT_EQ(expected.dtype(), partita::program::F32);
    ASSERT_EQ(expected.shape(), spec.shape);
    const float *got = static_cast<const float *>(global.data());
    const float *want = static_cast<const float *>(expected.data());
    int64_t n = global.tensor().numElements();
    double maxError = 0, maxReference = 0, worst = 0;
    int64_t worstAt = -1;
    for (int64_t i = 0; i < n; ++i) {
      maxReference = std::max(maxReference, double(std::fabs(want[i])));
      // NaN where onnxruntime has NaN is equal; anywhere else, wrong.
      bool bothNan = std::isnan(got[i]) && std::isnan(want[i]);
      double error =
          bothNan ? 0.0 : std::fabs(double(got[i]) - double(want[i]));
      if (!(error == error))
        error = INFINITY;
      maxError = std::max(maxError, error);
      // fp32: error over the allowed error (rtol 1e-4, atol 1e-5).
      double ratio =
          bothNan ? 0.0 : error / (1e-5 + 1e-4 * std::fabs(double(want[i])));
      if (ratio > worst || worstAt < 0)
        worst = ratio, worstAt = i;
    }
    std::printf("[ %s ] %s: %d rank(s), %lld launches, %lld matmuls, max "
                "|error| %.3g (max |reference| %.3g)\n",
                c.name.c_str(), spec.name.c_str(), int(worldSize),
                (long long)launches, (long long)matmuls, maxError,
                maxReference);
    if (c.bf16)
      EXPECT_LE(maxError, 2e-2 * maxReference)
          << spec.name << ": max |error| " << maxError;
    else
      EXPECT_LE(worst, 1.0) << spec.name << "[" << worstAt << "] is "
                            << got[worstAt] << ", onnxruntime " << want[worstAt]
                            << " (max |error| " << maxError << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaEmulation,
    ::testing::Values(
        Case{"gpt2", "gpt2", ""}, Case{"gpt2_tp2", "gpt2", "--mesh tp=2"},
        Case{"llama", "llama", ""}, Case{"llama_tp2", "llama", "--mesh tp=2"},
        Case{"bert", "bert", ""}, Case{"bert_tp2", "bert", "--mesh tp=2"},
        Case{"gpt2_bf16", "gpt2", "--dtype bf16", true},
        Case{"gpt2_sp2_ring", "gpt2", "--mesh sp=2 --sp-mode ring"},
        Case{"llama_tp2_megatron", "llama", "--mesh tp=2 --sp-mode megatron"},
        // Wider than the committed models, so that every lane of a warp
        // holds data: hidden 256 (rows of 256 in the norms, head dim 64),
        // a sequence of 80 (a partial 32-key tile and partial query
        // blocks), a vocabulary of 640.
        Case{"gpt_wide", "gpt_wide", "", false,
             "--hidden 256 --heads 4 --seq 80 --vocab 640"},
        Case{"gpt_wide_tp2", "gpt_wide", "--mesh tp=2", false,
             "--hidden 256 --heads 4 --seq 80 --vocab 640"},
        // Rotary tables and cumulative sums of inputs (nn.sin, nn.cos and
        // both shapes of the cumsum kernel), unsharded and at tp=2.
        Case{"positions", "positions", "", false, "", "make_positions_case.py"},
        Case{"positions_tp2", "positions", "--mesh tp=2", false, "",
             "make_positions_case.py"},
        // A past key row of FLT_MAX: onnxruntime's logits are all NaN, and
        // the second layer's presents partly; the attention kernels (the
        // prompt and, at tp=2, the same) must overflow as it does.
        Case{"overflow", "overflow", "", false, "", "make_overflow_case.py"},
        Case{"overflow_tp2", "overflow", "--mesh tp=2", false, "",
             "make_overflow_case.py"},
        // MatMulNBits: int4 with zero points and a bias, int8, and a packed
        // weight read twice (dequantized once, then multiplied); unsharded,
        // at tp=2 (column and row blocks) and in bf16.
        Case{"int4", "int4", "", false, "", "make_int4_case.py"},
        Case{"int4_tp2", "int4", "--mesh tp=2", false, "", "make_int4_case.py"},
        Case{"int4_bf16", "int4", "--dtype bf16", true, "",
             "make_int4_case.py"},
        // onnxruntime's fused mixture of experts: the router's top k as
        // reductions, then nn.moe as the grouped kernels (route, fc1 with
        // the activation, fc2, combine; lib/Target/CUDA/Moe.cpp);
        // unsharded, at tp=2, and with the experts split over ep (each
        // rank's ids shifted to its block, -1 elsewhere: slots that select
        // nothing), alone and with tp; in bf16; every SwiGLU layout (fc3
        // with its bias, fc1's halves with top 3) and gelu with top 1.
        Case{"moe", "moe", "", false, "", "make_moe_case.py"},
        Case{"moe_tp2", "moe", "--mesh tp=2", false, "", "make_moe_case.py"},
        Case{"moe_ep2", "moe", "--mesh ep=2", false, "", "make_moe_case.py"},
        Case{"moe_ep2_tp2", "moe", "--mesh ep=2,tp=2", false, "",
             "make_moe_case.py"},
        Case{"moe_bf16", "moe", "--dtype bf16", true, "", "make_moe_case.py"},
        Case{"moe_fc3", "moe_fc3", "", false, "fc3", "make_moe_case.py"},
        Case{"moe_fc3_ep2", "moe_fc3", "--mesh ep=2", false, "fc3",
             "make_moe_case.py"},
        Case{"moe_halves", "moe_halves", "", false, "halves",
             "make_moe_case.py"},
        Case{"moe_gelu", "moe_gelu", "", false, "gelu", "make_moe_case.py"},
        // int4 experts (QMoE): the batched dequantize kernel, whole and
        // with the experts over ep.
        Case{"qmoe", "qmoe", "", false, "qmoe", "make_moe_case.py"},
        Case{"qmoe_ep2", "qmoe", "--mesh ep=2", false, "qmoe",
             "make_moe_case.py"},
        // transformers' Mixtral (legacy export): attention, RMS norms and
        // the raised mixture (SwiGLU over fc1's halves, top 2
        // renormalized), unsharded and with the experts over ep.
        Case{"mixtral", "mixtral", "", false, "mixtral.legacy",
             "make_fixture_case.py"},
        Case{"mixtral_ep2", "mixtral", "--mesh ep=2", false, "mixtral.legacy",
             "make_fixture_case.py"}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

} // namespace

namespace {

/// One training step of the GPT-2 training fixture (issue 35) compiled for
/// --target cuda, its forward, backward and update kernels run on the
/// emulator: the loss and every parameter's gradient equal torch's (the
/// fixture's reference, which the host run equals too).
class CudaEmulationTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEmulationTraining, MatchesTorch) {
  std::string compiler, nvcc;
  if (std::string missing = findTools(compiler, nvcc); !missing.empty())
    GTEST_SKIP() << missing;
  Workspace &workspace = Workspace::get();
  std::string train = std::string(PARTITA_EMU_MODELS) + "/train";
  std::string artifactPath =
      workspace.root + "/train" + (GetParam().empty() ? "" : "_tp2");
  std::string output;
  ASSERT_EQ(runCommand("PARTITA_NVCC='" + nvcc + "' PARTITA_CACHE_DIR='" +
                           workspace.root + "/nvcc-cache' '" + compiler +
                           "' '" + train +
                           "/gpt2.onnx' --train --loss cross_entropy:logits "
                           "--optimizer sgd:lr=0 --output-gradients " +
                           GetParam() +
                           " --target cuda --cuda-arch sm_80 -o '" +
                           artifactPath + "'",
                       output),
            0)
      << output;
  std::unique_ptr<LoadedArtifact> artifact;
  Status opened = LoadedArtifact::open(artifactPath, artifact);
  ASSERT_TRUE(opened) << opened.message();
  const Manifest &manifest = artifact->manifest();
  std::vector<std::unique_ptr<EmulatedCudaDevice>> devices(
      size_t(manifest.worldSize));
  RunnerOptions options;
  for (int32_t rank = 0; rank < manifest.worldSize; ++rank) {
    std::string library;
    Status built = workspace.library(
        artifactPath, manifest.ranks[size_t(rank)].cudaSource, library);
    ASSERT_TRUE(built) << built.message();
    Status created = EmulatedCudaDevice::create(library, devices[rank]);
    ASSERT_TRUE(created) << created.message();
    options.devices.push_back(devices[rank].get());
  }
  std::vector<std::pair<std::string, HostTensor>> reference;
  Status read = readNpz(train + "/gpt2.train.npz", reference);
  ASSERT_TRUE(read) << read.message();
  auto find = [&](const std::string &name) -> const HostTensor * {
    for (const auto &[key, tensor] : reference)
      if (key == name)
        return &tensor;
    return nullptr;
  };
  std::vector<NamedTensor> batch;
  for (const char *name : {"input_ids", "attention_mask", "labels"}) {
    const HostTensor *tensor = find(std::string("batch0/") + name);
    ASSERT_NE(tensor, nullptr) << name;
    batch.push_back({name, tensor->tensor()});
  }

  float loss = 0;
  {
    std::unique_ptr<Runner> runner;
    std::unique_ptr<Trainer> trainer;
    Status created = Runner::create(*artifact, options, runner);
    ASSERT_TRUE(created) << created.message();
    created = Trainer::create(*runner, trainer);
    ASSERT_TRUE(created) << created.message();
    Status stepped = trainer->step(batch, std::nullopt, loss);
    ASSERT_TRUE(stepped) << stepped.message();
    const HostTensor *losses = find("sgd/loss");
    ASSERT_NE(losses, nullptr);
    float want = static_cast<const float *>(losses->data())[0];
    EXPECT_NEAR(loss, want, 1e-4 * std::fabs(want));
    int64_t launches = 0;
    for (const auto &device : devices)
      launches += device->launches();
    EXPECT_GT(launches, 0);
    int compared = 0;
    for (const auto &[name, tensor] : trainer->lastOutputs()) {
      if (name == "loss")
        continue;
      std::string parameter = name.substr(0, name.size() - 5); // ".grad"
      const HostTensor *expected = find("grad/" + parameter);
      ASSERT_NE(expected, nullptr) << name;
      ASSERT_EQ(expected->shape(), tensor.shape()) << name;
      const float *got = static_cast<const float *>(tensor.data());
      const float *want = static_cast<const float *>(expected->data());
      double worst = 0;
      for (int64_t i = 0, n = tensor.tensor().numElements(); i < n; ++i)
        worst = std::max(worst, std::fabs(double(got[i]) - want[i]) /
                                    (1e-6 + 1e-4 * std::fabs(want[i])));
      EXPECT_LE(worst, 1.0) << name;
      ++compared;
    }
    EXPECT_EQ(compared, 28);
    std::printf("[ gpt2 training %s ] loss %.6f, torch %.6f, %lld launches\n",
                GetParam().empty() ? "one rank" : GetParam().c_str(),
                double(loss), double(want), (long long)launches);
  }
}

INSTANTIATE_TEST_SUITE_P(Training, CudaEmulationTraining,
                         ::testing::Values("", "--mesh tp=2"),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param.empty() ? "one_rank" : "tp2";
                         });

} // namespace
