//===- RunnerTest.cpp - every rank of an artifact on global tensors -------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Runner.h"

#include "partita/runtime/ArtifactWriter.h"
#include "partita/runtime/CudaDevice.h"
#include "partita/runtime/distributed/Launcher.h"

#include "TestUtil.h"

using namespace partita::runtime;
namespace program = partita::program;
using program::Buffer;

namespace {

/// The model of these tests, y = x @ w + s and z = -x with x f32 [4, 6],
/// w f32 [6, 2] (a weight), s f32 [2], written as an artifact by hand: on
/// one rank, or on tp=2 Megatron style (x and z split on dimension 1, w on
/// dimension 0, the partial products all-reduced into the replicated y).
constexpr int64_t kRows = 4, kColumns = 6, kOut = 2;

class ProgramBuilder {
public:
  ProgramBuilder(int32_t rank, int32_t worldSize) {
    p.set_format_version(kProgramFormatVersion);
    p.set_rank(rank);
    p.set_world_size(worldSize);
  }
  int32_t buffer(Buffer::Kind kind, std::vector<int64_t> shape) {
    Buffer *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_kind(kind);
    b->mutable_type()->set_dtype(program::F32);
    for (int64_t d : shape)
      b->mutable_type()->add_shape(d);
    return b->id();
  }
  int32_t bound(Buffer::Kind kind, const std::string &name,
                std::vector<int64_t> shape) {
    int32_t id = buffer(kind, std::move(shape));
    program::Binding *binding =
        kind == Buffer::INPUT ? p.add_inputs() : p.add_outputs();
    binding->set_name(name);
    binding->set_buffer(id);
    return id;
  }
  int32_t weight(const std::string &name, std::vector<int64_t> shape) {
    int32_t id = buffer(Buffer::WEIGHT, std::move(shape));
    p.mutable_buffers(id)->set_weight(name);
    return id;
  }
  int32_t activation(std::vector<int64_t> shape) {
    int32_t id = buffer(Buffer::ACTIVATION, shape);
    int64_t bytes = 4;
    for (int64_t d : shape)
      bytes *= d;
    p.mutable_buffers(id)->set_arena_offset(p.arena_bytes());
    p.set_arena_bytes((p.arena_bytes() + uint64_t(bytes) + 63) / 64 * 64);
    return id;
  }
  void kernel(const std::string &op, std::vector<int32_t> operands,
              std::vector<int32_t> results) {
    program::Instruction *instruction = p.add_instructions();
    instruction->set_location(op);
    program::Kernel *k = instruction->mutable_kernel();
    k->set_op(op);
    for (int32_t id : operands)
      k->add_operands(id);
    for (int32_t id : results)
      k->add_results(id);
  }

