//===- DerivativesTest.cpp - vjp rules against finite differences ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Checks each vector-Jacobian product of NNDerivatives.cpp numerically: a
// case is an nn function y = f(parameters, inputs); the loss is
// sum(y * u) for a random cotangent u. partita-differentiate appends the
// gradients; the function and its differentiated form are lowered for one
// host rank (the exec pipeline) and run by the runtime's executor, and
// along random directions v the gradient's <g, v> must equal the central
// difference (L(p + h v) - L(p - h v)) / 2h of the forward's loss.
//
// The runtime computes in f32, so the difference is taken in f32 with
// h = 1e-2 (0.25 for the f16 round trip, linear) and compared within
// 1e-2 relative. The same cases (DerivativeCases.cpp) are checked in fp64
// against a reference interpreter by DerivativesF64Test.cpp, which also
// holds them to the op vocabulary: every op with a rule, and every
// combination of its attributes, has a case.
//
//===----------------------------------------------------------------------===//

#include "DerivativeCases.h"
#include "NNInterpreter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/Transforms/Passes.h"
#include "partita/Pipelines/Pipelines.h"
#include "partita/Target/ExecProgram/ExecProgram.h"
#include "partita/runtime/Executor.h"
#include "partita/runtime/HostCommunicator.h"
#include "partita/runtime/HostKernels.h"
#include "partita/runtime/LoadedArtifact.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace mlir::partita::test;
namespace rt = ::partita::runtime;

namespace {

using Context = mlir::partita::test::AllDialectsContext;

/// A function lowered for one host rank and ready to run.
struct Compiled {
  ::partita::program::Program program;
  rt::HostWorld world{1, std::chrono::seconds(60)};
  rt::ThreadPool pool{1};
  rt::WeightStore weights;
  std::unique_ptr<rt::Executor> executor;
};

/// Lowers `module`'s @main (after `differentiate` when asked).
testing::AssertionResult compile(MLIRContext &context, ModuleOp module,
                                 bool differentiate, Compiled &out,
                                 const std::string &loss = "") {
  PassManager pm(&context, ModuleOp::getOperationName());
  if (!loss.empty()) {
    mlir::partita::AddLossPassOptions options;
    options.kind = loss;
    options.output = "out";
    pm.nest<func::FuncOp>().addPass(mlir::partita::createAddLossPass(options));
  }
  if (differentiate)
    pm.nest<func::FuncOp>().addPass(mlir::partita::createDifferentiatePass());
  mlir::partita::ExecPipelineOptions exec;
  exec.rank = 0;
  mlir::partita::buildExecPipeline(pm, exec);
  if (failed(pm.run(module)))
    return testing::AssertionFailure() << "the pipeline failed";
  FailureOr<mlir::partita::ExecProgram> program =
      mlir::partita::translateToExecProgram(
          module.lookupSymbol<func::FuncOp>("main"));
  if (failed(program))
    return testing::AssertionFailure() << "translation failed";
  out.program = program->program;
  rt::Status created =
      rt::Executor::create(out.program, out.weights, out.world.communicator(0),
                           out.pool, out.executor);
  if (!created)
    return testing::AssertionFailure() << created.message();
  return testing::AssertionSuccess();
}

/// Runs `compiled` on `inputs` (one per program input, in order) into
/// `outputs` (one per output, sized by the program).
testing::AssertionResult
run(Compiled &compiled, std::vector<std::vector<float>> &inputs,
    const std::vector<std::vector<int64_t>> &inputShapes,
    std::vector<std::vector<float>> &outputs) {
  std::vector<rt::NamedTensor> in, out;
  for (int i = 0; i < compiled.program.inputs_size(); ++i)
    in.push_back({compiled.program.inputs(i).name(),
                  rt::Tensor{inputs[i].data(), ::partita::program::F32,
                             inputShapes[i]}});
  outputs.resize(compiled.program.outputs_size());
  for (int i = 0; i < compiled.program.outputs_size(); ++i) {
    const auto &buffer =
        compiled.program.buffers(compiled.program.outputs(i).buffer());
    std::vector<int64_t> shape(buffer.type().shape().begin(),
                               buffer.type().shape().end());
    outputs[i].assign(countOf(shape), 0.0f);
    out.push_back(
        {compiled.program.outputs(i).name(),
         rt::Tensor{outputs[i].data(), ::partita::program::F32, shape}});
  }
  rt::Status ran = compiled.executor->run(in, out);
  if (!ran)
    return testing::AssertionFailure() << ran.message();
  return testing::AssertionSuccess();
}

class Derivatives : public testing::TestWithParam<Case> {};

TEST_P(Derivatives, MatchFiniteDifferences) {
  const Case &c = GetParam();
  Context context;
  std::string text = functionText(c);
  OwningOpRef<ModuleOp> forward = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(forward) << text;
  OwningOpRef<ModuleOp> backward = forward->clone();
  Compiled f, g;
  ASSERT_TRUE(compile(context, *forward, false, f)) << text;
  ASSERT_TRUE(compile(context, *backward, true, g)) << text;

  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xffffffff);
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<size_t> parameters;
  for (const Arg &a : c.args) {
    shapes.push_back(shapeOf(a.type));
    std::uniform_real_distribution<double> dist(a.low, a.high);
    std::vector<float> values(countOf(shapes.back()));
    for (float &v : values)
      v = static_cast<float>(dist(rng));
    if (a.parameter)
      parameters.push_back(inputs.size());
    inputs.push_back(std::move(values));
  }
  shapes.push_back(shapeOf(c.resultType));
  std::normal_distribution<double> normal;
  std::vector<float> u(countOf(shapes.back()));
  for (float &v : u)
    v = static_cast<float>(normal(rng));
  inputs.push_back(u);

