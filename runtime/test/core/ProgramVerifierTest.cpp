//===- ProgramVerifierTest.cpp - load-time checks of exec programs --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Each test builds a small program that the verifier accepts, breaks it in
// one way, and checks the message that refuses it.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/ProgramVerifier.h"

#include "ProgramBuilder.h"
#include "TestUtil.h"

#include <cmath>

using namespace partita::runtime;
namespace program = partita::program;
using program::Buffer;
using program::Collective;
using program::PointToPoint;
using test::ProgramBuilder;

namespace {

void setBool(program::Kernel *kernel, const std::string &name, bool value) {
  (*kernel->mutable_attributes())[name].set_b(value);
}
void setInt(program::Kernel *kernel, const std::string &name, int64_t value) {
  (*kernel->mutable_attributes())[name].set_i(value);
}
void setString(program::Kernel *kernel, const std::string &name,
               const std::string &value) {
  (*kernel->mutable_attributes())[name].set_s(value);
}
void setInts(program::Kernel *kernel, const std::string &name,
             const std::vector<int64_t> &values) {
  auto *ints = (*kernel->mutable_attributes())[name].mutable_ints();
  for (int64_t value : values)
    ints->add_values(value);
}

/// x -> a = neg(x) -> y = exp(a): two instructions, the second reading the
/// first's result.
struct Chain {
  ProgramBuilder b{1, 2};
  int32_t x, a, y;
  Chain() {
    x = b.input("x", program::F32, {4});
    a = b.activation(program::F32, {4});
    y = b.output("y", program::F32, {4});
    b.kernel("neg", {x}, {a}, "/neg");
    b.kernel("exp", {a}, {y}, "/exp");
  }
};

Status verify(const program::Program &p) { return verifyProgram(p); }

TEST(ProgramVerifier, AcceptsAWellFormedProgram) {
  Chain c;
  EXPECT_OK(verify(c.b.p));
}

//===----------------------------------------------------------------------===//
// Data flow
//===----------------------------------------------------------------------===//

TEST(ProgramVerifier, DeletedInstructionLeavesAReadBeforeAnyWrite) {
  Chain c;
  c.b.p.mutable_instructions()->DeleteSubrange(0, 1);
  EXPECT_ERROR_CONTAINS(verify(c.b.p),
                        "rank 1, instruction 0 (exp at /exp): reads buffer 1 "
                        "before any instruction writes it");
}

TEST(ProgramVerifier, SwappedInstructionsReadBeforeAnyWrite) {
  Chain c;
  c.b.p.mutable_instructions()->SwapElements(0, 1);
  EXPECT_ERROR_CONTAINS(verify(c.b.p),
                        "rank 1, instruction 0 (exp at /exp): reads buffer 1 "
                        "before any instruction writes it");
}

TEST(ProgramVerifier, ViewsAreReadThroughTheirTarget) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {4});
  int32_t a = b.activation(program::F32, {4});
  int32_t view = b.alias(a, program::F32, {2, 2});
  int32_t y = b.output("y", program::F32, {2, 2});
  b.kernel("exp", {view}, {y});
  b.kernel("neg", {x}, {a});
  EXPECT_ERROR_CONTAINS(verify(b.p),
                        "rank 0, instruction 0 (exp): reads buffer 2 (a view "
                        "of buffer 1) before any instruction writes it");
  b.p.mutable_instructions()->SwapElements(0, 1);
  EXPECT_OK(verify(b.p));
}

/// Buffers that share arena bytes (the buffer plan reuses memory): reading
/// one after the other overwrote the bytes is refused, which is what two
/// swapped instructions usually do to a planned program.
TEST(ProgramVerifier, ReadOfBytesAnotherBufferOverwrote) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {4});
  int32_t a = b.activation(program::F32, {4});
  int32_t c = b.buffer(Buffer::ACTIVATION, program::F32, {4});
  b.p.mutable_buffers(c)->set_arena_offset(0); // a's bytes
  int32_t y = b.output("y", program::F32, {4});
  int32_t z = b.output("z", program::F32, {4});
  b.kernel("neg", {x}, {a});
  b.kernel("exp", {a}, {y});
  b.kernel("abs", {x}, {c});
  b.kernel("exp", {c}, {z});
  EXPECT_OK(verify(b.p));
  b.p.mutable_instructions()->SwapElements(1, 2);
  EXPECT_ERROR_CONTAINS(verify(b.p),
                        "rank 0, instruction 2 (exp): reads buffer 1, written "
                        "by instruction 0, but instruction 1 has since "
                        "overwritten its bytes with buffer 2 (they share "
                        "arena bytes)");
}

/// An empty buffer (a slice of zero rows) placed inside bytes another
/// buffer writes later holds nothing that write could destroy.
TEST(ProgramVerifier, EmptyBuffersHoldNothingToOverwrite) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {4});
  int32_t a = b.activation(program::F32, {4});
  int32_t empty = b.buffer(Buffer::ACTIVATION, program::F32, {0});
  b.p.mutable_buffers(empty)->set_arena_offset(8); // inside a's bytes
  int32_t y = b.output("y", program::F32, {4});
  setInts(b.kernel("slice", {x}, {empty}), "start", {0});
  setInts(b.p.mutable_instructions(0)->mutable_kernel(), "limit", {0});
  setInts(b.p.mutable_instructions(0)->mutable_kernel(), "stride", {1});
  b.kernel("neg", {x}, {a});
  setInt(b.kernel("concat", {a, empty}, {y}), "axis", 0);
  EXPECT_OK(verify(b.p));
}

