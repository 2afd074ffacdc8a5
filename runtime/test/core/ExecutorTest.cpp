//===- ExecutorTest.cpp - running hand-built programs ---------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Executor.h"

#include "partita/runtime/ArtifactWriter.h"
#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/HostKernels.h"
#include "partita/runtime/LoadedArtifact.h"

#include "ProgramBuilder.h"
#include "TestUtil.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

using namespace partita::runtime;
namespace program = partita::program;
using program::Buffer;
using test::ProgramBuilder;

namespace {

constexpr std::chrono::milliseconds kPatient = std::chrono::seconds(60);

void setBool(program::Kernel *kernel, const std::string &name, bool value) {
  (*kernel->mutable_attributes())[name].set_b(value);
}

program::ElementwiseStep *step(program::Kernel *kernel, const std::string &op,
                               int32_t operand = -1) {
  program::ElementwiseStep *s = kernel->add_epilogue();
  s->set_op(op);
  s->set_operand(operand);
  return s;
}

/// One rank, no weights: what most tests need.
struct SingleRank {
  HostWorld world{1, kPatient};
  ThreadPool pool{2};
  WeightStore weights;

  Status create(const program::Program &p,
                std::unique_ptr<Executor> &executor) {
    return Executor::create(p, weights, world.communicator(0), pool, executor);
  }
};

Tensor view(std::vector<float> &data, std::vector<int64_t> shape) {
  return Tensor{data.data(), program::F32, std::move(shape)};
}

/// y = relu(x @ w + bias) + residual, the matmul's epilogue doing the rest.
TEST(Executor, MatmulWithEpilogue) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2, 3});
  int32_t w = b.constant({1, -1, 2, 0, 0.5f, 1}, {3, 2});
  int32_t bias = b.constant({0.25f, -4}, {2});
  int32_t residual = b.constant({10, 20}, {2});
  int32_t y = b.output("y", program::F32, {2, 2});
  program::Kernel *matmul = b.kernel("matmul", {x, w, bias}, {y});
  setBool(matmul, "has_bias", true);
  step(matmul, "relu");
  step(matmul, "add", residual);

  SingleRank rank;
  std::unique_ptr<Executor> executor;
  ASSERT_OK(rank.create(b.p, executor));
  std::vector<float> xs = {1, 2, 3, -1, 0, 2}, ys(4);
  ASSERT_OK(
      executor->run({{"x", view(xs, {2, 3})}}, {{"y", view(ys, {2, 2})}}));
  // x @ w = [[1+4+1.5, -1+0+3], [-1+0+1, 1+0+2]] = [[6.5, 2], [0, 3]].
  // Exact: quarter-integer products and sums, the same bits in any order.
  EXPECT_EQ(ys, (std::vector<float>{16.75f, 20, 10.25f, 20}));
}

/// An alias reads an input with another shape, and a kernel writes an
/// output through an alias of an activation.
TEST(Executor, AliasesAreReshapes) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2, 3});
  int32_t flat = b.alias(x, program::F32, {6});
  int32_t negated = b.activation(program::F32, {6});
  int32_t square = b.alias(negated, program::F32, {3, 2});
  int32_t y = b.output("y", program::F32, {3, 2});
  b.kernel("neg", {flat}, {negated});
  b.kernel("copy", {square}, {y});

  SingleRank rank;
  std::unique_ptr<Executor> executor;
  ASSERT_OK(rank.create(b.p, executor));
  std::vector<float> xs = {1, 2, 3, 4, 5, 6}, ys(6);
  ASSERT_OK(
      executor->run({{"x", view(xs, {2, 3})}}, {{"y", view(ys, {3, 2})}}));
  EXPECT_EQ(ys, (std::vector<float>{-1, -2, -3, -4, -5, -6}));
}

/// Views at an offset: a cache's rows read from an input and written into
/// an output where they lie, one microbatch of rows at a time, as a
/// pipeline stage's KV cache is.
TEST(Executor, ViewsAtAnOffsetAreRowsInPlace) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {3, 2});
  int32_t y = b.output("y", program::F32, {3, 2});
  for (int64_t row = 0; row < 3; ++row) {
    uint64_t offset = uint64_t(row) * 2 * sizeof(float);
    int32_t in = b.alias(x, program::F32, {1, 2}, offset);
    int32_t out = b.alias(y, program::F32, {1, 2}, offset);
    b.kernel(row == 1 ? "abs" : "neg", {in}, {out});
  }

  SingleRank rank;
  std::unique_ptr<Executor> executor;
  ASSERT_OK(rank.create(b.p, executor));
  std::vector<float> xs = {1, 2, 3, -4, 5, 6}, ys(6, 7);
  ASSERT_OK(
      executor->run({{"x", view(xs, {3, 2})}}, {{"y", view(ys, {3, 2})}}));
  // Exact: negation and absolute value only flip sign bits.
  EXPECT_EQ(ys, (std::vector<float>{-1, -2, 3, 4, -5, -6}));
}

