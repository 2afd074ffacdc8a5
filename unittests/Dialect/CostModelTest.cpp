//===- CostModelTest.cpp - the roofline and alpha-beta models -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Analysis/CostModel.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "partita/Analysis/Cluster.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::partita;

namespace {

TEST(CostModelTest, MatmulAndAttention) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(R"mlir(
    func.func @f(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>,
                 %q: tensor<1x4x8x16xf32>) {
      %y = nn.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
      %a = nn.attention %q, %q, %q {causal} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
      %g:3 = nn.attention_grad %q, %q, %q out %a dout %a : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>)
      return
    })mlir",
                                                             &context);
  ASSERT_TRUE(module);
  SmallVector<Operation *> ops;
  module->walk([&](Operation *op) {
    if (isa<nn::MatmulOp, nn::AttentionOp, nn::AttentionGradOp>(op))
      ops.push_back(op);
  });
  ASSERT_EQ(ops.size(), 3u);
  OpCost matmul = estimateCost(ops[0]);
  EXPECT_EQ(matmul.flops, 2.0 * 2 * 8 * 32 * 16);
  EXPECT_EQ(matmul.bytes, 4.0 * (2 * 8 * 16 + 16 * 32 + 2 * 8 * 32));
  // Q K^T and P V (2d + 2dv per score) and a softmax (5), halved by causal.
  OpCost attention = estimateCost(ops[1]);
  EXPECT_EQ(attention.flops, 4.0 * 8 * 8 * (2 * 16 + 2 * 16 + 5) / 2);
  // Its backward: Q K^T twice, dout V^T, dS K, dS^T Q, P^T dout (8d + 4dv
  // per score) and 10 more, not causal.
  OpCost backward = estimateCost(ops[2]);
  EXPECT_EQ(backward.flops, 4.0 * 8 * 8 * (8 * 16 + 4 * 16 + 10));
  DeviceModel device{1e12, 1e9};
  EXPECT_DOUBLE_EQ(estimateSeconds(matmul, device), matmul.bytes / 1e9);
  EXPECT_EQ(
      tensorBytes(RankedTensorType::get({3, 5}, IntegerType::get(&context, 1))),
      15);
}

TEST(ClusterTest, AlphaBetaPerLink) {
  ClusterModel cluster;
  // tp stays in a node: 2(n-1) steps of 5 us plus bytes at 300 GB/s.
  EXPECT_DOUBLE_EQ(cluster.collectiveSeconds("all_reduce", 4, 3000000, {"tp"}),
                   6 * 5e-6 + 3e6 / 300e9);
  // dp crosses nodes; a group spanning both runs at the slower link.
  EXPECT_DOUBLE_EQ(cluster.collectiveSeconds("all_gather", 8, 25000, {"dp"}),
                   7 * 20e-6 + 25000 / 25e9);
  EXPECT_DOUBLE_EQ(
      cluster.collectiveSeconds("all_gather", 8, 25000, {"tp", "dp"}),
      7 * 20e-6 + 25000 / 25e9);
  EXPECT_EQ(cluster.collectiveSeconds("all_reduce", 1, 1000, {"tp"}), 0);
}

TEST(ClusterTest, LinkClassFollowsTheAxisRole) {
  MLIRContext context;
  context.loadDialect<dist::DistDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
      "dist.mesh @mesh [model = 4 : tp, data = 2 : dp]", &context);
  ASSERT_TRUE(module);
  auto mesh = *module->getOps<dist::MeshOp>().begin();
  llvm::Expected<ClusterModel> cluster = ClusterModel::fromJson(
      R"json({"axes": {"model": {"latency_us": 1}}})json");
  ASSERT_TRUE(static_cast<bool>(cluster))
      << llvm::toString(cluster.takeError());
  // `model` has the tp role: NVLink's bandwidth, the file's latency.
  EXPECT_DOUBLE_EQ(
      cluster->collectiveSeconds("all_gather", 4, 3000, {"model"}, mesh),
      3 * 1e-6 + 3000 / 300e9);
  // Without the mesh the name implies no role, so the link crosses nodes.
  EXPECT_DOUBLE_EQ(cluster->collectiveSeconds("all_gather", 4, 3000, {"model"}),
                   3 * 1e-6 + 3000 / 25e9);
  EXPECT_DOUBLE_EQ(
      cluster->collectiveSeconds("all_gather", 2, 3000, {"data"}, mesh),
      20e-6 + 3000 / 25e9);
}

TEST(ClusterTest, FromJson) {
  llvm::Expected<ClusterModel> model = ClusterModel::fromJson(R"json({
      "device": {"flops_per_second": 1e15},
      "intra_node": {"latency_us": 1, "bandwidth_gb_per_s": 900},
      "axes": {"dp": {"latency_us": 2, "bandwidth_gb_per_s": 100}}})json");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->device.flopsPerSecond, 1e15);
  EXPECT_DOUBLE_EQ(model->collectiveSeconds("all_gather", 2, 900, {"tp"}),
                   1e-6 + 900 / 900e9);
  EXPECT_DOUBLE_EQ(model->collectiveSeconds("all_gather", 2, 100, {"dp"}),
                   2e-6 + 100 / 100e9);

  llvm::Expected<ClusterModel> bad = ClusterModel::fromJson(
      R"json({"inter_node": {"bandwidth_gb_per_s": -1}})json");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "inter_node: bandwidth_gb_per_s must be positive");
  llvm::Expected<ClusterModel> notObject = ClusterModel::fromJson("[1]");
  ASSERT_FALSE(static_cast<bool>(notObject));
  EXPECT_EQ(llvm::toString(notObject.takeError()),
            "the cluster file is not a JSON object");
}