TEST(ProgramVerifier, ResultMustNotShareBytesWithAnOperand) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {4});
  int32_t a = b.activation(program::F32, {4});
  int32_t c = b.buffer(Buffer::ACTIVATION, program::F32, {4});
  b.p.mutable_buffers(c)->set_arena_offset(8); // overlaps a's last half
  int32_t y = b.output("y", program::F32, {4});
  b.kernel("neg", {x}, {a});
  b.kernel("exp", {a}, {c});
  b.kernel("exp", {c}, {y});
  EXPECT_ERROR_CONTAINS(verify(b.p), "rank 0, instruction 1 (exp): result "
                                     "buffer 2 shares bytes with operand "
                                     "buffer 1");
}

TEST(ProgramVerifier, EveryOutputIsWritten) {
  Chain c;
  c.b.p.mutable_instructions()->DeleteSubrange(1, 1);
  EXPECT_ERROR_CONTAINS(verify(c.b.p),
                        "rank 1: output 'y' (buffer 2) is never written");
}

TEST(ProgramVerifier, ReadOnlyBuffersAreNotWritten) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {4});
  int32_t w = b.weight("w", program::F32, {4});
  int32_t y = b.output("y", program::F32, {4});
  b.kernel("neg", {x}, {w});
  b.kernel("neg", {w}, {y});
  EXPECT_ERROR_CONTAINS(verify(b.p), "rank 0, instruction 0 (neg): writes "
                                     "buffer 1, which is read-only (an input, "
                                     "weight or constant)");
}

/// An all-reduce in flight from instruction 1 to its wait at 3: its result
/// is read after the wait, its operand is not overwritten before it.
struct AsyncAllReduce {
  ProgramBuilder b{0, 2};
  int32_t x, a, r, y, z;
  AsyncAllReduce() {
    x = b.input("x", program::F32, {4});
    a = b.activation(program::F32, {4});
    r = b.activation(program::F32, {4});
    y = b.output("y", program::F32, {4});
    z = b.output("z", program::F32, {4});
    b.kernel("neg", {x}, {a});
    Collective *c = b.collective(Collective::ALL_REDUCE, a, r, {0, 1});
    c->set_reduction("sum");
    c->set_async(true);
    c->set_token(7);
    b.kernel("exp", {x}, {y}); // overlaps the transfer
    b.wait(7);
    b.kernel("add", {r, y}, {z});
  }
};

TEST(ProgramVerifier, AsynchronousResultIsReadAfterItsWait) {
  AsyncAllReduce t;
  ASSERT_OK(verify(t.b.p));
  // The add moved before the wait.
  t.b.p.mutable_instructions()->SwapElements(3, 4);
  EXPECT_ERROR_CONTAINS(verify(t.b.p),
                        "rank 0, instruction 3 (add): reads buffer 2 while the "
                        "asynchronous all_reduce started at instruction 1 "
                        "(token 7) still writes its bytes (before its wait)");
}

TEST(ProgramVerifier, OperandInFlightIsNotOverwritten) {
  AsyncAllReduce t;
  // The kernel between start and wait now writes the operand's bytes.
  t.b.p.mutable_instructions(2)->mutable_kernel()->set_results(0, t.a);
  EXPECT_ERROR_CONTAINS(verify(t.b.p),
                        "rank 0, instruction 2 (exp): writes buffer 1 while "
                        "the asynchronous all_reduce started at instruction 1 "
                        "(token 7) still uses its bytes (before its wait)");
}

TEST(ProgramVerifier, TokensAreStartedOnceAndWaitedOnce) {
  AsyncAllReduce missing;
  missing.b.p.mutable_instructions()->DeleteSubrange(3, 2);
  EXPECT_ERROR_CONTAINS(verify(missing.b.p),
                        "rank 0: the asynchronous all_reduce started at "
                        "instruction 1 (token 7) is never waited for");

  AsyncAllReduce stray;
  stray.b.p.mutable_instructions(3)->mutable_wait()->set_token(8);
  EXPECT_ERROR_CONTAINS(verify(stray.b.p),
                        "rank 0, instruction 3 (wait): waits for token 8, "
                        "which no pending asynchronous instruction started");

  AsyncAllReduce twice;
  *twice.b.p.mutable_instructions(2) = twice.b.p.instructions(1);
  EXPECT_ERROR_CONTAINS(verify(twice.b.p),
                        "rank 0, instruction 2 (all_reduce at collective): "
                        "starts token 7 again before its wait");
}

//===----------------------------------------------------------------------===//
// Buffers and bindings
//===----------------------------------------------------------------------===//

TEST(ProgramVerifier, ActivationsLieInTheArena) {
  Chain c;
  c.b.p.mutable_buffers(c.a)->set_arena_offset(60);
  EXPECT_ERROR_CONTAINS(verify(c.b.p), "rank 1: buffer 1 (f32 [4] at arena "
                                       "offset 60) lies outside the arena of "
                                       "64 bytes");
  c.b.p.mutable_buffers(c.a)->set_arena_offset(UINT64_MAX - 4);
  EXPECT_ERROR_CONTAINS(verify(c.b.p), "lies outside the arena");
  c.b.p.mutable_buffers(c.a)->set_arena_offset(2);
  EXPECT_ERROR_CONTAINS(verify(c.b.p), "rank 1: buffer 1: arena offset 2 is "
                                       "not aligned to its elements");
}

