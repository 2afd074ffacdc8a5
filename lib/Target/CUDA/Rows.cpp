//===- Rows.cpp - norms, softmax and reductions ---------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// layer_norm, rms_norm, softmax and log_softmax are row kernels over the
// Prelude's norm_row and softmax_row: a warp per row for rows up to 1024
// elements (eight rows per block), a block per row above; each thread keeps
// its share of the row in registers (16-byte vector loads where the row's
// byte length allows), so global memory is read once, and very long rows
// fall back to re-reading from L2. `reduce` is generated directly: a warp
// per output when the reduced elements are contiguous, a thread per output
// (coalesced across the kept dimension) otherwise.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include <algorithm>

namespace partita::target::cuda {

namespace {

/// How a row kernel maps rows onto threads.
struct RowConfig {
  int64_t group = 32;       // Threads per row.
  int64_t threads = 256;    // Per block.
  int64_t rowsPerBlock = 8; // threads / group.
  int64_t vec = 1;
  bool cache = true;
  int64_t blocks = 1;
};

RowConfig rowConfig(int64_t rows, int64_t n, int64_t vec) {
  RowConfig c;
  c.vec = vec;
  if (n <= 1024) {
    c.group = 32;
    c.threads = 256;
    c.rowsPerBlock = 8;
  } else {
    // About 16 elements per thread, 128 to 1024 threads.
    int64_t threads = ((n + 15) / 16 + 31) / 32 * 32;
    c.threads = std::clamp<int64_t>(threads, 128, 1024);
    c.group = c.threads;
    c.rowsPerBlock = 1;
  }
  int64_t items = (n + c.group * vec - 1) / (c.group * vec);
  c.cache = items * vec <= (c.group == 32 ? 32 : 24);
  c.blocks = std::max<int64_t>(1, (rows + c.rowsPerBlock - 1) / c.rowsPerBlock);
  return c;
}

/// 16 bytes of elements when the row length and every buffer allow it.
int64_t vectorWidth(int64_t n, DType dtype,
                    std::initializer_list<const BufferView *> buffers) {
  int64_t width = 16 / static_cast<int64_t>(dtypeSize(dtype));
  if (width <= 1 || n % width != 0)
    return 1;
  for (const BufferView *b : buffers)
    if (b && !b->aligned16)
      return 1;
  return width;
}

std::string rowKernel(const RowConfig &c, const std::string &params,
                      int64_t rows, const std::string &sinkText,
                      const std::string &call) {
  std::string s = sinkText;
  s += "extern \"C\" __global__ void __launch_bounds__(" + literal(c.threads) +
       ") @NAME@(" + params + ") {\n";
  s += "  __shared__ float red[32];\n";
  if (c.rowsPerBlock > 1) {
    s += "  const pt::u64 row = (pt::u64)blockIdx.x * " +
         literal(c.rowsPerBlock) + " + threadIdx.x / 32;\n";
    s += "  if (row >= " + literal(rows) + ")\n    return;\n";
  } else {
    s += "  const pt::u64 row = blockIdx.x;\n";
    s += "  if (row >= " + literal(rows) + ")\n    return;\n";
  }
  s += "  " + call + ";\n}\n";
  return s;
}

/// The op's `axis` attribute normalized into [0, rank of `input`).
llvm::Expected<int64_t> getAxis(const KernelContext &ctx,
                                const BufferView &input) {
  auto axisOr = ctx.getInt("axis");
  if (!axisOr)
    return axisOr.takeError();
  int64_t rank = input.rank(), axis = *axisOr;
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return ctx.error("axis " + llvm::Twine(*axisOr) + " is out of range for " +
                     shapeString(input.shape));
  return axis;
}

} // namespace

llvm::Expected<GeneratedKernel> emitNormalization(const KernelContext &ctx) {
  bool centered = ctx.op() == "layer_norm";
  auto hasScale = ctx.getBool("has_scale");
  if (!hasScale)
    return hasScale.takeError();
  bool hasBias = false;
  if (centered) {
    auto b = ctx.getBool("has_bias");
    if (!b)
      return b.takeError();
    hasBias = *b;
  }
  int numOperands = 1 + int(*hasScale) + int(hasBias);
  if (auto err = ctx.expectCounts(numOperands, 1))
    return std::move(err);
  auto input = ctx.operand(0);
  auto result = ctx.result(0);
  if (!input)
    return input.takeError();
  if (!result)
    return result.takeError();
  auto axisOr = getAxis(ctx, *input);
  auto epsilon = ctx.getFloat("epsilon");
  if (!axisOr)
    return axisOr.takeError();
  if (!epsilon)
    return epsilon.takeError();
  int64_t rank = input->rank(), axis = *axisOr;
  if (!isFloat(input->dtype))
    return ctx.error("unsupported element type " + dtypeName(input->dtype));
  if (result->shape != input->shape)
    return ctx.error("the result " + shapeString(result->shape) +
                     " differs from the input " + shapeString(input->shape));
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < axis ? rows : n) *= input->shape[d];
  if (n >= (int64_t(1) << 31) || rows >= (int64_t(1) << 31))
    return ctx.error("rows above 2^31 elements are not supported");

