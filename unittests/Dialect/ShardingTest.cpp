//===- ShardingTest.cpp - the sharding passes' factor arithmetic ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// How a dimension's axes map onto its factors and back, and the --mesh
// syntax, on hand-worked cases.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Options/Options.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

class ShardingTest : public ::testing::Test {
protected:
  ShardingTest() {
    context.loadDialect<DistDialect>();
    module = parseSourceString<ModuleOp>(
        "dist.mesh @mesh [dp = 2, tp = 4, sp = 8]", &context);
    mesh = *module->getOps<MeshOp>().begin();
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  MeshOp mesh;
};

/// A rule with one operand whose only dimension has factors of `sizes`.
ShardingRule oneDim(ArrayRef<int64_t> sizes) {
  ShardingRule rule({1}, {});
  for (int64_t size : sizes)
    rule.append(ShardingRule::operand(0), 0,
                rule.addFactor(size, FactorKind::Parallel));
  return rule;
}

std::vector<std::vector<std::string>> strings(ArrayRef<AxisList> lists) {
  std::vector<std::vector<std::string>> out;
  for (const AxisList &list : lists)
    out.emplace_back(list.begin(), list.end());
  return out;
}

TEST_F(ShardingTest, ProjectFillsMajorFactorFirst) {
  // [heads = 16, head_dim = 64] split by tp=4: the heads take it.
  ShardingRule rule = oneDim({16, 64});
  DimFactors dim = rule.getOperands()[0][0];
  EXPECT_EQ(strings(projectDim(rule, dim, {"tp"}, mesh)),
            (std::vector<std::vector<std::string>>{{"tp"}, {}}));
  // tp (4) then sp (8): heads 16 = 4 * 4, so sp does not fit in what is
  // left of the heads (4) and the projection stops.
  EXPECT_EQ(strings(projectDim(rule, dim, {"tp", "sp"}, mesh)),
            (std::vector<std::vector<std::string>>{{"tp"}, {}}));
}

TEST_F(ShardingTest, ProjectPassesOnAFactorSplitWhole) {
  // [heads = 4, head_dim = 64]: tp (4) splits the heads whole, so sp goes
  // to the head dimension.
  ShardingRule rule = oneDim({4, 64});
  DimFactors dim = rule.getOperands()[0][0];
  SmallVector<AxisList> split = projectDim(rule, dim, {"tp", "sp"}, mesh);
  EXPECT_EQ(strings(split),
            (std::vector<std::vector<std::string>>{{"tp"}, {"sp"}}));
  FactorAxes assignment(split.begin(), split.end());
  EXPECT_EQ(strings({getDimAxes(rule, dim, assignment, mesh)}),
            (std::vector<std::vector<std::string>>{{"tp", "sp"}}));
}

TEST_F(ShardingTest, MinorFactorOnlyBehindAWholeMajor) {
  // A split of the minor factor alone is not a contiguous block of the
  // dimension: the dimension's axes stop at the major factor.
  ShardingRule rule = oneDim({16, 64});
  DimFactors dim = rule.getOperands()[0][0];
  FactorAxes assignment = {{"dp"}, {"tp"}};
  EXPECT_EQ(strings({getDimAxes(rule, dim, assignment, mesh)}),
            (std::vector<std::vector<std::string>>{{"dp"}}));
}

TEST_F(ShardingTest, ShardableKinds) {
  EXPECT_TRUE(isShardable({8, FactorKind::Parallel}));
  EXPECT_TRUE(isShardable({8, FactorKind::Lookup}));
  EXPECT_TRUE(isShardable({8, FactorKind::Reduction, FactorCombiner::Sum}));
  EXPECT_FALSE(isShardable({8, FactorKind::Reduction, FactorCombiner::Mean}));
  // A split max or min reduces its blocks itself (an all-reduce max or
  // min in the op's partition), so its result is never partial.
  EXPECT_TRUE(isShardable({8, FactorKind::Reduction, FactorCombiner::Max}));
  EXPECT_TRUE(isSelfReduced({8, FactorKind::Reduction, FactorCombiner::Max}));
  EXPECT_TRUE(isSelfReduced({8, FactorKind::Reduction, FactorCombiner::Min}));
  EXPECT_FALSE(isSelfReduced({8, FactorKind::Reduction, FactorCombiner::Sum}));
  EXPECT_FALSE(isShardable({8, FactorKind::Normalization}));
  EXPECT_FALSE(isShardable({8, FactorKind::KeyValueSequence}));
  EXPECT_FALSE(isShardable({8, FactorKind::Opaque}));
}

TEST_F(ShardingTest, PartialAxesOfSplitReductions) {
  // matmul [i, l] x [l, k] -> [i, k] with l over tp: the result is a
  // partial sum over tp, and the operands carry l's axes.
  ShardingRule rule({2, 2}, {2});
  unsigned i = rule.addFactor(8, FactorKind::Parallel);
  unsigned k = rule.addFactor(8, FactorKind::Parallel);
  unsigned l = rule.addFactor(16, FactorKind::Reduction);
  rule.append(ShardingRule::operand(0), 0, i);
  rule.append(ShardingRule::operand(0), 1, l);
  rule.append(ShardingRule::operand(1), 0, l);
  rule.append(ShardingRule::operand(1), 1, k);
  rule.append(ShardingRule::result(0), 0, i);
  rule.append(ShardingRule::result(0), 1, k);
  FactorAxes assignment(rule.getNumFactors());
  assignment[i] = {"dp"};
  assignment[l] = {"tp"};
  ShardingAttr result =
      getTensorSharding(rule, ShardingRule::result(0), assignment, mesh,
                        /*withPartial=*/true);
  EXPECT_EQ(formatSharding(result), "[{dp}, {}] partial [tp]");
  ShardingAttr rhs =
      getTensorSharding(rule, ShardingRule::operand(1), assignment, mesh,
                        /*withPartial=*/false);
  EXPECT_EQ(formatSharding(rhs), "[{tp}, {}]");
  // And back: the assignment the partitioner infers from these shardings.
  ShardingAttr lhs = getTensorSharding(rule, ShardingRule::operand(0),
                                       assignment, mesh, false);
  FactorAxes inferred = inferAssignment(rule, {lhs, rhs}, {result}, mesh);
  EXPECT_EQ(strings(inferred), strings(assignment));
}

// The mesh is parsed once, by partita::Mesh (partita/Options/Options.h);
// the annotate pass reads the roles it spells out.
TEST(MeshAxesTest, Parses) {
  std::string error;
  std::optional<::partita::Mesh> mesh =
      ::partita::Mesh::parse("dp=2, tp=4,pp=1", error);
  ASSERT_TRUE(mesh) << error;
  ASSERT_EQ(mesh->axes.size(), 3u);
  auto spec = [](const ::partita::MeshAxis &axis) {
    return std::make_tuple(axis.name, axis.size, *symbolizeAxisRole(axis.role));
  };
  EXPECT_EQ(spec(mesh->axes[0]), std::make_tuple("dp", 2, AxisRole::Data));
  EXPECT_EQ(spec(mesh->axes[1]), std::make_tuple("tp", 4, AxisRole::Tensor));
  EXPECT_EQ(spec(mesh->axes[2]), std::make_tuple("pp", 1, AxisRole::Pipeline));
  EXPECT_EQ(mesh->str(), "dp=2,tp=4,pp=1");
}

TEST(MeshAxesTest, ParsesRoles) {
  std::string error;
  std::optional<::partita::Mesh> mesh =
      ::partita::Mesh::parse("model=4:tp, data=2 : dp,x=1", error);
  ASSERT_TRUE(mesh) << error;
  ASSERT_EQ(mesh->axes.size(), 3u);
  EXPECT_EQ(symbolizeAxisRole(mesh->axes[0].role), AxisRole::Tensor);
  EXPECT_EQ(symbolizeAxisRole(mesh->axes[1].role), AxisRole::Data);
  EXPECT_EQ(mesh->axes[1].size, 2);
  EXPECT_EQ(symbolizeAxisRole(mesh->axes[2].role), AxisRole::None);
  EXPECT_EQ(mesh->str(), "model=4:tp,data=2:dp,x=1");
}

TEST(MeshAxesTest, Errors) {
  std::string error;
  auto parse = [&](const char *text) {
    return ::partita::Mesh::parse(text, error).has_value();
  };
  EXPECT_FALSE(parse("tp"));
  EXPECT_EQ(error, "'tp' is not of the form axis=size");
  EXPECT_FALSE(parse("tp=0"));
  EXPECT_EQ(error, "axis 'tp' has size 0; sizes are at least 1");
  EXPECT_FALSE(parse("tp=2,tp=4"));
  EXPECT_EQ(error, "axis 'tp' is given twice");
  EXPECT_FALSE(parse("=2"));
  EXPECT_FALSE(parse("tp=two"));
  EXPECT_FALSE(parse("model=4:xp"));
  EXPECT_EQ(error, "'model=4:xp': unknown role 'xp'; expected dp, tp, pp, sp, "
                   "ep or none");
  EXPECT_FALSE(parse("model=4:tp,tp=2"));
  EXPECT_EQ(error, "axes 'model' and 'tp' both have role tp");
  EXPECT_FALSE(parse("tp=2:"));
}

} // namespace