TEST(ProgramVerifier, BuffersAreWellFormed) {
  Chain c;
  c.b.p.mutable_buffers(c.a)->set_id(5);
  EXPECT_ERROR_CONTAINS(verify(c.b.p), "rank 1: buffer 1 has id 5");

  Chain dtype;
  dtype.b.p.mutable_buffers(dtype.a)->mutable_type()->set_dtype(
      program::DTYPE_UNSPECIFIED);
  EXPECT_ERROR_CONTAINS(verify(dtype.b.p), "buffer 1 has no element type");

  Chain shape;
  shape.b.p.mutable_buffers(shape.a)->mutable_type()->set_shape(0, -4);
  EXPECT_ERROR_CONTAINS(verify(shape.b.p), "buffer 1 has an invalid shape");

  ProgramBuilder constant;
  int32_t k = constant.constant({1, 2, 3}, {4});
  int32_t y = constant.output("y", program::F32, {4});
  constant.kernel("neg", {k}, {y});
  EXPECT_ERROR_CONTAINS(verify(constant.p), "buffer 0: the constant holds 12 "
                                            "bytes, f32 [4] needs 16");

  ProgramBuilder weight;
  int32_t w = weight.weight("", program::F32, {4});
  int32_t out = weight.output("y", program::F32, {4});
  weight.kernel("neg", {w}, {out});
  EXPECT_ERROR_CONTAINS(verify(weight.p), "buffer 0 is a weight without a "
                                          "name");
}

TEST(ProgramVerifier, ViewsLieWithinWhatTheyView) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {4});
  int32_t view = b.alias(x, program::F32, {3}, 4);
  int32_t y = b.output("y", program::F32, {3});
  b.kernel("neg", {view}, {y});
  EXPECT_OK(verify(b.p));
  b.p.mutable_buffers(view)->set_alias_offset(8);
  EXPECT_ERROR_CONTAINS(verify(b.p),
                        "buffer 1 (f32 [3] at offset 8) is a view of buffer "
                        "0 (f32 [4]), which does not hold its bytes");
  b.p.mutable_buffers(view)->set_alias_offset(2);
  EXPECT_ERROR_CONTAINS(verify(b.p), "buffer 1: view offset 2 is not aligned "
                                     "to its elements");

  ProgramBuilder cycle;
  int32_t first = cycle.alias(1, program::F32, {4});
  cycle.alias(first, program::F32, {4});
  EXPECT_ERROR_CONTAINS(verify(cycle.p), "is part of a cycle of views");

  ProgramBuilder self;
  self.alias(0, program::F32, {4});
  EXPECT_ERROR_CONTAINS(verify(self.p), "buffer 0 is a view of buffer 0, "
                                        "which is not another buffer");
}

/// An output written a block of rows at a time through views at their
/// offsets (a pipeline stage's KV cache, microbatch by microbatch): every
/// block must be written before the output is returned or read whole, and
/// a block is read only once written.
TEST(ProgramVerifier, ViewsAtAnOffsetWriteOnlyTheirBytes) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2, 4});
  int32_t y = b.output("y", program::F32, {2, 4});
  int32_t z = b.output("z", program::F32, {1, 4});
  int32_t rows[2];
  for (int r = 0; r < 2; ++r) {
    int32_t in = b.alias(x, program::F32, {1, 4}, uint64_t(r) * 16);
    rows[r] = b.alias(y, program::F32, {1, 4}, uint64_t(r) * 16);
    b.kernel("neg", {in}, {rows[r]});
  }
  b.kernel("exp", {rows[1]}, {z});
  EXPECT_OK(verify(b.p));

  // The second block never written: its read and the output are refused.
  ProgramBuilder half = b;
  half.p.mutable_instructions()->DeleteSubrange(1, 1);
  EXPECT_ERROR_CONTAINS(verify(half.p),
                        "rank 0, instruction 1 (exp): reads buffer 6 (a view "
                        "of buffer 1), but no instruction has written its "
                        "bytes 0 to 16 (views wrote only part of buffer 1)");
  half.p.mutable_instructions()->DeleteSubrange(1, 1);
  EXPECT_ERROR_CONTAINS(verify(half.p),
                        "rank 0: returns output 'y' (buffer 1), but no "
                        "instruction has written its bytes 16 to 32 (views "
                        "wrote only part of buffer 1)");
  // Reading the output whole after one block.
  ProgramBuilder whole = b;
  int32_t w = whole.output("w", program::F32, {2, 4});
  whole.kernel("neg", {y}, {w});
  whole.p.mutable_instructions()->SwapElements(1, 3);
  EXPECT_ERROR_CONTAINS(verify(whole.p),
                        "instruction 1 (neg): reads buffer 1, but no "
                        "instruction has written its bytes 16 to 32");
}

TEST(ProgramVerifier, EveryInputAndOutputIsBoundOnce) {
  Chain twice;
  *twice.b.p.add_inputs() = twice.b.p.inputs(0);
  EXPECT_ERROR_CONTAINS(verify(twice.b.p), "input 'x' is bound twice");

  Chain wrongKind;
  wrongKind.b.p.mutable_outputs(0)->set_buffer(wrongKind.a);
  EXPECT_ERROR_CONTAINS(verify(wrongKind.b.p),
                        "output 'y' is bound to buffer 1, which is not an "
                        "output buffer");

  Chain unbound;
  unbound.b.p.clear_outputs();
  EXPECT_ERROR_CONTAINS(verify(unbound.b.p),
                        "buffer 2 is an output buffer bound 0 times; it needs "
                        "exactly one binding");
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// A one-kernel program of `op` over the given operands (f32 inputs of the
/// given shapes) into an f32 output of `result`.
struct OneKernel {
  ProgramBuilder b;
  program::Kernel *kernel;
  OneKernel(const std::string &op,
            const std::vector<std::vector<int64_t>> &operands,
            std::vector<int64_t> result) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < operands.size(); ++i)
      ids.push_back(
          b.input("x" + std::to_string(i), program::F32, operands[i]));
    int32_t y = b.output("y", program::F32, std::move(result));
    kernel = b.kernel(op, ids, {y}, "/node");
  }
  Status verify() const { return verifyProgram(b.p); }
};

