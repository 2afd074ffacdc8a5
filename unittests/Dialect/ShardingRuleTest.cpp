//===- ShardingRuleTest.cpp - sharding rules of every nn op ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Prints the sharding rule of every nn op and checks it against the rule
// written beside the op, then checks that no registered nn op was left out.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/StringSet.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::partita;

namespace {

// Each op carries the rule it must have in an `expected` attribute.
constexpr const char *kEveryOp = R"mlir(
func.func @every_op(%a: tensor<2x8x16xf32>, %row: tensor<16xf32>,
                    %w: tensor<16x32xf32>, %bias: tensor<32xf32>,
                    %ids: tensor<2x8xi64>, %table: tensor<100x16xf32>,
                    %q: tensor<2x8x4x16xf32>, %kv: tensor<2x2x4x16xf32>,
                    %mask: tensor<2x1x1x4xi1>, %b: tensor<2x8x16xi1>,
                    %qkv: tensor<2x8x48xf32>, %i: tensor<4xi64>,
                    %pos: tensor<4xi64>,
                    %cs: tensor<1x4x8xf32>, %slot: tensor<1xi64>,
                    %pa: tensor<2x64xf32>, %pq: tensor<32x4x8xi8>,
                    %ps: tensor<32x4xf32>, %pz: tensor<32x2xi8>,
                    %tok: tensor<6x8xf32>, %eids: tensor<6x2xi64>,
                    %ew: tensor<6x2xf32>, %fc1: tensor<4x12x8xf32>,
                    %fc2: tensor<4x8x12xf32>, %fc3: tensor<4x12x8xf32>,
                    %eb: tensor<4x12xf32>) {
  %c = nn.constant {expected = "() -> ([i, j]) {i=4, j=8}"} dense<1.0> : tensor<4x8xf32>
  %add = nn.add %a, %row {expected = "([i, j, k], [k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %sub = nn.sub %a, %a {expected = "([i, j, k], [i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %mul = nn.mul %row, %a {expected = "([k], [i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %div = nn.div %a, %row {expected = "([i, j, k], [k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %pow = nn.pow %row, %row {expected = "([i], [i]) -> ([i]) {i=16}"} : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %max = nn.max %i, %i {expected = "([i], [i]) -> ([i]) {i=4}"} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %min = nn.min %i, %i {expected = "([i], [i]) -> ([i]) {i=4}"} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %and = nn.and %b, %b {expected = "([i, j, k], [i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<2x8x16xi1>, tensor<2x8x16xi1>) -> tensor<2x8x16xi1>
  %or = nn.or %b, %b {expected = "([i, j, k], [i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<2x8x16xi1>, tensor<2x8x16xi1>) -> tensor<2x8x16xi1>
  %xor = nn.xor %b, %b {expected = "([i, j, k], [i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<2x8x16xi1>, tensor<2x8x16xi1>) -> tensor<2x8x16xi1>
  %cmp = nn.compare lt, %i, %i {expected = "([i], [i]) -> ([i]) {i=4}"} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  %where = nn.where %b, %a, %row {expected = "([i, j, k], [i, j, k], [k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : (tensor<2x8x16xi1>, tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %neg = nn.neg %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %abs = nn.abs %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %exp = nn.exp %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %log = nn.log %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %sqrt = nn.sqrt %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %rsqrt = nn.rsqrt %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %recip = nn.reciprocal %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %tanh = nn.tanh %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %erf = nn.erf %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %sin = nn.sin %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %cos = nn.cos %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %sig = nn.sigmoid %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %relu = nn.relu %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %silu = nn.silu %a {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %gelu = nn.gelu %a approximation = tanh {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xf32>
  %not = nn.not %b {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<2x8x16xi1>
  %cast = nn.cast %ids {expected = "([i, j]) -> ([i, j]) {i=2, j=8}"} : tensor<2x8xi64> -> tensor<2x8xf32>
  %sum = nn.reduce sum %a axes = [2] keepdims {expected = "([i, j, k]) -> ([i, j, 1]) {i=2, j=8, k=16 reduction}"} : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %rmax = nn.reduce max %a axes = [1] {expected = "([i, j, k]) -> ([i, k]) {i=2, j=8 reduction(max), k=16}"} : tensor<2x8x16xf32> -> tensor<2x16xf32>
  %mean = nn.reduce mean %a axes = [0] {expected = "([i, j, k]) -> ([j, k]) {i=2 reduction(mean), j=8, k=16}"} : tensor<2x8x16xf32> -> tensor<8x16xf32>
  %sm = nn.softmax %a axis = 2 {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=16 normalization}"} : tensor<2x8x16xf32>
  %lsm = nn.log_softmax %a axis = 1 {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8 normalization, k=16}"} : tensor<2x8x16xf32>
  %scan = nn.cumsum %a axis = 1 exclusive {expected = "([i, j, k]) -> ([i, j, k]) {i=2, j=8 opaque, k=16}"} : tensor<2x8x16xf32>
  %pid = nn.cumsum %ids axis = 1 {expected = "([i, j]) -> ([i, j]) {i=2, j=8 opaque}"} : tensor<2x8xi64>
  %ln = nn.layer_norm %a scale(%row : tensor<16xf32>) bias(%row : tensor<16xf32>) axis = 2 epsilon = 1.0e-05 {expected = "([i, j, k], [k], [k]) -> ([i, j, k]) {i=2, j=8, k=16 normalization(sums)}"} : tensor<2x8x16xf32>
  %rms = nn.rms_norm %a scale(%row : tensor<16xf32>) axis = 2 epsilon = 1.0e-06 {expected = "([i, j, k], [k]) -> ([i, j, k]) {i=2, j=8, k=16 normalization(sums)}"} : tensor<2x8x16xf32>
  %mm = nn.matmul %a, %w bias %bias {expected = "([i, j, l], [l, k], [k]) -> ([i, j, k]) {i=2, j=8, k=32, l=16 reduction}"} : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %dq = nn.dequantize %pq, %ps {bits = 4 : i64, block_size = 16 : i64, expected = "([i, k, j], [i, k]) -> ([kl, i]) {i=32, j=8 opaque, k=4, l=16 opaque}"} : (tensor<32x4x8xi8>, tensor<32x4xf32>) -> tensor<64x32xf32>
  %qmm = nn.quantized_matmul %pa, %pq, %ps zero_points %pz bias %bias {bits = 4 : i64, block_size = 16 : i64, expected = "([i, lmn], [j, lm, k], [j, lm], [j, l], [j]) -> ([i, j]) {i=2, j=32, k=8 opaque, l=2 reduction, m=2 opaque, n=16 opaque}"} : (tensor<2x64xf32>, tensor<32x4x8xi8>, tensor<32x4xf32>, tensor<32x2xi8>, tensor<32xf32>) -> tensor<2x32xf32>
  %att = nn.attention %q, %kv, %kv mask %mask {causal, expected = "([i, jk, l, n], [i, j, m, n], [i, j, m, o], [i, 1, 1, m]) -> ([i, jk, l, o]) {i=2, j=2, k=4, l=4, m=4 kv_sequence, n=16 opaque, o=16}"} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x1x1x4xi1>) -> tensor<2x8x4x16xf32>
  %part:3 = nn.attention_partial %q, %kv, %kv mask %mask positions(%pos, %pos) {expected = "([i, jk, l, n], [i, j, m, n], [i, j, m, o], [i, 1, 1, m], [l], [m]) -> ([i, jk, l, o], [i, jk, l], [i, jk, l]) {i=2, j=2, k=4, l=4, m=4 kv_sequence, n=16 opaque, o=16}"} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x1x1x4xi1>, tensor<4xi64>, tensor<4xi64>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  %ag:3 = nn.attention_grad %q, %kv, %kv mask %mask out %q dout %q {expected = "([i, jk, l, n], [i, j, m, n], [i, j, m, o], [i, 1, 1, m], [i, jk, l, o], [i, jk, l, o]) -> ([i, jk, l, n], [i, j, m, n], [i, j, m, o]) {i=2, j=2, k=4 reduction, l=4 reduction, m=4 opaque, n=16 opaque, o=16 reduction}"} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x1x1x4xi1>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  %agc:3 = nn.attention_grad %q, %kv, %kv out %q dout %q {causal, expected = "([i, jk, l, n], [i, j, m, n], [i, j, m, o], [i, jk, l, o], [i, jk, l, o]) -> ([i, jk, l, n], [i, j, m, n], [i, j, m, o]) {i=2, j=2, k=4 reduction, l=4 opaque, m=4 opaque, n=16 opaque, o=16 reduction}"} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  %rope = nn.rope %q, %cs, %cs {interleaved, expected = "([i, j, k, l], [1, k, m], [1, k, m]) -> ([i, j, k, l]) {i=2, j=8, k=4, l=16 opaque, m=8 opaque}"} : (tensor<2x8x4x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<2x8x4x16xf32>
  %moe = nn.moe swiglu %tok, %eids, %ew experts(%fc1, %fc2, %fc3) fc1_bias %eb fc3_bias %eb {expected = "([i, l], [i, j], [i, j], [k, n, l], [k, m, n], [k, n, l], [k, n], [k, n]) -> ([i, m]) {i=6, j=2 opaque, k=4 lookup, l=8 opaque, m=8, n=12 lookup}"} : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x12x8xf32>, tensor<4x8x12xf32>, tensor<4x12x8xf32>, tensor<4x12xf32>, tensor<4x12xf32>) -> tensor<6x8xf32>
  %kvw = nn.kv_cache_write %q, %q, %slot axis = 2 {expected = "([i, j, k, m], [i, j, l, m], [1]) -> ([i, j, k, m]) {i=2, j=8, k=4 opaque, l=4 opaque, m=16}"} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<1xi64>) -> tensor<2x8x4x16xf32>
  %emb = nn.embedding %table, %ids {expected = "([i, l], [j, k]) -> ([j, k, l]) {i=100 lookup, j=2, k=8, l=16}"} : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %g = nn.gather %a, %ids axis = 1 {expected = "([i, j, m], [k, l]) -> ([i, k, l, m]) {i=2, j=8 lookup, k=2, l=8, m=16}"} : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x2x8x16xf32>
  %rs = nn.reshape %qkv {expected = "([i, j, kl]) -> ([i, j, k, l]) {i=2, j=8, k=3, l=16}"} : tensor<2x8x48xf32> -> tensor<2x8x3x16xf32>
  %tr = nn.transpose %q permutation = [0, 2, 1, 3] {expected = "([i, k, j, l]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=16}"} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %bc = nn.broadcast_to %row {expected = "([k]) -> ([i, j, k]) {i=2, j=8, k=16}"} : tensor<16xf32> -> tensor<2x8x16xf32>
  %sl = nn.slice %qkv start = [0, 0, 16] limit = [2, 8, 32] stride = [1, 1, 1] {expected = "([i, j, k]) -> ([i, j, l]) {i=2, j=8, k=48 opaque, l=16 opaque}"} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>
  %cc = nn.concat %a, %a axis = 2 {expected = "([i, j, k], [i, j, l]) -> ([i, j, m]) {i=2, j=8, k=16 opaque, l=16 opaque, m=32 opaque}"} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
  %s0, %s1, %s2 = nn.split %qkv axis = 2 {expected = "([i, j, k]) -> ([i, j, l], [i, j, m], [i, j, n]) {i=2, j=8, k=48 opaque, l=16 opaque, m=16 opaque, n=16 opaque}"} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  return
}
)mlir";

class ShardingRuleTest : public ::testing::Test {
protected:
  ShardingRuleTest() {
    context.loadDialect<nn::NNDialect, func::FuncDialect>();
  }
  MLIRContext context;
};

TEST_F(ShardingRuleTest, EveryOpHasTheExpectedRule) {
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kEveryOp, &context);
  ASSERT_TRUE(module);
  llvm::StringSet<> seen;
  module->walk([&](Operation *op) {
    if (op->getDialect()->getNamespace() != "nn")
      return;
    seen.insert(op->getName().getStringRef());
    auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
    ASSERT_TRUE(ruleOp) << op->getName().getStringRef().str()
                        << " has no sharding rule";
    ShardingRule rule = ruleOp.getShardingRule();
    EXPECT_TRUE(succeeded(rule.verify(op)));
    auto expected = op->getAttrOfType<StringAttr>("expected");
    ASSERT_TRUE(expected) << "no expected rule on "
                          << op->getName().getStringRef().str();
    EXPECT_EQ(rule.str(), expected.getValue().str())
        << "for " << op->getName().getStringRef().str();
  });
  // Every op of the dialect must be covered above.
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "nn")
      continue;
    EXPECT_TRUE(seen.contains(name.getStringRef()))
        << name.getStringRef().str() << " is missing from the test";
  }
}

/// The rule of a reshape between two shapes.
std::string reshapeRule(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  ShardingRule rule({static_cast<unsigned>(from.size())},
                    {static_cast<unsigned>(to.size())});
  addReshapeFactors(rule, ShardingRule::operand(0), from,
                    ShardingRule::result(0), to);
  return rule.str();
}

TEST(ReshapeFactorsTest, SplitKeepsHeads) {
  // [b, s, h*d] -> [b, s, h, d]: a split of h survives the reshape.
  EXPECT_EQ(reshapeRule({2, 8, 768}, {2, 8, 12, 64}),
            "([i, j, kl]) -> ([i, j, k, l]) {i=2, j=8, k=12, l=64}");
  EXPECT_EQ(reshapeRule({2, 8, 12, 64}, {2, 8, 768}),
            "([i, j, k, l]) -> ([i, j, kl]) {i=2, j=8, k=12, l=64}");
}

TEST(ReshapeFactorsTest, MergeAndSplitAcrossDims) {
  EXPECT_EQ(reshapeRule({16, 768}, {2, 8, 768}),
            "([ij, k]) -> ([i, j, k]) {i=2, j=8, k=768}");
  EXPECT_EQ(reshapeRule({4, 6}, {2, 12}),
            "([ij, k]) -> ([i, jk]) {i=2, j=2, k=6}");
}

TEST(ReshapeFactorsTest, UnitDimsMapToNoFactor) {
  EXPECT_EQ(reshapeRule({1, 8, 1, 16}, {8, 16, 1}),
            "([1, i, 1, j]) -> ([i, j, 1]) {i=8, j=16}");
}

TEST(ReshapeFactorsTest, GcdFactorization) {
  // 6 and 4 share a factor 2 but neither divides the other.
  EXPECT_EQ(reshapeRule({6, 4}, {4, 6}),
            "([ij, m]) -> ([ik, l]) {i=2, j=3 opaque, k=2 opaque, l=6 opaque, "
            "m=4 opaque}");
}

TEST(ReshapeFactorsTest, NoCommonFactorIsOpaque) {
  EXPECT_EQ(reshapeRule({2, 3}, {3, 2}),
            "([i, k]) -> ([j, l]) {i=2 opaque, j=3 opaque, k=3 opaque, "
            "l=2 opaque}");
}

TEST(ShardingRuleVerifyTest, RejectsWrongSizes) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(R"mlir(
    func.func @f(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %r = nn.exp %a : tensor<4x8xf32>
      return %r : tensor<4x8xf32>
    })mlir",
                                                             &context);
  ASSERT_TRUE(module);
  Operation *exp = nullptr;
  module->walk([&](nn::ExpOp op) { exp = op; });
  ASSERT_TRUE(exp);
  ShardingRule rule = ShardingRule::forOp(exp);
  // Factor of size 2 where the dimension has 4: verify must refuse it.
  unsigned f = rule.addFactor(2, FactorKind::Parallel);
  rule.append(ShardingRule::operand(0), 0, f);
  rule.append(ShardingRule::result(0), 0, f);
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_TRUE(failed(rule.verify(exp)));
  EXPECT_NE(message.find("has size 4 but its factors multiply to 2"),
            std::string::npos)
      << message;
}

} // namespace
