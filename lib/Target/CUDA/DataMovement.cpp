//===- DataMovement.cpp - layout kernels, gathers and embeddings ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// broadcast_to, slice, concat, split, gather, embedding and transposes that
// keep the innermost dimension are one thread per element in a grid-stride
// loop, the source offset a C expression of the element's index (constant
// divisors, dimensions merged where they stay contiguous). A transpose that
// moves the innermost dimension goes through 32x32 tiles in shared memory
// (padded against bank conflicts) so that both the reads and the writes are
// coalesced. Elements are copied as stored, unless an epilogue needs their
// value.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include <algorithm>

namespace partita::target::cuda {

namespace {

constexpr int64_t kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

/// The statements that move one element from `src` to `dst[index]`: a copy
/// of the stored bits, or its value through `steps` when there are any.
/// With a `guard`, the element is zero where the guard is false (and `src`
/// is not read).
llvm::Error emitMove(const KernelContext &ctx, const BufferView &source,
                     const std::string &src, const BufferView &dest,
                     const std::string &dst, const std::string &index,
                     llvm::ArrayRef<ChainStep> steps, const std::string &indent,
                     std::string &out, const std::string &guard = "") {
  if (steps.empty() && guard.empty()) {
    if (source.dtype != dest.dtype)
      return ctx.error("the result holds " + dtypeName(dest.dtype) +
                       ", the input " + dtypeName(source.dtype));
    out += indent + dst + "[" + index + "] = *(" + src + ");\n";
    return llvm::Error::success();
  }
  out += indent + "{\n";
  std::string inner = indent + "  ";
  out += inner + "[[maybe_unused]] float f = 0.0f;\n" + inner +
         "[[maybe_unused]] long long n = 0;\n";
  std::string load =
      (isFloat(source.dtype) ? "pt::ldf(" : "pt::ldi(") + src + ")";
  if (!guard.empty())
    load = guard + " ? " + load + " : 0";
  out += inner + (isFloat(source.dtype) ? "f = " : "n = ") + load + ";\n";
  if (auto err =
          emitChain(ctx, steps, source.dtype, dest, dst, index, inner, out))
    return err;
  out += indent + "}\n";
  return llvm::Error::success();
}

/// A kernel running `body` for every i below `total`.
GeneratedKernel gridStride(const KernelContext &ctx, const Signature &sig,
                           int64_t total, const std::string &body) {
  std::string idx = indexType(total + kThreads * kMaxBlocks);
  GeneratedKernel k;
  k.label = ctx.op();
  k.summary = ctx.summary();
  int64_t blocks =
      std::clamp<int64_t>((total + kThreads - 1) / kThreads, 1, kMaxBlocks);
  k.grid = {static_cast<uint32_t>(blocks), 1, 1};
  k.block = {static_cast<uint32_t>(kThreads), 1, 1};
  k.arguments = sig.arguments();
  k.text = "extern \"C\" __global__ void __launch_bounds__(" +
           literal(kThreads) + ") @NAME@(" + sig.parameters() + ") {\n";
  k.text += "  for (" + idx + " i = (" + idx + ")blockIdx.x * " +
            literal(kThreads) + " + threadIdx.x; i < " + literal(total) +
            "; i += (" + idx + ")gridDim.x * " + literal(kThreads) + ") {\n";
  k.text += body;
  k.text += "  }\n}\n";
  return k;
}

/// The unsigned type of an element's bits, for copies through shared
/// memory.
const char *bitsType(DType dtype) {
  switch (dtypeSize(dtype)) {
  case 1:
    return "unsigned char";
  case 2:
    return "unsigned short";
  case 4:
    return "unsigned";
  default:
    return "unsigned long long";
  }
}

/// One operand and one result, the epilogue on the result.
struct UnaryMove {
  BufferView source, dest;
  Signature sig;
  std::vector<ChainStep> steps;
};

llvm::Expected<UnaryMove> unaryMove(const KernelContext &ctx) {
  if (auto err = ctx.expectCounts(1, 1))
    return std::move(err);
  UnaryMove m;
  auto source = ctx.operand(0);
  auto dest = ctx.result(0);
  if (!source)
    return source.takeError();
  if (!dest)
    return dest.takeError();
  m.source = *source;
  m.dest = *dest;
  m.sig.addInput(m.source, "a0");
  m.sig.addOutput(m.dest, "r0");
  auto steps = epilogueSteps(ctx, m.sig);
  if (!steps)
    return steps.takeError();
  m.steps = std::move(*steps);
  if (m.source.numElements() >= (int64_t(1) << 40) ||
      m.dest.numElements() >= (int64_t(1) << 40))
    return ctx.error("tensors above 2^40 elements are not supported");
  return m;
}

llvm::Expected<GeneratedKernel>
stridedMove(const KernelContext &ctx, UnaryMove &m, const std::string &offset) {
  std::string body;
  if (auto err = emitMove(ctx, m.source, "a0 + " + offset, m.dest, "r0", "i",
                          m.steps, "    ", body))
    return std::move(err);
  return gridStride(ctx, m.sig, m.dest.numElements(), body);
}

llvm::Expected<GeneratedKernel> emitTranspose(const KernelContext &ctx) {
  auto m = unaryMove(ctx);
  if (!m)
    return m.takeError();
  auto perm = ctx.getInts("permutation");
  if (!perm)
    return perm.takeError();
  int64_t rank = m->source.rank();
  std::vector<bool> seen(rank, false);
  if (static_cast<int64_t>(perm->size()) != rank)
    return ctx.error("the permutation has " + llvm::Twine(perm->size()) +
                     " entries for rank " + llvm::Twine(rank));
  for (int64_t p : *perm) {
    if (p < 0 || p >= rank || seen[p])
      return ctx.error("invalid permutation " + shapeString(*perm));
    seen[p] = true;
  }
  llvm::SmallVector<int64_t, 6> inStrides = contiguousStrides(m->source.shape);
  llvm::SmallVector<int64_t, 6> shape, srcStrides;
  for (int64_t i = 0; i < rank; ++i) {
    shape.push_back(m->source.shape[(*perm)[i]]);
    srcStrides.push_back(inStrides[(*perm)[i]]);
  }
  if (m->dest.shape != shape)
    return ctx.error("the result " + shapeString(m->dest.shape) +
                     " is not the permuted " + shapeString(shape));

  // Without size-1 dims: does the innermost output dim read strided, and
  // which output dim is the input's contiguous one?
  llvm::SmallVector<int64_t, 6> dims, strides;
  for (int64_t i = 0; i < rank; ++i)
    if (shape[i] != 1) {
      dims.push_back(shape[i]);
      strides.push_back(srcStrides[i]);
    }
  int64_t tileDim = -1;
  if (!dims.empty() && strides.back() != 1)
    for (size_t i = 0; i < dims.size(); ++i)
      if (strides[i] == 1)
        tileDim = static_cast<int64_t>(i);
  if (tileDim < 0 || dims.back() < 8 || dims[tileDim] < 8)
    return stridedMove(ctx, *m, stridedOffset(shape, srcStrides, "i"));

  // Tiles of (output dim tileDim: contiguous in the input) x (the last
  // output dim: contiguous in the output); the other dims are the batch.
  int64_t last = static_cast<int64_t>(dims.size()) - 1;
  llvm::SmallVector<int64_t, 6> outStrides = contiguousStrides(dims);
  llvm::SmallVector<int64_t, 6> batchShape, batchSrc, batchDst;
  for (int64_t i = 0; i < last; ++i)
    if (i != tileDim) {
      batchShape.push_back(dims[i]);
      batchSrc.push_back(strides[i]);
      batchDst.push_back(outStrides[i]);
    }
  int64_t extentA = dims[tileDim], extentB = dims[last];
  int64_t tilesA = (extentA + 31) / 32, tilesB = (extentB + 31) / 32;
  int64_t batch = 1;
  for (int64_t s : batchShape)
    batch *= s;
  int64_t blocks = batch * tilesA * tilesB;
  if (blocks >= (int64_t(1) << 31))
    return ctx.error("too many tiles");
  std::string bits = bitsType(m->source.dtype);
  std::string elem = cudaType(m->source.dtype);
  std::string s =
      "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
      m->sig.parameters() + ") {\n";
  s += "  __shared__ " + bits + " tile[32][33];\n";
  s += "  const unsigned tb = blockIdx.x % " + literal(tilesB) +
       ", ta = blockIdx.x / " + literal(tilesB) + " % " + literal(tilesA) +
       ", bt = blockIdx.x / " + literal(tilesA * tilesB) + ";\n";
  s += "  const unsigned long long srcBase = " +
       stridedOffset(batchShape, batchSrc, "(unsigned long long)bt") + ";\n";
  s += "  const unsigned long long dstBase = " +
       stridedOffset(batchShape, batchDst, "(unsigned long long)bt") + ";\n";
  s += "  const unsigned tx = threadIdx.x % 32, ty = threadIdx.x / 32;\n";
  s += "  const " + bits + " *src = reinterpret_cast<const " + bits +
       " *>(a0);\n";
  s += "  for (unsigned k = ty; k < 32; k += 8) {\n";
  s += "    const unsigned a = ta * 32 + tx, b = tb * 32 + k;\n";
  s +=
      "    if (a < " + literal(extentA) + " && b < " + literal(extentB) + ")\n";
  s += "      tile[k][tx] = src[srcBase + a + (unsigned long long)b * " +
       literal(strides[last]) + "];\n";
  s += "  }\n";
  s += "  __syncthreads();\n";
  s += "  for (unsigned k = ty; k < 32; k += 8) {\n";
  s += "    const unsigned a = ta * 32 + k, b = tb * 32 + tx;\n";
  s += "    if (a >= " + literal(extentA) + " || b >= " + literal(extentB) +
       ")\n      continue;\n";
  s += "    const unsigned long long i = dstBase + (unsigned long long)a * " +
       literal(outStrides[tileDim]) + " + b;\n";
  std::string body;
  if (auto err =
          emitMove(ctx, m->source,
                   "reinterpret_cast<const " + elem + " *>(&tile[tx][k])",
                   m->dest, "r0", "i", m->steps, "    ", body))
    return std::move(err);
  s += body;
  s += "  }\n}\n";

  GeneratedKernel k;
  k.label = "transpose";
  k.summary = ctx.summary() + " (tiled)";
  k.grid = {static_cast<uint32_t>(blocks), 1, 1};
  k.block = {256, 1, 1};
  k.arguments = m->sig.arguments();
  k.text = s;
  return k;
}

llvm::Expected<GeneratedKernel> emitBroadcastTo(const KernelContext &ctx) {
  auto m = unaryMove(ctx);
  if (!m)
    return m.takeError();
  const auto &from = m->source.shape, &to = m->dest.shape;
  bool ok = from.size() <= to.size();
  for (size_t d = 0; ok && d < from.size(); ++d)
    ok = from[d] == 1 || from[d] == to[to.size() - from.size() + d];
  if (!ok)
    return ctx.error("cannot broadcast " + shapeString(from) + " to " +
                     shapeString(to));
  return stridedMove(ctx, *m, broadcastOffset(from, to, "i"));
}

llvm::Expected<GeneratedKernel> emitSlice(const KernelContext &ctx) {
  auto m = unaryMove(ctx);
  if (!m)
    return m.takeError();
  auto start = ctx.getInts("start"), limit = ctx.getInts("limit"),
       stride = ctx.getInts("stride");
  if (!start)
    return start.takeError();
  if (!limit)
    return limit.takeError();
  if (!stride)
    return stride.takeError();
  size_t rank = m->source.shape.size();
  if (start->size() != rank || limit->size() != rank || stride->size() != rank)
    return ctx.error("start, limit and stride need one entry per dimension");
  llvm::SmallVector<int64_t, 6> inStrides = contiguousStrides(m->source.shape);
  llvm::SmallVector<int64_t, 6> shape, srcStrides;
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    int64_t s = (*start)[d], l = (*limit)[d], st = (*stride)[d];
    if (s < 0 || s > l || l > m->source.shape[d] || st < 1)
      return ctx.error("bad bounds in dimension " + llvm::Twine(d));
    shape.push_back((l - s + st - 1) / st);
    srcStrides.push_back(inStrides[d] * st);
    base += s * inStrides[d];
  }
  if (m->dest.shape != shape)
    return ctx.error("the result " + shapeString(m->dest.shape) +
                     " is not the slice " + shapeString(shape));
  std::string offset = stridedOffset(shape, srcStrides, "i");
  if (base != 0)
    offset = literal(base) + " + " + offset;
  return stridedMove(ctx, *m, offset);
}

/// The [outer, axis, inner] view of `shape` around `axis`.
void aroundAxis(llvm::ArrayRef<int64_t> shape, int64_t axis, int64_t &outer,
                int64_t &inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      outer *= shape[d];
    else if (d > axis)
      inner *= shape[d];
  }
}