  Signature sig;
  std::string x = sig.addInput(*input, "a0");
  std::string scale = "(const " + std::string(cudaType(input->dtype)) +
                      " *)nullptr",
              bias = scale;
  std::optional<BufferView> scaleView, biasView;
  for (int i = 1; i < numOperands; ++i) {
    auto param = ctx.operand(i);
    if (!param)
      return param.takeError();
    if (param->dtype != input->dtype || param->numElements() != n)
      return ctx.error(
          "operand " + llvm::Twine(i) + " " + shapeString(param->shape) + " " +
          dtypeName(param->dtype) + " does not match the normalized " +
          llvm::Twine(n) + " elements of " + dtypeName(input->dtype));
    std::string name = sig.addInput(*param, "a" + std::to_string(i));
    if (i == 1 && *hasScale) {
      scale = name;
      scaleView = *param;
    } else {
      bias = name;
      biasView = *param;
    }
  }
  std::string init;
  auto sink = emitFloatSink(ctx, *result, sig, init);
  if (!sink)
    return sink.takeError();
  bool plainStore = ctx.getKernel().epilogue_size() == 0;
  int64_t vec = vectorWidth(n, input->dtype,
                            {&*input, scaleView ? &*scaleView : nullptr,
                             biasView ? &*biasView : nullptr,
                             plainStore ? &*result : nullptr});
  RowConfig c = rowConfig(rows, n, vec);

  std::string call =
      "pt::norm_row<" + std::string(cudaType(input->dtype)) + ", " +
      literal(n) + ", " + literal(c.group) + ", " + literal(c.vec) + ", " +
      (c.cache ? "true" : "false") + ", " + (centered ? "true" : "false") +
      ", " + (*hasScale ? "true" : "false") + ", " +
      (hasBias ? "true" : "false") + ">(" + x + ", " + scale + ", " + bias +
      ", row, " + floatLiteral(*epsilon) + ", " + init + ", red)";
  GeneratedKernel k;
  k.label = ctx.op();
  k.summary = ctx.summary();
  k.grid = {static_cast<uint32_t>(c.blocks), 1, 1};
  k.block = {static_cast<uint32_t>(c.threads), 1, 1};
  k.arguments = sig.arguments();
  k.text = rowKernel(c, sig.parameters(), rows, *sink, call);
  return k;
}

