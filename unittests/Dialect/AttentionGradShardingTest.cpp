//===- AttentionGradShardingTest.cpp - attention_grad split, run ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// nn.attention_grad's sharding rule and partition hook, run: a function of
// q, k, v (a float mask), out and dout whose inputs are annotated split
// over a host mesh is propagated, partitioned and lowered for every rank;
// the ranks run together (their collectives meet), each on its blocks of
// the inputs, and must all return what one device computes. Each case splits a
// different factor: batch and kv heads (parallel), the query heads of a kv
// group, the query rows and the value features (reductions: dk and dv, or dq
// and dk, are partial sums until the results are reduced), and causal query
// rows (opaque: the inputs are gathered, each rank computes all).
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Dist/Transforms/Passes.h"
#include "partita/InitAllDialects.h"
#include "partita/Pipelines/Pipelines.h"
#include "partita/Target/ExecProgram/ExecProgram.h"
#include "partita/runtime/Executor.h"
#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/HostKernels.h"
#include "partita/runtime/LoadedArtifact.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <thread>

using namespace mlir;
namespace rt = ::partita::runtime;

namespace {

struct ShardCase {
  std::string name;
  /// The mesh's axes, e.g. "dp = 2, tp = 2".
  std::string mesh;
  int32_t ranks;
  std::vector<int64_t> q, k, v, mask;
  bool causal;
  /// The sharding of q, k, v, the mask, out and dout: `[{dp}, {tp}, {}, {}]`
  /// or empty for none.
  std::string qSplit, kvSplit, vSplit, maskSplit, outSplit;
};

std::string typeOf(const std::vector<int64_t> &shape) {
  std::string text = "tensor<";
  for (int64_t d : shape)
    text += std::to_string(d) + "x";
  return text + "f32>";
}

int64_t countOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The function: the inputs annotated, the op, the results replicated.
/// Without `sharded`, no mesh and no annotations (one device).
std::string moduleText(const ShardCase &c, bool sharded) {
  std::vector<int64_t> out = {c.q[0], c.q[1], c.q[2], c.v[3]};
  std::string q = typeOf(c.q), k = typeOf(c.k), v = typeOf(c.v),
              o = typeOf(out), m = typeOf(c.mask);
  bool hasMask = !c.mask.empty();
  std::string text;
  if (sharded)
    text += "dist.mesh @mesh [" + c.mesh + "]\n";
  text += "func.func @main(%q: " + q + ", %k: " + k + ", %v: " + v +
          (hasMask ? ", %m: " + m : "") + ", %o: " + o + ", %g: " + o +
          ") -> (" + q + ", " + k + ", " + v + ") {\n";
  auto annotate = [&](const std::string &name, const std::string &split,
                      const std::string &type) {
    if (!sharded || split.empty())
      return "%" + name;
    text += "  %" + name + "s = dist.annotate %" + name + " sharding<@mesh, " +
            split + "> : " + type + "\n";
    return "%" + name + "s";
  };
  std::string qa = annotate("q", c.qSplit, q), ka = annotate("k", c.kvSplit, k),
              va = annotate("v", c.vSplit.empty() ? c.kvSplit : c.vSplit, v),
              ma = hasMask ? annotate("m", c.maskSplit, m) : "",
              oa = annotate("o", c.outSplit, o),
              ga = annotate("g", c.outSplit, o);
  text += "  %dq, %dk, %dv = nn.attention_grad " + qa + ", " + ka + ", " + va +
          (hasMask ? " mask " + ma : "") + " out " + oa + " dout " + ga +
          (c.causal ? " {causal}" : "") + " : (" + q + ", " + k + ", " + v +
          (hasMask ? ", " + m : "") + ", " + o + ", " + o + ") -> (" + q +
          ", " + k + ", " + v + ")\n";
  std::vector<std::string> results = {"%dq", "%dk", "%dv"};
  if (sharded) {
    const char *whole = "sharding<@mesh, [{}, {}, {}, {}]>";
    std::string types[] = {q, k, v};
    for (int i = 0; i < 3; ++i) {
      text += "  " + results[i] + "r = dist.annotate " + results[i] + " " +
              whole + " : " + types[i] + "\n";
      results[i] += "r";
    }
  }
  text += "  return " + results[0] + ", " + results[1] + ", " + results[2] +
          " : " + q + ", " + k + ", " + v + "\n}\n";
  return text;
}

struct Context : MLIRContext {
  Context() : MLIRContext(registry()) { loadAllAvailableDialects(); }
  static DialectRegistry registry() {
    DialectRegistry registry;
    mlir::partita::registerAllDialects(registry);
    return registry;
  }
};

/// Which block of each input a rank reads: per dimension, its first index
/// and its size.
using Blocks = std::vector<std::vector<std::pair<int64_t, int64_t>>>;

/// Rank `rank`'s program of `text`, and the blocks of the inputs it reads
/// (after partitioning, the arguments are split as the plan says).
testing::AssertionResult compile(MLIRContext &context, const std::string &text,
                                 bool sharded, int32_t rank,
                                 ::partita::program::Program &program,
                                 Blocks &blocks) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module)
    return testing::AssertionFailure() << "does not parse:\n" << text;
  auto func = module->lookupSymbol<func::FuncOp>("main");
  blocks.clear();
  for (Type type : func.getArgumentTypes()) {
    blocks.emplace_back();
    for (int64_t size : cast<RankedTensorType>(type).getShape())
      blocks.back().push_back({0, size});
  }
  if (sharded) {
    PassManager pm(&context, ModuleOp::getOperationName());
    pm.addPass(mlir::partita::createPropagateShardingPass());
    mlir::partita::PipelineOptions options;
    mlir::partita::buildPartitionPipeline(pm, options);
    if (failed(pm.run(*module)))
      return testing::AssertionFailure() << "partitioning failed:\n" << text;
    auto mesh = *module->getOps<mlir::partita::dist::MeshOp>().begin();
    ArrayRef<int64_t> sizes = mesh.getAxisSizes();
    SmallVector<int64_t> coords(sizes.size());
    for (int64_t i = static_cast<int64_t>(sizes.size()) - 1, r = rank; i >= 0;
         --i) {
      coords[i] = r % sizes[i];
      r /= sizes[i];
    }
    for (unsigned a = 0; a < func.getNumArguments(); ++a) {
      auto sharding = func.getArgAttrOfType<mlir::partita::dist::ShardingAttr>(
          a, "dist.sharding");
      for (auto [d, block] : llvm::enumerate(blocks[a])) {
        int64_t position = 0, count = 1;
        for (StringRef axis : sharding.getAxesOfDim(d)) {
          unsigned i = *mesh.getAxisIndex(axis);
          position = position * sizes[i] + coords[i];
          count *= sizes[i];
        }
        block.second /= count;
        block.first = position * block.second;
      }
    }
  }
  PassManager pm(&context, ModuleOp::getOperationName());
  mlir::partita::ExecPipelineOptions exec;
  exec.rank = rank;
  mlir::partita::buildExecPipeline(pm, exec);
  if (failed(pm.run(*module)))
    return testing::AssertionFailure() << "the exec pipeline failed";
  FailureOr<mlir::partita::ExecProgram> translated =
      mlir::partita::translateToExecProgram(
          module->lookupSymbol<func::FuncOp>("main"));
  if (failed(translated))
    return testing::AssertionFailure() << "translation failed";
  program = translated->program;
  return testing::AssertionSuccess();
}