TEST(Executor, Constants) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2, 2});
  int32_t c = b.constant({0.5f, -2}, {2});
  int32_t y = b.output("y", program::F32, {2, 2});
  b.kernel("mul", {x, c}, {y});
  SingleRank rank;
  std::unique_ptr<Executor> executor;
  ASSERT_OK(rank.create(b.p, executor));
  std::vector<float> xs = {1, 2, 3, 4}, ys(4);
  // Runs twice: nothing of the first run leaks into the second.
  for (int run = 0; run < 2; ++run) {
    ASSERT_OK(
        executor->run({{"x", view(xs, {2, 2})}}, {{"y", view(ys, {2, 2})}}));
    // Exact: products by 0.5 and -2.
    EXPECT_EQ(ys, (std::vector<float>{0.5f, -4, 1.5f, -8}));
    xs = {2, 4, 6, 8};
    for (float &value : xs)
      value /= 2;
  }
}

/// A matmul whose weight comes from an artifact written by ArtifactWriter.
TEST(Executor, WeightsFromAnArtifact) {
  test::TemporaryDirectory directory;
  std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {1, 2});
  int32_t w = b.weight("proj.weight", program::F32, {2, 3});
  int32_t y = b.output("y", program::F32, {1, 3});
  b.kernel("matmul", {x, w}, {y});

  ArtifactWriter writer;
  writer.manifest().modelName = "weights";
  writer.manifest().ranks = {RankEntry{}};
  writer.manifest().inputs = {{"x", program::F32, {1, 2}, {}}};
  writer.manifest().outputs = {{"y", program::F32, {1, 3}, {}}};
  ASSERT_OK(writer.addProgram(0, b.p));
  ASSERT_OK(writer.addWeight("proj.weight", program::F32, {2, 3}, weight.data(),
                             weight.size() * sizeof(float)));
  ASSERT_OK(writer.commit(directory.path("art")));
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(directory.path("art"), artifact));

  HostWorld world(1, kPatient);
  ThreadPool pool(1);
  std::unique_ptr<Executor> executor;
  ASSERT_OK(Executor::create(artifact->program(0), artifact->weights(),
                             world.communicator(0), pool, executor));
  std::vector<float> xs = {1, -1}, ys(3);
  ASSERT_OK(
      executor->run({{"x", view(xs, {1, 2})}}, {{"y", view(ys, {1, 3})}}));
  // Exact: small-integer products and sums, the same bits in any order.
  EXPECT_EQ(ys, (std::vector<float>{-3, -3, -3}));

  // The program's view of the weight must match the file's.
  b.p.mutable_buffers(w)->mutable_type()->set_shape(0, 3);
  b.p.mutable_buffers(w)->mutable_type()->set_shape(1, 2);
  EXPECT_ERROR_CONTAINS(Executor::create(b.p, artifact->weights(),
                                         world.communicator(0), pool, executor),
                        "buffer 1: weight 'proj.weight' is f32 [2, 3] in the "
                        "artifact, the program expects f32 [3, 2]");
  b.p.mutable_buffers(w)->set_weight("absent");
  EXPECT_ERROR_CONTAINS(Executor::create(b.p, artifact->weights(),
                                         world.communicator(0), pool, executor),
                        "weight 'absent' is not in the artifact's weights");
}

/// `field` of /proc/self/status (`RssAnon`, `RssFile`) in bytes.
int64_t statusBytes(const char *field) {
  std::ifstream status("/proc/self/status");
  std::string line, prefix = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.rfind(prefix, 0) == 0)
      return std::stoll(line.substr(prefix.size())) * 1024;
  return -1;
}