TEST(ProgramVerifier, KernelOpsAndCounts) {
  EXPECT_ERROR_CONTAINS(OneKernel("frobnicate", {{4}}, {4}).verify(),
                        "rank 0, instruction 0 (frobnicate at /node): unknown "
                        "kernel op 'frobnicate'");
  EXPECT_ERROR_CONTAINS(OneKernel("add", {{4}}, {4}).verify(),
                        "expected 2 operands, got 1");
  EXPECT_ERROR_CONTAINS(
      OneKernel("layer_norm", {{4}, {4}, {4}, {4}}, {4}).verify(),
      "expected 1 to 3 operands, got 4");
  OneKernel noResult("neg", {{4}}, {4});
  noResult.kernel->clear_results();
  EXPECT_ERROR_CONTAINS(noResult.verify(), "expected 1 results, got 0");
  OneKernel badId("neg", {{4}}, {4});
  badId.kernel->set_operands(0, 9);
  EXPECT_ERROR_CONTAINS(badId.verify(), "operand buffer 9 is not a buffer of "
                                        "the program (it has 2)");
}

TEST(ProgramVerifier, OperandCountsFollowTheFlags) {
  OneKernel matmul("matmul", {{2, 3}, {3, 4}}, {2, 4});
  ASSERT_OK(matmul.verify());
  setBool(matmul.kernel, "has_bias", true);
  EXPECT_ERROR_CONTAINS(matmul.verify(), "expected 3 operands for has_bias = "
                                         "true, got 2");
  OneKernel attention("attention", {{1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}},
                      {1, 2, 4, 8});
  // Required: the compiler always writes it.
  setBool(attention.kernel, "causal", false);
  setBool(attention.kernel, "has_mask", true);
  EXPECT_ERROR_CONTAINS(attention.verify(), "expected 4 operands for has_mask "
                                            "= true, got 3");
}

TEST(ProgramVerifier, AttributesAreKnownAndRequiredOnesPresent) {
  // A renamed `causal` ran non-causal: the key nothing reads is refused,
  // and the required one is missing.
  OneKernel renamed("attention", {{1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}},
                    {1, 2, 4, 8});
  setBool(renamed.kernel, "kausal", true);
  EXPECT_ERROR_CONTAINS(renamed.verify(), "unknown attribute 'kausal'");
  OneKernel missing("attention", {{1, 2, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}},
                    {1, 2, 4, 8});
  EXPECT_ERROR_CONTAINS(missing.verify(), "missing attribute 'causal'");
  setBool(missing.kernel, "causal", true);
  ASSERT_OK(missing.verify());
}

TEST(ProgramVerifier, AttributesHaveTheirTypes) {
  OneKernel missing("softmax", {{2, 4}}, {2, 4});
  EXPECT_ERROR_CONTAINS(missing.verify(), "missing attribute 'axis'");
  OneKernel wrong("softmax", {{2, 4}}, {2, 4});
  setString(wrong.kernel, "axis", "last");
  EXPECT_ERROR_CONTAINS(wrong.verify(), "attribute 'axis' is not an integer");
  OneKernel flag("matmul", {{2, 3}, {3, 4}}, {2, 4});
  setInt(flag.kernel, "has_bias", 1);
  EXPECT_ERROR_CONTAINS(flag.verify(), "attribute 'has_bias' is not a bool");
  OneKernel epsilon("layer_norm", {{2, 4}}, {2, 4});
  setInt(epsilon.kernel, "axis", -1);
  (*epsilon.kernel->mutable_attributes())["epsilon"].set_f(NAN);
  EXPECT_ERROR_CONTAINS(epsilon.verify(),
                        "attribute 'epsilon' is not a number (finite)");
}

TEST(ProgramVerifier, AttributesAreInRange) {
  OneKernel axis("softmax", {{2, 4}}, {2, 4});
  setInt(axis.kernel, "axis", -2);
  EXPECT_OK(axis.verify());
  setInt(axis.kernel, "axis", 2);
  EXPECT_ERROR_CONTAINS(axis.verify(), "axis 2 is out of range for rank 2");

  OneKernel compare("compare", {{4}, {4}}, {4});
  setString(compare.kernel, "direction", "approximately");
  EXPECT_ERROR_CONTAINS(compare.verify(),
                        "attribute 'direction' is 'approximately', not one of "
                        "eq, ne, lt, le, gt, ge");

  OneKernel reduce("reduce", {{2, 3, 4}}, {2});
  setString(reduce.kernel, "kind", "sum");
  setInts(reduce.kernel, "axes", {2, 1});
  EXPECT_ERROR_CONTAINS(reduce.verify(),
                        "attribute 'axes' [2, 1] is not strictly increasing");

  OneKernel transpose("transpose", {{2, 3}}, {3, 2});
  setInts(transpose.kernel, "permutation", {0, 0});
  EXPECT_ERROR_CONTAINS(transpose.verify(), "attribute 'permutation' [0, 0] is "
                                            "not a permutation of the input's "
                                            "2 dimensions");

  OneKernel slice("slice", {{4, 6}}, {2, 3});
  setInts(slice.kernel, "start", {0, 2});
  setInts(slice.kernel, "limit", {2, 8});
  setInts(slice.kernel, "stride", {1, 2});
  EXPECT_ERROR_CONTAINS(slice.verify(), "bad bounds in dimension 1: start 2, "
                                        "limit 8, stride 2, size 6");
}