/// Concat's operands or split's results: the pieces of `whole` along axis.
llvm::Error checkPieces(const KernelContext &ctx, const BufferView &whole,
                        llvm::ArrayRef<BufferView> pieces, int64_t axis) {
  int64_t total = 0;
  for (const BufferView &piece : pieces) {
    llvm::SmallVector<int64_t, 6> expected = whole.shape;
    if (piece.rank() == whole.rank())
      expected[axis] = piece.shape[axis];
    if (piece.shape != expected || piece.dtype != whole.dtype)
      return ctx.error("piece " + shapeString(piece.shape) + " " +
                       dtypeName(piece.dtype) + " does not fit " +
                       shapeString(whole.shape) + " " + dtypeName(whole.dtype) +
                       " along axis " + llvm::Twine(axis));
    total += piece.shape[axis];
  }
  if (total != whole.shape[axis])
    return ctx.error("the pieces' sizes along the axis sum to " +
                     llvm::Twine(total) + ", not " +
                     llvm::Twine(whole.shape[axis]));
  return llvm::Error::success();
}

llvm::Expected<int64_t> normalizedAxis(const KernelContext &ctx, int64_t rank) {
  auto axis = ctx.getInt("axis");
  if (!axis)
    return axis.takeError();
  int64_t a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    return ctx.error("axis " + llvm::Twine(*axis) + " is out of range");
  return a;
}