/// The host backend reads weights where the artifact maps them: opening
/// the artifact and creating the executor add no anonymous memory of the
/// weight's size (nothing copied), and neither touch its pages (nothing
/// hashed or read); a run reads them through the mapping.
TEST(Executor, WeightsAreMappedNotCopied) {
  if (statusBytes("RssAnon") < 0)
    GTEST_SKIP() << "no RssAnon in /proc/self/status";
  constexpr int64_t kRows = 4096, kColumns = 4096;
  constexpr int64_t kWeightBytes = kRows * kColumns * int64_t(sizeof(float));
  test::TemporaryDirectory directory;
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {1, kRows});
  int32_t w = b.weight("w", program::F32, {kRows, kColumns});
  int32_t y = b.output("y", program::F32, {1, kColumns});
  b.kernel("matmul", {x, w}, {y});
  {
    std::vector<float> weight(size_t(kRows * kColumns), 0.5f);
    ArtifactWriter writer;
    writer.manifest().modelName = "mapped";
    writer.manifest().ranks = {RankEntry{}};
    writer.manifest().inputs = {{"x", program::F32, {1, kRows}, {}}};
    writer.manifest().outputs = {{"y", program::F32, {1, kColumns}, {}}};
    ASSERT_OK(writer.addProgram(0, b.p));
    ASSERT_OK(writer.addWeight("w", program::F32, {kRows, kColumns},
                               weight.data(), size_t(kWeightBytes)));
    ASSERT_OK(writer.commit(directory.path("art")));
  }
  HostWorld world(1, kPatient);
  ThreadPool pool(1);
  std::vector<float> xs(static_cast<size_t>(kRows), 1.0f);
  std::vector<float> ys(static_cast<size_t>(kColumns));
  int64_t anonBefore = statusBytes("RssAnon");
  int64_t fileBefore = statusBytes("RssFile");
  std::unique_ptr<LoadedArtifact> artifact;
  ASSERT_OK(LoadedArtifact::open(directory.path("art"), artifact));
  std::unique_ptr<Executor> executor;
  ASSERT_OK(Executor::create(artifact->program(0), artifact->weights(),
                             world.communicator(0), pool, executor));
  EXPECT_LT(statusBytes("RssAnon") - anonBefore, kWeightBytes / 8);
  EXPECT_LT(statusBytes("RssFile") - fileBefore, kWeightBytes / 8);
  ASSERT_OK(executor->run({{"x", view(xs, {1, kRows})}},
                          {{"y", view(ys, {1, kColumns})}}));
  // Exact: 4096 halves sum to 2048 in any order.
  EXPECT_EQ(ys[0], 2048.0f);
  EXPECT_EQ(ys[size_t(kColumns - 1)], 2048.0f);
  EXPECT_LT(statusBytes("RssAnon") - anonBefore, kWeightBytes / 2);
}

/// Each rank doubles its input, starts an all-reduce, computes something
/// else meanwhile, waits, and adds its input: y = sum_r(2 x_r) + x, z = -x.
TEST(Executor, AsyncAllReduceOnTwoRanks) {
  std::vector<program::Program> programs;
  for (int32_t r = 0; r < 2; ++r) {
    ProgramBuilder b(r, 2);
    int32_t x = b.input("x", program::F32, {4});
    int32_t two = b.constant({2}, {1});
    int32_t doubled = b.activation(program::F32, {4});
    int32_t summed = b.activation(program::F32, {4});
    int32_t y = b.output("y", program::F32, {4});
    int32_t z = b.output("z", program::F32, {4});
    b.kernel("mul", {x, two}, {doubled});
    program::Collective *reduce =
        b.collective(program::Collective::ALL_REDUCE, doubled, summed, {0, 1});
    reduce->set_reduction("sum");
    reduce->set_async(true);
    reduce->set_token(5);
    b.kernel("neg", {x}, {z});
    b.wait(5);
    b.kernel("add", {summed, x}, {y});
    programs.push_back(b.p);
  }
  HostWorld world(2, kPatient);
  WeightStore weights;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::unique_ptr<Executor>> executors(2);
  for (int32_t r = 0; r < 2; ++r) {
    pools.push_back(std::make_unique<ThreadPool>(1));
    ASSERT_OK(Executor::create(programs[size_t(r)], weights,
                               world.communicator(r), *pools.back(),
                               executors[size_t(r)]));
  }
  std::vector<std::vector<float>> xs = {{1, 2, 3, 4}, {10, 20, 30, 40}};
  std::vector<std::vector<float>> ys(2, std::vector<float>(4)),
      zs(2, std::vector<float>(4));
  std::vector<Status> statuses(2);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      statuses[r] =
          executors[r]->run({{"x", view(xs[r], {4})}},
                            {{"y", view(ys[r], {4})}, {"z", view(zs[r], {4})}});
    });
  for (std::thread &thread : threads)
    thread.join();
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_OK(statuses[r]);
    for (size_t i = 0; i < 4; ++i) {
      // Exact: small-integer sums, the same bits in any order.
      EXPECT_EQ(ys[r][i], 2 * (xs[0][i] + xs[1][i]) + xs[r][i]);
      EXPECT_EQ(zs[r][i], -xs[r][i]);
    }
  }
}