TEST(ProgramVerifier, CumsumAxisFlagsAndShape) {
  OneKernel scan("cumsum", {{2, 4}}, {2, 4});
  EXPECT_ERROR_CONTAINS(scan.verify(), "missing attribute 'axis'");
  setInt(scan.kernel, "axis", -1);
  EXPECT_OK(scan.verify());
  setBool(scan.kernel, "exclusive", true);
  setBool(scan.kernel, "reverse", true);
  EXPECT_OK(scan.verify());
  setInt(scan.kernel, "axis", 2);
  EXPECT_ERROR_CONTAINS(scan.verify(), "axis 2 is out of range for rank 2");
  setInt(scan.kernel, "axis", 0);
  setInt(scan.kernel, "reverse", 1);
  EXPECT_ERROR_CONTAINS(scan.verify(), "attribute 'reverse' is not a bool");

  OneKernel reshaped("cumsum", {{2, 4}}, {4, 2});
  setInt(reshaped.kernel, "axis", 0);
  EXPECT_ERROR_CONTAINS(reshaped.verify(), "the result f32 [4, 2] differs "
                                           "from the input f32 [2, 4]");
  EXPECT_OK(OneKernel("sin", {{3}}, {3}).verify());
  EXPECT_OK(OneKernel("cos", {{3}}, {3}).verify());
}

/// kv_cache_write of an update into a cache f32 [2, 8, 4] along axis 1.
struct CacheWrite {
  ProgramBuilder b;
  program::Kernel *kernel;
  CacheWrite(std::vector<int64_t> update = {2, 1, 4},
             DType updateType = program::F32,
             std::vector<int64_t> position = {1},
             DType positionType = program::I64,
             std::vector<int64_t> result = {2, 8, 4},
             DType resultType = program::F32) {
    int32_t cache = b.input("cache", program::F32, {2, 8, 4});
    int32_t u = b.input("update", updateType, std::move(update));
    int32_t p = b.input("position", positionType, std::move(position));
    int32_t out = b.output("cache", resultType, std::move(result));
    kernel = b.kernel("kv_cache_write", {cache, u, p}, {out}, "/write");
    setInt(kernel, "axis", 1);
  }
  Status verify() const { return verifyProgram(b.p); }
};

TEST(ProgramVerifier, KvCacheWriteTypesAndShapes) {
  EXPECT_OK(CacheWrite().verify());
  EXPECT_OK(CacheWrite({2, 8, 4}).verify());
  CacheWrite negative;
  setInt(negative.kernel, "axis", -2);
  EXPECT_OK(negative.verify());
  CacheWrite noAxis;
  noAxis.kernel->mutable_attributes()->clear();
  EXPECT_ERROR_CONTAINS(noAxis.verify(),
                        "rank 0, instruction 0 (kv_cache_write at /write): "
                        "missing attribute 'axis'");
  CacheWrite farAxis;
  setInt(farAxis.kernel, "axis", 3);
  EXPECT_ERROR_CONTAINS(farAxis.verify(), "axis 3 is out of range for rank 3");

  EXPECT_ERROR_CONTAINS(
      CacheWrite({2, 1, 4}, program::F32, {1}, program::I64, {2, 7, 4})
          .verify(),
      "the result f32 [2, 7, 4] differs from the cache f32 [2, 8, 4]");
  EXPECT_ERROR_CONTAINS(CacheWrite({2, 1, 4}, program::F32, {1}, program::I64,
                                   {2, 8, 4}, program::F16)
                            .verify(),
                        "the result f16 [2, 8, 4] differs from the cache f32 "
                        "[2, 8, 4]");
  EXPECT_ERROR_CONTAINS(CacheWrite({2, 1, 4}, program::BF16).verify(),
                        "the update is bf16, the cache f32");
  for (std::vector<int64_t> update :
       {std::vector<int64_t>{2, 9, 4}, {2, 1, 5}, {2, 4}, {2, 1, 4, 1}})
    EXPECT_ERROR_CONTAINS(CacheWrite(update).verify(),
                          "the update " + shapeString(update) +
                              " does not fit the cache [2, 8, 4] along axis 1");
  EXPECT_ERROR_CONTAINS(
      CacheWrite({2, 1, 4}, program::F32, {1}, program::I32).verify(),
      "the position is i32 [1], expected i64 with one element or one per row "
      "of the batch");
  // One position per row of the batch (2) is valid; 3 is not.
  EXPECT_TRUE(CacheWrite({2, 1, 4}, program::F32, {2}).verify().isOk());
  EXPECT_ERROR_CONTAINS(CacheWrite({2, 1, 4}, program::F32, {3}).verify(),
                        "the position is i64 [3], expected i64 with one "
                        "element or one per row of the batch");
  CacheWrite epilogue;
  program::ElementwiseStep *step = epilogue.kernel->add_epilogue();
  step->set_op("neg");
  step->set_operand(-1);
  EXPECT_ERROR_CONTAINS(epilogue.verify(),
                        "kv_cache_write takes no epilogue (it writes one slice "
                        "of its result)");
}