llvm::Expected<GeneratedKernel> emitConcat(const KernelContext &ctx) {
  const program::Kernel &kernel = ctx.getKernel();
  if (kernel.results_size() != 1 || kernel.operands_size() < 1)
    return ctx.error("expected operands and 1 result");
  auto dest = ctx.result(0);
  if (!dest)
    return dest.takeError();
  auto axis = normalizedAxis(ctx, dest->rank());
  if (!axis)
    return axis.takeError();
  Signature sig;
  std::vector<BufferView> pieces;
  for (int i = 0; i < kernel.operands_size(); ++i) {
    auto piece = ctx.operand(i);
    if (!piece)
      return piece.takeError();
    pieces.push_back(*piece);
    sig.addInput(*piece, "a" + std::to_string(i));
  }
  if (auto err = checkPieces(ctx, *dest, pieces, *axis))
    return std::move(err);
  sig.addOutput(*dest, "r0");
  auto steps = epilogueSteps(ctx, sig);
  if (!steps)
    return steps.takeError();
  int64_t outer, inner;
  aroundAxis(dest->shape, *axis, outer, inner);
  int64_t axisSize = dest->shape[*axis];
  std::string body = "    const auto inner = i % " + literal(inner) +
                     ", a = i / " + literal(inner) + " % " + literal(axisSize) +
                     ", outer = i / " + literal(inner * axisSize) + ";\n";
  body += "    (void)inner;\n    (void)outer;\n";
  int64_t offset = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    int64_t size = pieces[p].shape[*axis];
    if (size == 0)
      continue;
    bool lastPiece = offset + size == axisSize;
    body += std::string("    ") + (offset == 0 ? "if" : "else if") + " (" +
            (lastPiece ? "true" : "a < " + literal(offset + size)) + ") {\n";
    std::string src = "a" + std::to_string(p) + " + (outer * " + literal(size) +
                      " + (a - " + literal(offset) + ")) * " + literal(inner) +
                      " + inner";
    if (auto err = emitMove(ctx, pieces[p], src, *dest, "r0", "i", *steps,
                            "      ", body))
      return std::move(err);
    body += "    }\n";
    offset += size;
  }
  return gridStride(ctx, sig, dest->numElements(), body);
}

