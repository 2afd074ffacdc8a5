//===- Elementwise.cpp - standalone elementwise kernels -------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Binary ops, compare, where, unary ops, gelu, cast and copy: one thread per
// result element in a grid-stride loop, the kernel's op and its fused
// epilogue applied as one chain in registers (Support.cpp), each operand
// read through its broadcast offset (constant divisors, merged dimensions).
// Where every operand that is not a scalar has the result's layout and one
// float width, a thread takes 16 bytes of each (float4 or 8 halves) per
// iteration.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include "partita/runtime/OpVocabulary.h"

#include <algorithm>

namespace partita::target::cuda {

namespace {

constexpr int64_t kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

} // namespace

llvm::Expected<GeneratedKernel> emitElementwise(const KernelContext &ctx) {
  const program::Kernel &kernel = ctx.getKernel();
  const std::string &op = ctx.op();
  if (kernel.results_size() != 1)
    return ctx.error("expected 1 result, got " +
                     llvm::Twine(kernel.results_size()));
  auto result = ctx.result(0);
  if (!result)
    return result.takeError();

  Signature sig;
  ChainStep first;
  first.op = op;
  first.attributes = &kernel.attributes();
  std::optional<BufferView> source;
  if (op == "where") {
    if (kernel.operands_size() != 3)
      return ctx.error("expected 3 operands, got " +
                       llvm::Twine(kernel.operands_size()));
    auto cond = ctx.operand(0), onTrue = ctx.operand(1),
         onFalse = ctx.operand(2);
    if (!cond)
      return cond.takeError();
    if (!onTrue)
      return onTrue.takeError();
    if (!onFalse)
      return onFalse.takeError();
    first.operand = *cond;
    first.operandName = sig.addInput(*cond, "a0");
    source = *onTrue;
    sig.addInput(*onTrue, "a1");
    first.onFalse = *onFalse;
    first.onFalseName = sig.addInput(*onFalse, "a2");
  } else {
    const runtime::OpInfo *info = runtime::lookupOp(op);
    bool binary = info && info->stepTakesOperand();
    int expected = binary ? 2 : 1;
    if (kernel.operands_size() != expected)
      return ctx.error("expected " + llvm::Twine(expected) + " operands, got " +
                       llvm::Twine(kernel.operands_size()));
    auto lhs = ctx.operand(0);
    if (!lhs)
      return lhs.takeError();
    source = *lhs;
    sig.addInput(*lhs, "a0");
    if (binary) {
      auto rhs = ctx.operand(1);
      if (!rhs)
        return rhs.takeError();
      first.operand = *rhs;
      first.operandName = sig.addInput(*rhs, "a1");
    }
  }
  std::string sourceName = op == "where" ? "a1" : "a0";
  std::string resultName = sig.addOutput(*result, "r0");
  auto epilogue = epilogueSteps(ctx, sig);
  if (!epilogue)
    return epilogue.takeError();
  std::vector<ChainStep> steps = {first};
  steps.insert(steps.end(), epilogue->begin(), epilogue->end());

  int64_t total = result->numElements();
  std::string sourceOffset;
  if (op == "copy") {
    if (source->numElements() != total || source->dtype != result->dtype)
      return ctx.error("the result " + shapeString(result->shape) + " " +
                       dtypeName(result->dtype) + " and the input " +
                       shapeString(source->shape) + " " +
                       dtypeName(source->dtype) + " differ");
    sourceOffset = "i";
  } else {
    size_t lead = result->shape.size() -
                  std::min(result->shape.size(), source->shape.size());
    bool ok = source->shape.size() <= result->shape.size();
    for (size_t d = 0; ok && d < source->shape.size(); ++d)
      ok = source->shape[d] == 1 || source->shape[d] == result->shape[lead + d];
    if (!ok)
      return ctx.error("operand of shape " + shapeString(source->shape) +
                       " does not broadcast to the result " +
                       shapeString(result->shape));
    sourceOffset = broadcastOffset(source->shape, result->shape, "i");
  }

  GeneratedKernel k;
  k.label = op;
  k.summary = ctx.summary();
  k.block = {static_cast<uint32_t>(kThreads), 1, 1};
  k.arguments = sig.arguments();
  k.text = "extern \"C\" __global__ void __launch_bounds__(" +
           literal(kThreads) + ") @NAME@(" + sig.parameters() + ") {\n";

  // Vectors of 16 bytes per thread when every buffer that is not a scalar
  // has the result's layout, one float type's width and an aligned start,
  // and the chain stays in floats.
  std::vector<std::pair<std::string, BufferView>> vectorOperands;
  bool vectorize =
      isFloat(source->dtype) && isFloat(result->dtype) && result->aligned16 &&
      (source->shape == result->shape || op == "copy") && source->aligned16;
  size_t width = dtypeSize(result->dtype);
  vectorize = vectorize && dtypeSize(source->dtype) == width;
  if (vectorize)
    vectorOperands.push_back({sourceName, *source});
  for (const ChainStep &step : steps) {
    if (!vectorize)
      break;
    if (step.op == "compare" || step.op == "where" || step.op == "cast") {
      vectorize = false;
      break;
    }
    if (!step.operand || step.operand->numElements() == 1)
      continue;
    vectorize = isFloat(step.operand->dtype) &&
                dtypeSize(step.operand->dtype) == width &&
                step.operand->shape == result->shape && step.operand->aligned16;
    bool seen = false;
    for (auto &[name, view] : vectorOperands)
      seen = seen || name == step.operandName;
    if (!seen)
      vectorOperands.push_back({step.operandName, *step.operand});
  }
  int64_t vec = 16 / static_cast<int64_t>(width);
  vectorize = vectorize && total % vec == 0 && total > 0;

  std::string body;
  int64_t items = total;
  if (vectorize) {
    items = total / vec;
    ChainIO io;
    std::string idx = indexType(total + vec * kThreads * kMaxBlocks);
    body += "    const " + idx + " base = v * " + literal(vec) + ";\n";
    for (auto &[name, view] : vectorOperands) {
      body += "    float x_" + name + "[" + literal(vec) + "];\n";
      body += "    pt::ldvec<" + literal(vec) + ">(" + name + " + base, x_" +
              name + ");\n";
      io.operandValues[name] = "x_" + name + "[u]";
    }
    io.store = "y[u] = f;";
    body += "    float y[" + literal(vec) + "];\n";
    body += "#pragma unroll\n";
    body += "    for (int u = 0; u < " + literal(vec) + "; ++u) {\n";
    body += "      [[maybe_unused]] const " + idx + " i = base + u;\n";
    body += "      [[maybe_unused]] float f = x_" + sourceName + "[u];\n";
    body += "      [[maybe_unused]] long long n = 0;\n";
    if (auto err = emitChain(ctx, steps, source->dtype, *result, resultName,
                             "i", "      ", body, io))
      return std::move(err);
    body += "    }\n";
    body +=
        "    pt::stvec<" + literal(vec) + ">(" + resultName + " + base, y);\n";
  } else {
    body += "    [[maybe_unused]] float f = 0.0f;\n";
    body += "    [[maybe_unused]] long long n = 0;\n";
    body += std::string("    ") +
            (isFloat(source->dtype) ? "f = pt::ldf(" : "n = pt::ldi(") +
            sourceName + " + " + sourceOffset + ");\n";
    if (auto err = emitChain(ctx, steps, source->dtype, *result, resultName,
                             "i", "    ", body))
      return std::move(err);
  }
  std::string var = vectorize ? "v" : "i";
  std::string idx = indexType(items + kThreads * kMaxBlocks);
  int64_t blocks =
      std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks);
  k.grid = {static_cast<uint32_t>(blocks), 1, 1};
  k.text += "  for (" + idx + " " + var + " = (" + idx + ")blockIdx.x * " +
            literal(kThreads) + " + threadIdx.x; " + var + " < " +
            literal(items) + "; " + var + " += (" + idx + ")gridDim.x * " +
            literal(kThreads) + ") {\n";
  k.text += body;
  k.text += "  }\n}\n";
  return k;
}

} // namespace partita::target::cuda