TEST(ProgramVerifier, KvCacheWriteMayWriteItsCacheInPlace) {
  // A copy of the cache (a pipeline microbatch's rows) written in place:
  // the result is a view of the cache operand, the same bytes exactly.
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2, 8, 4});
  int32_t u = b.input("update", program::F32, {2, 1, 4});
  int32_t p = b.input("position", program::I64, {1});
  int32_t copy = b.activation(program::F32, {2, 8, 4});
  int32_t written = b.alias(copy, program::F32, {2, 8, 4});
  int32_t y = b.output("y", program::F32, {2, 8, 4});
  b.kernel("neg", {x}, {copy});
  setInt(b.kernel("kv_cache_write", {copy, u, p}, {written}), "axis", 1);
  b.kernel("neg", {written}, {y});
  EXPECT_OK(verifyProgram(b.p));
  // Only the cache operand, and only its whole bytes: a result on the
  // update's bytes, or on part of the cache's, is refused.
  ProgramBuilder partial;
  x = partial.input("x", program::F32, {2, 8, 4});
  u = partial.input("update", program::F32, {2, 1, 4});
  p = partial.input("position", program::I64, {1});
  copy = partial.activation(program::F32, {2, 8, 4});
  int32_t shifted = partial.buffer(Buffer::ACTIVATION, program::F32, {2, 8, 4});
  partial.p.mutable_buffers(shifted)->set_arena_offset(64);
  partial.p.set_arena_bytes(partial.p.arena_bytes() + 64);
  y = partial.output("y", program::F32, {2, 8, 4});
  partial.kernel("neg", {x}, {copy});
  setInt(partial.kernel("kv_cache_write", {copy, u, p}, {shifted}), "axis", 1);
  partial.kernel("neg", {shifted}, {y});
  EXPECT_ERROR_CONTAINS(verifyProgram(partial.p),
                        "rank 0, instruction 1 (kv_cache_write): result "
                        "buffer 4 shares bytes with operand buffer 3");
  // The update's bytes (as long as the cache) are not the cache's.
  ProgramBuilder other;
  int32_t cache = other.input("cache", program::F32, {2, 8, 4});
  x = other.input("x", program::F32, {2, 8, 4});
  p = other.input("position", program::I64, {1});
  int32_t update = other.activation(program::F32, {2, 8, 4});
  int32_t onUpdate = other.alias(update, program::F32, {2, 8, 4});
  y = other.output("y", program::F32, {2, 8, 4});
  other.kernel("neg", {x}, {update});
  setInt(other.kernel("kv_cache_write", {cache, update, p}, {onUpdate}), "axis",
         1);
  other.kernel("neg", {onUpdate}, {y});
  EXPECT_ERROR_CONTAINS(verifyProgram(other.p),
                        "rank 0, instruction 1 (kv_cache_write): result "
                        "buffer 4 (a view of buffer 3) shares bytes with "
                        "operand buffer 3");
}

TEST(ProgramVerifier, ElementwiseOperandsBroadcastToTheResult) {
  EXPECT_OK(OneKernel("add", {{4}, {3, 1}}, {3, 4}).verify());
  EXPECT_ERROR_CONTAINS(OneKernel("add", {{4}, {3, 2}}, {3, 4}).verify(),
                        "operand 1 ([3, 2]) does not broadcast to the result "
                        "[3, 4]");
  EXPECT_ERROR_CONTAINS(OneKernel("neg", {{1, 4}}, {3, 4}).verify(),
                        "the result [3, 4] differs from the input [1, 4]");
}

TEST(ProgramVerifier, EpilogueSteps) {
  auto step = [](program::Kernel *kernel, const std::string &op,
                 int32_t operand) {
    program::ElementwiseStep *s = kernel->add_epilogue();
    s->set_op(op);
    s->set_operand(operand);
    return s;
  };
  OneKernel good("matmul", {{2, 3}, {3, 4}}, {2, 4});
  int32_t residual = good.b.input("residual", program::F32, {4});
  step(good.kernel, "gelu", -1);
  step(good.kernel, "add", residual);
  EXPECT_OK(good.verify());

  OneKernel where("matmul", {{2, 3}, {3, 4}}, {2, 4});
  step(where.kernel, "where", 1);
  EXPECT_ERROR_CONTAINS(where.verify(), "epilogue step 0 (where): not an "
                                        "elementwise op an epilogue can apply");
  OneKernel unary("matmul", {{2, 3}, {3, 4}}, {2, 4});
  step(unary.kernel, "relu", 0);
  EXPECT_ERROR_CONTAINS(unary.verify(), "epilogue step 0 (relu): a unary step "
                                        "has operand buffer 0, expected -1");
  OneKernel shape("matmul", {{2, 3}, {3, 4}}, {2, 4});
  step(shape.kernel, "add", 1);
  EXPECT_ERROR_CONTAINS(shape.verify(), "epilogue step 0 (add): its operand "
                                        "[3, 4] does not broadcast to the "
                                        "result [2, 4]");
}

TEST(ProgramVerifier, CudaStepsUseTheKernelsBuffers) {
  OneKernel launch("neg", {{4}}, {4});
  launch.b.input("other", program::F32, {4});
  program::CudaLaunch *l = launch.kernel->add_cuda()->mutable_launch();
  l->set_function("partita_neg_0");
  for (int i = 0; i < 3; ++i) {
    l->add_grid(1);
    l->add_block(32);
  }
  l->add_arguments(0);
  l->add_arguments(1);
  ASSERT_OK(launch.verify());
  l->set_arguments(0, 2);
  EXPECT_ERROR_CONTAINS(launch.verify(),
                        "CUDA step 0 (partita_neg_0) passes buffer 2, which is "
                        "not an operand or result of the kernel");

  OneKernel matmul("matmul", {{2, 3}, {3, 4}}, {2, 4});
  program::CublasLtMatmul *mm = matmul.kernel->add_cuda()->mutable_matmul();
  mm->set_a(0);
  mm->set_b(1);
  mm->set_d(2);
  mm->set_bias(-1);
  mm->set_c(-1);
  mm->set_m(2);
  mm->set_n(4);
  mm->set_k(3);
  mm->set_batch(1);
  ASSERT_OK(matmul.verify());
  mm->set_batch(2);
  mm->set_stride_a(6);
  EXPECT_ERROR_CONTAINS(matmul.verify(),
                        "CUDA step 0 (cuBLASLt matmul): a (f32 "
                        "[2, 3]) is smaller than the call "
                        "reads or writes");
}