/// The block `block` of the row-major tensor `whole` of `shape`.
std::vector<float> cut(const std::vector<float> &whole,
                       const std::vector<int64_t> &shape,
                       const std::vector<std::pair<int64_t, int64_t>> &block) {
  int64_t count = 1;
  for (auto [first, size] : block)
    count *= size;
  std::vector<float> local(count);
  for (int64_t e = 0; e < count; ++e) {
    int64_t rest = e, offset = 0, stride = 1;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      int64_t index = rest % block[d].second;
      rest /= block[d].second;
      offset += (block[d].first + index) * stride;
      stride *= shape[d];
    }
    local[e] = whole[offset];
  }
  return local;
}

/// Runs the programs of every rank together, rank `r` on `inputs[r]`;
/// `outputs[r]` gets its results.
testing::AssertionResult
runAll(const std::vector<::partita::program::Program> &programs,
       std::vector<std::vector<std::vector<float>>> &inputs,
       std::vector<std::vector<std::vector<float>>> &outputs) {
  int32_t ranks = static_cast<int32_t>(programs.size());
  rt::HostWorld world(ranks, std::chrono::seconds(60));
  rt::WeightStore weights;
  std::vector<std::string> errors(ranks);
  outputs.assign(ranks, {});
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const ::partita::program::Program &program = programs[r];
      rt::ThreadPool pool(1);
      std::unique_ptr<rt::Executor> executor;
      rt::Status created = rt::Executor::create(
          program, weights, world.communicator(r), pool, executor);
      if (!created) {
        errors[r] = created.message();
        return;
      }
      std::vector<rt::NamedTensor> in, out;
      for (int i = 0; i < program.inputs_size(); ++i) {
        const auto &type = program.buffers(program.inputs(i).buffer()).type();
        in.push_back({program.inputs(i).name(),
                      rt::Tensor{inputs[r][i].data(), ::partita::program::F32,
                                 std::vector<int64_t>(type.shape().begin(),
                                                      type.shape().end())}});
      }
      outputs[r].resize(program.outputs_size());
      for (int i = 0; i < program.outputs_size(); ++i) {
        const auto &type = program.buffers(program.outputs(i).buffer()).type();
        std::vector<int64_t> shape(type.shape().begin(), type.shape().end());
        outputs[r][i].assign(countOf(shape), 0.0f);
        out.push_back(
            {program.outputs(i).name(),
             rt::Tensor{outputs[r][i].data(), ::partita::program::F32, shape}});
      }
      rt::Status ran = executor->run(in, out);
      if (!ran)
        errors[r] = ran.message();
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int32_t r = 0; r < ranks; ++r)
    if (!errors[r].empty())
      return testing::AssertionFailure() << "rank " << r << ": " << errors[r];
  return testing::AssertionSuccess();
}