llvm::Expected<GeneratedKernel> emitSplit(const KernelContext &ctx) {
  const program::Kernel &kernel = ctx.getKernel();
  if (kernel.operands_size() != 1 || kernel.results_size() < 1)
    return ctx.error("expected 1 operand and results");
  auto source = ctx.operand(0);
  if (!source)
    return source.takeError();
  auto axis = normalizedAxis(ctx, source->rank());
  if (!axis)
    return axis.takeError();
  Signature sig;
  sig.addInput(*source, "a0");
  std::vector<BufferView> pieces;
  for (int i = 0; i < kernel.results_size(); ++i) {
    auto piece = ctx.result(i);
    if (!piece)
      return piece.takeError();
    pieces.push_back(*piece);
    sig.addOutput(*piece, "r" + std::to_string(i));
  }
  if (auto err = checkPieces(ctx, *source, pieces, *axis))
    return std::move(err);
  auto steps = epilogueSteps(ctx, sig);
  if (!steps)
    return steps.takeError();
  int64_t outer, inner;
  aroundAxis(source->shape, *axis, outer, inner);
  int64_t axisSize = source->shape[*axis];
  std::string body = "    const auto inner = i % " + literal(inner) +
                     ", a = i / " + literal(inner) + " % " + literal(axisSize) +
                     ", outer = i / " + literal(inner * axisSize) + ";\n";
  body += "    (void)inner;\n    (void)outer;\n";
  int64_t offset = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    int64_t size = pieces[p].shape[*axis];
    if (size == 0)
      continue;
    bool lastPiece = offset + size == axisSize;
    body += std::string("    ") + (offset == 0 ? "if" : "else if") + " (" +
            (lastPiece ? "true" : "a < " + literal(offset + size)) + ") {\n";
    std::string index = "(outer * " + literal(size) + " + (a - " +
                        literal(offset) + ")) * " + literal(inner) + " + inner";
    body += "      const auto j = " + index + ";\n";
    // The epilogue belongs to the first result only.
    llvm::ArrayRef<ChainStep> pieceSteps;
    if (p == 0)
      pieceSteps = *steps;
    if (auto err =
            emitMove(ctx, *source, "a0 + i", pieces[p], "r" + std::to_string(p),
                     "j", pieceSteps, "      ", body))
      return std::move(err);
    body += "    }\n";
    offset += size;
  }
  return gridStride(ctx, sig, source->numElements(), body);
}

