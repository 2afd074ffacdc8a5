//===- CodeGen.cpp - CUDA launches and module source for a program --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Lowers every Kernel instruction to its CudaSteps: a cuBLASLt matmul (with
// the bias, a tanh GELU and a residual add folded into cuBLASLt's epilogue
// where its order allows, and a generated kernel for the rest of the
// epilogue) or launches of generated kernels. A matmul whose batch
// broadcast is not one stride per operand is a generated kernel too. Kernels
// whose text is equal are one function: the text depends only on shapes, types
// and attributes, so the layers of a model share their kernels.
//
//===----------------------------------------------------------------------===//

#include "partita/Target/CUDA/CodeGen.h"

#include "Emitter.h"
#include "partita/runtime/MatmulShape.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <map>

namespace partita::target::cuda {

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

namespace {

bool isTanhGelu(const program::ElementwiseStep &step) {
  if (step.op() != "gelu")
    return false;
  auto it = step.attributes().find("approximation");
  return it != step.attributes().end() &&
         it->second.value_case() == program::Attribute::kS &&
         it->second.s() == "tanh";
}

/// A generated kernel for a matmul whose batch broadcast is not one stride
/// per operand (lhs [2, 1, m, k] with rhs [1, 3, k, n]): the whole kernel
/// with its epilogue, a block per 16x16 tile of each batch.
llvm::Expected<LoweredKernel>
emitMatmulFallback(const KernelContext &ctx, const BufferView &lhs,
                   const BufferView &rhs, const BufferView &result,
                   bool hasBias, llvm::ArrayRef<int64_t> batchShape, int64_t m,
                   int64_t n, int64_t k) {
  int64_t batches = 1;
  for (int64_t d : batchShape)
    batches *= d;
  int64_t tilesM = (m + 15) / 16, tilesN = (n + 15) / 16;
  int64_t blocks = batches * tilesM * tilesN;
  if (blocks >= (int64_t(1) << 31) || m >= (int64_t(1) << 31) ||
      n >= (int64_t(1) << 31) || k >= (int64_t(1) << 31))
    return ctx.error("matrices too large for the generated matmul");
  Signature sig;
  sig.addInput(lhs, "a0");
  sig.addInput(rhs, "a1");
  std::string bias =
      "(const " + std::string(cudaType(lhs.dtype)) + " *)nullptr";
  if (hasBias) {
    auto b = ctx.operand(2);
    if (!b)
      return b.takeError();
    if (b->dtype != lhs.dtype || b->shape != llvm::ArrayRef<int64_t>{n})
      return ctx.error("the bias must be [" + llvm::Twine(n) + "] " +
                       dtypeName(lhs.dtype));
    bias = sig.addInput(*b, "a2");
  }
  std::string init;
  auto sink = emitFloatSink(ctx, result, sig, init);
  if (!sink)
    return sink.takeError();
  llvm::ArrayRef<int64_t> lhsBatch = llvm::ArrayRef(lhs.shape).drop_back(2);
  llvm::ArrayRef<int64_t> rhsBatch = llvm::ArrayRef(rhs.shape).drop_back(2);
  std::string s = *sink;
  s += "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
       sig.parameters() + ") {\n";
  s += "  const unsigned tileN = blockIdx.x % " + literal(tilesN) +
       ", tileM = blockIdx.x / " + literal(tilesN) + " % " + literal(tilesM) +
       ";\n";
  s += "  const pt::u64 bt = blockIdx.x / " + literal(tilesM * tilesN) + ";\n";
  s += "  const pt::u64 aOff = " + broadcastOffset(lhsBatch, batchShape, "bt") +
       " * " + literal(m * k) + "ULL;\n";
  s += "  const pt::u64 bOff = " + broadcastOffset(rhsBatch, batchShape, "bt") +
       " * " + literal(k * n) + "ULL;\n";
  s += "  pt::matmul_tile<" + std::string(cudaType(lhs.dtype)) + ", " +
       literal(m) + ", " + literal(n) + ", " + literal(k) + ", " +
       (hasBias ? "true" : "false") + ">(a0, a1, " + bias +
       ", bt, aOff, bOff, tileM, tileN, " + init + ");\n";
  s += "}\n";
  GeneratedKernel g;
  g.label = "matmul";
  g.summary = ctx.summary() + " (generated: batch broadcast)";
  g.grid = {static_cast<uint32_t>(blocks), 1, 1};
  g.block = {256, 1, 1};
  g.arguments = sig.arguments();
  g.text = s;
  LoweredKernel lowered;
  lowered.launches.push_back(std::move(g));
  return lowered;
}

} // namespace

llvm::Expected<LoweredKernel> emitMatmul(const KernelContext &ctx) {
  auto hasBias = ctx.getBool("has_bias");
  if (!hasBias)
    return hasBias.takeError();
  if (auto err = ctx.expectCounts(2 + int(*hasBias), 1))
    return std::move(err);
  auto lhs = ctx.operand(0), rhs = ctx.operand(1);
  auto result = ctx.result(0);
  if (!lhs)
    return lhs.takeError();
  if (!rhs)
    return rhs.takeError();
  if (!result)
    return result.takeError();
  if (!isFloat(lhs->dtype) || rhs->dtype != lhs->dtype ||
      result->dtype != lhs->dtype)
    return ctx.error("lhs, rhs and the result need one float element type, "
                     "got " +
                     dtypeName(lhs->dtype) + ", " + dtypeName(rhs->dtype) +
                     " and " + dtypeName(result->dtype));
  runtime::MatmulShape shape;
  if (runtime::Status shaped =
          runtime::matmulShape({lhs->shape.begin(), lhs->shape.end()},
                               {rhs->shape.begin(), rhs->shape.end()}, shape);
      !shaped)
    return ctx.error(shaped.message());
  const int64_t m = shape.m, n = shape.n, k = shape.k, batches = shape.batches;
  std::vector<int64_t> expected = shape.resultShape();
  if (llvm::ArrayRef(result->shape) != llvm::ArrayRef(expected))
    return ctx.error("the result " + shapeString(result->shape) + " is not " +
                     shapeString(expected));
  if (k == 0 || m == 0 || n == 0 || batches == 0)
    return ctx.error("empty matrices are not supported");
  // One batch stride per operand: all of its own batch, or none of it.
  auto strideOf = [&](int64_t own, int64_t matrix) -> std::optional<int64_t> {
    if (own == batches)
      return matrix;
    if (own == 1)
      return 0;
    return std::nullopt;
  };
  std::optional<int64_t> strideA = strideOf(shape.lhsBatches, m * k);
  std::optional<int64_t> strideB = strideOf(shape.rhsBatches, k * n);
  if (!strideA || !strideB)
    return emitMatmulFallback(ctx, *lhs, *rhs, *result, *hasBias, shape.batch,
                              m, n, k);

  program::CublasLtMatmul mm;
  mm.set_a(lhs->id);
  mm.set_b(rhs->id);
  mm.set_d(result->id);
  mm.set_bias(-1);
  mm.set_c(-1);
  mm.set_k(k);
  mm.set_n(n);
  if (shape.batchFoldsIntoRows()) {
    mm.set_m(m * batches);
    mm.set_batch(1);
    mm.set_stride_a(m * k * batches);
    // 0 for a shared weight; k * n when there is one batch only.
    mm.set_stride_b(*strideB);
    mm.set_stride_d(m * n * batches);
  } else {
    mm.set_m(m);
    mm.set_batch(batches);
    mm.set_stride_a(*strideA);
    mm.set_stride_b(*strideB);
    mm.set_stride_d(m * n);
  }
  if (*hasBias) {
    auto bias = ctx.operand(2);
    if (!bias)
      return bias.takeError();
    if (bias->dtype != lhs->dtype || bias->shape != llvm::ArrayRef<int64_t>{n})
      return ctx.error("the bias must be [" + llvm::Twine(n) + "] " +
                       dtypeName(lhs->dtype) + ", got " +
                       shapeString(bias->shape) + " " + dtypeName(bias->dtype));
    mm.set_bias(bias->id);
  }

  // cuBLASLt computes act(a b + c + bias): a residual add (same shape and
  // type) can be c, and then a tanh GELU the activation; a GELU first is
  // the activation and nothing can follow into c.
  const program::Kernel &kernel = ctx.getKernel();
  int folded = 0;
  if (kernel.epilogue_size() > 0) {
    const program::ElementwiseStep &first = kernel.epilogue(0);
    if (first.op() == "add" && first.operand() >= 0) {
      auto c = ctx.buffer(first.operand());
      if (!c)
        return c.takeError();
      if (c->shape == result->shape && c->dtype == result->dtype) {
        mm.set_c(c->id);
        folded = 1;
      }
    }
    if (folded < kernel.epilogue_size() &&
        isTanhGelu(kernel.epilogue(folded))) {
      mm.set_gelu(true);
      ++folded;
    }
  }

  LoweredKernel lowered;
  lowered.hasMatmul = true;
  lowered.matmul = mm;
  if (folded == kernel.epilogue_size())
    return lowered;

  // The rest of the epilogue in place on d.
  Signature sig;
  std::string d = sig.addOutput(*result, "r0");
  auto all = epilogueSteps(ctx, sig);
  if (!all)
    return all.takeError();
  std::vector<ChainStep> rest(all->begin() + folded, all->end());
  int64_t total = result->numElements();
  std::string idx = indexType(total + 256 * 65535);
  std::string body = "    float f = pt::ldf(" + d + " + i);\n";
  body += "    [[maybe_unused]] long long n = 0;\n";
  if (auto err =
          emitChain(ctx, rest, result->dtype, *result, d, "i", "    ", body))
    return std::move(err);
  GeneratedKernel g;
  g.label = "matmul_epilogue";
  g.summary = "matmul epilogue:";
  for (size_t i = folded; i < static_cast<size_t>(kernel.epilogue_size());
       ++i) {
    std::string step = kernel.epilogue(i).op();
    if (kernel.epilogue(i).op() == "gelu") {
      auto it = kernel.epilogue(i).attributes().find("approximation");
      step += "(" +
              (it == kernel.epilogue(i).attributes().end() ? std::string("none")
                                                           : it->second.s()) +
              ")";
    }
    g.summary += (i == static_cast<size_t>(folded) ? " " : ", ") + step;
  }
  int64_t blocks = std::clamp<int64_t>((total + 255) / 256, 1, 65535);
  g.grid = {static_cast<uint32_t>(blocks), 1, 1};
  g.block = {256, 1, 1};
  g.arguments = sig.arguments();
  g.text = "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
           sig.parameters() + ") {\n";
  g.text += "  for (" + idx + " i = (" + idx +
            ")blockIdx.x * 256 + threadIdx.x; i < " + literal(total) +
            "; i += (" + idx + ")gridDim.x * 256) {\n";
  g.text += body;
  g.text += "  }\n}\n";
  lowered.launches.push_back(std::move(g));
  return lowered;
}

//===----------------------------------------------------------------------===//
// Packed weights
//===----------------------------------------------------------------------===//

namespace {

/// The packed weight of a dequantize (operands from `first`) or a
/// quantized_matmul, checked, as the prelude's template arguments
/// `N, K, BITS, BS, ZP` and the kernel's pointer arguments. A batched
/// dequantize's operands lead with `batch`: each batch's weight starts
/// `strides` elements (q, scales, zero points) after the previous one's.
struct PackedOperands {
  std::string templateArgs;
  std::string pointers; // "q, scales, zp"
  std::string q, s, zp;
  int64_t strides[3] = {0, 0, 0};
};

llvm::Expected<PackedOperands>
addPackedOperands(const KernelContext &ctx, Signature &sig, int first,
                  int64_t k, DType scaleType, bool hasZeroPoints,
                  llvm::ArrayRef<int64_t> batch = {}) {
  auto batched = [&](llvm::ArrayRef<int64_t> shape) {
    llvm::SmallVector<int64_t, 6> full(batch);
    llvm::append_range(full, shape);
    return full;
  };
  auto bits = ctx.getInt("bits");
  if (!bits)
    return bits.takeError();
  auto blockSize = ctx.getInt("block_size");
  if (!blockSize)
    return blockSize.takeError();
  if ((*bits != 4 && *bits != 8) || *blockSize < 16 ||
      !llvm::isPowerOf2_64(*blockSize))
    return ctx.error("bits must be 4 or 8 and block_size a power of two of "
                     "at least 16");
  auto packed = ctx.operand(first), scales = ctx.operand(first + 1);
  if (!packed)
    return packed.takeError();
  if (!scales)
    return scales.takeError();
  if (packed->shape.size() != batch.size() + 3)
    return ctx.error("packed must be [n, blocks, bytes per block]" +
                     std::string(batch.empty() ? "" : " after the batch"));
  int64_t n = packed->shape[batch.size()],
          blocks = (k + *blockSize - 1) / *blockSize;
  int64_t blockBytes = *blockSize * *bits / 8,
          zeroPointBytes = (blocks * *bits + 7) / 8;
  if (packed->dtype != program::I8 ||
      llvm::ArrayRef(packed->shape) !=
          llvm::ArrayRef(batched({n, blocks, blockBytes})))
    return ctx.error("packed " + shapeString(packed->shape) +
                     " does not hold a [" + llvm::Twine(k) + ", " +
                     llvm::Twine(n) + "] weight");
  if (scales->dtype != scaleType ||
      llvm::ArrayRef(scales->shape) != llvm::ArrayRef(batched({n, blocks})))
    return ctx.error("scales must be " + shapeString(batched({n, blocks})) +
                     " " + dtypeName(scaleType));
  if (n >= (int64_t(1) << 31) || k >= (int64_t(1) << 31))
    return ctx.error("weights of 2^31 rows or columns are not supported");
  PackedOperands out;
  std::string q = sig.addInput(*packed, "q");
  std::string s = sig.addInput(*scales, "s");
  std::string zp = "(const unsigned char *)nullptr";
  if (hasZeroPoints) {
    auto z = ctx.operand(first + 2);
    if (!z)
      return z.takeError();
    if (z->dtype != program::I8 ||
        llvm::ArrayRef(z->shape) !=
            llvm::ArrayRef(batched({n, zeroPointBytes})))
      return ctx.error("zero_points must be " +
                       shapeString(batched({n, zeroPointBytes})) + " i8");
    zp = "(const unsigned char *)" + sig.addInput(*z, "z");
  }
  out.templateArgs = literal(n) + ", " + literal(k) + ", " + literal(*bits) +
                     ", " + literal(*blockSize) + ", " +
                     (hasZeroPoints ? "true" : "false");
  out.q = "(const unsigned char *)" + q;
  out.s = s;
  out.zp = zp;
  out.pointers = out.q + ", " + s + ", " + zp;
  out.strides[0] = n * blocks * blockBytes;
  out.strides[1] = n * blocks;
  out.strides[2] = hasZeroPoints ? n * zeroPointBytes : 0;
  return out;
}

} // namespace

llvm::Expected<GeneratedKernel> emitQuantizedMatmul(const KernelContext &ctx) {
  auto hasZeroPoints = ctx.getBool("has_zero_points");
  if (!hasZeroPoints)
    return hasZeroPoints.takeError();
  auto hasBias = ctx.getBool("has_bias");
  if (!hasBias)
    return hasBias.takeError();
  if (auto err = ctx.expectCounts(3 + int(*hasZeroPoints) + int(*hasBias), 1))
    return std::move(err);
  auto lhs = ctx.operand(0);
  auto result = ctx.result(0);
  if (!lhs)
    return lhs.takeError();
  if (!result)
    return result.takeError();
  if (!isFloat(lhs->dtype) || lhs->shape.size() < 2 ||
      result->dtype != lhs->dtype)
    return ctx.error("lhs and the result need one float element type and "
                     "lhs rank 2 or more");
  int64_t k = lhs->shape.back();
  int64_t m = k ? lhs->numElements() / k : 0;
  Signature sig;
  std::string a = sig.addInput(*lhs, "a");
  auto packed = addPackedOperands(ctx, sig, 1, k, lhs->dtype, *hasZeroPoints);
  if (!packed)
    return packed.takeError();
  int64_t n = ctx.operand(1)->shape[0];
  llvm::SmallVector<int64_t> expected(lhs->shape);
  expected.back() = n;
  if (llvm::ArrayRef(result->shape) != llvm::ArrayRef(expected))
    return ctx.error("the result " + shapeString(result->shape) + " is not " +
                     shapeString(expected));
  if (k == 0 || m == 0 || n == 0)
    return ctx.error("empty matrices are not supported");
  std::string bias =
      "(const " + std::string(cudaType(lhs->dtype)) + " *)nullptr";
  if (*hasBias) {
    auto b = ctx.operand(3 + int(*hasZeroPoints));
    if (!b)
      return b.takeError();
    if (b->dtype != lhs->dtype || b->shape != llvm::ArrayRef<int64_t>{n})
      return ctx.error("the bias must be [" + llvm::Twine(n) + "] " +
                       dtypeName(lhs->dtype));
    bias = sig.addInput(*b, "b");
  }
  int64_t tilesM = (m + 15) / 16, tilesN = (n + 15) / 16;
  if (tilesM * tilesN >= (int64_t(1) << 31) || m >= (int64_t(1) << 31))
    return ctx.error("matrices too large for the generated matmul");
  std::string init;
  auto sink = emitFloatSink(ctx, *result, sig, init);
  if (!sink)
    return sink.takeError();
  std::string text = *sink;
  text += "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
          sig.parameters() + ") {\n";
  text += "  pt::qmatmul_tile<" + std::string(cudaType(lhs->dtype)) + ", " +
          literal(m) + ", " + packed->templateArgs + ", " +
          (*hasBias ? "true" : "false") + ">(" + a + ", " + packed->pointers +
          ", " + bias + ", blockIdx.x / " + literal(tilesN) +
          ", blockIdx.x % " + literal(tilesN) + ", " + init + ");\n}\n";
  GeneratedKernel g;
  g.label = "quantized_matmul";
  g.summary = ctx.summary();
  g.grid = {static_cast<uint32_t>(tilesM * tilesN), 1, 1};
  g.block = {256, 1, 1};
  g.arguments = sig.arguments();
  g.text = text;
  return g;
}

llvm::Expected<GeneratedKernel> emitDequantize(const KernelContext &ctx) {
  auto hasZeroPoints = ctx.getBool("has_zero_points");
  if (!hasZeroPoints)
    return hasZeroPoints.takeError();
  if (auto err = ctx.expectCounts(2 + int(*hasZeroPoints), 1))
    return std::move(err);
  auto result = ctx.result(0);
  if (!result)
    return result.takeError();
  if (!isFloat(result->dtype) || result->shape.size() < 2)
    return ctx.error("the result must be a float [B..., k, n]");
  // Leading batch dimensions: stacked weights, one after another.
  llvm::ArrayRef<int64_t> batch = llvm::ArrayRef(result->shape).drop_back(2);
  int64_t k = result->shape[batch.size()], n = result->shape.back();
  Signature sig;
  auto packed =
      addPackedOperands(ctx, sig, 0, k, result->dtype, *hasZeroPoints, batch);
  if (!packed)
    return packed.takeError();
  if (ctx.operand(0)->shape[batch.size()] != n)
    return ctx.error("the result " + shapeString(result->shape) +
                     " does not have the packed weight's columns");
  std::string init;
  auto sink = emitFloatSink(ctx, *result, sig, init);
  if (!sink)
    return sink.takeError();
  int64_t total = result->numElements();
  std::string idx = indexType(total + 256 * 65535);
  std::string text = *sink;
  text += "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
          sig.parameters() + ") {\n";
  text += "  const auto sink = " + init + ";\n";
  text += "  for (" + idx + " i = (" + idx +
          ")blockIdx.x * 256 + threadIdx.x; i < " + literal(total) +
          "; i += (" + idx + ")gridDim.x * 256) {\n";
  std::string pointers = packed->pointers, within = "i";
  if (!batch.empty()) {
    // The batch's weight, and the element within it.
    text += "    const pt::u64 b = i / " + literal(k * n) + ", r = i % " +
            literal(k * n) + ";\n";
    pointers =
        packed->q + " + b * " + literal(packed->strides[0]) + ", " + packed->s +
        " + b * " + literal(packed->strides[1]) + ", " +
        (*hasZeroPoints ? packed->zp + " + b * " + literal(packed->strides[2])
                        : packed->zp);
    within = "r";
  }
  text += "    sink(i, pt::packed_weight<" +
          std::string(cudaType(result->dtype)) + ", " + packed->templateArgs +
          ">(" + pointers + ", (int)(" + within + " / " + literal(n) +
          "), (int)(" + within + " % " + literal(n) + ")));\n  }\n}\n";
  GeneratedKernel g;
  g.label = "dequantize";
  g.summary = ctx.summary();
  g.grid = {
      static_cast<uint32_t>(std::clamp<int64_t>((total + 255) / 256, 1, 65535)),
      1, 1};
  g.block = {256, 1, 1};
  g.arguments = sig.arguments();
  g.text = text;
  return g;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

namespace {

llvm::Expected<LoweredKernel> lowerKernel(const KernelContext &ctx,
                                          const CodeGenOptions &options) {
  const std::string &op = ctx.op();
  if (op == "matmul")
    return emitMatmul(ctx);
  if (op == "moe")
    return emitMoe(ctx);
  auto emit = [&]() -> llvm::Expected<GeneratedKernel> {
    if (isElementwiseOp(op))
      return emitElementwise(ctx);
    if (op == "layer_norm" || op == "rms_norm")
      return emitNormalization(ctx);
    if (op == "softmax" || op == "log_softmax")
      return emitSoftmax(ctx);
    if (op == "reduce")
      return emitReduce(ctx);
    if (op == "cumsum")
      return emitCumsum(ctx);
    if (op == "attention" || op == "attention_partial")
      return emitAttention(ctx, options.decodeKeySplit);
    if (op == "attention_grad")
      return emitAttentionGrad(ctx);
    if (op == "rope")
      return emitRope(ctx);
    if (op == "quantized_matmul")
      return emitQuantizedMatmul(ctx);
    if (op == "dequantize")
      return emitDequantize(ctx);
    if (llvm::is_contained({"transpose", "broadcast_to", "slice", "concat",
                            "split", "gather", "embedding", "kv_cache_write"},
                           llvm::StringRef(op)))
      return emitDataMovement(ctx);
    return ctx.error("no CUDA kernel for this op");
  };
  auto kernel = emit();
  if (!kernel)
    return kernel.takeError();
  LoweredKernel lowered;
  lowered.launches.push_back(std::move(*kernel));
  return lowered;
}

/// One function of the module and who launches it.
struct Function {
  std::string name;
  std::string text;
  std::vector<std::string> summaries;
  std::vector<std::string> locations;
};

std::string replaceAll(std::string text, llvm::StringRef from,
                       llvm::StringRef to) {
  for (size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to.str());
  return text;
}

/// Refuses buffers whose sizes the emitters could not compute: every
/// product of dimensions (0 counted as 1), times 8 bytes, must fit int64_t.
/// The exec lowering bounds every tensor far below; this keeps a program
/// from elsewhere from overflowing them.
llvm::Error checkBufferSizes(const program::Program &program) {
  for (const program::Buffer &buffer : program.buffers()) {
    int64_t bound = 8;
    for (int64_t d : buffer.type().shape())
      if (d < 0 || llvm::MulOverflow(bound, std::max<int64_t>(d, 1), bound))
        return llvm::createStringError(
            "buffer " + std::to_string(buffer.id()) +
            " has a negative dimension or more elements than 64-bit sizes "
            "can count");
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<std::string> generateCudaSource(program::Program &program,
                                               const CodeGenOptions &options) {
  if (llvm::Error error = checkBufferSizes(program))
    return std::move(error);
  if (options.decodeKeySplit < 1 || options.decodeKeySplit >= (1 << 30))
    return llvm::createStringError("the decode key split must be positive");
  std::vector<Function> functions;
  std::map<std::string, size_t> byText;
  std::map<std::string, int> counters;
  std::vector<std::pair<int, std::vector<program::CudaStep>>> steps;

  for (int i = 0; i < program.instructions_size(); ++i) {
    const program::Instruction &inst = program.instructions(i);
    if (!inst.has_kernel())
      continue;
    KernelContext ctx(program, inst.kernel(), inst.location());
    auto lowered = lowerKernel(ctx, options);
    if (!lowered)
      return lowered.takeError();
    std::vector<program::CudaStep> kernelSteps;
    if (lowered->hasMatmul)
      *kernelSteps.emplace_back().mutable_matmul() = lowered->matmul;
    for (GeneratedKernel &g : lowered->launches) {
      auto [it, inserted] = byText.try_emplace(g.text, functions.size());
      if (inserted) {
        std::string label = g.label;
        std::replace_if(
            label.begin(), label.end(),
            [](char c) { return !llvm::isAlnum(c) && c != '_'; }, '_');
        Function f;
        f.name = options.functionPrefix + label + "_" +
                 std::to_string(counters[label]++);
        f.text = g.text;
        functions.push_back(std::move(f));
      }
      Function &f = functions[it->second];
      if (!llvm::is_contained(f.summaries, g.summary))
        f.summaries.push_back(g.summary);
      std::string location =
          inst.location().empty() ? "<unknown>" : inst.location();
      if (f.locations.empty() || f.locations.back() != location)
        f.locations.push_back(location);
      program::CudaLaunch &launch =
          *kernelSteps.emplace_back().mutable_launch();
      launch.set_function(f.name + g.entry);
      for (uint32_t v : g.grid)
        launch.add_grid(v);
      for (uint32_t v : g.block)
        launch.add_block(v);
      launch.set_shared_bytes(g.sharedBytes);
      for (int32_t id : g.arguments)
        launch.add_arguments(id);
    }
    steps.emplace_back(i, std::move(kernelSteps));
  }

  // Only a program that lowered completely is changed.
  for (auto &[index, kernelSteps] : steps) {
    program::Kernel *kernel =
        program.mutable_instructions(index)->mutable_kernel();
    kernel->clear_cuda();
    for (program::CudaStep &step : kernelSteps)
      *kernel->add_cuda() = std::move(step);
  }

  std::string source =
      "// Generated by Partita's CUDA code generator: the kernels of one "
      "rank's\n// exec program. Do not edit.\n//\n// Launch plan: each "
      "kernel instruction (with its fused epilogue) and the\n// steps it "
      "runs on the compute stream, in program order.\n";
  for (auto &[index, kernelSteps] : steps) {
    const program::Instruction &inst = program.instructions(index);
    std::string ops = inst.kernel().op();
    for (const program::ElementwiseStep &step : inst.kernel().epilogue())
      ops += "+" + step.op();
    source += "//   " +
              (inst.location().empty() ? "<unknown>" : inst.location()) + ": " +
              ops + " ->";
    for (const program::CudaStep &step : inst.kernel().cuda()) {
      if (step.has_launch()) {
        source += " " + step.launch().function();
        continue;
      }
      const program::CublasLtMatmul &mm = step.matmul();
      source += " cublasLt[" + std::to_string(mm.batch()) + "x" +
                std::to_string(mm.m()) + "x" + std::to_string(mm.n()) + "x" +
                std::to_string(mm.k());
      if (mm.bias() >= 0)
        source += " bias";
      if (mm.c() >= 0)
        source += " +c";
      if (mm.gelu())
        source += " gelu";
      source += "]";
    }
    source += "\n";
  }
  source += "\n";
  source += kPrelude;
  source += "\n";
  for (const Function &f : functions) {
    source += "\n// " + f.name + ": " + f.summaries.front() + "\n";
    for (size_t s = 1; s < f.summaries.size(); ++s)
      source += "//   also: " + f.summaries[s] + "\n";
    for (const std::string &location : f.locations)
      source += "//   at " + location + "\n";
    source += replaceAll(f.text, kNamePlaceholder, f.name);
  }
  return source;
}

} // namespace partita::target::cuda