  program::Program p;
};

TensorSharding splitDims(std::vector<std::vector<std::string>> dims,
                         std::vector<std::string> partial = {}) {
  TensorSharding sharding;
  sharding.dims = std::move(dims);
  sharding.partial = std::move(partial);
  return sharding;
}

/// The weight: w[i][j] = i - 2 j, small integers so every sum is exact.
std::vector<float> weightValues() {
  std::vector<float> w(size_t(kColumns * kOut));
  for (int64_t i = 0; i < kColumns; ++i)
    for (int64_t j = 0; j < kOut; ++j)
      w[size_t(i * kOut + j)] = float(i - 2 * j);
  return w;
}

struct Options {
  int32_t tp = 1;
  /// Mark y as holding partial sums over tp.
  bool partialOutput = false;
  std::string target = "host";
};

Status writeModel(const std::string &path, const Options &options) {
  int32_t tp = options.tp;
  int64_t local = kColumns / tp;
  ArtifactWriter writer;
  Manifest &manifest = writer.manifest();
  manifest.modelName = "runner";
  manifest.target = options.target;
  manifest.worldSize = tp;
  if (tp > 1)
    manifest.meshAxes = {{"tp", tp}};
  if (options.target == "cuda")
    manifest.cudaArchs = {"sm_80"};
  TensorSharding columns = tp > 1 ? splitDims({{}, {"tp"}}) : TensorSharding();
  TensorSharding y =
      options.partialOutput ? splitDims({{}, {}}, {"tp"}) : TensorSharding();
  manifest.inputs = {{"x", program::F32, {kRows, kColumns}, columns},
                     {"s", program::F32, {kOut}, {}}};
  manifest.outputs = {{"y", program::F32, {kRows, kOut}, y},
                      {"z", program::F32, {kRows, kColumns}, columns}};
  std::vector<float> w = weightValues();
  for (int32_t rank = 0; rank < tp; ++rank) {
    RankEntry entry;
    entry.rank = rank;
    if (tp > 1)
      entry.coords = {{"tp", rank}};
    if (options.target == "cuda") {
      entry.cudaSource = "cuda/rank" + std::to_string(rank) + ".cu";
      entry.cudaFatbin = "cuda/rank" + std::to_string(rank) + ".fatbin";
      PARTITA_RETURN_IF_ERROR(writer.addFile(entry.cudaSource, "// none"));
      PARTITA_RETURN_IF_ERROR(writer.addFile(entry.cudaFatbin, "none"));
    }
    manifest.ranks.push_back(entry);

    std::string weight = "w." + std::to_string(rank);
    PARTITA_RETURN_IF_ERROR(writer.addWeight(
        weight, program::F32, {local, kOut}, w.data() + rank * local * kOut,
        size_t(local * kOut) * sizeof(float)));
    ProgramBuilder b(rank, tp);
    int32_t x = b.bound(Buffer::INPUT, "x", {kRows, local});
    int32_t s = b.bound(Buffer::INPUT, "s", {kOut});
    int32_t wId = b.weight(weight, {local, kOut});
    int32_t product = b.activation({kRows, kOut});
    int32_t summed = product;
    int32_t yId = b.bound(Buffer::OUTPUT, "y", {kRows, kOut});
    int32_t z = b.bound(Buffer::OUTPUT, "z", {kRows, local});
    b.kernel("matmul", {x, wId}, {product});
    if (tp > 1) {
      summed = b.activation({kRows, kOut});
      program::Instruction *instruction = b.p.add_instructions();
      instruction->set_location("all_reduce");
      program::Collective *reduce = instruction->mutable_collective();
      reduce->set_kind(program::Collective::ALL_REDUCE);
      reduce->set_operand(product);
      reduce->set_result(summed);
      reduce->set_reduction("sum");
      for (int32_t r = 0; r < tp; ++r)
        reduce->add_group(r);
    }
    b.kernel("add", {summed, s}, {yId});
    b.kernel("neg", {x}, {z});
    PARTITA_RETURN_IF_ERROR(writer.addProgram(rank, b.p));
  }
  return writer.commit(path);
}

Tensor view(std::vector<float> &data, std::vector<int64_t> shape) {
  return Tensor{data.data(), program::F32, std::move(shape)};
}

/// x[i][j] = seed + i * kColumns + j, s = {seed, -seed}.
struct Inputs {
  explicit Inputs(float seed) : x(size_t(kRows * kColumns)), s{seed, -seed} {
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = seed + float(i);
  }
  std::vector<NamedTensor> named() {
    return {{"x", view(x, {kRows, kColumns})}, {"s", view(s, {kOut})}};
  }
  std::vector<float> x, s;
};

struct Outputs {
  std::vector<NamedTensor> named() {
    return {{"y", view(y, {kRows, kOut})}, {"z", view(z, {kRows, kColumns})}};
  }
  std::vector<float> y = std::vector<float>(size_t(kRows * kOut), -1);
  std::vector<float> z = std::vector<float>(size_t(kRows * kColumns), -1);
};

class RunnerTest : public ::testing::Test {
protected:
  void SetUp() override {
    for (int32_t tp : {1, 2}) {
      Options options;
      options.tp = tp;
      std::string path = directory.path("tp" + std::to_string(tp));
      ASSERT_OK(writeModel(path, options));
      ASSERT_OK(LoadedArtifact::open(path, tp == 1 ? whole : sharded));
    }
  }

  /// The tp=2 model compiled for --target cuda (with fatbins that are not
  /// real ones).
  Status openCudaModel(std::unique_ptr<LoadedArtifact> &artifact) {
    Options options;
    options.tp = 2;
    options.target = "cuda";
    PARTITA_RETURN_IF_ERROR(writeModel(directory.path("cuda"), options));
    return LoadedArtifact::open(directory.path("cuda"), artifact);
  }

  RunnerOptions patient() {
    RunnerOptions options;
    options.threadsPerRank = 1;
    options.timeoutSeconds = 60;
    return options;
  }