/// gather and embedding: result[o, i, c] = data[o, index[i], c] over
/// [outer, axisSize, inner]; negative indices count from the end, and an
/// index out of range yields zeros.
llvm::Expected<GeneratedKernel> emitGatherLike(const KernelContext &ctx,
                                               bool embedding) {
  if (auto err = ctx.expectCounts(2, 1))
    return std::move(err);
  auto data = ctx.operand(0), indices = ctx.operand(1);
  auto dest = ctx.result(0);
  if (!data)
    return data.takeError();
  if (!indices)
    return indices.takeError();
  if (!dest)
    return dest.takeError();
  if (indices->dtype != program::I64 && indices->dtype != program::I32)
    return ctx.error("indices have element type " + dtypeName(indices->dtype) +
                     ", expected i64 or i32");
  int64_t axis = 0;
  if (embedding) {
    if (data->rank() != 2)
      return ctx.error("the table needs rank 2, got " +
                       shapeString(data->shape));
  } else {
    auto a = normalizedAxis(ctx, data->rank());
    if (!a)
      return a.takeError();
    axis = *a;
  }
  llvm::SmallVector<int64_t, 6> expected(data->shape.begin(),
                                         data->shape.begin() + axis);
  expected.append(indices->shape.begin(), indices->shape.end());
  expected.append(data->shape.begin() + axis + 1, data->shape.end());
  if (dest->shape != expected)
    return ctx.error("the result " + shapeString(dest->shape) + " is not " +
                     shapeString(expected));
  int64_t outer, inner;
  aroundAxis(data->shape, axis, outer, inner);
  int64_t axisSize = data->shape[axis];
  int64_t count = indices->numElements();
  Signature sig;
  sig.addInput(*data, "a0");
  sig.addInput(*indices, "a1");
  sig.addOutput(*dest, "r0");
  auto steps = epilogueSteps(ctx, sig);
  if (!steps)
    return steps.takeError();
  std::string body = "    const auto c = i % " + literal(inner) + ", t = i / " +
                     literal(inner) + ", k = t % " + literal(count) +
                     ", o = t / " + literal(count) + ";\n";
  body += "    (void)c;\n    (void)o;\n";
  body += "    long long index = a1[k];\n";
  body +=
      "    index = index < 0 ? index + " + literal(axisSize) + " : index;\n";
  body += "    const bool valid = index >= 0 && index < " + literal(axisSize) +
          ";\n";
  std::string src = "a0 + (o * " + literal(axisSize) +
                    " + (unsigned long long)index) * " + literal(inner) +
                    " + c";
  if (auto err = emitMove(ctx, *data, src, *dest, "r0", "i", *steps, "    ",
                          body, "valid"))
    return std::move(err);
  return gridStride(ctx, sig, dest->numElements(), body);
}

} // namespace

