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
// 1e-2 relative (docs/training.md: the fp64
// check over the whole vocabulary is to come). Every op with a rule has a
// case here (RulesHaveCases), so a rule added without one fails.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/Transforms/Passes.h"
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
#include <set>

using namespace mlir;
namespace rt = ::partita::runtime;

namespace {

struct Arg {
  std::string name, type;
  bool parameter;
  /// Values drawn uniformly from [low, high].
  double low = -1.5, high = 1.5;
};

struct Case {
  std::string name;
  std::vector<Arg> args;
  /// The body: defines %y of `resultType` from the arguments.
  std::string body, resultType;
  /// The nn ops whose rules it checks.
  std::vector<std::string> ops;
  /// The step of the central difference: larger where the function is
  /// linear and rounds (a cast to f16), so that rounding does not swamp it.
  double h = 1e-2;
};

std::ostream &operator<<(std::ostream &os, const Case &c) {
  return os << c.name;
}

std::vector<int64_t> shapeOf(const std::string &type) {
  // tensor<2x3xf32> or tensor<f32>.
  std::vector<int64_t> shape;
  std::string inner = type.substr(7, type.size() - 8);
  size_t start = 0, x;
  while ((x = inner.find('x', start)) != std::string::npos) {
    shape.push_back(std::stoll(inner.substr(start, x - start)));
    start = x + 1;
  }
  return shape;
}

int64_t countOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string functionText(const Case &c) {
  std::string text = "func.func @main(";
  for (const Arg &a : c.args) {
    text += "%" + a.name + ": " + a.type;
    if (a.parameter)
      text += " {partita.parameter = \"" + a.name + "\"}";
    text += ", ";
  }
  size_t rank = shapeOf(c.resultType).size();
  std::string axes;
  for (size_t d = 0; d < rank; ++d)
    axes += (d ? ", " : "") + std::to_string(d);
  text += "%u: " + c.resultType + ") -> (tensor<f32> {partita.loss}) {\n" +
          c.body + "\n  %weighted = nn.mul %y, %u : (" + c.resultType + ", " +
          c.resultType + ") -> " + c.resultType + "\n";
  if (rank == 0)
    text += "  return %weighted : tensor<f32>\n}\n";
  else
    text += "  %loss = nn.reduce sum %weighted axes = [" + axes +
            "] : " + c.resultType +
            " -> tensor<f32>\n  return %loss : tensor<f32>\n}\n";
  return text;
}

/// A context with every Partita dialect loaded.
struct Context : MLIRContext {
  Context() : MLIRContext(registry()) { loadAllAvailableDialects(); }
  static DialectRegistry registry() {
    DialectRegistry registry;
    mlir::partita::registerAllDialects(registry);
    return registry;
  }
};

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

const std::vector<Case> &cases() {
  static const std::vector<Case> all = {
      {"add_sub_broadcast",
       {{"a", "tensor<3x4xf32>", true}, {"b", "tensor<4xf32>", true}},
       R"(  %s = nn.add %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %y = nn.sub %s, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>",
       {"add", "sub"}},
      {"mul_div_broadcast",
       {{"a", "tensor<3x4xf32>", true},
        {"b", "tensor<3x1xf32>", true, 0.5, 2.0}},
       R"(  %p = nn.mul %a, %b : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %y = nn.div %p, %b : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>",
       {"mul", "div"}},
      {"unary_positive",
       {{"a", "tensor<2x5xf32>", true, 0.5, 2.0}},
       R"(  %l = nn.log %a : tensor<2x5xf32>
  %s = nn.sqrt %a : tensor<2x5xf32>
  %r = nn.rsqrt %a : tensor<2x5xf32>
  %q = nn.reciprocal %a : tensor<2x5xf32>
  %t1 = nn.add %l, %s : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
  %t2 = nn.add %r, %q : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
  %y = nn.add %t1, %t2 : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>)",
       "tensor<2x5xf32>",
       {"log", "sqrt", "rsqrt", "reciprocal"}},
      {"unary_activations",
       {{"a", "tensor<2x6xf32>", true}},
       R"(  %e = nn.exp %a : tensor<2x6xf32>
  %t = nn.tanh %a : tensor<2x6xf32>
  %s = nn.sigmoid %a : tensor<2x6xf32>
  %n = nn.neg %a : tensor<2x6xf32>
  %si = nn.silu %n : tensor<2x6xf32>
  %g = nn.gelu %a : tensor<2x6xf32>
  %gt = nn.gelu %e approximation = tanh : tensor<2x6xf32>
  %t1 = nn.add %e, %t : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %t2 = nn.add %s, %si : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %t3 = nn.add %g, %gt : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %t4 = nn.add %t1, %t2 : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %y = nn.add %t3, %t4 : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>)",
       "tensor<2x6xf32>",
       {"exp", "tanh", "sigmoid", "neg", "silu", "gelu"}},
      // relu away from its kink: values at least 0.1 from 0.
      {"relu",
       {{"a", "tensor<2x4xf32>", true, 0.1, 1.5},
        {"s", "tensor<2x4xf32>", false}},
       R"(  %z = nn.constant dense<0.0> : tensor<f32>
  %sign = nn.compare gt, %s, %z : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xi1>
  %n = nn.neg %a : tensor<2x4xf32>
  %x = nn.where %sign, %n, %a : (tensor<2x4xi1>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = nn.relu %x : tensor<2x4xf32>)",
       "tensor<2x4xf32>",
       {"relu", "where"}},
      {"cast_round_trip",
       {{"a", "tensor<3x2xf32>", true}},
       R"(  %h = nn.cast %a : tensor<3x2xf32> -> tensor<3x2xf16>
  %y = nn.cast %h : tensor<3x2xf16> -> tensor<3x2xf32>)",
       "tensor<3x2xf32>",
       {"cast"},
       0.25},
      {"shapes",
       {{"a", "tensor<2x3x4xf32>", true}, {"b", "tensor<4xf32>", true}},
       R"(  %r = nn.reshape %a : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %t = nn.transpose %r permutation = [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
  %bb = nn.reshape %b : tensor<4xf32> -> tensor<4x1xf32>
  %bc = nn.broadcast_to %bb : tensor<4x1xf32> -> tensor<4x6xf32>
  %y = nn.mul %t, %bc : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>)",
       "tensor<4x6xf32>",
       {"reshape", "transpose", "broadcast_to"}},
      {"reductions",
       {{"a", "tensor<3x4x5xf32>", true}},
       R"(  %s = nn.reduce sum %a axes = [2] : tensor<3x4x5xf32> -> tensor<3x4xf32>
  %m = nn.reduce mean %a axes = [0, 2] keepdims : tensor<3x4x5xf32> -> tensor<1x4x1xf32>
  %mr = nn.reshape %m : tensor<1x4x1xf32> -> tensor<4xf32>
  %y = nn.mul %s, %mr : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>",
       {"reduce"}},
      {"softmaxes",
       {{"a", "tensor<3x5xf32>", true}},
       R"(  %s = nn.softmax %a axis = 1 : tensor<3x5xf32>
  %l = nn.log_softmax %a axis = 0 : tensor<3x5xf32>
  %y = nn.add %s, %l : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>)",
       "tensor<3x5xf32>",
       {"softmax", "log_softmax"}},
      {"matmul_batched_bias",
       {{"x", "tensor<2x3x4xf32>", true},
        {"w", "tensor<4x5xf32>", true},
        {"b", "tensor<5xf32>", true}},
       R"(  %y = nn.matmul %x, %w bias %b : (tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>)",
       "tensor<2x3x5xf32>",
       {"matmul"}},
      {"matmul_batch_broadcast",
       {{"x", "tensor<3x4xf32>", true}, {"w", "tensor<2x4x2xf32>", true}},
       R"(  %y = nn.matmul %x, %w : (tensor<3x4xf32>, tensor<2x4x2xf32>) -> tensor<2x3x2xf32>)",
       "tensor<2x3x2xf32>",
       {"matmul"}},
      {"layer_norm",
       {{"x", "tensor<2x3x4xf32>", true},
        {"g", "tensor<4xf32>", true},
        {"b", "tensor<4xf32>", true}},
       R"(  %n = nn.layer_norm %x scale(%g : tensor<4xf32>) bias(%b : tensor<4xf32>) axis = 2 epsilon = 1.0e-05 : tensor<2x3x4xf32>
  %m = nn.layer_norm %x axis = 1 epsilon = 1.0e-05 : tensor<2x3x4xf32>
  %y = nn.add %n, %m : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>)",
       "tensor<2x3x4xf32>",
       {"layer_norm"}},
      {"rms_norm",
       {{"x", "tensor<3x5xf32>", true}, {"g", "tensor<5xf32>", true}},
       R"(  %n = nn.rms_norm %x scale(%g : tensor<5xf32>) axis = 1 epsilon = 1.0e-06 : tensor<3x5xf32>
  %m = nn.rms_norm %x axis = 0 epsilon = 1.0e-06 : tensor<3x5xf32>
  %y = nn.add %n, %m : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>)",
       "tensor<3x5xf32>",
       {"rms_norm"}},
      // max and min away from ties: a ramp of 10 puts each row's extreme
      // where the perturbation cannot move it.
      {"reduce_max_min",
       {{"a", "tensor<3x3xf32>", true}},
       R"(  %ramp = nn.constant dense<[[0.0, 10.0, 0.0], [10.0, 0.0, 0.0], [0.0, 0.0, 10.0]]> : tensor<3x3xf32>
  %up = nn.add %a, %ramp : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %down = nn.sub %a, %ramp : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %mx = nn.reduce max %up axes = [1] : tensor<3x3xf32> -> tensor<3xf32>
  %mn = nn.reduce min %down axes = [1] keepdims : tensor<3x3xf32> -> tensor<3x1xf32>
  %mnr = nn.reshape %mn : tensor<3x1xf32> -> tensor<3xf32>
  %y = nn.mul %mx, %mnr : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>)",
       "tensor<3xf32>",
       {}},
      {"cumsum",
       {{"a", "tensor<3x4xf32>", true}},
       R"(  %c = nn.cumsum %a axis = 1 : tensor<3x4xf32>
  %e = nn.cumsum %a axis = 0 exclusive : tensor<3x4xf32>
  %r = nn.cumsum %a axis = 1 exclusive reverse : tensor<3x4xf32>
  %t = nn.mul %c, %e : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %y = nn.add %t, %r : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>",
       {"cumsum"}},
      // Rotations of any tables: the rule is the adjoint, exact for any.
      {"rope",
       {{"x", "tensor<2x2x3x6xf32>", true},
        {"c", "tensor<1x3x2xf32>", false},
        {"s", "tensor<1x3x2xf32>", false}},
       R"(  %h = nn.rope %x, %c, %s : (tensor<2x2x3x6xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<2x2x3x6xf32>
  %i = nn.rope %h, %c, %s {interleaved} : (tensor<2x2x3x6xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<2x2x3x6xf32>
  %y = nn.mul %i, %x : (tensor<2x2x3x6xf32>, tensor<2x2x3x6xf32>) -> tensor<2x2x3x6xf32>)",
       "tensor<2x2x3x6xf32>",
       {"rope"}},
      // Rows used twice, once, and not at all.
      {"embedding",
       {{"t", "tensor<5x3xf32>", true}},
       R"(  %ids = nn.constant dense<[[0, 2], [4, 2]]> : tensor<2x2xi64>
  %e = nn.embedding %t, %ids : (tensor<5x3xf32>, tensor<2x2xi64>) -> tensor<2x2x3xf32>
  %ids32 = nn.constant dense<[1, 2]> : tensor<2xi32>
  %f = nn.embedding %t, %ids32 : (tensor<5x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
  %y = nn.mul %e, %f : (tensor<2x2x3xf32>, tensor<2x3xf32>) -> tensor<2x2x3xf32>)",
       "tensor<2x2x3xf32>",
       {"embedding"}},
      // GPT-2's fused QKV: split, the pieces sliced and put back together.
      {"split_slice_concat",
       {{"a", "tensor<2x6xf32>", true}, {"b", "tensor<2x2xf32>", true}},
       R"(  %q, %k, %v = nn.split %a axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x3xf32>, tensor<2x1xf32>
  %ks = nn.slice %k start = [0, 1] limit = [1, 3] stride = [1, 1] : tensor<2x3xf32> -> tensor<1x2xf32>
  %c = nn.concat %q, %b, %v axis = 1 : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x1xf32>) -> tensor<2x5xf32>
  %cs = nn.slice %c start = [1, 0] limit = [2, 2] stride = [1, 1] : tensor<2x5xf32> -> tensor<1x2xf32>
  %y = nn.mul %ks, %cs : (tensor<1x2xf32>, tensor<1x2xf32>) -> tensor<1x2xf32>)",
       "tensor<1x2xf32>",
       {"split", "slice", "concat"}},
      // Along a middle axis with a negative index, and a scalar index.
      {"gather",
       {{"a", "tensor<3x4x2xf32>", true}},
       R"(  %i = nn.constant dense<[[1, -1], [0, 1]]> : tensor<2x2xi64>
  %g = nn.gather %a, %i axis = 1 : (tensor<3x4x2xf32>, tensor<2x2xi64>) -> tensor<3x2x2x2xf32>
  %j = nn.constant dense<2> : tensor<i32>
  %h = nn.gather %a, %j axis = 0 : (tensor<3x4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
  %hs = nn.slice %h start = [0, 0] limit = [2, 2] stride = [1, 1] : tensor<4x2xf32> -> tensor<2x2xf32>
  %y = nn.mul %g, %hs : (tensor<3x2x2x2xf32>, tensor<2x2xf32>) -> tensor<3x2x2x2xf32>)",
       "tensor<3x2x2x2xf32>",
       {"gather"}},
      {"pow_abs_erf_trig",
       {{"a", "tensor<2x4xf32>", true, 0.5, 2.0},
        {"e", "tensor<4xf32>", true, 0.5, 2.5},
        {"b", "tensor<2x4xf32>", true}},
       // abs of values 0.5 or more from its kink, of both signs.
       R"(  %p = nn.pow %a, %e : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %sign = nn.constant dense<[[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, -1.0, 1.0]]> : tensor<2x4xf32>
  %away = nn.mul %a, %sign : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %ab = nn.abs %away : tensor<2x4xf32>
  %er = nn.erf %b : tensor<2x4xf32>
  %s = nn.sin %b : tensor<2x4xf32>
  %c = nn.cos %a : tensor<2x4xf32>
  %t1 = nn.add %p, %ab : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %t2 = nn.mul %er, %s : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %t3 = nn.add %t1, %t2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = nn.add %t3, %c : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>)",
       "tensor<2x4xf32>",
       {"pow", "abs", "erf", "sin", "cos"}},
      // Elementwise max and min away from ties (b is a shifted by 0.5 or
      // more either way).
      {"max_min",
       {{"a", "tensor<2x3xf32>", true},
        {"d", "tensor<2x3xf32>", true, 0.5, 1.5}},
       R"(  %up = nn.add %a, %d : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %sign = nn.constant dense<[[1.0, -1.0, 1.0], [-1.0, 1.0, -1.0]]> : tensor<2x3xf32>
  %shift = nn.mul %d, %sign : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = nn.add %a, %shift : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %mx = nn.max %up, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %mn = nn.min %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = nn.mul %mx, %mn : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>)",
       "tensor<2x3xf32>",
       {"max", "min"}},
      // Attention's backward (nn.attention_grad): causal square, grouped
      // heads with a given scale and causal rows aligned at the last key,
      // a bool mask (some rows may see no key: P = 0 there, as the forward
      // gives zeros) and an additive float mask.
      {"attention_causal",
       {{"q", "tensor<2x2x4x4xf32>", true},
        {"k", "tensor<2x2x4x4xf32>", true},
        {"v", "tensor<2x2x4x3xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {causal} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x3xf32>) -> tensor<2x2x4x3xf32>)",
       "tensor<2x2x4x3xf32>",
       {"attention"}},
      {"attention_gqa_scale",
       {{"q", "tensor<1x4x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x2xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {causal, scale = 0.6 : f32} : (tensor<1x4x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x2xf32>) -> tensor<1x4x3x2xf32>)",
       "tensor<1x4x3x2xf32>",
       {"attention"}},
      {"attention_bool_mask",
       {{"q", "tensor<2x2x3x4xf32>", true},
        {"k", "tensor<2x2x5x4xf32>", true},
        {"v", "tensor<2x2x5x3xf32>", true},
        {"s", "tensor<2x1x3x5xf32>", false}},
       R"(  %z = nn.constant dense<-0.5> : tensor<f32>
  %m = nn.compare gt, %s, %z : (tensor<2x1x3x5xf32>, tensor<f32>) -> tensor<2x1x3x5xi1>
  %y = nn.attention %q, %k, %v mask %m : (tensor<2x2x3x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x3xf32>, tensor<2x1x3x5xi1>) -> tensor<2x2x3x3xf32>)",
       "tensor<2x2x3x3xf32>",
       {"attention"}},
      {"attention_float_mask",
       {{"q", "tensor<1x2x4x4xf32>", true},
        {"k", "tensor<1x1x4x4xf32>", true},
        {"v", "tensor<1x1x4x4xf32>", true},
        {"bias", "tensor<4x4xf32>", false}},
       R"(  %y = nn.attention %q, %k, %v mask %bias : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>)",
       "tensor<1x2x4x4xf32>",
       {"attention"}},
      {"constant_operand",
       {{"a", "tensor<4xf32>", true}},
       R"(  %c = nn.constant dense<[1.0, -2.0, 0.5, 3.0]> : tensor<4xf32>
  %y = nn.mul %a, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>)",
       "tensor<4xf32>",
       {"constant"}},
  };
  return all;
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

INSTANTIATE_TEST_SUITE_P(Rules, Derivatives, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

/// Every op with a rule (the DifferentiableOpInterface attached) has a
/// case above: a rule added without one fails here.
TEST(Derivatives, RulesHaveCases) {
  Context context;
  std::set<std::string> covered;
  for (const Case &c : cases())
    for (const std::string &op : c.ops)
      covered.insert("nn." + op);
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "nn")
      continue;
    if (name.hasInterface<mlir::partita::nn::DifferentiableOpInterface>()) {
      EXPECT_TRUE(covered.count(name.getStringRef().str()))
          << name.getStringRef().str() << " has a rule and no case";
    }
  }
}

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