TEST(Executor, RunChecksNamesDtypesAndShapes) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2, 3});
  int32_t y = b.output("y", program::F32, {2, 3});
  b.kernel("neg", {x}, {y});
  SingleRank rank;
  std::unique_ptr<Executor> executor;
  ASSERT_OK(rank.create(b.p, executor));
  std::vector<float> xs(6), ys(6);
  std::vector<int64_t> ids(6);
  NamedTensor output{"y", view(ys, {2, 3})};
  EXPECT_ERROR_CONTAINS(executor->run({}, {output}),
                        "input 'x' (f32 [2, 3]) is missing");
  EXPECT_ERROR_CONTAINS(
      executor->run({{"x", view(xs, {2, 3})}, {"q", view(xs, {2, 3})}},
                    {output}),
      "rank 0: the program has no input 'q' (its inputs: x)");
  EXPECT_ERROR_CONTAINS(executor->run({{"x", view(xs, {3, 2})}}, {output}),
                        "input 'x': expected f32 [2, 3], got f32 [3, 2]");
  EXPECT_ERROR_CONTAINS(
      executor->run({{"x", Tensor{ids.data(), program::I64, {2, 3}}}},
                    {output}),
      "input 'x': expected f32 [2, 3], got i64 [2, 3]");
  EXPECT_ERROR_CONTAINS(executor->run({{"x", view(xs, {2, 3})}}, {}),
                        "output 'y' (f32 [2, 3]) is missing");
  EXPECT_OK(executor->run({{"x", view(xs, {2, 3})}}, {output}));
}

TEST(Executor, KernelErrorsNameTheLocation) {
  ProgramBuilder b;
  int32_t x = b.input("x", program::F32, {2});
  int32_t y = b.output("y", program::F32, {2});
  b.kernel("frobnicate", {x}, {y}, "/block.0/Frob");
  SingleRank rank;
  std::unique_ptr<Executor> executor;
  ASSERT_OK(rank.create(b.p, executor));
  std::vector<float> xs(2), ys(2);
  Status status = executor->run({{"x", view(xs, {2})}}, {{"y", view(ys, {2})}});
  EXPECT_ERROR_CONTAINS(status, "rank 0: /block.0/Frob: ");
  EXPECT_ERROR_CONTAINS(status, "frobnicate");
}

struct InvalidCase {
  const char *what;
  std::function<void(ProgramBuilder &)> build;
  const char *message;
};