llvm::Expected<GeneratedKernel> emitSoftmax(const KernelContext &ctx) {
  bool isLog = ctx.op() == "log_softmax";
  if (auto err = ctx.expectCounts(1, 1))
    return std::move(err);
  auto input = ctx.operand(0);
  auto result = ctx.result(0);
  if (!input)
    return input.takeError();
  if (!result)
    return result.takeError();
  auto axisOr = getAxis(ctx, *input);
  if (!axisOr)
    return axisOr.takeError();
  int64_t rank = input->rank(), axis = *axisOr;
  if (!isFloat(input->dtype))
    return ctx.error("unsupported element type " + dtypeName(input->dtype));
  if (result->shape != input->shape)
    return ctx.error("the result " + shapeString(result->shape) +
                     " differs from the input " + shapeString(input->shape));
  int64_t outer = 1, n = input->shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= input->shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= input->shape[d];
  int64_t rows = outer * inner;
  if (n >= (int64_t(1) << 31) || inner >= (int64_t(1) << 31) ||
      rows >= (int64_t(1) << 31))
    return ctx.error("sizes above 2^31 are not supported");

  Signature sig;
  std::string x = sig.addInput(*input, "a0");
  std::string init;
  auto sink = emitFloatSink(ctx, *result, sig, init);
  if (!sink)
    return sink.takeError();
  bool plainStore = ctx.getKernel().epilogue_size() == 0;
  int64_t vec = inner == 1
                    ? vectorWidth(n, input->dtype,
                                  {&*input, plainStore ? &*result : nullptr})
                    : 1;
  RowConfig c = rowConfig(rows, n, vec);
  std::string call =
      "pt::softmax_row<" + std::string(cudaType(input->dtype)) + ", " +
      literal(n) + ", " + literal(inner) + ", " + literal(c.group) + ", " +
      literal(c.vec) + ", " + (c.cache ? "true" : "false") + ", " +
      (isLog ? "true" : "false") + ">(" + x + ", row, " + init + ", red)";
  GeneratedKernel k;
  k.label = ctx.op();
  k.summary = ctx.summary();
  k.grid = {static_cast<uint32_t>(c.blocks), 1, 1};
  k.block = {static_cast<uint32_t>(c.threads), 1, 1};
  k.arguments = sig.arguments();
  k.text = rowKernel(c, sig.parameters(), rows, *sink, call);
  return k;
}