  std::vector<std::vector<float>> outputs;
  ASSERT_TRUE(run(g, inputs, shapes, outputs));
  ASSERT_EQ(outputs.size(), 1 + parameters.size());

  const double h = c.h;
  for (int direction = 0; direction < 3; ++direction) {
    std::vector<std::vector<float>> v(parameters.size());
    double analytic = 0;
    for (size_t k = 0; k < parameters.size(); ++k) {
      v[k].resize(inputs[parameters[k]].size());
      for (size_t i = 0; i < v[k].size(); ++i) {
        v[k][i] = static_cast<float>(normal(rng));
        analytic += double(outputs[1 + k][i]) * v[k][i];
      }
    }
    auto lossAt = [&](double step) {
      std::vector<std::vector<float>> moved = inputs;
      for (size_t k = 0; k < parameters.size(); ++k)
        for (size_t i = 0; i < v[k].size(); ++i)
          moved[parameters[k]][i] += static_cast<float>(step * v[k][i]);
      std::vector<std::vector<float>> loss;
      EXPECT_TRUE(run(f, moved, shapes, loss));
      return double(loss[0][0]);
    };
    double numeric = (lossAt(h) - lossAt(-h)) / (2 * h);
    EXPECT_NEAR(analytic, numeric,
                1e-2 * std::max(std::fabs(analytic), std::fabs(numeric)) + 2e-3)
        << c.name << ", direction " << direction;
  }
}