//===----------------------------------------------------------------------===//
// Collectives and transfers on one rank
//===----------------------------------------------------------------------===//

TEST(ProgramVerifier, CollectivesAreWellFormed) {
  AsyncAllReduce kind;
  kind.b.p.mutable_instructions(1)->mutable_collective()->set_kind(
      Collective::KIND_UNSPECIFIED);
  EXPECT_ERROR_CONTAINS(verify(kind.b.p), "unknown collective kind 0");

  AsyncAllReduce reduction;
  reduction.b.p.mutable_instructions(1)->mutable_collective()->set_reduction(
      "product");
  EXPECT_ERROR_CONTAINS(verify(reduction.b.p), "unknown reduction 'product'");

  AsyncAllReduce group;
  group.b.p.mutable_instructions(1)->mutable_collective()->set_group(0, 2);
  group.b.p.mutable_instructions(1)->mutable_collective()->set_group(1, 3);
  EXPECT_ERROR_CONTAINS(verify(group.b.p), "the group must list distinct ranks "
                                           "of 0..1");

  ProgramBuilder gather(0, 2);
  int32_t x = gather.input("x", program::F32, {2, 4});
  int32_t y = gather.output("y", program::F32, {2, 4});
  gather.collective(Collective::ALL_GATHER, x, y, {0, 1})->set_dim(1);
  EXPECT_ERROR_CONTAINS(verify(gather.p),
                        "all_gather over group [0, 1] on rank "
                        "0: the result should be [2, 8], it "
                        "is [2, 4]");
}

TEST(ProgramVerifier, TransfersNameAnotherRank) {
  ProgramBuilder b(0, 2);
  int32_t x = b.input("x", program::F32, {4});
  b.p2p(PointToPoint::SEND, x, 2);
  EXPECT_ERROR_CONTAINS(verify(b.p), "rank 0, instruction 0 (send at send): "
                                     "peer 2 is not a rank of the world of 2");
  b.p.mutable_instructions(0)->mutable_p2p()->set_peer(0);
  EXPECT_ERROR_CONTAINS(verify(b.p), "sends to itself");
  b.p.mutable_instructions(0)->mutable_p2p()->set_kind(
      PointToPoint::KIND_UNSPECIFIED);
  EXPECT_ERROR_CONTAINS(verify(b.p), "unknown point-to-point kind 0");
}

//===----------------------------------------------------------------------===//
// All ranks together
//===----------------------------------------------------------------------===//

/// A two-stage pipeline: rank 0 computes a and sends it in two pieces
/// (tags 0 and 1); rank 1 receives both (the first asynchronously) and
/// adds them.
struct Pipeline {
  ProgramBuilder first{0, 2}, second{1, 2};
  Pipeline() {
    int32_t x = first.input("x", program::F32, {4});
    int32_t a = first.activation(program::F32, {4});
    first.kernel("neg", {x}, {a});
    first.p2p(PointToPoint::SEND, a, 1, 0);
    first.p2p(PointToPoint::SEND, x, 1, 1);

    int32_t r0 = second.activation(program::F32, {4});
    int32_t r1 = second.activation(program::F32, {4});
    int32_t y = second.output("y", program::F32, {4});
    PointToPoint *recv = second.p2p(PointToPoint::RECV, r0, 0, 0);
    recv->set_async(true);
    recv->set_token(0);
    second.wait(0);
    second.p2p(PointToPoint::RECV, r1, 0, 1);
    second.kernel("add", {r0, r1}, {y});
  }
  Status verify() const { return verifyPrograms({&first.p, &second.p}); }
};

TEST(ProgramVerifier, AcceptsAMatchedPipeline) {
  Pipeline p;
  EXPECT_OK(p.verify());
}

TEST(ProgramVerifier, ReceiveTurnedIntoASendNamesBothRanks) {
  Pipeline p;
  p.second.p.mutable_instructions(0)->mutable_p2p()->set_kind(
      PointToPoint::SEND);
  // Rank 1's own data flow is broken too (it sends what it never wrote),
  // but the mismatch between the ranks is what is reported.
  EXPECT_ERROR_CONTAINS(p.verify(),
                        "rank 0 sends 2 messages to rank 1, but rank 1 "
                        "receives 1 message from rank 0: the 1st does not "
                        "match: rank 0, instruction 1 (send at send) sends f32 "
                        "[4] to rank 1 with tag 0; rank 1, instruction 2 (recv "
                        "at recv) receives f32 [4] from rank 0 with tag 1");
}

TEST(ProgramVerifier, SendWithoutAReceive) {
  Pipeline p;
  p.second.p.mutable_instructions()->DeleteSubrange(2, 1);
  EXPECT_ERROR_CONTAINS(p.verify(),
                        "rank 0 sends 2 messages to rank 1, but rank 1 "
                        "receives 1 message from rank 0: the 2nd has no "
                        "receive: rank 0, instruction 2 (send at send) sends "
                        "f32 [4] to rank 1 with tag 1");
}

TEST(ProgramVerifier, TransfersMatchInOrderByTagAndType) {
  Pipeline swapped;
  swapped.first.p.mutable_instructions()->SwapElements(1, 2);
  EXPECT_ERROR_CONTAINS(swapped.verify(),
                        "the messages from rank 0 to rank 1 do not match: the "
                        "1st does not match: rank 0, instruction 1 (send at "
                        "send) sends f32 [4] to rank 1 with tag 1; rank 1, "
                        "instruction 0 (recv at recv) receives f32 [4] from "
                        "rank 0 with tag 0");

  Pipeline type;
  type.second.p.mutable_buffers(1)->mutable_type()->set_dtype(program::I32);
  EXPECT_ERROR_CONTAINS(type.verify(), "the 2nd does not match: rank 0, "
                                       "instruction 2 (send at send) sends f32 "
                                       "[4] to rank 1 with tag 1; rank 1, "
                                       "instruction 2 (recv at recv) receives "
                                       "i32 [4] from rank 0 with tag 1");
}