llvm::Expected<GeneratedKernel> emitReduce(const KernelContext &ctx) {
  if (auto err = ctx.expectCounts(1, 1))
    return std::move(err);
  auto input = ctx.operand(0);
  auto result = ctx.result(0);
  if (!input)
    return input.takeError();
  if (!result)
    return result.takeError();
  auto kind = ctx.getString("kind");
  auto axesOr = ctx.getInts("axes");
  auto keepdims = ctx.getBool("keepdims");
  if (!kind)
    return kind.takeError();
  if (!axesOr)
    return axesOr.takeError();
  if (!keepdims)
    return keepdims.takeError();
  if (!llvm::is_contained({"sum", "mean", "max", "min"},
                          llvm::StringRef(*kind)))
    return ctx.error("unknown reduction kind '" + *kind + "'");
  int64_t rank = input->rank();
  std::vector<bool> reduced(rank, false);
  if (axesOr->empty())
    return ctx.error("axes is empty");
  for (int64_t a : *axesOr) {
    int64_t axis = a < 0 ? a + rank : a;
    if (axis < 0 || axis >= rank || reduced[axis])
      return ctx.error("bad axes for " + shapeString(input->shape));
    reduced[axis] = true;
  }
  llvm::SmallVector<int64_t, 6> expected, keptShape, keptStrides, redShape,
      redStrides;
  llvm::SmallVector<int64_t, 6> strides = contiguousStrides(input->shape);
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d] || *keepdims)
      expected.push_back(reduced[d] ? 1 : input->shape[d]);
    (reduced[d] ? redShape : keptShape).push_back(input->shape[d]);
    (reduced[d] ? redStrides : keptStrides).push_back(strides[d]);
  }
  if (result->shape != expected)
    return ctx.error("the result " + shapeString(result->shape) +
                     " is not the reduced shape " + shapeString(expected));
  int64_t outputs = result->numElements();
  int64_t count = 1;
  for (int64_t d : redShape)
    count *= d;
  if (input->numElements() >= (int64_t(1) << 31))
    return ctx.error("inputs above 2^31 elements are not supported");

  // A warp per output when the innermost dimension that is not 1 is reduced
  // (its lanes read consecutive elements); a thread per output otherwise.
  bool rowStyle = false;
  for (int64_t d = rank; d-- > 0;)
    if (input->shape[d] != 1) {
      rowStyle = reduced[d];
      break;
    }

  Signature sig;
  std::string x = sig.addInput(*input, "a0");
  std::string r = sig.addOutput(*result, "r0");
  auto epilogue = epilogueSteps(ctx, sig);
  if (!epilogue)
    return epilogue.takeError();

  bool fl = isFloat(input->dtype);
  std::string acc = fl ? "float" : "long long";
  std::string load = fl ? "pt::ldf" : "pt::ldi";
  std::string init, combine;
  if (*kind == "max") {
    init = fl ? "-__int_as_float(0x7f800000)" : "(-0x7fffffffffffffffLL - 1)";
    combine = fl ? "pt::fmax_nan(b, a)" : "pt::imax(a, b)";
  } else if (*kind == "min") {
    init = fl ? "__int_as_float(0x7f800000)" : "0x7fffffffffffffffLL";
    combine = fl ? "pt::fmin_nan(b, a)" : "pt::imin(a, b)";
  } else {
    init = fl ? "0.0f" : "0LL";
    combine = fl ? "a + b" : "pt::iadd(a, b)";
  }
  std::string keptOffset = stridedOffset(keptShape, keptStrides, "o");
  std::string redOffset = stridedOffset(redShape, redStrides, "k");

  std::string s =
      "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
      sig.parameters() + ") {\n";
  s += "  auto combine = [](" + acc + " a, " + acc + " b) { return " + combine +
       "; };\n";
  int64_t blocks;
  if (rowStyle) {
    s += "  const unsigned o = blockIdx.x * 8 + threadIdx.x / 32;\n";
    s += "  const unsigned lane = threadIdx.x % 32;\n";
    s += "  if (o >= " + literal(outputs) + ")\n    return;\n";
    s += "  " + acc + " acc = " + init + ";\n";
    s += "  for (unsigned k = lane; k < " + literal(count) + "; k += 32)\n";
    s += "    acc = combine(acc, " + load + "(" + x + " + " + keptOffset +
         " + " + redOffset + "));\n";
    s += "#pragma unroll\n";
    s += "  for (int s = 16; s > 0; s >>= 1)\n";
    s += "    acc = combine(acc, __shfl_xor_sync(0xffffffffu, acc, s));\n";
    s += "  if (lane != 0)\n    return;\n";
    blocks = (outputs + 7) / 8;
  } else {
    s += "  const unsigned o = blockIdx.x * 256 + threadIdx.x;\n";
    s += "  if (o >= " + literal(outputs) + ")\n    return;\n";
    s += "  " + acc + " acc = " + init + ";\n";
    s += "  for (unsigned k = 0; k < " + literal(count) + "; ++k)\n";
    s += "    acc = combine(acc, " + load + "(" + x + " + " + keptOffset +
         " + " + redOffset + "));\n";
    blocks = (outputs + 255) / 256;
  }
  if (*kind == "mean")
    s +=
        fl ? "  acc = acc / " + floatLiteral(double(count)) + ";\n"
           : "  acc = " + std::string(count ? "acc / " + literal(count) : "0") +
                 ";\n";
  s += std::string("  [[maybe_unused]] float f = ") + (fl ? "acc" : "0.0f") +
       ";\n";
  s += std::string("  [[maybe_unused]] long long n = ") + (fl ? "0" : "acc") +
       ";\n";
  // The kernel's own result type first, as the host stores it.
  if (!ctx.getKernel().epilogue().empty()) {
    if (input->dtype == program::F16)
      s += "  f = pt::round_f16(f);\n";
    else if (input->dtype == program::BF16)
      s += "  f = pt::round_bf16(f);\n";
    else if (input->dtype == program::I32)
      s += "  n = pt::wrap_i32(n);\n";
    else if (input->dtype == program::I8)
      s += "  n = pt::wrap_i8(n);\n";
    else if (input->dtype == program::BOOL)
      s += "  n = pt::wrap_bool(n);\n";
  }
  if (auto err =
          emitChain(ctx, *epilogue, input->dtype, *result, r, "o", "  ", s))
    return std::move(err);
  s += "}\n";

  GeneratedKernel k;
  k.label = "reduce_" + *kind;
  k.summary = ctx.summary() + " over " + std::to_string(count) + " elements";
  k.grid = {static_cast<uint32_t>(std::max<int64_t>(1, blocks)), 1, 1};
  k.block = {256, 1, 1};
  k.arguments = sig.arguments();
  k.text = s;
  return k;
}