class AttentionGradSharding : public testing::TestWithParam<ShardCase> {};

TEST_P(AttentionGradSharding, EveryRankMatchesOneDevice) {
  const ShardCase &c = GetParam();
  Context context;
  std::vector<::partita::program::Program> one(1), split(c.ranks);
  std::vector<Blocks> blocks(c.ranks);
  Blocks whole;
  ASSERT_TRUE(compile(context, moduleText(c, false), false, 0, one[0], whole));
  for (int32_t r = 0; r < c.ranks; ++r)
    ASSERT_TRUE(
        compile(context, moduleText(c, true), true, r, split[r], blocks[r]));

  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xffffffff);
  std::uniform_real_distribution<double> dist(-1.5, 1.5);
  std::vector<int64_t> out = {c.q[0], c.q[1], c.q[2], c.v[3]};
  std::vector<std::vector<int64_t>> shapes = {c.q, c.k, c.v};
  if (!c.mask.empty())
    shapes.push_back(c.mask);
  shapes.push_back(out);
  shapes.push_back(out);
  std::vector<std::vector<float>> inputs;
  for (const std::vector<int64_t> &shape : shapes) {
    inputs.emplace_back(countOf(shape));
    for (float &x : inputs.back())
      x = static_cast<float>(dist(rng));
  }
  std::vector<std::vector<std::vector<float>>> wholeInputs = {inputs},
                                               rankInputs(c.ranks);
  bool anySplit = false;
  for (int32_t r = 0; r < c.ranks; ++r)
    for (size_t i = 0; i < inputs.size(); ++i) {
      rankInputs[r].push_back(cut(inputs[i], shapes[i], blocks[r][i]));
      anySplit |= rankInputs[r].back().size() < inputs[i].size();
    }
  ASSERT_TRUE(anySplit) << "the plan splits no input";
  std::vector<std::vector<std::vector<float>>> want, got;
  ASSERT_TRUE(runAll(one, wholeInputs, want));
  ASSERT_TRUE(runAll(split, rankInputs, got));
  const char *names[] = {"dq", "dk", "dv"};
  for (int32_t r = 0; r < c.ranks; ++r)
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(got[r][i].size(), want[0][i].size());
      double worst = 0, scale = 0;
      for (size_t e = 0; e < want[0][i].size(); ++e) {
        worst =
            std::max(worst, double(std::fabs(got[r][i][e] - want[0][i][e])));
        scale = std::max(scale, double(std::fabs(want[0][i][e])));
      }
      EXPECT_LE(worst, 1e-5 * std::max(scale, 1.0))
          << c.name << ": rank " << r << "'s " << names[i];
    }
}

INSTANTIATE_TEST_SUITE_P(
    Splits, AttentionGradSharding,
    testing::Values(
        // Batch over dp, the kv heads (and their query heads) over tp.
        ShardCase{"batch_and_heads",
                  "dp = 2, tp = 2",
                  4,
                  {2, 4, 3, 4},
                  {2, 2, 5, 4},
                  {2, 2, 5, 3},
                  {},
                  true,
                  "[{dp}, {tp}, {}, {}]",
                  "[{dp}, {tp}, {}, {}]"},
        // One kv head read by four query heads split over tp: dk and dv
        // are sums over the devices' query heads.
        ShardCase{"query_heads_of_a_group",
                  "tp = 2",
                  2,
                  {1, 4, 3, 4},
                  {1, 1, 3, 4},
                  {1, 1, 3, 4},
                  {},
                  false,
                  "[{}, {tp}, {}, {}]",
                  "",
                  "",
                  "",
                  "[{}, {tp}, {}, {}]"},
        // Query rows over sp with a mask per row: dk and dv are sums over
        // the devices' rows.
        ShardCase{"query_rows",
                  "sp = 2",
                  2,
                  {1, 2, 4, 4},
                  {1, 2, 6, 4},
                  {1, 2, 6, 4},
                  {1, 1, 4, 6},
                  false,
                  "[{}, {}, {sp}, {}]",
                  "",
                  "",
                  "[{}, {}, {sp}, {}]",
                  "[{}, {}, {sp}, {}]"},
        // Causal query rows over sp cannot be split: gathered.
        ShardCase{"causal_query_rows",
                  "sp = 2",
                  2,
                  {1, 2, 4, 4},
                  {1, 2, 6, 4},
                  {1, 2, 6, 4},
                  {},
                  true,
                  "[{}, {}, {sp}, {}]",
                  "",
                  "",
                  "",
                  "[{}, {}, {sp}, {}]"},
        // Value features over tp: dq and dk are sums over the devices'
        // features.
        ShardCase{"value_features",
                  "tp = 2",
                  2,
                  {1, 2, 3, 4},
                  {1, 2, 5, 4},
                  {1, 2, 5, 4},
                  {},
                  true,
                  "",
                  "",
                  "[{}, {}, {}, {tp}]",
                  "",
                  "[{}, {}, {}, {tp}]"}),
    [](const testing::TestParamInfo<ShardCase> &info) {
      return info.param.name;
    });

} // namespace