/// The fp64 check's reference interpreter (NNInterpreter.h) computes what
/// the runtime's kernels compute: the differentiated function's loss and
/// gradients agree on the same inputs, to f32's accuracy (f16's where the
/// case rounds to f16, which the interpreter does not), so that the fp64
/// check is of the ops' real semantics (rope's layout, causal alignment).
TEST_P(Derivatives, InterpreterAgreesWithTheRuntime) {
  const Case &c = GetParam();
  Context context;
  std::string text = functionText(c);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module) << text;
  OwningOpRef<ModuleOp> lowered = module->clone();
  Compiled compiled;
  ASSERT_TRUE(compile(context, *lowered, true, compiled)) << text;
  PassManager pm(&context, ModuleOp::getOperationName());
  pm.nest<func::FuncOp>().addPass(mlir::partita::createDifferentiatePass());
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto func = module->lookupSymbol<func::FuncOp>("main");
  bool rounds16 = false;
  func.walk([&](Operation *op) {
    for (Type type : op->getResultTypes())
      if (auto tensor = dyn_cast<RankedTensorType>(type))
        rounds16 |=
            tensor.getElementType().isF16() || tensor.getElementType().isBF16();
  });

  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xffffffff);
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DoubleTensor> doubles;
  std::normal_distribution<double> normal;
  for (size_t i = 0; i <= c.args.size(); ++i) {
    bool cotangent = i == c.args.size();
    shapes.push_back(shapeOf(cotangent ? c.resultType : c.args[i].type));
    std::vector<float> values(countOf(shapes.back()));
    std::uniform_real_distribution<double> dist(
        cotangent ? -1.0 : c.args[i].low, cotangent ? 1.0 : c.args[i].high);
    for (float &v : values)
      v = static_cast<float>(cotangent ? normal(rng) : dist(rng));
    doubles.push_back({shapes.back(), {values.begin(), values.end()}});
    inputs.push_back(std::move(values));
  }
  std::vector<std::vector<float>> outputs;
  ASSERT_TRUE(run(compiled, inputs, shapes, outputs));
  llvm::Expected<std::vector<DoubleTensor>> reference =
      interpretInDouble(func, doubles);
  ASSERT_TRUE(static_cast<bool>(reference))
      << llvm::toString(reference.takeError());
  ASSERT_EQ(reference->size(), outputs.size());
  const double relative = rounds16 ? 2e-3 : 1e-4;
  for (size_t k = 0; k < outputs.size(); ++k) {
    double size = 0;
    for (double x : (*reference)[k].values)
      size = std::max(size, std::fabs(x));
    ASSERT_EQ((*reference)[k].values.size(), outputs[k].size());
    for (size_t i = 0; i < outputs[k].size(); ++i)
      EXPECT_NEAR(outputs[k][i], (*reference)[k].values[i],
                  relative * size + 1e-6)
          << c.name << ", result " << k << " [" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, Derivatives, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

/// partita-add-loss against a direct computation in double: the loss of
/// random logits (labels with -100 among them) and its gradient by the
/// logits, (softmax - onehot) / (positions counted), as torch computes
/// F.cross_entropy(..., ignore_index=-100); and the mean squared error.
TEST(Loss, MatchesADirectComputation) {
  Context context;
  const int64_t rows = 6, classes = 5;
  const std::string ce =
      "func.func @main(%x: tensor<6x5xf32> {partita.parameter = \"x\"}) -> "
      "(tensor<6x5xf32> {onnx.name = \"out\"}) {\n"
      "  return %x : tensor<6x5xf32>\n}\n";
  for (const std::string kind : {"cross_entropy", "mse"}) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ce, &context);
    ASSERT_TRUE(module);
    Compiled step;
    ASSERT_TRUE(compile(context, *module, true, step, kind)) << kind;
    std::mt19937 rng(11);
    std::normal_distribution<double> normal;
    std::vector<float> logits(rows * classes), target(rows * classes);
    for (float &v : logits)
      v = static_cast<float>(2 * normal(rng));
    for (float &v : target)
      v = static_cast<float>(normal(rng));
    std::vector<int64_t> labels = {3, -100, 0, 4, -100, 1};
    std::vector<rt::NamedTensor> in, out;
    in.push_back(
        {step.program.inputs(0).name(),
         rt::Tensor{logits.data(), ::partita::program::F32, {rows, classes}}});
    if (kind == "cross_entropy")
      in.push_back(
          {step.program.inputs(1).name(),
           rt::Tensor{labels.data(), ::partita::program::I64, {rows}}});
    else
      in.push_back(
          {step.program.inputs(1).name(), rt::Tensor{target.data(),
                                                     ::partita::program::F32,
                                                     {rows, classes}}});
    float loss = 0;
    std::vector<float> grad(rows * classes);
    out.push_back({step.program.outputs(0).name(),
                   rt::Tensor{&loss, ::partita::program::F32, {}}});
    out.push_back(
        {step.program.outputs(1).name(),
         rt::Tensor{grad.data(), ::partita::program::F32, {rows, classes}}});
    rt::Status ran = step.executor->run(in, out);
    ASSERT_TRUE(ran) << ran.message();

    double want = 0;
    std::vector<double> wantGrad(rows * classes, 0.0);
    if (kind == "cross_entropy") {
      int counted = 0;
      for (int64_t r = 0; r < rows; ++r)
        counted += labels[r] != -100;
      for (int64_t r = 0; r < rows; ++r) {
        if (labels[r] == -100)
          continue;
        double top = -INFINITY, sum = 0;
        for (int64_t c = 0; c < classes; ++c)
          top = std::max(top, double(logits[r * classes + c]));
        for (int64_t c = 0; c < classes; ++c)
          sum += std::exp(logits[r * classes + c] - top);
        want -=
            (logits[r * classes + labels[r]] - top - std::log(sum)) / counted;
        for (int64_t c = 0; c < classes; ++c)
          wantGrad[r * classes + c] =
              (std::exp(logits[r * classes + c] - top) / sum -
               (c == labels[r])) /
              counted;
      }
    } else {
      for (int64_t i = 0; i < rows * classes; ++i) {
        double d = double(logits[i]) - target[i];
        want += d * d / (rows * classes);
        wantGrad[i] = 2 * d / (rows * classes);
      }
    }
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want) + 1e-6) << kind;
    for (int64_t i = 0; i < rows * classes; ++i)
      EXPECT_NEAR(grad[i], wantGrad[i], 1e-5) << kind << " [" << i << "]";
  }
}

} // namespace