/// cumsum: a warp per line when the scanned axis is the innermost (position
/// ids, `mask.cumsum(-1)`), 32 elements at a time with a shuffle scan and a
/// carry; a thread per line otherwise, walking the axis in order with the
/// threads of a warp on adjacent columns (coalesced). Integers are exact
/// either way; the warp scan adds floats in a tree order within each 32.
llvm::Expected<GeneratedKernel> emitCumsum(const KernelContext &ctx) {
  if (auto err = ctx.expectCounts(1, 1))
    return std::move(err);
  auto input = ctx.operand(0);
  auto result = ctx.result(0);
  if (!input)
    return input.takeError();
  if (!result)
    return result.takeError();
  auto axisOr = getAxis(ctx, *input);
  auto exclusive = ctx.getBool("exclusive");
  auto reverse = ctx.getBool("reverse");
  if (!axisOr)
    return axisOr.takeError();
  if (!exclusive)
    return exclusive.takeError();
  if (!reverse)
    return reverse.takeError();
  int64_t rank = input->rank(), axis = *axisOr;
  if (result->shape != input->shape || result->dtype != input->dtype)
    return ctx.error("the result differs from the input " +
                     shapeString(input->shape));
  if (input->dtype == program::BOOL)
    return ctx.error("no cumsum of bool");
  int64_t total = input->numElements();
  if (total >= (int64_t(1) << 31))
    return ctx.error("inputs above 2^31 elements are not supported");
  int64_t outer = 1, n = input->shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= input->shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= input->shape[d];

  Signature sig;
  std::string x = sig.addInput(*input, "a0");
  std::string r = sig.addOutput(*result, "r0");
  auto epilogue = epilogueSteps(ctx, sig);
  if (!epilogue)
    return epilogue.takeError();

  bool fl = isFloat(input->dtype);
  std::string acc = fl ? "float" : "long long";
  std::string load = fl ? "pt::ldf" : "pt::ldi";
  std::string zero = fl ? "0.0f" : "0LL";
  // Each value as the unfused kernel would store it, then the epilogue.
  auto store = [&](const std::string &value, const std::string &index,
                   const std::string &indent, std::string &out) -> llvm::Error {
    out +=
        indent + "[[maybe_unused]] float f = " + (fl ? value : "0.0f") + ";\n";
    out +=
        indent + "[[maybe_unused]] long long n = " + (fl ? "0" : value) + ";\n";
    if (!ctx.getKernel().epilogue().empty()) {
      if (input->dtype == program::F16)
        out += indent + "f = pt::round_f16(f);\n";
      else if (input->dtype == program::BF16)
        out += indent + "f = pt::round_bf16(f);\n";
      else if (input->dtype == program::I32)
        out += indent + "n = pt::wrap_i32(n);\n";
      else if (input->dtype == program::I8)
        out += indent + "n = pt::wrap_i8(n);\n";
    }
    return emitChain(ctx, *epilogue, input->dtype, *result, r, index, indent,
                     out);
  };

  std::string s =
      "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
      sig.parameters() + ") {\n";
  s += "  auto add = [](" + acc + " a, " + acc + " b) { return " +
       (fl ? "a + b" : "pt::iadd(a, b)") + "; };\n";
  int64_t blocks;
  if (inner == 1) {
    s += "  const unsigned row = blockIdx.x * 8 + threadIdx.x / 32;\n";
    s += "  const unsigned lane = threadIdx.x % 32;\n";
    s += "  if (row >= " + literal(outer) + ")\n    return;\n";
    s += "  " + acc + " carry = " + zero + ";\n";
    s += "  for (unsigned k0 = 0; k0 < " + literal(n) + "; k0 += 32) {\n";
    s += "    const unsigned k = k0 + lane;\n";
    s += "    const unsigned at = row * " + literal(n) + " + " +
         (*reverse ? literal(n - 1) + " - k" : std::string("k")) + ";\n";
    s += "    " + acc + " v = k < " + literal(n) + " ? " + load + "(" + x +
         " + at) : " + zero + ";\n";
    s += "    v = add(carry, pt::warp_inclusive_scan(v, add));\n";
    if (*exclusive) {
      s += "    " + acc + " before = __shfl_up_sync(0xffffffffu, v, 1);\n";
      s += "    " + acc + " out = lane == 0 ? carry : before;\n";
    } else {
      s += "    " + acc + " out = v;\n";
    }
    s += "    carry = __shfl_sync(0xffffffffu, v, 31);\n";
    s += "    if (k < " + literal(n) + ") {\n";
    if (auto err = store("out", "at", "      ", s))
      return std::move(err);
    s += "    }\n  }\n";
    blocks = (outer + 7) / 8;
  } else {
    std::string idx = indexType(total);
    s += "  const " + idx + " t = (" + idx +
         ")blockIdx.x * 256 + threadIdx.x;\n";
    s += "  if (t >= " + literal(outer * inner) + ")\n    return;\n";
    s += "  const " + idx + " base = t / " + literal(inner) + " * " +
         literal(n * inner) + " + t % " + literal(inner) + ";\n";
    s += "  " + acc + " acc = " + zero + ";\n";
    s += "  for (unsigned s = 0; s < " + literal(n) + "; ++s) {\n";
    s += "    const " + idx + " at = base + (" + idx + ")(" +
         (*reverse ? literal(n - 1) + " - s" : std::string("s")) + ") * " +
         literal(inner) + ";\n";
    s += "    const " + acc + " x = " + load + "(" + x + " + at);\n";
    if (*exclusive) {
      s += "    const " + acc + " out = acc;\n";
      s += "    acc = add(acc, x);\n";
    } else {
      s += "    acc = add(acc, x);\n";
      s += "    const " + acc + " out = acc;\n";
    }
    s += "    {\n";
    if (auto err = store("out", "at", "      ", s))
      return std::move(err);
    s += "    }\n  }\n";
    blocks = (outer * inner + 255) / 256;
  }
  s += "}\n";

  GeneratedKernel k;
  k.label = "cumsum";
  // "cumsum over 8 elements, exclusive epilogue: sub".
  k.summary = "cumsum over " + std::to_string(n) + " elements" +
              (*exclusive ? ", exclusive" : "") +
              (*reverse ? ", reverse" : "") +
              ctx.summary().substr(ctx.op().size());
  k.grid = {static_cast<uint32_t>(std::max<int64_t>(1, blocks)), 1, 1};
  k.block = {256, 1, 1};
  k.arguments = sig.arguments();
  k.text = s;
  return k;
}

} // namespace partita::target::cuda