/// The error text of an Expected that must have failed.
template <typename T> std::string errorOf(llvm::Expected<T> value) {
  if (value)
    return "(no error)";
  return llvm::toString(value.takeError());
}

TEST(ClusterTest, Presets) {
  llvm::Expected<ClusterModel> h100 = ClusterModel::fromPreset("h100-80g");
  ASSERT_TRUE(static_cast<bool>(h100)) << llvm::toString(h100.takeError());
  EXPECT_EQ(h100->name, "h100-80g");
  EXPECT_EQ(h100->device.flopsPerSecond, 989e12);
  EXPECT_EQ(h100->device.bytesPerSecond, 3.35e12);
  EXPECT_EQ(h100->deviceMemoryBytes, 80e9);
  EXPECT_EQ(h100->intraNode.bytesPerSecond, 450e9);
  EXPECT_EQ(h100->interNode.bytesPerSecond, 50e9);
  EXPECT_EQ(h100->devices(), 8);

  llvm::Expected<ClusterModel> a100 = ClusterModel::fromPreset("a100-80g:4x2");
  ASSERT_TRUE(static_cast<bool>(a100)) << llvm::toString(a100.takeError());
  EXPECT_EQ(a100->name, "a100-80g:4x2");
  EXPECT_EQ(a100->device.flopsPerSecond, 312e12);
  EXPECT_EQ(a100->device.bytesPerSecond, 2.039e12);
  EXPECT_EQ(a100->intraNode.bytesPerSecond, 300e9);
  EXPECT_EQ(a100->nodes, 4);
  EXPECT_EQ(a100->devicesPerNode, 2);

  llvm::Expected<ClusterModel> h200 = ClusterModel::fromPreset("h200-141g:2x8");
  ASSERT_TRUE(static_cast<bool>(h200)) << llvm::toString(h200.takeError());
  EXPECT_EQ(h200->device.bytesPerSecond, 4.8e12);
  EXPECT_EQ(h200->deviceMemoryBytes, 141e9);
  EXPECT_EQ(h200->devices(), 16);

  // `default` is the model used without --cluster.
  llvm::Expected<ClusterModel> standard = ClusterModel::fromPreset("default");
  ASSERT_TRUE(static_cast<bool>(standard));
  ClusterModel none;
  EXPECT_EQ(none.name, "default");
  EXPECT_EQ(standard->device.flopsPerSecond, none.device.flopsPerSecond);
  EXPECT_EQ(standard->interNode.bytesPerSecond, none.interNode.bytesPerSecond);
  EXPECT_EQ(ClusterModel::presetNames().size(), 4u);

  EXPECT_EQ(errorOf(ClusterModel::fromPreset("h100")),
            "unknown cluster preset 'h100' (known: a100-80g, h100-80g, "
            "h200-141g, default; or give a JSON file)");
  for (const char *bad : {"h100-80g:2y8", "h100-80g:0x8", "h100-80g:2x",
                          "h100-80g:", "h100-80g:-1x8", "h100-80g:9999999x8"})
    EXPECT_EQ(errorOf(ClusterModel::fromPreset(bad)),
              std::string("cluster preset '") + bad +
                  "': the suffix must be NODESxGPUS with positive counts, "
                  "e.g. h100-80g:2x8")
        << bad;
}

TEST(ClusterTest, FromJsonOverridesAPreset) {
  llvm::Expected<ClusterModel> model = ClusterModel::fromJson(R"json({
      "preset": "h200-141g:2x8", "nodes": 4,
      "device": {"memory_bytes": 1e11}})json");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->name, "h200-141g:2x8");
  EXPECT_EQ(model->nodes, 4);
  EXPECT_EQ(model->devicesPerNode, 8);
  EXPECT_EQ(model->deviceMemoryBytes, 1e11);
  EXPECT_EQ(model->device.bytesPerSecond, 4.8e12);

  llvm::Expected<ClusterModel> named = ClusterModel::fromJson(
      R"json({"name": "lab", "devices_per_node": 4})json");
  ASSERT_TRUE(static_cast<bool>(named));
  EXPECT_EQ(named->name, "lab");
  EXPECT_EQ(named->devicesPerNode, 4);
  llvm::Expected<ClusterModel> unnamed = ClusterModel::fromJson("{}");
  ASSERT_TRUE(static_cast<bool>(unnamed));
  EXPECT_EQ(unnamed->name, "custom");

  EXPECT_EQ(errorOf(ClusterModel::fromJson(R"json({"preset": 3})json")),
            "'preset' must be a string such as \"h100-80g:2x8\"");
  EXPECT_EQ(errorOf(ClusterModel::fromJson(R"json({"preset": "tpu"})json")),
            "unknown cluster preset 'tpu' (known: a100-80g, h100-80g, "
            "h200-141g, default; or give a JSON file)");
  EXPECT_EQ(errorOf(ClusterModel::fromJson(R"json({"nodes": 0})json")),
            "'nodes' must be a positive integer");
  EXPECT_EQ(errorOf(ClusterModel::fromJson(R"json({"name": 1})json")),
            "'name' must be a string");
  EXPECT_EQ(errorOf(ClusterModel::fromJson(
                R"json({"device": {"memory_bytes": 0}})json")),
            "device: memory_bytes must be positive");
}

} // namespace
