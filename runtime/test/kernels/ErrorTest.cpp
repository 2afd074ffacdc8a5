//===- ErrorTest.cpp - malformed kernels fail with a Status ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

namespace partita::runtime::test {
namespace {

/// Runs `k` and returns its error message (failing the test on success).
std::string errorOf(KernelBuilder &k) {
  Status s = k.run(testPool());
  EXPECT_FALSE(s.isOk());
  return s.message();
}

bool mentions(const std::string &message, const std::string &word) {
  return message.find(word) != std::string::npos;
}

TEST(ErrorTest, UnknownOp) {
  Buffer x(program::F32, {2}), out(program::F32, {2});
  KernelBuilder k("conv2d");
  k.operand(x).result(out);
  std::string m = errorOf(k);
  EXPECT_TRUE(mentions(m, "conv2d")) << m;
}

TEST(ErrorTest, WrongOperandCount) {
  Buffer x(program::F32, {2}), out(program::F32, {2});
  KernelBuilder add("add");
  add.operand(x).result(out);
  std::string m = errorOf(add);
  EXPECT_TRUE(mentions(m, "add") && mentions(m, "2 operands")) << m;

  KernelBuilder neg("neg");
  neg.operand(x).operand(x).result(out);
  m = errorOf(neg);
  EXPECT_TRUE(mentions(m, "neg")) << m;

  KernelBuilder attention("attention");
  attention.operand(x).operand(x).result(out);
  m = errorOf(attention);
  EXPECT_TRUE(mentions(m, "attention")) << m;

  KernelBuilder concat("concat");
  concat.result(out).attr("axis", 0);
  m = errorOf(concat);
  EXPECT_TRUE(mentions(m, "concat")) << m;
}

TEST(ErrorTest, WrongResultCount) {
  Buffer x(program::F32, {2}), out(program::F32, {2});
  KernelBuilder k("relu");
  k.operand(x).result(out).result(out);
  std::string m = errorOf(k);
  EXPECT_TRUE(mentions(m, "relu") && mentions(m, "results")) << m;
}

TEST(ErrorTest, MissingOrMistypedAttribute) {
  Buffer x(program::F32, {2, 3}), out(program::F32, {2, 3});
  KernelBuilder missing("softmax");
  missing.operand(x).result(out);
  std::string m = errorOf(missing);
  EXPECT_TRUE(mentions(m, "softmax") && mentions(m, "axis")) << m;

  KernelBuilder mistyped("softmax");
  mistyped.operand(x).result(out).attr("axis", "last");
  m = errorOf(mistyped);
  EXPECT_TRUE(mentions(m, "axis") && mentions(m, "integer")) << m;

  KernelBuilder range("softmax");
  range.operand(x).result(out).attr("axis", 2);
  m = errorOf(range);
  EXPECT_TRUE(mentions(m, "softmax") && mentions(m, "out of range")) << m;
}

TEST(ErrorTest, UnboundAndUntypedBuffers) {
  program::Kernel kernel;
  kernel.set_op("relu");
  kernel.add_operands(0);
  kernel.add_results(1);
  float out[2];
  BufferResolver resolver = [&](int32_t id) {
    if (id == 0)
      return Tensor{nullptr, program::F32, {2}};
    return Tensor{out, program::F32, {2}};
  };
  Status s = runHostKernel(kernel, resolver, testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_TRUE(mentions(s.message(), "relu") &&
              mentions(s.message(), "not bound"))
      << s.message();

  BufferResolver untyped = [&](int32_t) {
    return Tensor{out, program::DTYPE_UNSPECIFIED, {2}};
  };
  s = runHostKernel(kernel, untyped, testPool());
  EXPECT_FALSE(s.isOk());
  EXPECT_TRUE(mentions(s.message(), "element type")) << s.message();
}

TEST(ErrorTest, ResultShapeMismatch) {
  Buffer x(program::F32, {2, 3}), out(program::F32, {3, 2});
  KernelBuilder k("softmax");
  k.operand(x).result(out).attr("axis", 1);
  std::string m = errorOf(k);
  EXPECT_TRUE(mentions(m, "softmax") && mentions(m, "[3, 2]")) << m;

  KernelBuilder t("transpose");
  t.operand(x).result(out).attr("permutation", std::vector<int64_t>{0, 0});
  m = errorOf(t);
  EXPECT_TRUE(mentions(m, "transpose") && mentions(m, "permutation")) << m;
}

} // namespace
} // namespace partita::runtime::test