TEST(Executor, RefusesInvalidPrograms) {
  std::vector<InvalidCase> cases = {
      {"version", [](ProgramBuilder &b) { b.p.set_format_version(7); },
       "program format version 7 is not supported"},
      {"rank", [](ProgramBuilder &b) { b.p.set_rank(1); },
       "the program is for rank 1 of 1, the communicator is rank 0 of 1"},
      {"arena",
       [](ProgramBuilder &b) {
         int32_t a = b.activation(program::F32, {4});
         b.p.mutable_buffers(a)->set_arena_offset(56);
       },
       "lies outside the arena of 64 bytes"},
      {"constant",
       [](ProgramBuilder &b) {
         int32_t c = b.constant({1, 2}, {2});
         b.p.mutable_buffers(c)->mutable_type()->set_shape(0, 3);
       },
       "the constant holds 8 bytes, f32 [3] needs 12"},
      {"alias size",
       [](ProgramBuilder &b) {
         int32_t a = b.activation(program::F32, {4});
         b.alias(a, program::F32, {5});
       },
       "buffer 1 (f32 [5] at offset 0) aliases buffer 0 (f32 [4]), which "
       "does not hold its bytes"},
      {"alias offset",
       [](ProgramBuilder &b) {
         int32_t a = b.activation(program::F32, {4});
         b.alias(a, program::F32, {2}, 12);
       },
       "buffer 1 (f32 [2] at offset 12) aliases buffer 0 (f32 [4]), which "
       "does not hold its bytes"},
      {"alias alignment",
       [](ProgramBuilder &b) {
         int32_t a = b.activation(program::F32, {4});
         b.alias(a, program::F32, {2}, 2);
       },
       "buffer 1: view offset 2 is not aligned to its elements"},
      {"alias cycle",
       [](ProgramBuilder &b) {
         int32_t first = b.alias(1, program::F32, {2});
         b.alias(first, program::F32, {2});
       },
       "cycle of aliases"},
      {"dtype",
       [](ProgramBuilder &b) { b.buffer(Buffer::ACTIVATION, {}, {2}); },
       "buffer 0 has no element type"},
      {"unbound input",
       [](ProgramBuilder &b) { b.buffer(Buffer::INPUT, program::F32, {2}); },
       "buffer 0 is an input buffer bound 0 times"},
      {"unknown buffer",
       [](ProgramBuilder &b) { b.kernel("neg", {3}, {4}, "/Neg"); },
       "rank 0: /Neg: reads buffer 3, which the program does not have"},
      {"read-only result",
       [](ProgramBuilder &b) {
         int32_t c = b.constant({1}, {1});
         b.kernel("neg", {c}, {c}, "/Neg");
       },
       "/Neg: writes buffer 0, which is read-only"},
      {"unknown token", [](ProgramBuilder &b) { b.wait(3); },
       "waits for token 3, which no pending asynchronous instruction "
       "started"},
      {"unwaited token",
       [](ProgramBuilder &b) {
         int32_t a = b.activation(program::F32, {2});
         int32_t r = b.activation(program::F32, {2});
         program::Collective *c =
             b.collective(program::Collective::ALL_REDUCE, a, r, {0});
         c->set_reduction("sum");
         c->set_async(true);
         c->set_token(9);
       },
       "token 9 is started but never waited for"},
      {"reduction",
       [](ProgramBuilder &b) {
         int32_t a = b.activation(program::F32, {2});
         b.collective(program::Collective::ALL_REDUCE, a, a, {0})
             ->set_reduction("avg");
       },
       "unknown reduction 'avg'"},
      {"empty", [](ProgramBuilder &b) { b.p.add_instructions(); },
       "instruction 0: empty instruction"},
  };
  for (const InvalidCase &c : cases) {
    ProgramBuilder b;
    c.build(b);
    SingleRank rank;
    std::unique_ptr<Executor> executor;
    Status status = rank.create(b.p, executor);
    EXPECT_FALSE(status.isOk()) << c.what;
    EXPECT_NE(status.message().find(c.message), std::string::npos)
        << c.what << ": " << status.message();
  }
}

} // namespace

/// A resident tensor (a training parameter, a KV cache) is bound as an
/// input and an output of one memory: an update written in place must
/// come after the last read of the old value, or the executor refuses the
/// program (a compiler bug would otherwise read the new value as the old).
TEST(Executor, ResidentUpdatesComeAfterTheLastRead) {
  auto build = [](bool readAfterUpdate) {
    ProgramBuilder b;
    int32_t w = b.input("w", program::F32, {2});
    int32_t x = b.input("x", program::F32, {2});
    int32_t updated = b.output("w", program::F32, {2});
    int32_t y = b.output("y", program::F32, {2});
    if (!readAfterUpdate)
      b.kernel("mul", {w, x}, {y});
    b.kernel("add", {w, x}, {updated});
    if (readAfterUpdate)
      b.kernel("mul", {w, x}, {y});
    return b.p;
  };
  SingleRank rank;
  std::vector<float> memory = {1, 2}, xs = {3, 4}, ys(2);
  std::vector<NamedTensor> resident = {{"w", view(memory, {2})}};
  for (bool late : {false, true}) {
    program::Program p = build(late);
    std::unique_ptr<Executor> executor;
    Status created =
        Executor::create(p, rank.weights, rank.world.communicator(0), rank.pool,
                         executor, resident);
    if (late) {
      EXPECT_ERROR_CONTAINS(created, "reads 'w' after");
      EXPECT_ERROR_CONTAINS(created, "wrote its new value over it");
      continue;
    }
    ASSERT_OK(created);
    ASSERT_OK(executor->run({{"x", view(xs, {2})}}, {{"y", view(ys, {2})}}));
    EXPECT_EQ(ys, (std::vector<float>{3, 8}));
    EXPECT_EQ(memory, (std::vector<float>{4, 6}));
  }
}
