//===- Attention.cpp - attention, its partial form and backward, rope -----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// attention and attention_partial instantiate the Prelude's tiled
// online-softmax kernel (pt::attention) with the instruction's static
// shapes: blocks of 4 warps, each warp owning 8 query rows (4 when a head
// dimension exceeds 64, to keep the per-lane output slice at 16 registers
// and shared memory under 48 KiB), key/value tiles of 32 in shared memory.
// The mask's broadcast to [b, hq, sq, skv] becomes four element strides.
//
// A decode step's attention (one query row: sq = 1, attention only) is
// flash-decoding instead (pt::attention_decode): the keys split into
// ranges of CodeGenOptions::decodeKeySplit (256) keys, one block of 4 warps
// per range and (batch, head), the last block of a (batch, head) merging
// the ranges' partial max, sum and weighted values.
//
// attention_grad is one block of 4 warps per (batch, kv head), which owns
// that head's dk and dv (pt::attention_grad): a warp per query row gives
// the row's statistics and dq, then a warp per key dk and dv; the rows'
// statistics pass between the two phases through a scratch array of the
// function. Simple rather than fast.
//
// rope is one thread per output element: each reads its rotation pair.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include <algorithm>
#include <cmath>

namespace partita::target::cuda {

namespace {

constexpr int64_t kWarps = 4;
constexpr int64_t kMaxHeadDim = 128;

/// Checks that `mask` is bool or float and broadcasts to `scores`
/// ([b, hq, sq, skv]), and sets the element stride of each of the four
/// dimensions (0 where it broadcasts).
llvm::Error broadcastMask(const KernelContext &ctx, const BufferView &mask,
                          const std::array<int64_t, 4> &scores,
                          int64_t (&strides)[4]) {
  if (mask.dtype != program::BOOL && !isFloat(mask.dtype))
    return ctx.error("the mask has element type " + dtypeName(mask.dtype) +
                     ", expected bool or a float type");
  if (mask.rank() > 4)
    return ctx.error("the mask has rank above 4: " + shapeString(mask.shape));
  llvm::SmallVector<int64_t, 6> contiguous = contiguousStrides(mask.shape);
  int64_t lead = 4 - mask.rank();
  for (int64_t dim = 0; dim < 4; ++dim) {
    int64_t size = dim < lead ? 1 : mask.shape[dim - lead];
    if (size != scores[dim] && size != 1)
      return ctx.error("the mask " + shapeString(mask.shape) +
                       " does not broadcast to " + shapeString(scores));
    strides[dim] = size == 1 || dim < lead ? 0 : contiguous[dim - lead];
  }
  return llvm::Error::success();
}

/// The sizes of an attention kernel's q [b, hq, sq, d], k [b, hkv, skv, d]
/// and v [b, hkv, skv, dv].
struct AttentionSizes {
  int64_t batch, hq, hkv, sq, skv, d, dv;
};

/// Checks q, k and v (one float type, rank 4, grouped heads, head sizes
/// 1 to kMaxHeadDim) and returns their sizes.
llvm::Expected<AttentionSizes> checkQueryKeyValue(const KernelContext &ctx,
                                                  const BufferView &q,
                                                  const BufferView &k,
                                                  const BufferView &v) {
  if (!isFloat(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype)
    return ctx.error("q, k and v need one float element type, got " +
                     dtypeName(q.dtype) + ", " + dtypeName(k.dtype) + ", " +
                     dtypeName(v.dtype));
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    return ctx.error("q, k and v need rank 4, got " + shapeString(q.shape) +
                     ", " + shapeString(k.shape) + ", " + shapeString(v.shape));
  AttentionSizes s{q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                   k.shape[2], q.shape[3], v.shape[3]};
  if (k.shape[0] != s.batch || v.shape[0] != s.batch || v.shape[1] != s.hkv ||
      v.shape[2] != s.skv || k.shape[3] != s.d || s.hkv == 0 ||
      s.hq % s.hkv != 0)
    return ctx.error("inconsistent shapes q " + shapeString(q.shape) + ", k " +
                     shapeString(k.shape) + ", v " + shapeString(v.shape));
  if (s.d > kMaxHeadDim || s.dv > kMaxHeadDim || s.d < 1 || s.dv < 1)
    return ctx.error("head dimensions " + llvm::Twine(s.d) + " and " +
                     llvm::Twine(s.dv) + " are outside 1 to 128");
  return s;
}

/// How the kernel templates take the scores' scale and mask.
struct ScoreArguments {
  double scale = 1;
  /// 0: scores not capped.
  double softcap = 0.0;
  /// 0: no sliding window.
  int64_t window = 0;
  std::string maskType = "float", maskArg = "(const float *)nullptr";
  /// 0: no mask, 1: bool (keep where true), 2: added to the scores.
  int maskMode = 0;
  int64_t maskStrides[4] = {0, 0, 0, 0};
};

/// Adds q, k and v to `sig` as a0, a1 and a2, and the mask (operand
/// `maskIndex`, when `hasMask`) as a<maskIndex>; reads the scale (the
/// attribute, or 1/sqrt(d)).
llvm::Expected<ScoreArguments> addScoreOperands(const KernelContext &ctx,
                                                Signature &sig,
                                                llvm::ArrayRef<BufferView> ops,
                                                bool hasMask, int maskIndex,
                                                const AttentionSizes &s) {
  ScoreArguments args;
  args.scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  if (ctx.getKernel().attributes().count("scale")) {
    auto scale = ctx.getFloat("scale");
    if (!scale)
      return scale.takeError();
    args.scale = *scale;
  }
  if (ctx.getKernel().attributes().count("softcap")) {
    auto softcap = ctx.getFloat("softcap");
    if (!softcap)
      return softcap.takeError();
    if (!(*softcap > 0.0) || !std::isfinite(*softcap))
      return ctx.error("softcap " + std::to_string(*softcap) +
                       " is not positive and finite");
    args.softcap = *softcap;
  }
  if (ctx.getKernel().attributes().count("window")) {
    auto window = ctx.getInt("window");
    if (!window)
      return window.takeError();
    if (*window <= 0 || *window >= (int64_t(1) << 31))
      return ctx.error("window " + std::to_string(*window) +
                       " is not in [1, 2^31)");
    args.window = *window;
  }
  sig.addInput(ops[0], "a0");
  sig.addInput(ops[1], "a1");
  sig.addInput(ops[2], "a2");
  if (!hasMask)
    return args;
  const BufferView &mask = ops[maskIndex];
  if (auto err = broadcastMask(ctx, mask, {s.batch, s.hq, s.sq, s.skv},
                               args.maskStrides))
    return std::move(err);
  args.maskMode = mask.dtype == program::BOOL ? 1 : 2;
  args.maskType = cudaType(mask.dtype);
  args.maskArg = sig.addInput(mask, "a" + std::to_string(maskIndex));
  return args;
}

} // namespace

llvm::Expected<GeneratedKernel> emitAttention(const KernelContext &ctx,
                                              int64_t decodeKeySplit) {
  bool partial = ctx.op() == "attention_partial";
  auto hasMask = ctx.getBool("has_mask");
  if (!hasMask)
    return hasMask.takeError();
  bool causal = false, hasPositions = false;
  if (partial) {
    auto p = ctx.getBool("has_positions");
    if (!p)
      return p.takeError();
    hasPositions = *p;
  } else {
    auto c = ctx.getBool("causal");
    if (!c)
      return c.takeError();
    causal = *c;
  }
  int numOperands = 3 + int(*hasMask) + 2 * int(hasPositions);
  if (auto err = ctx.expectCounts(numOperands, partial ? 3 : 1))
    return std::move(err);
  std::vector<BufferView> ops;
  for (int i = 0; i < numOperands; ++i) {
    auto view = ctx.operand(i);
    if (!view)
      return view.takeError();
    ops.push_back(*view);
  }
  auto out = ctx.result(0);
  if (!out)
    return out.takeError();
  const BufferView &q = ops[0], &k = ops[1], &v = ops[2];
  auto sizes = checkQueryKeyValue(ctx, q, k, v);
  if (!sizes)
    return sizes.takeError();
  int64_t batch = sizes->batch, hq = sizes->hq, sq = sizes->sq, d = sizes->d;
  int64_t hkv = sizes->hkv, skv = sizes->skv, dv = sizes->dv;
  if (out->shape != llvm::ArrayRef<int64_t>{batch, hq, sq, dv})
    return ctx.error("the result " + shapeString(out->shape) +
                     " is not [b, hq, sq, dv]");
  int64_t rowsPerWarp = d <= 64 && dv <= 64 ? 8 : 4;
  int64_t blockRows = kWarps * rowsPerWarp;
  int64_t qBlocks = (sq + blockRows - 1) / blockRows;
  int64_t blocks = batch * hq * qBlocks;
  if (blocks >= (int64_t(1) << 31) || q.numElements() >= (int64_t(1) << 31) ||
      k.numElements() >= (int64_t(1) << 31) ||
      out->numElements() >= (int64_t(1) << 31) || skv >= (int64_t(1) << 30))
    return ctx.error("tensors above 2^31 elements are not supported");
  if (batch * hq * qBlocks == 0)
    return ctx.error("empty attention");

  Signature sig;
  auto scores = addScoreOperands(ctx, sig, ops, *hasMask, 3, *sizes);
  if (!scores)
    return scores.takeError();
  double scale = scores->scale;
  const std::string &maskType = scores->maskType, &maskArg = scores->maskArg;
  int maskMode = scores->maskMode;
  const int64_t (&maskStrides)[4] = scores->maskStrides;
  int next = 3 + int(*hasMask);
  std::string qposArg = "(const long long *)nullptr", kposArg = qposArg;
  if (hasPositions) {
    const BufferView &qpos = ops[next], &kpos = ops[next + 1];
    if (qpos.dtype != program::I64 || kpos.dtype != program::I64 ||
        qpos.shape != llvm::ArrayRef<int64_t>{sq} ||
        kpos.shape != llvm::ArrayRef<int64_t>{skv})
      return ctx.error("the positions must be i64 [sq] and [skv], got " +
                       shapeString(qpos.shape) + " and " +
                       shapeString(kpos.shape));
    qposArg = sig.addInput(qpos, "a" + std::to_string(next));
    kposArg = sig.addInput(kpos, "a" + std::to_string(next + 1));
  }
  std::string init;
  auto sink = emitFloatSink(ctx, *out, sig, init);
  if (!sink)
    return sink.takeError();
  // attention_partial's row maxima and sums.
  std::string statsArgs[2] = {"(float *)nullptr", "(float *)nullptr"};
  for (int r = 1; partial && r <= 2; ++r) {
    auto stats = ctx.result(r);
    if (!stats)
      return stats.takeError();
    if (stats->dtype != program::F32 ||
        stats->shape != llvm::ArrayRef<int64_t>{batch, hq, sq})
      return ctx.error(std::string(r == 1 ? "the row maxima" : "the row sums") +
                       " must be f32 [b, hq, sq], got " +
                       dtypeName(stats->dtype) + " " +
                       shapeString(stats->shape));
    statsArgs[r - 1] = sig.addOutput(*stats, "r" + std::to_string(r));
  }
  // A decode step (one query row, no positions): flash-decoding, the keys
  // split over blocks (Prelude: pt::attention_decode). The scratch of the
  // blocks' partials and the per-(b, h) counters are statics of the
  // function, sized by its static shapes.
  if (sq == 1 && !partial) {
    int64_t splits = (skv + decodeKeySplit - 1) / decodeKeySplit;
    int64_t decodeBlocks = batch * hq * splits;
    if (decodeBlocks >= (int64_t(1) << 31) ||
        batch * hq * splits * (dv + 2) >= (int64_t(1) << 31))
      return ctx.error("tensors above 2^31 elements are not supported");
    std::string call =
        "pt::attention_decode<" + std::string(cudaType(q.dtype)) + ", " +
        maskType + ", " + literal(batch) + ", " + literal(hq) + ", " +
        literal(hkv) + ", " + literal(skv) + ", " + literal(d) + ", " +
        literal(dv) + ", " + literal(decodeKeySplit) + ", " +
        std::to_string(maskMode) + ", " + std::to_string(maskStrides[0]) +
        "LL, " + std::to_string(maskStrides[1]) + "LL, " +
        std::to_string(maskStrides[3]) + "LL>(a0, a1, a2, " + maskArg + ", " +
        floatLiteral(scale) + ", " + floatLiteral(scores->softcap) + ", " +
        std::to_string(scores->window) + ", " +
        (splits > 1 ? "@NAME@_part, @NAME@_done"
                    : "(float *)nullptr, (unsigned *)nullptr") +
        ", " + init + ")";
    GeneratedKernel kernel;
    kernel.label = ctx.op();
    kernel.summary = ctx.summary() + " (decode: " + std::to_string(splits) +
                     " split" + (splits == 1 ? "" : "s") + " of " +
                     std::to_string(decodeKeySplit) + " keys)";
    kernel.grid = {static_cast<uint32_t>(decodeBlocks), 1, 1};
    kernel.block = {static_cast<uint32_t>(kWarps * 32), 1, 1};
    kernel.arguments = sig.arguments();
    kernel.text = *sink;
    if (splits > 1)
      kernel.text += "__device__ float @NAME@_part[" +
                     std::to_string(batch * hq * splits * (dv + 2)) +
                     "];\n__device__ unsigned @NAME@_done[" +
                     std::to_string(batch * hq) + "];\n";
    kernel.text += "extern \"C\" __global__ void __launch_bounds__(" +
                   literal(kWarps * 32) + ") @NAME@(" + sig.parameters() +
                   ") {\n  " + call + ";\n}\n";
    return kernel;
  }

  int64_t width = 16 / static_cast<int64_t>(dtypeSize(q.dtype));
  bool vecLoad = d % width == 0 && q.aligned16 && k.aligned16;

  auto b = [](bool value) { return value ? "true" : "false"; };
  std::string call =
      "pt::attention<" + std::string(cudaType(q.dtype)) + ", " + maskType +
      ", " + literal(batch) + ", " + literal(hq) + ", " + literal(hkv) + ", " +
      literal(sq) + ", " + literal(skv) + ", " + literal(d) + ", " +
      literal(dv) + ", " + literal(rowsPerWarp) + ", " + literal(kWarps) +
      ", " + b(vecLoad) + ", " + b(causal) + ", " + std::to_string(maskMode) +
      ", " + std::to_string(maskStrides[0]) + "LL, " +
      std::to_string(maskStrides[1]) + "LL, " + std::to_string(maskStrides[2]) +
      "LL, " + std::to_string(maskStrides[3]) + "LL, " + b(hasPositions) +
      ", " + b(partial) + ">(a0, a1, a2, " + maskArg + ", " + qposArg + ", " +
      kposArg + ", " + statsArgs[0] + ", " + statsArgs[1] + ", " +
      floatLiteral(scale) + ", " + floatLiteral(scores->softcap) + ", " +
      std::to_string(scores->window) + ", " + init + ")";

  GeneratedKernel kernel;
  kernel.label = ctx.op();
  kernel.summary = ctx.summary();
  kernel.grid = {static_cast<uint32_t>(blocks), 1, 1};
  kernel.block = {static_cast<uint32_t>(kWarps * 32), 1, 1};
  kernel.arguments = sig.arguments();
  kernel.text = *sink + "extern \"C\" __global__ void __launch_bounds__(" +
                literal(kWarps * 32) + ") @NAME@(" + sig.parameters() +
                ") {\n  " + call + ";\n}\n";
  return kernel;
}

llvm::Expected<GeneratedKernel> emitAttentionGrad(const KernelContext &ctx) {
  auto hasMask = ctx.getBool("has_mask");
  if (!hasMask)
    return hasMask.takeError();
  auto causal = ctx.getBool("causal");
  if (!causal)
    return causal.takeError();
  int numOperands = 5 + int(*hasMask);
  if (auto err = ctx.expectCounts(numOperands, 3))
    return std::move(err);
  if (ctx.getKernel().epilogue_size() != 0)
    return ctx.error("takes no epilogue (it has three results)");
  std::vector<BufferView> ops, results;
  for (int i = 0; i < numOperands; ++i) {
    auto view = ctx.operand(i);
    if (!view)
      return view.takeError();
    ops.push_back(*view);
  }
  for (int i = 0; i < 3; ++i) {
    auto view = ctx.result(i);
    if (!view)
      return view.takeError();
    results.push_back(*view);
  }
  const BufferView &q = ops[0], &k = ops[1], &v = ops[2];
  const BufferView &out = ops[3 + int(*hasMask)],
                   &dout = ops[4 + int(*hasMask)];
  auto sizes = checkQueryKeyValue(ctx, q, k, v);
  if (!sizes)
    return sizes.takeError();
  if (out.dtype != q.dtype || dout.dtype != q.dtype)
    return ctx.error("out and dout need the element type of q, k and v");
  int64_t batch = sizes->batch, hq = sizes->hq, sq = sizes->sq, d = sizes->d;
  int64_t hkv = sizes->hkv, skv = sizes->skv, dv = sizes->dv;
  llvm::SmallVector<int64_t, 4> outShape = {batch, hq, sq, dv};
  if (out.shape != llvm::ArrayRef<int64_t>(outShape) ||
      dout.shape != llvm::ArrayRef<int64_t>(outShape))
    return ctx.error("out and dout must be [b, hq, sq, dv], got " +
                     shapeString(out.shape) + " and " +
                     shapeString(dout.shape));
  for (int i = 0; i < 3; ++i)
    if (results[i].dtype != q.dtype || results[i].shape != ops[i].shape)
      return ctx.error(std::string(i == 0   ? "dq"
                                   : i == 1 ? "dk"
                                            : "dv") +
                       " must have the type of " +
                       (i == 0   ? "q"
                        : i == 1 ? "k"
                                 : "v"));
  if (batch * hkv == 0 || sq == 0)
    return ctx.error("empty attention_grad");
  if (batch * hkv >= (int64_t(1) << 31) ||
      q.numElements() >= (int64_t(1) << 31) ||
      k.numElements() >= (int64_t(1) << 31) ||
      v.numElements() >= (int64_t(1) << 31) ||
      out.numElements() >= (int64_t(1) << 31) ||
      3 * batch * hq * sq >= (int64_t(1) << 31))
    return ctx.error("tensors above 2^31 elements are not supported");

  Signature sig;
  auto scores = addScoreOperands(ctx, sig, ops, *hasMask, 3, *sizes);
  if (!scores)
    return scores.takeError();
  double scale = scores->scale;
  const std::string &maskType = scores->maskType, &maskArg = scores->maskArg;
  int maskMode = scores->maskMode;
  const int64_t (&maskStrides)[4] = scores->maskStrides;
  std::string outArg =
      sig.addInput(out, "a" + std::to_string(3 + int(*hasMask)));
  std::string doutArg =
      sig.addInput(dout, "a" + std::to_string(4 + int(*hasMask)));
  for (int i = 0; i < 3; ++i)
    sig.addOutput(results[i], "r" + std::to_string(i));

  auto b = [](bool value) { return value ? "true" : "false"; };
  std::string call =
      "pt::attention_grad<" + std::string(cudaType(q.dtype)) + ", " + maskType +
      ", " + literal(batch) + ", " + literal(hq) + ", " + literal(hkv) + ", " +
      literal(sq) + ", " + literal(skv) + ", " + literal(d) + ", " +
      literal(dv) + ", " + literal(kWarps) + ", " + b(*causal) + ", " +
      std::to_string(maskMode) + ", " + std::to_string(maskStrides[0]) +
      "LL, " + std::to_string(maskStrides[1]) + "LL, " +
      std::to_string(maskStrides[2]) + "LL, " + std::to_string(maskStrides[3]) +
      "LL>(a0, a1, a2, " + maskArg + ", " + outArg + ", " + doutArg + ", " +
      floatLiteral(scale) + ", " + floatLiteral(scores->softcap) + ", " +
      std::to_string(scores->window) + ", @NAME@_stats, r0, r1, r2)";

  GeneratedKernel kernel;
  kernel.label = ctx.op();
  kernel.summary = ctx.summary();
  kernel.grid = {static_cast<uint32_t>(batch * hkv), 1, 1};
  kernel.block = {static_cast<uint32_t>(kWarps * 32), 1, 1};
  kernel.arguments = sig.arguments();
  // Each row's maximum, 1 / sum and D, between the kernel's two phases.
  kernel.text = "__device__ float @NAME@_stats[" +
                std::to_string(3 * batch * hq * sq) +
                "];\nextern \"C\" __global__ void __launch_bounds__(" +
                literal(kWarps * 32) + ") @NAME@(" + sig.parameters() +
                ") {\n  " + call + ";\n}\n";
  return kernel;
}

llvm::Expected<GeneratedKernel> emitRope(const KernelContext &ctx) {
  if (auto err = ctx.expectCounts(3, 1))
    return std::move(err);
  auto interleaved = ctx.getBool("interleaved");
  if (!interleaved)
    return interleaved.takeError();
  auto x = ctx.operand(0), cosT = ctx.operand(1), sinT = ctx.operand(2);
  auto result = ctx.result(0);
  if (!x)
    return x.takeError();
  if (!cosT)
    return cosT.takeError();
  if (!sinT)
    return sinT.takeError();
  if (!result)
    return result.takeError();
  if (!isFloat(x->dtype) || cosT->dtype != x->dtype || sinT->dtype != x->dtype)
    return ctx.error("input, cos and sin need one float element type");
  if (x->rank() != 4 || result->shape != x->shape)
    return ctx.error("the input needs rank 4 and the result its shape, got " +
                     shapeString(x->shape) + " and " +
                     shapeString(result->shape));
  int64_t batch = x->shape[0], heads = x->shape[1], seq = x->shape[2],
          d = x->shape[3];
  if (cosT->rank() != 3 || sinT->shape != cosT->shape)
    return ctx.error("cos and sin need rank 3 [b or 1, s, r/2], got " +
                     shapeString(cosT->shape) + " and " +
                     shapeString(sinT->shape));
  int64_t half = cosT->shape[2];
  bool perBatch = cosT->shape[0] != 1;
  if ((perBatch && cosT->shape[0] != batch) || cosT->shape[1] != seq ||
      2 * half > d)
    return ctx.error("cos " + shapeString(cosT->shape) +
                     " does not fit the input " + shapeString(x->shape));
  int64_t total = x->numElements();
  if (total >= (int64_t(1) << 31))
    return ctx.error("inputs above 2^31 elements are not supported");

  Signature sig;
  sig.addInput(*x, "a0");
  sig.addInput(*cosT, "a1");
  sig.addInput(*sinT, "a2");
  std::string init;
  auto sink = emitFloatSink(ctx, *result, sig, init);
  if (!sink)
    return sink.takeError();
  std::string s = *sink;
  s += "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(" +
       sig.parameters() + ") {\n";
  s += "  const auto sink = " + init + ";\n";
  s += "  for (unsigned i = blockIdx.x * 256 + threadIdx.x; i < " +
       literal(total) + "; i += gridDim.x * 256) {\n";
  s += "    const unsigned col = i % " + literal(d) + ", row = i / " +
       literal(d) + ";\n";
  s += "    float v;\n";
  s += "    if (col < " + literal(2 * half) + ") {\n";
  s += "      const unsigned pos = row % " + literal(seq) + ";\n";
  if (perBatch)
    s += "      const unsigned table = (row / " + literal(heads * seq) + " * " +
         literal(seq) + " + pos) * " + literal(half) + ";\n";
  else
    s += "      const unsigned table = pos * " + literal(half) + ";\n";
  if (*interleaved) {
    s += "      const unsigned p = col / 2, i1 = 2 * p, i2 = 2 * p + 1;\n";
    s += "      const bool first = col % 2 == 0;\n";
  } else {
    s += "      const bool first = col < " + literal(half) + ";\n";
    s += "      const unsigned p = first ? col : col - " + literal(half) +
         ", i1 = p, i2 = p + " + literal(half) + ";\n";
  }
  s += "      const float x1 = pt::ldf(a0 + row * " + literal(d) +
       " + i1), x2 = pt::ldf(a0 + row * " + literal(d) + " + i2);\n";
  s += "      const float c = pt::ldf(a1 + table + p), "
       "sn = pt::ldf(a2 + table + p);\n";
  s += "      v = first ? x1 * c - x2 * sn : x2 * c + x1 * sn;\n";
  s += "    } else {\n";
  s += "      v = pt::ldf(a0 + i);\n";
  s += "    }\n";
  s += "    sink(i, v);\n";
  s += "  }\n}\n";

  GeneratedKernel k;
  k.label = "rope";
  k.summary = ctx.summary() + (*interleaved ? " (interleaved)" : "");
  k.grid = {
      static_cast<uint32_t>(std::clamp<int64_t>((total + 255) / 256, 1, 65535)),
      1, 1};
  k.block = {256, 1, 1};
  k.arguments = sig.arguments();
  k.text = s;
  return k;
}

} // namespace partita::target::cuda
