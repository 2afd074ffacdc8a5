//===- TensorShardsTest.cpp - splitting and assembling tensors ------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/TensorShards.h"

#include "partita/runtime/ArtifactWriter.h"
#include "partita/runtime/Executor.h"
#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/HostKernels.h"
#include "partita/runtime/LoadedArtifact.h"

#include "TestUtil.h"

#include <chrono>
#include <functional>
#include <numeric>

using namespace partita::runtime;
namespace program = partita::program;
using test::TemporaryDirectory;

namespace {

/// A manifest of the mesh `axes` whose ranks linearise their coordinates
/// with the first axis major, as the compiler numbers them.
Manifest meshManifest(const std::vector<MeshAxis> &axes) {
  Manifest manifest;
  manifest.meshAxes = axes;
  manifest.worldSize = 1;
  for (const MeshAxis &axis : axes)
    manifest.worldSize *= int32_t(axis.size);
  for (int32_t rank = 0; rank < manifest.worldSize; ++rank) {
    RankEntry entry;
    entry.rank = rank;
    int64_t rest = rank;
    entry.coords.resize(axes.size());
    for (size_t a = axes.size(); a-- > 0;) {
      entry.coords[a] = {axes[a].name, rest % axes[a].size};
      rest /= axes[a].size;
    }
    manifest.ranks.push_back(entry);
  }
  return manifest;
}

TensorSharding sharded(std::vector<std::vector<std::string>> dims,
                       std::vector<std::string> partial = {}) {
  TensorSharding sharding;
  sharding.dims = std::move(dims);
  sharding.partial = std::move(partial);
  return sharding;
}

template <typename T> std::vector<T> iota(int64_t count, T first = T(0)) {
  std::vector<T> values(static_cast<size_t>(count));
  std::iota(values.begin(), values.end(), first);
  return values;
}

int64_t product(const std::vector<int64_t> &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

template <typename T>
Tensor view(std::vector<T> &values, DType dtype, std::vector<int64_t> shape) {
  return Tensor{values.data(), dtype, std::move(shape)};
}

template <typename T> std::vector<T> contents(const HostTensor &tensor) {
  const T *data = static_cast<const T *>(tensor.data());
  return std::vector<T>(data, data + tensor.tensor().numElements());
}

/// `rank`'s shard of the f32 tensor 0, 1, 2, ... of `shape`.
std::vector<float> shardOf(const Manifest &manifest,
                           const TensorSharding &sharding,
                           std::vector<int64_t> shape, int32_t rank) {
  std::vector<float> values = iota<float>(product(shape));
  HostTensor local;
  Status status = extractShard(view(values, program::F32, shape), sharding,
                               manifest, rank, local);
  EXPECT_TRUE(status.isOk()) << status.message();
  return status.isOk() ? contents<float>(local) : std::vector<float>{};
}

/// Extracts every rank's shard of a `dtype` tensor of `shape` (bytes 1, 2,
/// 3, ...), checks its shape against localShape, inserts every shard into a
/// zeroed tensor and expects the original back.
void expectRoundTrip(const Manifest &manifest, const TensorSharding &sharding,
                     const std::vector<int64_t> &shape,
                     const std::vector<int64_t> &expectedLocalShape,
                     DType dtype = program::F32) {
  SCOPED_TRACE("sharding " + shardingString(sharding) + " of " +
               shapeString(shape));
  size_t bytes = size_t(product(shape)) * dtypeSize(dtype);
  std::vector<uint8_t> original(bytes), assembled(bytes, 0);
  for (size_t i = 0; i < bytes; ++i)
    original[i] = uint8_t(i % 251 + 1);
  Tensor global = view(original, dtype, shape);
  Tensor target = view(assembled, dtype, shape);
  TensorSpec spec{"t", dtype, shape, sharding};
  for (int32_t rank = 0; rank < manifest.worldSize; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::vector<int64_t> local;
    ASSERT_OK(localShape(spec, manifest, rank, local));
    EXPECT_EQ(local, expectedLocalShape);
    HostTensor shard;
    ASSERT_OK(extractShard(global, sharding, manifest, rank, shard));
    EXPECT_EQ(shard.dtype(), dtype);
    EXPECT_EQ(shard.shape(), expectedLocalShape);
    ASSERT_OK(insertShard(shard.tensor(), sharding, manifest, rank, target));
  }
  EXPECT_EQ(assembled, original);
}

/// Two axes on one dimension: the rank at (i, j) on (a, b) holds block
/// i * size(b) + j, whatever the mesh order of a and b.
TEST(TensorShards, TwoAxesOnOneDimensionMajorFirst) {
  Manifest mesh = meshManifest({{"dp", 2}, {"tp", 2}});
  // Ranks: 0 = (dp 0, tp 0), 1 = (0, 1), 2 = (1, 0), 3 = (1, 1).
  TensorSharding dpTp = sharded({{"dp", "tp"}});
  EXPECT_EQ(shardOf(mesh, dpTp, {8}, 0), (std::vector<float>{0, 1}));
  EXPECT_EQ(shardOf(mesh, dpTp, {8}, 1), (std::vector<float>{2, 3}));
  EXPECT_EQ(shardOf(mesh, dpTp, {8}, 2), (std::vector<float>{4, 5}));
  EXPECT_EQ(shardOf(mesh, dpTp, {8}, 3), (std::vector<float>{6, 7}));
  TensorSharding tpDp = sharded({{"tp", "dp"}});
  EXPECT_EQ(shardOf(mesh, tpDp, {8}, 0), (std::vector<float>{0, 1}));
  EXPECT_EQ(shardOf(mesh, tpDp, {8}, 1), (std::vector<float>{4, 5}));
  EXPECT_EQ(shardOf(mesh, tpDp, {8}, 2), (std::vector<float>{2, 3}));
  EXPECT_EQ(shardOf(mesh, tpDp, {8}, 3), (std::vector<float>{6, 7}));

  // Three axes, the middle one of the mesh first: (tp, dp, sp).
  Manifest cube = meshManifest({{"dp", 2}, {"tp", 2}, {"sp", 2}});
  TensorSharding three = sharded({{}, {"tp", "dp", "sp"}});
  // Rank 3 is (dp 0, tp 1, sp 1): block 1*4 + 0*2 + 1 = 5 of each row.
  EXPECT_EQ(shardOf(cube, three, {2, 8}, 3), (std::vector<float>{5, 13}));
  // Rank 6 is (dp 1, tp 1, sp 0): block 1*4 + 1*2 + 0 = 6.
  EXPECT_EQ(shardOf(cube, three, {2, 8}, 6), (std::vector<float>{6, 14}));
}

TEST(TensorShards, OneDimensionAndTwoDimensions) {
  Manifest mesh = meshManifest({{"dp", 2}, {"tp", 2}});
  // [[0 1 2 3] [4 5 6 7]]: rows over dp, columns over tp.
  TensorSharding both = sharded({{"dp"}, {"tp"}});
  EXPECT_EQ(shardOf(mesh, both, {2, 4}, 0), (std::vector<float>{0, 1}));
  EXPECT_EQ(shardOf(mesh, both, {2, 4}, 1), (std::vector<float>{2, 3}));
  EXPECT_EQ(shardOf(mesh, both, {2, 4}, 2), (std::vector<float>{4, 5}));
  EXPECT_EQ(shardOf(mesh, both, {2, 4}, 3), (std::vector<float>{6, 7}));
  // Columns only: strided rows; dp replicates.
  TensorSharding columns = sharded({{}, {"tp"}});
  EXPECT_EQ(shardOf(mesh, columns, {2, 4}, 1),
            (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(shardOf(mesh, columns, {2, 4}, 3),
            (std::vector<float>{2, 3, 6, 7}));
  // A middle dimension: runs of whole innermost rows.
  Manifest tp = meshManifest({{"tp", 2}});
  EXPECT_EQ(shardOf(tp, sharded({{}, {"tp"}, {}}), {2, 4, 3}, 1),
            (std::vector<float>{6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23}));
}

TEST(TensorShards, RoundTrips) {
  Manifest dpTp = meshManifest({{"dp", 2}, {"tp", 2}});
  expectRoundTrip(dpTp, sharded({{"dp"}, {}}), {4, 6}, {2, 6});
  expectRoundTrip(dpTp, sharded({{}, {"tp"}}), {4, 6}, {4, 3});
  expectRoundTrip(dpTp, sharded({{"dp"}, {"tp"}}), {4, 6}, {2, 3});
  expectRoundTrip(dpTp, sharded({{"tp"}, {"dp"}}), {4, 6}, {2, 3});
  expectRoundTrip(dpTp, sharded({{"dp", "tp"}, {}}), {8, 3}, {2, 3});
  expectRoundTrip(dpTp, sharded({{}, {"tp", "dp"}}), {3, 8}, {3, 2});

  Manifest tp4 = meshManifest({{"tp", 4}});
  expectRoundTrip(tp4, sharded({{"tp"}}), {8}, {2});
  expectRoundTrip(tp4, sharded({{}, {}, {"tp"}}), {2, 3, 8}, {2, 3, 2});
  expectRoundTrip(tp4, sharded({{}, {"tp"}, {}}), {2, 8, 5}, {2, 2, 5});

  Manifest cube = meshManifest({{"dp", 2}, {"tp", 2}, {"sp", 2}});
  expectRoundTrip(cube, sharded({{"dp"}, {"sp"}, {"tp"}}), {4, 6, 4},
                  {2, 3, 2});
  expectRoundTrip(cube, sharded({{"dp", "sp"}, {}, {"tp"}}), {4, 6, 4},
                  {1, 6, 2});
  expectRoundTrip(cube, sharded({{}, {"sp", "tp", "dp"}}), {3, 16}, {3, 2});
  expectRoundTrip(cube, sharded({{"tp"}, {}}), {4, 5}, {2, 5});
  // Eight dimensions, split in three places.
  expectRoundTrip(cube, sharded({{"dp"}, {}, {"tp"}, {}, {}, {}, {"sp"}, {}}),
                  {2, 3, 4, 1, 2, 1, 6, 3}, {1, 3, 2, 1, 2, 1, 3, 3});
}

TEST(TensorShards, EveryDtype) {
  Manifest mesh = meshManifest({{"dp", 2}, {"tp", 2}});
  TensorSharding sharding = sharded({{"dp"}, {"tp"}});
  for (DType dtype : {program::F32, program::F16, program::BF16, program::I64,
                      program::I32, program::I8, program::BOOL})
    expectRoundTrip(mesh, sharding, {4, 6}, {2, 3}, dtype);
}

TEST(TensorShards, ReplicatedIsAWholeCopy) {
  Manifest mesh = meshManifest({{"dp", 2}, {"tp", 2}});
  // No dims at all and dims that split nothing mean the same.
  expectRoundTrip(mesh, TensorSharding{}, {3, 5}, {3, 5});
  expectRoundTrip(mesh, sharded({{}, {}}), {3, 5}, {3, 5});
  EXPECT_EQ(shardOf(mesh, TensorSharding{}, {2, 2}, 3),
            (std::vector<float>{0, 1, 2, 3}));
  // A scalar, and a tensor with no elements.
  expectRoundTrip(mesh, TensorSharding{}, {}, {});
  expectRoundTrip(mesh, sharded({{"dp"}, {}}), {4, 0}, {2, 0});
}

TEST(TensorShards, ShardIndex) {
  Manifest mesh = meshManifest({{"dp", 2}, {"tp", 2}});
  int64_t index = -1, count = -1;
  // Split over dp only: tp replicates, so ranks 0 and 1 hold shard 0.
  std::vector<int64_t> expected = {0, 0, 1, 1};
  for (int32_t rank = 0; rank < 4; ++rank) {
    ASSERT_OK(shardIndex(sharded({{"dp"}, {}}), mesh, rank, index, count));
    EXPECT_EQ(index, expected[size_t(rank)]);
    EXPECT_EQ(count, 2);
  }
  ASSERT_OK(shardIndex(sharded({{"tp"}, {"dp"}}), mesh, 1, index, count));
  EXPECT_EQ(index, 2);
  EXPECT_EQ(count, 4);
  ASSERT_OK(shardIndex(TensorSharding{}, mesh, 3, index, count));
  EXPECT_EQ(index, 0);
  EXPECT_EQ(count, 1);
}

TEST(TensorShards, Errors) {
  Manifest mesh = meshManifest({{"dp", 2}, {"tp", 2}});
  std::vector<float> values = iota<float>(6);
  Tensor global = view(values, program::F32, {6});
  HostTensor local;
  std::vector<int64_t> shape;

  EXPECT_ERROR_CONTAINS(
      extractShard(global, sharded({{"dp", "tp"}}), mesh, 0, local),
      "sharding dims [[dp, tp]], partial [] cannot split dimension 0 of [6] "
      "over dp, tp: 6 is not divisible by 4");
  EXPECT_ERROR_CONTAINS(
      localShape({"x", program::F32, {6}, sharded({{"dp", "tp"}})}, mesh, 0,
                 shape),
      "6 is not divisible by 4");
  EXPECT_ERROR_CONTAINS(
      extractShard(global, sharded({{"pp"}}), mesh, 0, local),
      "names 'pp', which is not a mesh axis (the mesh has: dp, tp)");
  EXPECT_ERROR_CONTAINS(
      localShape({"x", program::F32, {6}, sharded({{}}, {"pp"})}, mesh, 0,
                 shape),
      "names 'pp', which is not a mesh axis");
  EXPECT_ERROR_CONTAINS(
      extractShard(global, sharded({{"dp", "dp"}}), mesh, 0, local),
      "uses mesh axis 'dp' twice");
  EXPECT_ERROR_CONTAINS(
      extractShard(global, sharded({{"dp"}, {}}), mesh, 0, local),
      "names 2 dimensions, the tensor has 1");
  EXPECT_ERROR_CONTAINS(extractShard(global, TensorSharding{}, mesh, 4, local),
                        "rank 4 is outside the mesh of 4 ranks");
  EXPECT_ERROR_CONTAINS(extractShard(global, TensorSharding{}, mesh, -1, local),
                        "rank -1 is outside the mesh of 4 ranks");

  // Partial sums: the shape is known, but no block holds them.
  TensorSharding partial = sharded({{"dp"}}, {"tp"});
  EXPECT_OK(localShape({"x", program::F32, {6}, partial}, mesh, 0, shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{3}));
  EXPECT_ERROR_CONTAINS(extractShard(global, partial, mesh, 0, local),
                        "sharding dims [[dp]], partial [tp] holds partial "
                        "sums over tp");
  std::vector<float> shardValues(3);
  EXPECT_ERROR_CONTAINS(insertShard(view(shardValues, program::F32, {3}),
                                    partial, mesh, 0, global),
                        "holds partial sums over tp");

  // insertShard wants exactly the shard's dtype and shape.
  std::vector<float> wide(6);
  EXPECT_ERROR_CONTAINS(insertShard(view(wide, program::F32, {6}),
                                    sharded({{"dp"}}), mesh, 2, global),
                        "rank 2's shard of f32 [6] under sharding dims [[dp]], "
                        "partial [] is f32 [3], not f32 [6]");
  std::vector<int32_t> integers(3);
  EXPECT_ERROR_CONTAINS(insertShard(view(integers, program::I32, {3}),
                                    sharded({{"dp"}}), mesh, 2, global),
                        "is f32 [3], not i32 [3]");

  // A hand-built manifest whose rank lacks a coordinate.
  Manifest broken = mesh;
  broken.ranks[1].coords.pop_back();
  EXPECT_ERROR_CONTAINS(
      extractShard(global, sharded({{"tp"}}), broken, 1, local),
      "rank 1 has no coordinate on mesh axis 'tp'");
}

/// A dp=2 artifact whose input and output are split on dimension 0: each
/// rank copies its half, and assembling the outputs gives the input back.
TEST(TensorShards, ShardedArtifactRunsPerRank) {
  const std::vector<int64_t> globalShape = {4, 3}, shardShape = {2, 3};
  ArtifactWriter writer;
  Manifest &manifest = writer.manifest();
  manifest = meshManifest({{"dp", 2}});
  manifest.modelName = "copy";
  TensorSharding batch = sharded({{"dp"}, {}});
  manifest.inputs = {{"x", program::F32, globalShape, batch}};
  manifest.outputs = {{"y", program::F32, globalShape, batch}};
  for (int32_t rank = 0; rank < 2; ++rank) {
    program::Program p;
    p.set_format_version(kProgramFormatVersion);
    p.set_rank(rank);
    p.set_world_size(2);
    for (program::Buffer::Kind kind :
         {program::Buffer::INPUT, program::Buffer::OUTPUT}) {
      program::Buffer *buffer = p.add_buffers();
      buffer->set_id(p.buffers_size() - 1);
      buffer->set_kind(kind);
      buffer->mutable_type()->set_dtype(program::F32);
      for (int64_t dim : shardShape)
        buffer->mutable_type()->add_shape(dim);
      program::Binding *binding =
          kind == program::Buffer::INPUT ? p.add_inputs() : p.add_outputs();
      binding->set_name(kind == program::Buffer::INPUT ? "x" : "y");
      binding->set_buffer(buffer->id());
    }
    program::Kernel *copy = p.add_instructions()->mutable_kernel();
    copy->set_op("copy");
    copy->add_operands(0);
    copy->add_results(1);
    ASSERT_OK(writer.addProgram(rank, p));
  }
  TemporaryDirectory directory;
  ASSERT_OK(writer.commit(directory.path("art")));

  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(directory.path("art"), artifact));
  const Manifest &loaded = artifact->manifest();
  std::vector<float> input = iota<float>(12, 1.0f), output(12, 0.0f);
  Tensor globalInput = view(input, program::F32, globalShape);
  Tensor globalOutput = view(output, program::F32, globalShape);
  HostWorld world(2, std::chrono::seconds(60));
  ThreadPool pool(1);
  for (int32_t rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::unique_ptr<Executor> executor;
    ASSERT_OK(Executor::create(artifact->program(rank), artifact->weights(),
                               world.communicator(rank), pool, executor));
    HostTensor x, y;
    ASSERT_OK(
        extractShard(globalInput, loaded.inputs[0].sharding, loaded, rank, x));
    std::vector<int64_t> shape;
    ASSERT_OK(localShape(loaded.outputs[0], loaded, rank, shape));
    EXPECT_EQ(shape, shardShape);
    ASSERT_OK(y.allocate(program::F32, shape));
    ASSERT_OK(executor->run({{"x", x.tensor()}}, {{"y", y.tensor()}}));
    EXPECT_EQ(contents<float>(y), iota<float>(6, 1.0f + 6.0f * float(rank)));
    ASSERT_OK(insertShard(y.tensor(), loaded.outputs[0].sharding, loaded, rank,
                          globalOutput));
  }
  EXPECT_EQ(output, input);
}

} // namespace