/// Both ranks all-reduce a and then all-gather it.
struct TwoCollectives {
  ProgramBuilder ranks[2] = {ProgramBuilder(0, 2), ProgramBuilder(1, 2)};
  TwoCollectives() {
    for (ProgramBuilder &b : ranks) {
      int32_t x = b.input("x", program::F32, {2});
      int32_t a = b.activation(program::F32, {2});
      int32_t y = b.output("y", program::F32, {4});
      b.collective(Collective::ALL_REDUCE, x, a, {0, 1})->set_reduction("sum");
      b.collective(Collective::ALL_GATHER, a, y, {0, 1})->set_dim(0);
    }
  }
  Status verify() const { return verifyPrograms({&ranks[0].p, &ranks[1].p}); }
};

TEST(ProgramVerifier, CollectivesMatchAcrossTheGroup) {
  TwoCollectives good;
  ASSERT_OK(good.verify());

  TwoCollectives reduction;
  reduction.ranks[1]
      .p.mutable_instructions(0)
      ->mutable_collective()
      ->set_reduction("max");
  EXPECT_ERROR_CONTAINS(reduction.verify(),
                        "the collectives over group [0, 1] do not match: the "
                        "1st does not match: rank 0, instruction 0 "
                        "(all_reduce at collective) "
                        "calls all_reduce(sum) f32 [2] -> [2] over group [0, "
                        "1]; rank 1, instruction 0 (all_reduce at collective) "
                        "calls all_reduce(max) f32 [2] -> [2] over group [0, "
                        "1]");

  TwoCollectives order;
  order.ranks[1].p.mutable_instructions(0)->mutable_collective()->set_group(0,
                                                                            1);
  order.ranks[1].p.mutable_instructions(0)->mutable_collective()->set_group(1,
                                                                            0);
  EXPECT_ERROR_CONTAINS(order.verify(),
                        "rank 0 makes 2 collectives over group [0, 1], but "
                        "rank 1 makes 1: the 1st does not match: rank 0, "
                        "instruction 0 (all_reduce at collective) calls "
                        "all_reduce(sum) f32 [2] -> [2] over group [0, 1]; "
                        "rank 1, instruction 1 (all_gather at collective) "
                        "calls all_gather(dim 0) f32 [2] -> [4] over group "
                        "[0, 1]");

  TwoCollectives missing;
  // Rank 1 concatenates its own a twice instead of gathering.
  program::Kernel *concat =
      missing.ranks[1].p.mutable_instructions(1)->mutable_kernel();
  concat->set_op("concat");
  concat->add_operands(1);
  concat->add_operands(1);
  concat->add_results(2);
  setInt(concat, "axis", 0);
  EXPECT_ERROR_CONTAINS(missing.verify(),
                        "rank 0 makes 2 collectives over group [0, 1], but "
                        "rank 1 makes 1: the 2nd has no counterpart on rank "
                        "1: rank 0, instruction 1 (all_gather at collective) "
                        "calls all_gather(dim 0) f32 [2] -> [4] over group "
                        "[0, 1]");
}

TEST(ProgramVerifier, CommunicationThatDeadlocksIsRefused) {
  // Each rank receives from the other before it sends: counts and tags
  // match, but neither receive can ever complete.
  ProgramBuilder ranks[2] = {ProgramBuilder(0, 2), ProgramBuilder(1, 2)};
  for (int r = 0; r < 2; ++r) {
    ProgramBuilder &b = ranks[r];
    int32_t x = b.input("x", program::F32, {4});
    int32_t y = b.output("y", program::F32, {4});
    b.p2p(PointToPoint::RECV, y, 1 - r);
    b.p2p(PointToPoint::SEND, x, 1 - r);
  }
  EXPECT_ERROR_CONTAINS(verifyPrograms({&ranks[0].p, &ranks[1].p}),
                        "the ranks' communication deadlocks: each of these "
                        "waits for another: rank 0, instruction 0 (recv at "
                        "recv) receives f32 [4] from rank 1 with tag 0; rank "
                        "1, instruction 0 (recv at recv) receives f32 [4] from "
                        "rank 0 with tag 0");
  // Sends are eager: sending first on one side is enough.
  ranks[0].p.mutable_instructions()->SwapElements(0, 1);
  EXPECT_OK(verifyPrograms({&ranks[0].p, &ranks[1].p}));
}

TEST(ProgramVerifier, CollectiveAndTransferInOppositeOrders) {
  TwoCollectives t;
  // Rank 0 sends after both collectives, rank 1 receives before them.
  t.ranks[0].p2p(PointToPoint::SEND, 0, 1);
  int32_t r = t.ranks[1].activation(program::F32, {2});
  t.ranks[1].p2p(PointToPoint::RECV, r, 0);
  auto *instructions = t.ranks[1].p.mutable_instructions();
  for (int i = instructions->size() - 1; i > 0; --i)
    instructions->SwapElements(i, i - 1);
  EXPECT_ERROR_CONTAINS(t.verify(),
                        "the ranks' communication deadlocks: each of these "
                        "waits for another: rank 0, instruction 0 (all_reduce "
                        "at collective) calls all_reduce(sum) f32 [2] -> [2] "
                        "over group [0, 1]; rank 1, instruction 0 (recv at "
                        "recv) receives f32 [2] from rank 0 with tag 0");
}

} // namespace