  test::TemporaryDirectory directory;
  std::unique_ptr<LoadedArtifact> whole, sharded;
};

/// The tp=2 artifact gives what the single-rank one does, run after run
/// with other inputs: its sharded input split afresh, its replicated output
/// from rank 0, its sharded output assembled from both ranks.
TEST_F(RunnerTest, ShardedMatchesSingleRank) {
  std::unique_ptr<Runner> one, two;
  ASSERT_OK(Runner::create(*whole, patient(), one));
  RunnerOptions defaults;
  ASSERT_OK(Runner::create(*sharded, defaults, two));
  EXPECT_EQ(two->manifest().worldSize, 2);
  EXPECT_EQ(&two->manifest(), &sharded->manifest());

  std::vector<float> previousY;
  for (float seed : {1.0f, -7.0f}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Inputs inputs(seed);
    Outputs expected, got;
    ASSERT_OK(one->run(inputs.named(), expected.named()));
    ASSERT_OK(two->run(inputs.named(), got.named()));
    // Bitwise although tp=2 splits the matmul: every product and partial
    // sum is a small integer (far below 2^24), exact in any order.
    EXPECT_EQ(got.y, expected.y);
    EXPECT_EQ(got.z, expected.z);

    // Against values worked out here: y = x @ w + s, z = -x.
    std::vector<float> w = weightValues();
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < kOut; ++j) {
        float sum = inputs.s[size_t(j)];
        for (int64_t k = 0; k < kColumns; ++k)
          sum += inputs.x[size_t(i * kColumns + k)] * w[size_t(k * kOut + j)];
        EXPECT_EQ(got.y[size_t(i * kOut + j)], sum) << i << ", " << j;
      }
    for (size_t i = 0; i < got.z.size(); ++i)
      EXPECT_EQ(got.z[i], -inputs.x[i]) << i;
    EXPECT_NE(got.y, previousY);
    previousY = got.y;
  }
}

/// execute() runs without assembling, as partita-run's timed loop does, and
/// gatherOutputs() then gives what run() gives, also after a run() that
/// wrote a replicated output into other memory.
TEST_F(RunnerTest, ExecuteThenGatherMatchesRun) {
  std::unique_ptr<Runner> runner;
  ASSERT_OK(Runner::create(*sharded, patient(), runner));
  EXPECT_TRUE(runner->holdsOutputs());
  Inputs first(3), second(-5);
  Outputs byRun, byGather, earlier;
  ASSERT_OK(runner->run(first.named(), earlier.named()));
  ASSERT_OK(runner->run(second.named(), byRun.named()));
  ASSERT_OK(runner->execute(first.named()));
  ASSERT_OK(runner->execute(second.named()));
  ASSERT_OK(runner->gatherOutputs(byGather.named()));
  EXPECT_EQ(byGather.y, byRun.y);
  EXPECT_EQ(byGather.z, byRun.z);
  EXPECT_NE(earlier.y, byRun.y);

  Inputs wrong(1);
  std::vector<NamedTensor> unknown = wrong.named();
  unknown[0].name = "q";
  EXPECT_ERROR_CONTAINS(runner->execute(unknown), "the model has no input 'q'");
  Outputs noZ;
  std::vector<NamedTensor> missing = {noZ.named()[0]};
  EXPECT_ERROR_CONTAINS(runner->gatherOutputs(missing), "missing output 'z'");
}

/// Joining a multi-process run takes a cuda artifact whose world the
/// environment matches.
TEST_F(RunnerTest, JoinRefusesMismatches) {
  RankEnvironment environment;
  environment.rank = 0;
  environment.worldSize = 2;
  environment.masterAddress = "127.0.0.1";
  environment.source = "torchrun";
  std::unique_ptr<Runner> runner;
  EXPECT_ERROR_CONTAINS(Runner::join(*sharded, patient(), environment, runner),
                        "a multi-process run needs a cuda artifact; " +
                            sharded->path() +
                            " was compiled for --target host");

  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(openCudaModel(artifact));
  RunnerOptions single = patient();
  single.singleGpu = true;
  EXPECT_ERROR_CONTAINS(
      Runner::join(*artifact, single, environment, runner),
      "singleGpu runs every rank in this process, but the environment "
      "(torchrun) makes it rank 0 of 2");
  environment.worldSize = 4;
  EXPECT_ERROR_CONTAINS(Runner::join(*artifact, patient(), environment, runner),
                        "the environment (torchrun) runs 4 ranks, but " +
                            artifact->path() + " has 2");
  EXPECT_FALSE(runner);
}