/// kv_cache_write: the update's slice of the cache, in place, at the slot
/// (one, or one per row of the batch) the position buffer holds on the
/// device (Prelude: pt::kv_cache_write).
static llvm::Expected<GeneratedKernel>
emitKvCacheWrite(const KernelContext &ctx) {
  if (auto err = ctx.expectCounts(3, 1))
    return std::move(err);
  if (ctx.getKernel().epilogue_size() != 0)
    return ctx.error("takes no epilogue (it writes one slice of its result)");
  auto cache = ctx.operand(0), update = ctx.operand(1),
       position = ctx.operand(2);
  auto out = ctx.result(0);
  for (auto *view : {&cache, &update, &position, &out})
    if (!*view)
      return view->takeError();
  auto axis = ctx.getInt("axis");
  if (!axis)
    return axis.takeError();
  int64_t rank = cache->rank(), a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    return ctx.error("axis " + llvm::Twine(*axis) + " is out of range for " +
                     "rank " + llvm::Twine(rank));
  if (out->dtype != cache->dtype || out->shape != cache->shape ||
      update->dtype != cache->dtype)
    return ctx.error("the result and the update must have the cache's "
                     "element type (and the result its shape)");
  bool fits = update->rank() == rank;
  for (int64_t d = 0; fits && d < rank; ++d)
    fits = d == a ? update->shape[d] <= cache->shape[d]
                  : update->shape[d] == cache->shape[d];
  if (!fits)
    return ctx.error("the update " + shapeString(update->shape) +
                     " does not fit the cache " + shapeString(cache->shape) +
                     " along axis " + llvm::Twine(a));
  bool perRow = a != 0 && position->numElements() == cache->shape[0];
  if (position->dtype != program::I64 ||
      (position->numElements() != 1 && !perRow))
    return ctx.error("the position must be i64 with one element or one per "
                     "row of the batch");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d)
    outer *= cache->shape[d];
  int64_t row = perRow ? outer / cache->shape[0] : outer;
  for (int64_t d = a + 1; d < rank; ++d)
    inner *= cache->shape[d];
  int64_t slots = cache->shape[a], tokens = update->shape[a];
  const char *element = nullptr;
  switch (dtypeSize(cache->dtype)) {
  case 1:
    element = "unsigned char";
    break;
  case 2:
    element = "unsigned short";
    break;
  case 4:
    element = "unsigned";
    break;
  case 8:
    element = "unsigned long long";
    break;
  default:
    return ctx.error("element type " + dtypeName(cache->dtype) +
                     " is not supported");
  }
  Signature sig;
  sig.addInput(*cache, "a0");
  sig.addInput(*update, "a1");
  sig.addInput(*position, "a2");
  sig.addOutput(*out, "r0");
  std::string e = element;
  GeneratedKernel g;
  g.label = "kv_cache_write";
  g.summary = ctx.summary() + " (in place, slot read on the device)";
  int64_t total = update->numElements();
  g.grid = {
      static_cast<uint32_t>(std::clamp<int64_t>((total + 255) / 256, 1, 65535)),
      1, 1};
  g.block = {256, 1, 1};
  g.arguments = sig.arguments();
  g.text = "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
           sig.parameters() + ") {\n  pt::kv_cache_write<" + e + ", " +
           std::to_string(outer) + "LL, " + std::to_string(slots) + "LL, " +
           std::to_string(tokens) + "LL, " + std::to_string(inner) + "LL, " +
           std::to_string(row) + "LL>((const " + e + " *)a0, (const " + e +
           " *)a1, a2, (" + e + " *)r0);\n}\n";
  return g;
}

llvm::Expected<GeneratedKernel> emitDataMovement(const KernelContext &ctx) {
  const std::string &op = ctx.op();
  if (op == "kv_cache_write")
    return emitKvCacheWrite(ctx);
  if (op == "transpose")
    return emitTranspose(ctx);
  if (op == "broadcast_to")
    return emitBroadcastTo(ctx);
  if (op == "slice")
    return emitSlice(ctx);
  if (op == "concat")
    return emitConcat(ctx);
  if (op == "split")
    return emitSplit(ctx);
  if (op == "gather")
    return emitGatherLike(ctx, false);
  if (op == "embedding")
    return emitGatherLike(ctx, true);
  return ctx.error("not a data movement op");
}

} // namespace partita::target::cuda