/// The caller's tensors are checked by name, dtype and global shape, with
/// messages naming what was expected; a refused run aborts nothing.
TEST_F(RunnerTest, RefusesWrongTensors) {
  std::unique_ptr<Runner> runner;
  ASSERT_OK(Runner::create(*sharded, patient(), runner));
  Inputs inputs(2);
  Outputs outputs;
  std::vector<int32_t> ints(size_t(kRows * kColumns));
  std::vector<float> small(size_t(kRows * 3));

  std::vector<NamedTensor> unknown = inputs.named();
  unknown[0].name = "ids";
  EXPECT_ERROR_CONTAINS(runner->run(unknown, outputs.named()),
                        "the model has no input 'ids'; its inputs are: x (f32 "
                        "[4, 6]), s (f32 [2])");

  std::vector<NamedTensor> dtype = inputs.named();
  dtype[0].tensor = Tensor{ints.data(), program::I32, {kRows, kColumns}};
  EXPECT_ERROR_CONTAINS(runner->run(dtype, outputs.named()),
                        "input 'x': expected f32 [4, 6], got i32 [4, 6]");

  // The shape of a rank's shard is not the global shape.
  std::vector<NamedTensor> shape = inputs.named();
  shape[0].tensor = view(small, {kRows, 3});
  EXPECT_ERROR_CONTAINS(runner->run(shape, outputs.named()),
                        "input 'x': expected f32 [4, 6], got f32 [4, 3]");

  std::vector<NamedTensor> missing = inputs.named();
  missing.pop_back();
  EXPECT_ERROR_CONTAINS(runner->run(missing, outputs.named()),
                        "missing input 's' (f32 [2])");

  std::vector<NamedTensor> twice = inputs.named();
  twice.push_back(twice[0]);
  EXPECT_ERROR_CONTAINS(runner->run(twice, outputs.named()),
                        "input 'x' is given twice");

  std::vector<NamedTensor> noZ = outputs.named();
  noZ.pop_back();
  EXPECT_ERROR_CONTAINS(runner->run(inputs.named(), noZ),
                        "missing output 'z' (f32 [4, 6])");

  std::vector<NamedTensor> unknownOutput = outputs.named();
  unknownOutput[1].name = "logits";
  EXPECT_ERROR_CONTAINS(runner->run(inputs.named(), unknownOutput),
                        "the model has no output 'logits'; its outputs are: y "
                        "(f32 [4, 2]), z (f32 [4, 6])");

  std::vector<NamedTensor> outputShape = outputs.named();
  outputShape[1].tensor = view(small, {kRows, 3});
  EXPECT_ERROR_CONTAINS(runner->run(inputs.named(), outputShape),
                        "output 'z': expected f32 [4, 6], got f32 [4, 3]");

  // Nothing was aborted: the runner still runs.
  ASSERT_OK(runner->run(inputs.named(), outputs.named()));
  EXPECT_EQ(outputs.z[0], -2);
}

TEST_F(RunnerTest, RefusesPartialSums) {
  Options options;
  options.tp = 2;
  options.partialOutput = true;
  ASSERT_OK(writeModel(directory.path("partial"), options));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(directory.path("partial"), artifact));
  std::unique_ptr<Runner> runner;
  EXPECT_ERROR_CONTAINS(
      Runner::create(*artifact, patient(), runner),
      "output 'y' holds partial sums (sharding dims [[], []], partial [tp]): "
      "the program should have reduced them (a compiler bug)");
  EXPECT_FALSE(runner);
}

TEST_F(RunnerTest, RefusesBadOptions) {
  std::unique_ptr<Runner> runner;
  RunnerOptions options = patient();
  options.singleGpu = true;
  EXPECT_ERROR_CONTAINS(Runner::create(*sharded, options, runner),
                        "singleGpu runs cuda artifacts");
  options = patient();
  options.timeoutSeconds = 0;
  EXPECT_ERROR_CONTAINS(Runner::create(*sharded, options, runner),
                        "the timeout must be a positive number of seconds");
}

/// A multi-rank cuda artifact runs one process per GPU, which a runner in
/// one process cannot do; with singleGpu it tries GPU 0.
TEST_F(RunnerTest, MultiRankCudaNeedsSingleGpu) {
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(openCudaModel(artifact));
  std::unique_ptr<Runner> runner;
  EXPECT_ERROR_CONTAINS(Runner::create(*artifact, patient(), runner),
                        "with 2 ranks, one process per GPU: run it with "
                        "partita-run, or run every rank on GPU 0 with "
                        "singleGpu");

  RunnerOptions single = patient();
  single.singleGpu = true;
  int32_t gpus = 0;
  Status created = Runner::create(*artifact, single, runner);
  // The fatbins are not real ones, so this fails either way: for want of a
  // GPU, or loading the module.
  EXPECT_FALSE(created.isOk());
  if (!CudaDevice::available() || !CudaDevice::deviceCount(gpus)) {
    EXPECT_NE(created.message().find("was compiled for --target cuda"),
              std::string::npos)
        << created.message();
  }
}

} // namespace
