//===- OpsContrib.cpp - onnxruntime's contrib ops -------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The ops of onnxruntime's `com.microsoft` domain (and its own ops of the
// default domain) that onnxruntime-genai's model builder writes, lowered to
// the nn ops the ONNX standard ones become: the fused residual norms, rotary
// embedding with cos/sin caches, GroupQueryAttention with its rotary
// embedding and key/value cache, int4 matmuls and the fused mixture of
// experts (docs/frontend.md).
//
//===----------------------------------------------------------------------===//

#include "ImportContext.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/StringSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

/// [b, s, heads * d] -> [b, heads, s, d].
Value toHeads(NodeContext &ctx, Value x, int64_t heads) {
  ArrayRef<int64_t> s = typeOf(x).getShape();
  Value r = reshape(ctx, x, {s[0], s[1], heads, s[2] / heads});
  return nn::TransposeOp::create(
      ctx.getBuilder(), ctx.getLoc(),
      typeOf(r).clone({s[0], heads, s[1], s[2] / heads}), r,
      ArrayRef<int64_t>{0, 2, 1, 3});
}

/// [b, heads, s, d] -> [b, s, heads * d].
Value fromHeads(NodeContext &ctx, Value x) {
  ArrayRef<int64_t> s = typeOf(x).getShape();
  Value t = nn::TransposeOp::create(ctx.getBuilder(), ctx.getLoc(),
                                    typeOf(x).clone({s[0], s[2], s[1], s[3]}),
                                    x, ArrayRef<int64_t>{0, 2, 1, 3});
  return reshape(ctx, t, {s[0], s[2], s[1] * s[3]});
}

/// Rows `[first, first + count)` of a rotary cache `[max, r/2]`, as nn.rope
/// reads them: `[1, count, r/2]`. The rows must exist.
FailureOr<Value> cacheRows(NodeContext &ctx, Value cache, int64_t first,
                           int64_t count, StringRef what) {
  ArrayRef<int64_t> shape = typeOf(cache).getShape();
  if (shape.size() != 2)
    return ctx.emitError() << ctx.getNode().op_type() << " " << what
                           << " must be [max_sequence_length, rotary/2]";
  if (first + count > shape[0])
    return ctx.emitError() << ctx.getNode().op_type() << " needs rotary "
                           << what << " rows up to position "
                           << first + count - 1 << "; it has " << shape[0];
  Value rows = cache;
  if (first != 0 || count != shape[0])
    rows = nn::SliceOp::create(
        ctx.getBuilder(), ctx.getLoc(), typeOf(cache).clone({count, shape[1]}),
        cache, ArrayRef<int64_t>{first, 0},
        ArrayRef<int64_t>{first + count, shape[1]}, ArrayRef<int64_t>{1, 1});
  return reshape(ctx, rows, {1, count, shape[1]});
}

/// Rows of a rotary cache `[max, r/2]` at run-time positions `ids`
/// (`[b, s]`, i64): `[b, s, r/2]`. A negative position (which onnxruntime
/// refuses and Gather would count from the end) becomes one the gather
/// refuses at run time, as a position past the cache is.
Value gatherRows(NodeContext &ctx, Value cache, Value ids) {
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto idsType = typeOf(ids);
  int64_t rows = typeOf(cache).getDimSize(0);
  auto scalarType = RankedTensorType::get({}, idsType.getElementType());
  Value negative = nn::CompareOp::create(b, loc, idsType.clone(b.getI1Type()),
                                         nn::CompareDirection::LT, ids,
                                         intConstant(ctx, scalarType, {0}));
  ids = nn::WhereOp::create(b, loc, idsType, negative,
                            intConstant(ctx, scalarType, {-rows - 1}), ids);
  ArrayRef<int64_t> is = idsType.getShape();
  return nn::GatherOp::create(
      b, loc, typeOf(cache).clone({is[0], is[1], typeOf(cache).getDimSize(1)}),
      cache, ids, 0);
}

/// The residual and its norm: onnxruntime's SkipLayerNormalization and
/// SkipSimplifiedLayerNormalization (RMS). `input + skip (+ bias)` is
/// normalized over the last dimension; output 3 is the sum, the next
/// layer's residual.
template <typename NormOp> LogicalResult skipNormHandler(NodeContext &ctx) {
  constexpr bool rms = std::is_same_v<NormOp, nn::RmsNormOp>;
  Value input = ctx.getInput(0), skip = ctx.getInput(1),
        gamma = ctx.getInput(2);
  if (!input || !skip || !gamma)
    return failure();
  if (ctx.hasOutput(1) || ctx.hasOutput(2))
    return ctx.emitError() << ctx.getNode().op_type()
                           << " mean and inv_std_var outputs are not supported";
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto type = typeOf(input);
  int64_t rank = type.getRank();
  int64_t hidden = rank ? type.getShape().back() : 0;
  if (rank != 2 && rank != 3)
    return ctx.emitError() << ctx.getNode().op_type()
                           << " input must be [batch, sequence, hidden] or "
                              "[tokens, hidden]";
  // skip is the input's shape, or broadcasts to it from [1, s, h] or [s, h].
  ArrayRef<int64_t> skipShape = typeOf(skip).getShape();
  bool fits = skipShape.size() <= static_cast<size_t>(rank) &&
              (skipShape == type.getShape().take_back(skipShape.size()) ||
               (skipShape.size() == 3 && skipShape[0] == 1 &&
                skipShape.drop_front() == type.getShape().drop_front()));
  if (!fits)
    return ctx.emitError() << ctx.getNode().op_type() << " skip of shape "
                           << typeOf(skip) << " does not match input " << type;
  unsigned betaIndex = rms ? ~0u : 3, biasIndex = rms ? 3 : 4;
  for (unsigned i : {2u, betaIndex, biasIndex})
    if (i != ~0u && ctx.hasInput(i)) {
      Value p = ctx.getInput(i);
      if (!p)
        return failure();
      if (typeOf(p).getShape() != ArrayRef<int64_t>{hidden})
        return ctx.emitError()
               << ctx.getNode().op_type() << " input " << i << " must be ["
               << hidden << "], the hidden size";
    }
  Value sum = nn::AddOp::create(b, loc, input, skip);
  if (ctx.hasInput(biasIndex))
    sum = nn::AddOp::create(b, loc, sum, ctx.getInput(biasIndex));
  float epsilon = ctx.getAttrFloat("epsilon", 1e-12f);
  auto axis = b.getI64IntegerAttr(rank - 1);
  Value out;
  if constexpr (rms)
    out = nn::RmsNormOp::create(b, loc, type, sum, gamma, axis,
                                b.getF32FloatAttr(epsilon));
  else
    out = nn::LayerNormOp::create(
        b, loc, type, sum, gamma,
        ctx.hasInput(betaIndex) ? ctx.getInput(betaIndex) : Value(), axis,
        b.getF32FloatAttr(epsilon));
  ctx.setOutput(0, out);
  if (ctx.hasOutput(3))
    ctx.setOutput(3, sum);
  return success();
}

/// com.microsoft RotaryEmbedding: input [b, s, hidden] (heads from
/// num_heads, or from the caches' width) or [b, heads, s, d]; position_ids
/// [1] (the first token's position, the rest following it) or [b, s];
/// caches [max, r/2]; interleaved; rotary_embedding_dim r <= d.
LogicalResult contribRotaryHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0), cos = ctx.getInput(2), sin = ctx.getInput(3);
  if (!x || !cos || !sin)
    return failure();
  if (ctx.getAttrInt("is_packed_batching", 0))
    return ctx.emitError() << "RotaryEmbedding is_packed_batching is not "
                              "supported";
  if (ctx.getAttrFloat("scale", 1.0f) != 1.0f)
    return ctx.emitError() << "RotaryEmbedding scale "
                           << ctx.getAttrFloat("scale", 1.0f)
                           << " is not supported (1 only)";
  ArrayRef<int64_t> xs = typeOf(x).getShape();
  if (typeOf(cos).getRank() != 2 || typeOf(cos) != typeOf(sin))
    return ctx.emitError() << "RotaryEmbedding caches must be two "
                              "[max_sequence_length, rotary/2] tensors";
  int64_t half = typeOf(cos).getDimSize(1);
  int64_t rotary = ctx.getAttrInt("rotary_embedding_dim", 0);
  if (rotary != 0 && rotary != 2 * half)
    return ctx.emitError() << "RotaryEmbedding rotary_embedding_dim " << rotary
                           << " does not match caches of width " << half;
  bool threeD = xs.size() == 3;
  int64_t seq = threeD ? xs[1] : xs.size() == 4 ? xs[2] : -1;
  if (seq < 0)
    return ctx.emitError() << "RotaryEmbedding input must have rank 3 or 4";
  if (threeD) {
    int64_t heads = ctx.getAttrInt("num_heads", 0);
    if (heads == 0 && half > 0 && xs[2] % (2 * half) == 0)
      heads = xs[2] / (2 * half);
    if (heads <= 0 || xs[2] % heads != 0)
      return ctx.emitError() << "RotaryEmbedding of a 3-D input needs "
                                "num_heads dividing its hidden size "
                             << xs[2];
    x = toHeads(ctx, x, heads);
  }
  if (2 * half > typeOf(x).getDimSize(3))
    return ctx.emitError() << "RotaryEmbedding rotates " << 2 * half
                           << " features of a head of "
                           << typeOf(x).getDimSize(3);
  // Each token's position: [1] is the first token's, the others follow.
  Value ids = ctx.getInput(1);
  if (!ids)
    return failure();
  ArrayRef<int64_t> is = typeOf(ids).getShape();
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  if (is.size() == 1 && is[0] == 1) {
    SmallVector<int64_t> offsets(seq);
    for (int64_t i = 0; i < seq; ++i)
      offsets[i] = i;
    auto idsType = RankedTensorType::get({1, seq}, b.getI64Type());
    ids = nn::AddOp::create(b, loc, idsType, reshape(ctx, ids, {1, 1}),
                            intConstant(ctx, idsType, offsets));
  } else if (is.size() != 2 || (is[0] != xs[0] && is[0] != 1) || is[1] != seq) {
    return ctx.emitError() << "RotaryEmbedding position_ids must be [1] or "
                              "[batch, sequence]";
  }
  Value out = nn::RopeOp::create(
      b, loc, x.getType(), x, gatherRows(ctx, cos, ids),
      gatherRows(ctx, sin, ids),
      ctx.getAttrInt("interleaved", 0) ? b.getUnitAttr() : UnitAttr());
  ctx.setOutput(0, threeD ? fromHeads(ctx, out) : out);
  return success();
}

/// Attention with a sink per head, which nn.attention does not express,
/// spelled out (with Gemma2's tanh softcapping of the scores too where
/// given; `softcap` 0 for none): a sink is gpt-oss's head_sink (`sink`
/// [heads]) or smooth_softmax's, 0:
/// each query head's key/value head gathered, `scores = q k^T * scale`,
/// capped as `softcap * tanh(scores / softcap)`, the mask (`mask`: bool,
/// or a float mask added to the scores) and the causal mask of query `i`
/// at position `past + i`, a softmax over the keys and the sink (a logit
/// that takes its share of the denominator and no value), and the values.
/// Raising finds no attention in it, so ring and flash attention do not
/// apply to it.
Value explicitAttention(NodeContext &ctx, Value q, Value k, Value v, Value mask,
                        int64_t past, float scale, float softcap, Value sink) {
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto qType = typeOf(q), kType = typeOf(k);
  int64_t batch = qType.getDimSize(0), heads = qType.getDimSize(1),
          seq = qType.getDimSize(2), head = qType.getDimSize(3);
  int64_t kvHeads = kType.getDimSize(1), total = kType.getDimSize(2);
  Type element = qType.getElementType();
  auto scalar = [&](double value) -> Value {
    return nn::ConstantOp::create(b, loc,
                                  cast<ElementsAttr>(DenseElementsAttr::get(
                                      RankedTensorType::get({}, element),
                                      b.getFloatAttr(element, value))));
  };
  // Key/value head h / group for query head h.
  if (kvHeads != heads) {
    SmallVector<int64_t> which(heads);
    for (int64_t h = 0; h < heads; ++h)
      which[h] = h / (heads / kvHeads);
    auto indexType = RankedTensorType::get({heads}, b.getI64Type());
    Value indices = nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(indexType, ArrayRef(which))));
    auto repeated = kType.clone({batch, heads, total, head});
    k = nn::GatherOp::create(b, loc, repeated, k, indices, int64_t(1));
    v = nn::GatherOp::create(
        b, loc, typeOf(v).clone({batch, heads, total, typeOf(v).getDimSize(3)}),
        v, indices, int64_t(1));
  }
  Value kT =
      nn::TransposeOp::create(b, loc, kType.clone({batch, heads, head, total}),
                              k, ArrayRef<int64_t>{0, 1, 3, 2});
  auto scoresType = qType.clone({batch, heads, seq, total});
  Value scores = nn::MatmulOp::create(b, loc, scoresType, q, kT, Value());
  if (softcap > 0.0f) {
    scores = nn::MulOp::create(b, loc, scores, scalar(scale / softcap));
    scores = nn::MulOp::create(b, loc, nn::TanhOp::create(b, loc, scores),
                               scalar(softcap));
  } else {
    scores = nn::MulOp::create(b, loc, scores, scalar(scale));
  }
  // The causal mask: query i, at position past + i, sees keys j <= past + i.
  SmallVector<bool> seen(seq * total);
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < total; ++j)
      seen[i * total + j] = j <= past + i;
  auto causalType = RankedTensorType::get({1, 1, seq, total}, b.getI1Type());
  Value causal = nn::ConstantOp::create(
      b, loc, cast<ElementsAttr>(DenseElementsAttr::get(causalType, seen)));
  Value hidden = scalar(-std::numeric_limits<double>::infinity());
  auto maskType = cast<RankedTensorType>(mask.getType());
  if (maskType.getElementType().isInteger(1)) {
    Value both = nn::AndOp::create(b, loc, mask, causal);
    scores = nn::WhereOp::create(b, loc, scoresType, both, scores, hidden);
  } else {
    scores = nn::AddOp::create(b, loc, scores, mask);
    scores = nn::WhereOp::create(b, loc, scoresType, causal, scores, hidden);
  }
  Value probabilities;
  if (sink) {
    // The sink as one more key column of every row, dropped after the
    // softmax.
    auto columnType = scoresType.clone({batch, heads, seq, 1});
    Value column = nn::BroadcastToOp::create(
        b, loc, columnType, reshape(ctx, sink, {1, heads, 1, 1}));
    auto withSinkType = scoresType.clone({batch, heads, seq, total + 1});
    Value all = nn::ConcatOp::create(b, loc, withSinkType,
                                     ValueRange{scores, column}, uint64_t(3));
    Value normalized =
        nn::SoftmaxOp::create(b, loc, withSinkType, all, int64_t(3));
    probabilities = nn::SliceOp::create(
        b, loc, scoresType, normalized, ArrayRef<int64_t>{0, 0, 0, 0},
        ArrayRef<int64_t>{batch, heads, seq, total},
        ArrayRef<int64_t>{1, 1, 1, 1});
  } else {
    probabilities =
        nn::SoftmaxOp::create(b, loc, scoresType, scores, int64_t(3));
  }
  return nn::MatmulOp::create(
      b, loc, qType.clone({batch, heads, seq, typeOf(v).getDimSize(3)}),
      probabilities, v, Value());
}

/// com.microsoft GroupQueryAttention, as onnxruntime's CPU kernel computes
/// it with separate past and present buffers (what the model builder
/// writes): the query (or the packed query, key and value) split into
/// heads, an attention_bias added to the scores, per-head RMS norms of query
/// and key (q_norm_weight, k_norm_weight: Qwen3), rotary embedding of both at
/// positions `past + i` (do_rotary), the present key and value the past
/// followed by the new ones, and causal attention over them with query head h
/// reading key/value head h / (num_heads / kv_num_heads). Key j of batch
/// row b is attended only where j <= seqlens_k[b] (right padding of a
/// first prompt). Inputs where the past is not contiguous (seqlens_k[b]
/// other than past + sequence - 1 after a first prompt, or
/// total_sequence_length other than past + sequence) are refused at run
/// time on every rank: they need the shared-buffer cache, which Partita
/// replaces with its own (--max-seq).
LogicalResult groupQueryAttentionHandler(NodeContext &ctx) {
  auto refuse = [&](StringRef what) {
    return ctx.emitError() << "GroupQueryAttention " << what
                           << " is not supported";
  };
  for (auto [index, what] : {std::pair<unsigned, StringRef>{9, "position_ids"},
                             {12, "k_scale (a quantized cache)"},
                             {13, "v_scale (a quantized cache)"},
                             {16, "query_seqlens"}})
    if (ctx.hasInput(index))
      return refuse(what);
  if (ctx.hasOutput(3) || ctx.getAttrInt("qk_output", 0))
    return refuse("output_qk");
  if (ctx.getAttrInt("causal", 1) != 1)
    return refuse("causal=0");
  if (ctx.getAttrInt("kv_cache_bit_width", 0) != 0 ||
      ctx.getAttrString("k_quant_type", "NONE") != "NONE" ||
      ctx.getAttrString("v_quant_type", "NONE") != "NONE")
    return refuse("with a quantized cache");
  if (ctx.getAttrInt("sliding_window_cache", 0))
    return refuse("sliding_window_cache (a window-sized cache)");
  int64_t window = ctx.getAttrInt("local_window_size", -1);
  if (window < -1 || window == 0)
    return ctx.emitError() << "GroupQueryAttention local_window_size " << window
                           << " is neither -1 nor positive";
  float softcap = ctx.getAttrFloat("softcap", 0.0f);
  if (!(softcap >= 0.0f) || !std::isfinite(softcap))
    return ctx.emitError() << "GroupQueryAttention softcap " << softcap
                           << " is neither 0 nor positive";
  if (ctx.hasInput(1) != ctx.hasInput(2) || ctx.hasInput(3) != ctx.hasInput(4))
    return ctx.emitError() << "GroupQueryAttention needs key and value, and "
                              "past_key and past_value, together";
  if (ctx.hasInput(14) != ctx.hasInput(15))
    return ctx.emitError() << "GroupQueryAttention needs q_norm_weight and "
                              "k_norm_weight together";

  Value query = ctx.getInput(0);
  if (!query)
    return failure();
  int64_t heads = ctx.getAttrInt("num_heads", 0),
          kvHeads = ctx.getAttrInt("kv_num_heads", 0);
  ArrayRef<int64_t> qs = typeOf(query).getShape();
  if (qs.size() != 3 || heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0)
    return ctx.emitError() << "GroupQueryAttention needs a [batch, sequence, "
                              "hidden] query and num_heads a multiple of "
                              "kv_num_heads";
  int64_t batch = qs[0], seq = qs[1];
  bool packed = !ctx.hasInput(1);
  int64_t headSize = qs[2] / (packed ? heads + 2 * kvHeads : heads);
  if (headSize * (packed ? heads + 2 * kvHeads : heads) != qs[2])
    return ctx.emitError() << "GroupQueryAttention query hidden size " << qs[2]
                           << " is not "
                           << (packed ? "(num_heads + 2 * "
                                        "kv_num_heads)"
                                      : "num_heads")
                           << " times a head size";
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  Value key, value;
  if (packed) {
    // A split, which tensor parallelism sees as a fused projection's
    // segments (partita-annotate), rather than three slices.
    auto part = [&](int64_t width) -> Type {
      return typeOf(query).clone({batch, seq, width});
    };
    auto parts = nn::SplitOp::create(b, loc,
                                     TypeRange{part(heads * headSize),
                                               part(kvHeads * headSize),
                                               part(kvHeads * headSize)},
                                     query, int64_t(2));
    query = parts.getResult(0);
    key = parts.getResult(1);
    value = parts.getResult(2);
  } else {
    key = ctx.getInput(1);
    value = ctx.getInput(2);
    if (!key || !value)
      return failure();
    SmallVector<int64_t> want = {batch, seq, kvHeads * headSize};
    if (typeOf(key).getShape() != ArrayRef<int64_t>(want) ||
        typeOf(value).getShape() != ArrayRef<int64_t>(want))
      return ctx.emitError()
             << "GroupQueryAttention key and value must be [" << batch << ", "
             << seq << ", " << kvHeads * headSize << "]";
  }
  Value q = toHeads(ctx, query, heads), k = toHeads(ctx, key, kvHeads),
        v = toHeads(ctx, value, kvHeads);

  // Qwen3's per-head RMS norms, before the rotary embedding.
  if (ctx.hasInput(14)) {
    float shared = ctx.getAttrFloat("qk_norm_epsilon", 1e-6f);
    for (auto [x, index, name] :
         {std::tuple<Value *, unsigned, StringRef>{&q, 14, "q_norm_epsilon"},
          {&k, 15, "k_norm_epsilon"}}) {
      Value weight = ctx.getInput(index);
      if (!weight)
        return failure();
      if (typeOf(weight).getShape() != ArrayRef<int64_t>{headSize})
        return ctx.emitError()
               << "GroupQueryAttention input " << index << " must be ["
               << headSize << "], the head size";
      *x = nn::RmsNormOp::create(
          b, loc, x->getType(), *x, weight, b.getI64IntegerAttr(3),
          b.getF32FloatAttr(ctx.getAttrFloat(name, shared)));
    }
  }

  int64_t past = 0;
  Value pastKey, pastValue;
  if (ctx.hasInput(3)) {
    pastKey = ctx.getInput(3);
    pastValue = ctx.getInput(4);
    if (!pastKey || !pastValue)
      return failure();
    ArrayRef<int64_t> ps = typeOf(pastKey).getShape();
    if (ps.size() != 4 || ps[0] != batch || ps[1] != kvHeads ||
        ps[3] != headSize || typeOf(pastValue) != typeOf(pastKey))
      return ctx.emitError()
             << "GroupQueryAttention past_key and past_value must be [" << batch
             << ", " << kvHeads << ", past, " << headSize << "]";
    past = ps[2];
  }
  int64_t total = past + seq;

  Value seqlens = ctx.getInput(5), totalLength = ctx.getInput(6);
  if (!seqlens || !totalLength)
    return failure();
  if (typeOf(seqlens).getShape() != ArrayRef<int64_t>{batch} ||
      typeOf(totalLength).getNumElements() != 1)
    return ctx.emitError() << "GroupQueryAttention seqlens_k must be [" << batch
                           << "] and total_sequence_length a scalar";
  Value lengths = reshape(ctx, seqlens, {batch, 1});

  // Serving (--max-seq) feeds rows right-padded, as onnxruntime-genai
  // does: a row's tokens from slot 0, the padding after them. In the
  // decode step each row's new tokens are at its own positions,
  // seqlens_k[b] - sequence + 1 + i, where its cache is written and its
  // rotary angles taken; the prefill (an empty past) is at 0 + i for
  // every row.
  KvCacheForm serving = ctx.getKvCacheForm();
  if (serving != KvCacheForm::None) {
    Operation *parent = b.getInsertionBlock()->getParentOp();
    auto func = dyn_cast<func::FuncOp>(parent);
    if (!func)
      func = parent->getParentOfType<func::FuncOp>();
    if (func)
      func->setAttr(nn::NNDialect::kRightPaddedAttrName, b.getUnitAttr());
  }
  Value firstSlot, rowPositions;
  if (serving == KvCacheForm::Decode && pastKey) {
    auto i64 = b.getI64Type();
    firstSlot = nn::SubOp::create(
        b, loc,
        nn::CastOp::create(b, loc, RankedTensorType::get({batch, 1}, i64),
                           lengths),
        intConstant(ctx, RankedTensorType::get({}, i64), {seq - 1}));
    SmallVector<int64_t> steps(seq);
    for (int64_t i = 0; i < seq; ++i)
      steps[i] = i;
    rowPositions = nn::AddOp::create(
        b, loc, RankedTensorType::get({batch, seq}, i64), firstSlot,
        intConstant(ctx, RankedTensorType::get({1, seq}, i64), steps));
  }

  if (ctx.getAttrInt("do_rotary", 0)) {
    Value cos = ctx.hasInput(7) ? ctx.getInput(7) : Value(),
          sin = ctx.hasInput(8) ? ctx.getInput(8) : Value();
    if (!cos || !sin)
      return ctx.emitError() << "GroupQueryAttention do_rotary needs "
                                "cos_cache and sin_cache";
    FailureOr<Value> cosRows, sinRows;
    if (rowPositions) {
      for (auto [table, what] :
           {std::pair<Value, StringRef>{cos, "cos_cache"}, {sin, "sin_cache"}})
        if (typeOf(table).getRank() != 2)
          return ctx.emitError() << "GroupQueryAttention " << what
                                 << " must be [max_sequence_length, rotary/2]";
      cosRows = gatherRows(ctx, cos, rowPositions);
      sinRows = gatherRows(ctx, sin, rowPositions);
    } else {
      cosRows = cacheRows(ctx, cos, past, seq, "cos_cache");
      sinRows = cacheRows(ctx, sin, past, seq, "sin_cache");
    }
    if (failed(cosRows) || failed(sinRows))
      return failure();
    if (2 * typeOf(cos).getDimSize(1) > headSize)
      return ctx.emitError()
             << "GroupQueryAttention rotates " << 2 * typeOf(cos).getDimSize(1)
             << " features of a head of " << headSize;
    UnitAttr interleaved =
        ctx.getAttrInt("rotary_interleaved", 0) ? b.getUnitAttr() : UnitAttr();
    q = nn::RopeOp::create(b, loc, q.getType(), q, *cosRows, *sinRows,
                           interleaved);
    k = nn::RopeOp::create(b, loc, k.getType(), k, *cosRows, *sinRows,
                           interleaved);
  }

  // The present cache: the past, then the new keys and values (also for an
  // empty past: the KV-cache form finds the cache by this concat).
  Value presentKey = k, presentValue = v;
  if (pastKey && firstSlot) {
    // Each row's new keys and values at its own slot of the past padded
    // by `sequence` slots, which partita-kv-cache makes the resident cache.
    auto presentType = typeOf(k).clone({batch, kvHeads, total, headSize});
    Value fill =
        nn::ConstantOp::create(b, loc,
                               cast<ElementsAttr>(DenseElementsAttr::get(
                                   cast<ShapedType>(k.getType()),
                                   b.getZeroAttr(typeOf(k).getElementType()))));
    Value slots = reshape(ctx, firstSlot, {batch});
    for (auto [present, pastPart, update] :
         {std::tuple<Value *, Value, Value>{&presentKey, pastKey, k},
          {&presentValue, pastValue, v}}) {
      Value padded = nn::ConcatOp::create(
          b, loc, presentType, ValueRange{pastPart, fill}, uint64_t(2));
      *present = nn::KvCacheWriteOp::create(b, loc, presentType, padded, update,
                                            slots, int64_t(2));
    }
  } else if (pastKey) {
    auto presentType = typeOf(k).clone({batch, kvHeads, total, headSize});
    presentKey = nn::ConcatOp::create(b, loc, presentType,
                                      ValueRange{pastKey, k}, uint64_t(2));
    presentValue = nn::ConcatOp::create(b, loc, presentType,
                                        ValueRange{pastValue, v}, uint64_t(2));
  }

  // Keys a row may see: j <= seqlens_k[b]. The row's lengths must describe
  // the contiguous cache: low <= seqlens_k[b] <= total - 1, where low is
  // total - 1 after a first prompt (unless serving writes each row at its
  // own position: then sequence - 1), else 0; and total_sequence_length
  // must equal total. Lengths given as constants (initializers) are
  // checked now; others at run time, where a row that breaks the rule
  // picks index 1 of a one-entry table, which the gather refuses.
  bool exact = past > 0 && !firstSlot;
  int64_t low = exact ? total - 1 : (firstSlot ? seq - 1 : 0);
  if (const HostTensor *given = ctx.getConstant(5),
      *givenTotal = ctx.getConstant(6);
      given && givenTotal) {
    if (givenTotal->getAsInt(0) != total)
      return ctx.emitError()
             << "GroupQueryAttention total_sequence_length is "
             << givenTotal->getAsInt(0) << ", but past + sequence is " << total;
    for (int64_t row = 0; row < batch; ++row) {
      int64_t length = given->getAsInt(row);
      if (length < low || length > total - 1)
        return ctx.emitError()
               << "GroupQueryAttention seqlens_k[" << row << "] is " << length
               << ", but it must be "
               << (exact ? "past + sequence - 1 = " + std::to_string(total - 1)
                         : "between " + std::to_string(low) + " and " +
                               std::to_string(total - 1))
               << " (a contiguous cache of " << total << " positions)";
    }
  }
  auto i32 = b.getI32Type(), i1 = b.getI1Type();
  auto rowType = RankedTensorType::get({batch, 1}, i32);
  auto scalar = [&](int64_t x) {
    return intConstant(ctx, RankedTensorType::get({}, i32), {x});
  };
  auto compare = [&](nn::CompareDirection direction, Value lhs, Value rhs,
                     RankedTensorType type) -> Value {
    return nn::CompareOp::create(b, loc, type.clone(i1), direction, lhs, rhs);
  };
  Value ok = nn::AndOp::create(
      b, loc, compare(nn::CompareDirection::GE, lengths, scalar(low), rowType),
      compare(nn::CompareDirection::LE, lengths, scalar(total - 1), rowType));
  ok = nn::AndOp::create(
      b, loc, ok,
      compare(nn::CompareDirection::EQ, reshape(ctx, totalLength, {1, 1}),
              scalar(total), RankedTensorType::get({1, 1}, i32)));
  auto rowIndexType = RankedTensorType::get({batch, 1}, b.getI64Type());
  Value pick = nn::WhereOp::create(
      b, loc, rowIndexType, ok,
      intConstant(ctx, RankedTensorType::get({}, b.getI64Type()), {0}),
      intConstant(ctx, RankedTensorType::get({}, b.getI64Type()), {1}));
  Value table = nn::ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(RankedTensorType::get({1}, i1),
                                                ArrayRef<bool>{true})));
  Value accepted = nn::GatherOp::create(
      b,
      NameLoc::get(
          b.getStringAttr(firstSlot ? "GroupQueryAttention seqlens_k and "
                                      "total_sequence_length: rows within the "
                                      "cache"
                                    : "GroupQueryAttention seqlens_k and "
                                      "total_sequence_length: a contiguous "
                                      "cache of past + sequence"),
          loc),
      RankedTensorType::get({batch, 1}, i1), table, pick, 0);
  SmallVector<int64_t> positions(total);
  for (int64_t j = 0; j < total; ++j)
    positions[j] = j;
  Value mask;
  if (rowPositions) {
    // Query i of row b, at position p = rowPositions[b, i], sees the keys
    // j <= p, and with a window those with p - j < window.
    auto i64 = b.getI64Type();
    auto fullType = RankedTensorType::get({batch, 1, seq, total}, i1);
    Value keys = intConstant(ctx, RankedTensorType::get({1, 1, 1, total}, i64),
                             positions);
    Value at = reshape(ctx, rowPositions, {batch, 1, seq, 1});
    mask = compare(nn::CompareDirection::LE, keys, at, fullType);
    if (window > 0 && window < total)
      mask = nn::AndOp::create(
          b, loc, mask,
          compare(
              nn::CompareDirection::GT, keys,
              nn::SubOp::create(
                  b, loc, at,
                  intConstant(ctx, RankedTensorType::get({}, i64), {window})),
              fullType));
    mask = nn::AndOp::create(b, loc, fullType, mask,
                             reshape(ctx, accepted, {batch, 1, 1, 1}));
  } else {
    Value keyPositions =
        intConstant(ctx, RankedTensorType::get({1, total}, i32), positions);
    auto maskType = RankedTensorType::get({batch, total}, i1);
    mask = nn::AndOp::create(
        b, loc, maskType,
        compare(nn::CompareDirection::LE, keyPositions, lengths, maskType),
        accepted);
    mask = reshape(ctx, mask, {batch, 1, 1, total});
  }
  // A sliding window (Mistral's, gpt-oss's local layers): query i, at
  // position past + i, attends the `window` keys j with
  // past + i - j < window, as onnxruntime's kernel does. Only where it
  // cuts a key of this step.
  if (!rowPositions && window > 0 && window < total) {
    SmallVector<bool> inWindow(seq * total);
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t j = 0; j < total; ++j)
        inWindow[i * total + j] = past + i - j < window;
    auto windowType = RankedTensorType::get({1, 1, seq, total}, i1);
    Value windowMask = nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(windowType, inWindow)));
    mask = nn::AndOp::create(b, loc,
                             RankedTensorType::get({batch, 1, seq, total}, i1),
                             mask, windowMask);
  }

  // attention_bias [batch or 1, heads or 1, sequence, total] is added to
  // the scores: a float mask, -inf where the keys are not attended.
  if (ctx.hasInput(10)) {
    Value bias = ctx.getInput(10);
    if (!bias)
      return failure();
    ArrayRef<int64_t> bs = typeOf(bias).getShape();
    if (bs.size() != 4 || (bs[0] != batch && bs[0] != 1) ||
        (bs[1] != heads && bs[1] != 1) || bs[2] != seq || bs[3] != total)
      return ctx.emitError()
             << "GroupQueryAttention attention_bias must be [" << batch
             << " or 1, " << heads << " or 1, " << seq << ", " << total << "]";
    Type element = typeOf(bias).getElementType();
    Value hidden = nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            RankedTensorType::get({}, element),
            b.getFloatAttr(element,
                           -std::numeric_limits<double>::infinity()))));
    auto maskShape = cast<RankedTensorType>(mask.getType()).getShape();
    SmallVector<int64_t> shape = {batch, std::max(bs[1], maskShape[1]), seq,
                                  total};
    mask = nn::WhereOp::create(b, loc, RankedTensorType::get(shape, element),
                               mask, bias, hidden);
  }
  const onnx::AttributeProto *scaleAttr = ctx.getAttr("scale");
  float scale = scaleAttr && scaleAttr->f() != 0.0f
                    ? scaleAttr->f()
                    : static_cast<float>(1.0 / std::sqrt(double(headSize)));
  // gpt-oss's attention sinks: head_sink per head, or smooth_softmax's
  // sink of 0.
  Value sink;
  if (ctx.hasInput(11)) {
    sink = ctx.getInput(11);
    if (!sink)
      return failure();
    if (typeOf(sink).getShape() != ArrayRef<int64_t>{heads})
      return ctx.emitError() << "GroupQueryAttention head_sink must be ["
                             << heads << "], one per head";
  } else if (ctx.getAttrInt("smooth_softmax", 0)) {
    sink = nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            RankedTensorType::get({heads}, typeOf(q).getElementType()),
            b.getZeroAttr(typeOf(q).getElementType()))));
  }
  Value out;
  if (sink) {
    out = explicitAttention(ctx, q, presentKey, presentValue, mask, past, scale,
                            softcap, sink);
  } else {
    auto attention = nn::AttentionOp::create(
        b, loc, q.getType(), q, presentKey, presentValue, mask, b.getUnitAttr(),
        FloatAttr(), FloatAttr(), IntegerAttr());
    if (scaleAttr && scaleAttr->f() != 0.0f)
      attention.setScaleAttr(b.getF32FloatAttr(scale));
    if (softcap > 0.0f)
      attention.setSoftcapAttr(b.getF32FloatAttr(softcap));
    out = attention;
  }
  ctx.setOutput(0, fromHeads(ctx, out));
  if (ctx.hasOutput(1))
    ctx.setOutput(1, presentKey);
  if (ctx.hasOutput(2))
    ctx.setOutput(2, presentValue);
  return success();
}

/// A constant input of MatMulNBits's or QMoE's packed bytes (uint8) as
/// nn's i8 of the same bits, reshaped to `shape`: the model's bytes, not a
/// copy. `what` names the input in errors ("MatMulNBits B").
FailureOr<Value> packedBytes(NodeContext &ctx, unsigned i, StringRef what,
                             ArrayRef<int64_t> shape) {
  const HostTensor *tensor = ctx.getConstant(i);
  if (!tensor)
    return ctx.emitError() << what
                           << " must be an initializer (a weight computed "
                              "at run time is not supported)";
  if (tensor->dataType != onnx::TensorProto_DataType_UINT8)
    return ctx.emitError() << what << " must be uint8, got "
                           << dataTypeName(tensor->dataType);
  if (tensor->getNumElements() != *getElementCount(shape))
    return ctx.emitError() << what << " has " << tensor->getNumElements()
                           << " bytes; its shape, bits and block_size need "
                           << *getElementCount(shape);
  SmallVector<int64_t> newShape(shape);
  HostTensor bytes(onnx::TensorProto_DataType_INT8, newShape);
  if (tensor->hasRawBytes()) {
    bytes = HostTensor::fromRaw(onnx::TensorProto_DataType_INT8, newShape,
                                tensor->getRawBytes());
  } else {
    std::vector<int64_t> &ints = bytes.mutableInts();
    for (int64_t v : tensor->getInts())
      ints.push_back(static_cast<int8_t>(static_cast<uint8_t>(v)));
  }
  return ctx.createConstantView(i, bytes);
}

/// An optional input of the node, or null.
Value optionalInput(NodeContext &ctx, unsigned i) {
  return ctx.hasInput(i) ? ctx.getInput(i) : Value();
}

/// The expert weights of a fused mixture, as floats `[E, out, in]`.
struct MixtureWeights {
  Value fc1, fc2, fc3, bias1, bias2, bias3;
};

/// What MoE and QMoE (`op`) share once the experts are floats: the
/// attributes' checks, the router and nn.moe. The router's softmax over
/// the experts and its top k (renormalized to sum 1 with
/// normalize_routing_weights), then nn.moe: each token's k experts' MLPs,
/// weighted by their routing weights, on the stacked `[E, out, in]`
/// weights. Activations: relu, gelu (the tanh approximation, as
/// onnxruntime computes it), silu, identity and swiglu (gate and up
/// unfused with fc3, interleaved, or concatenated; activation_alpha,
/// activation_beta, swiglu_limit). Refused: the sparse mixer, CUDA's relu2
/// and geglu, and a limit after the activation (CUDA only).
LogicalResult buildMixture(NodeContext &ctx, StringRef op,
                           const MixtureWeights &weightsIn) {
  Value input = ctx.getInput(0), router = ctx.getInput(1);
  if (!input || !router)
    return failure();
  auto [fc1, fc2, fc3, bias1, bias2, bias3] = weightsIn;
  if (ctx.getAttrInt("use_sparse_mixer", 0))
    return ctx.emitError() << op << "'s sparse mixer is not supported";
  if (ctx.getAttrInt("swiglu_limit_after_activation", 0))
    return ctx.emitError() << op
                           << "'s swiglu_limit_after_activation (CUDA "
                              "only in onnxruntime) is not supported";
  std::string activation = ctx.getAttrString("activation_type", "relu");
  if (!llvm::is_contained({"relu", "gelu", "silu", "identity", "swiglu"},
                          activation))
    return ctx.emitError() << op << "'s activation_type '" << activation
                           << "' is not supported (relu, gelu, silu, "
                              "identity and swiglu are)";
  auto inputType = typeOf(input);
  Type element = inputType.getElementType();
  if (!isa<FloatType>(element))
    return ctx.emitError() << op << " computes in floats, not " << element;
  int64_t hidden = inputType.getShape().back();
  int64_t tokens = inputType.getNumElements() / std::max<int64_t>(hidden, 1);
  auto routerType = typeOf(router);
  auto fc1Type = typeOf(fc1), fc2Type = typeOf(fc2);
  if (routerType.getRank() != 2 || routerType.getDimSize(0) != tokens ||
      fc1Type.getRank() != 3 || fc2Type.getRank() != 3)
    return ctx.emitError()
           << op << " expects router_probs [tokens, experts] (" << tokens
           << " tokens) and 3-D expert weights, got router_probs "
           << shapeText(routerType.getShape()) << ", fc1 "
           << shapeText(fc1Type.getShape()) << " and fc2 "
           << shapeText(fc2Type.getShape());
  int64_t experts = routerType.getDimSize(1);
  int64_t k = ctx.getAttrInt("k", 1);
  if (k < 1 || k > experts)
    return ctx.emitError() << op << "'s k is " << k << ", but there are "
                           << experts << " experts";
  int64_t fusion = ctx.getAttrInt("swiglu_fusion", 0);
  bool swiglu = activation == "swiglu";
  if (fusion < 0 || fusion > 2 || (swiglu && fusion == 0 && !fc3) ||
      (!swiglu && fusion != 0))
    return ctx.emitError() << op << "'s swiglu_fusion is " << fusion
                           << " with activation_type '" << activation
                           << "' and " << (fc3 ? "" : "no ")
                           << "fc3_experts_weights";
  if (fc3 && (!swiglu || fusion != 0))
    return ctx.emitError() << op
                           << "'s fc3_experts_weights is used only by an "
                              "unfused swiglu (swiglu_fusion 0), not with "
                              "activation_type '"
                           << activation << "' and swiglu_fusion " << fusion;
  int64_t fused = fc1Type.getDimSize(1);
  int64_t inter = swiglu && fusion != 0 ? fused / 2 : fused;
  auto expect = [&](Value v, ArrayRef<int64_t> shape, StringRef what) {
    if (!v || typeOf(v).getShape() == shape)
      return true;
    ctx.emitError() << op << "'s " << what << " has shape "
                    << shapeText(typeOf(v).getShape()) << ", not "
                    << shapeText(shape);
    return false;
  };
  if (!expect(fc1, {experts, fused, hidden}, "fc1_experts_weights") ||
      !expect(bias1, {experts, fused}, "fc1_experts_bias") ||
      !expect(fc2, {experts, hidden, inter}, "fc2_experts_weights") ||
      !expect(bias2, {experts, hidden}, "fc2_experts_bias") ||
      !expect(fc3, {experts, inter, hidden}, "fc3_experts_weights") ||
      !expect(bias3, {experts, inter}, "fc3_experts_bias") ||
      (swiglu && fusion != 0 && fused % 2 != 0))
    return failure();

  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  // Routing: softmax, top k, renormalized.
  Value probabilities =
      nn::SoftmaxOp::create(b, loc, routerType, router, int64_t(1));
  auto [weights, chosen] = buildTopK(ctx, probabilities, 1, k, true);
  if (!weights)
    return failure();
  auto topType = typeOf(weights);
  if (ctx.getAttrInt("normalize_routing_weights", 0)) {
    Value total = nn::ReduceOp::create(b, loc, topType.clone({tokens, 1}),
                                       nn::ReduceKind::Sum, weights,
                                       ArrayRef<int64_t>{1}, true);
    weights = nn::DivOp::create(b, loc, weights, total);
  }
  nn::MoeActivation kind = llvm::StringSwitch<nn::MoeActivation>(activation)
                               .Case("relu", nn::MoeActivation::Relu)
                               .Case("gelu", nn::MoeActivation::GeluTanh)
                               .Case("silu", nn::MoeActivation::Silu)
                               .Case("identity", nn::MoeActivation::Identity)
                               .Default(nn::MoeActivation::Swiglu);
  Value x = reshape(ctx, input, {tokens, hidden});
  auto moe = nn::MoeOp::create(
      b, loc, typeOf(x), x, chosen, weights, fc1, fc2, fc3, bias1, bias2, bias3,
      kind, swiglu && fusion == 1, FloatAttr(), FloatAttr(), FloatAttr());
  if (swiglu) {
    moe.setAlphaAttr(
        b.getF32FloatAttr(ctx.getAttrFloat("activation_alpha", 1.0)));
    moe.setBetaAttr(
        b.getF32FloatAttr(ctx.getAttrFloat("activation_beta", 0.0)));
    if (llvm::any_of(ctx.getNode().attribute(), [](const auto &attribute) {
          return attribute.name() == "swiglu_limit";
        })) {
      float limit = ctx.getAttrFloat("swiglu_limit", 0);
      if (!(limit > 0))
        return ctx.emitError()
               << op << "'s swiglu_limit must be positive, got " << limit;
      moe.setLimitAttr(b.getF32FloatAttr(limit));
    }
  }
  ctx.setOutput(0, reshape(ctx, moe, inputType.getShape()));
  return success();
}

/// com.microsoft.MoE (onnxruntime's fused mixture of experts), its experts
/// the model's float weights as they are stored.
LogicalResult moeHandler(NodeContext &ctx) {
  Value fc1 = ctx.getInput(2), fc2 = ctx.getInput(4);
  if (!fc1 || !fc2)
    return failure();
  return buildMixture(ctx, "MoE",
                      {fc1, fc2, optionalInput(ctx, 6), optionalInput(ctx, 3),
                       optionalInput(ctx, 5), optionalInput(ctx, 7)});
}

/// One projection of QMoE's experts: the packed `[E, N, K * bits / 8]`
/// weight (input `weight`), its scales (`[E, N, K / block_size]`, or
/// `[E, N]` without a block size: one block per row) and zero points
/// (`zeroPoints`, optional), as the float `[E, N, K]` experts: a batched
/// nn.dequantize (`[E, K, N]`, as MatMulNBits's weight) transposed.
FailureOr<Value> dequantizeExperts(NodeContext &ctx, unsigned weight,
                                   unsigned scalesInput, unsigned zeroPoints,
                                   StringRef what, int64_t bits,
                                   int64_t blockSize, Type element) {
  std::string name = ("QMoE's " + what + "_experts_weights").str();
  const HostTensor *tensor = ctx.getConstant(weight);
  if (!tensor || tensor->shape.size() != 3)
    return ctx.emitError() << name
                           << " must be an initializer [experts, rows, "
                              "packed bytes]";
  int64_t experts = tensor->shape[0], n = tensor->shape[1];
  int64_t k = tensor->shape[2] * 8 / bits;
  int64_t block = blockSize > 0 ? blockSize : k;
  if (block < 16 || !llvm::isPowerOf2_64(block) || k % block != 0)
    return ctx.emitError()
           << "QMoE's " << what << " has rows of " << k << " elements and "
           << (blockSize > 0 ? "block_size "
                             : "one block per row (no "
                               "block_size): ")
           << block
           << "; Partita needs blocks of a power of two of at least "
              "16 that divide the rows";
  int64_t blocks = k / block;
  FailureOr<Value> packed =
      packedBytes(ctx, weight, name, {experts, n, blocks, block * bits / 8});
  if (failed(packed))
    return failure();
  std::string scaleName = ("QMoE's " + what + "_scales").str();
  if (!ctx.hasInput(scalesInput))
    return ctx.emitError() << scaleName << " are required (quant_type 'int')";
  SmallVector<int64_t> scaleShape = {experts, n, blocks};
  Value scales;
  if (const HostTensor *constant = ctx.getConstant(scalesInput)) {
    if (constant->getNumElements() != experts * n * blocks ||
        constant->dataType != getDataType(element))
      return ctx.emitError()
             << scaleName << " must hold " << experts * n * blocks
             << " values of the input's type";
    HostTensor shaped = *constant;
    shaped.shape = scaleShape;
    scales = ctx.createConstantView(scalesInput, shaped);
  } else {
    scales = ctx.getInput(scalesInput);
    if (!scales)
      return failure();
    if (typeOf(scales).getNumElements() != experts * n * blocks ||
        typeOf(scales).getElementType() != element)
      return ctx.emitError()
             << scaleName << " must hold " << experts * n * blocks
             << " values of the input's type";
    scales = reshape(ctx, scales, scaleShape);
  }
  Value zero;
  if (ctx.hasInput(zeroPoints)) {
    // Without a block size onnxruntime packs the zero points of two rows
    // to a byte; nn.dequantize packs those of a row's blocks.
    if (blockSize <= 0 && bits != 8)
      return ctx.emitError()
             << "QMoE's " << what
             << "_zero_points without block_size (two rows' to a byte) are "
                "not supported; give block_size";
    FailureOr<Value> z =
        packedBytes(ctx, zeroPoints, ("QMoE's " + what + "_zero_points").str(),
                    {experts, n, (blocks * bits + 7) / 8});
    if (failed(z))
      return failure();
    zero = *z;
  }
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  Value dequantized = nn::DequantizeOp::create(
      b, loc, RankedTensorType::get({experts, k, n}, element), *packed, scales,
      zero, b.getI64IntegerAttr(bits), b.getI64IntegerAttr(block));
  return nn::TransposeOp::create(
             b, loc, RankedTensorType::get({experts, n, k}, element),
             dequantized, ArrayRef<int64_t>{0, 2, 1})
      .getResult();
}

/// com.microsoft.QMoE: MoE with integer experts (4 or 8 bits, blockwise or
/// one block per row, optional zero points), which onnxruntime-genai's
/// builder writes for int4 mixtures: each projection a batched
/// nn.dequantize of the stacked packed weights, then MoE's router and
/// nn.moe. Refused by name: the other quantization types (fp4, fp8, ...),
/// prepacked weights, DeepSeek's separate router weights, global and
/// activation scales.
LogicalResult qmoeHandler(NodeContext &ctx) {
  if (ctx.isTraining())
    return ctx.emitError() << "--train: QMoE's experts are packed integers, "
                              "which a training step does not update (train "
                              "the float model, then quantize it)";
  std::string quantType = ctx.getAttrString("quant_type", "int");
  if (quantType != "int")
    return ctx.emitError() << "QMoE's quant_type '" << quantType
                           << "' is not supported (int is)";
  if (ctx.getAttrInt("weights_prepacked", 0) > 0)
    return ctx.emitError() << "QMoE's prepacked weights (CUTLASS's layout) "
                              "are not supported";
  static const char *const kUnsupported[] = {
      "router_weights",     "fc1_global_scale", "fc2_global_scale",
      "fc1_act_scale",      "fc2_act_scale",    "fc1_act_block_scale",
      "fc2_act_block_scale"};
  for (unsigned i = 14; i < ctx.getNumInputs(); ++i)
    if (ctx.hasInput(i))
      return ctx.emitError()
             << "QMoE's " << kUnsupported[i - 14] << " input is not supported";
  int64_t bits = ctx.getAttrInt("expert_weight_bits", 4);
  int64_t blockSize = ctx.getAttrInt("block_size", 0);
  Value input = ctx.getInput(0);
  if (!input)
    return failure();
  Type element = typeOf(input).getElementType();
  MixtureWeights weights;
  struct Projection {
    const char *name;
    unsigned weight, scales, bias, zeroPoints;
    Value *out, *outBias;
  } projections[] = {{"fc1", 2, 3, 4, 11, &weights.fc1, &weights.bias1},
                     {"fc2", 5, 6, 7, 12, &weights.fc2, &weights.bias2},
                     {"fc3", 8, 9, 10, 13, &weights.fc3, &weights.bias3}};
  for (const Projection &p : projections) {
    std::string bitsName = std::string(p.name) + "_expert_weight_bits";
    int64_t own = ctx.getAttrInt(bitsName, bits);
    if (own != 4 && own != 8)
      return ctx.emitError() << "QMoE's " << p.name << " has " << own
                             << "-bit weights (4 and 8 are supported)";
    if (!ctx.hasInput(p.weight)) {
      if (p.weight != 8)
        return ctx.emitError() << "QMoE needs " << p.name << "_experts_weights";
      for (auto [input, what] :
           {std::pair(p.scales, "_scales"), std::pair(p.bias, "_experts_bias"),
            std::pair(p.zeroPoints, "_zero_points")})
        if (ctx.hasInput(input))
          return ctx.emitError()
                 << "QMoE's " << p.name << what << " is given without "
                 << p.name << "_experts_weights";
      continue;
    }
    FailureOr<Value> experts = dequantizeExperts(
        ctx, p.weight, p.scales, p.zeroPoints, p.name, own, blockSize, element);
    if (failed(experts))
      return failure();
    *p.out = *experts;
    *p.outBias = optionalInput(ctx, p.bias);
  }
  return buildMixture(ctx, "QMoE", weights);
}

/// onnxruntime's MatMulNBits: `A [..., K]` times the `[K, N]` weight that
/// `B` (packed `bits`-bit integers), `scales` and `zero_points` quantize
/// block by block along K, plus `bias`: an nn.matmul of an nn.dequantize,
/// which the exec pipeline fuses so the float weight is never built.
/// `accuracy_level` chooses onnxruntime's arithmetic (level 4 quantizes A
/// to int8); Partita computes in fp32 at every level (docs/frontend.md).
LogicalResult matMulNBitsHandler(NodeContext &ctx) {
  int64_t k = ctx.getAttrInt("K", 0), n = ctx.getAttrInt("N", 0);
  int64_t bits = ctx.getAttrInt("bits", 4);
  int64_t blockSize = ctx.getAttrInt("block_size", 0);
  if (k <= 0 || n <= 0)
    return ctx.emitError() << "MatMulNBits K and N must be positive, got " << k
                           << " and " << n;
  if (bits != 4 && bits != 8)
    return ctx.emitError() << "MatMulNBits bits=" << bits
                           << " is not supported (4 and 8 are)";
  if (blockSize < 16 || !llvm::isPowerOf2_64(blockSize))
    return ctx.emitError() << "MatMulNBits block_size must be a power of two "
                              "of at least 16, got "
                           << blockSize;
  if (ctx.hasInput(4))
    return ctx.emitError() << "MatMulNBits g_idx (a permuted block order) is "
                              "not supported";
  if (ctx.isTraining())
    return ctx.emitError() << "--train: MatMulNBits weights are packed "
                              "integers, which a training step does not "
                              "update (train the float model, then quantize "
                              "it)";
  Value a = ctx.getInput(0);
  if (!a)
    return failure();
  RankedTensorType aType = typeOf(a);
  if (aType.getRank() < 1 || aType.getShape().back() != k)
    return ctx.emitError() << "MatMulNBits A " << aType
                           << " must end in K = " << k;
  int64_t blocks = (k + blockSize - 1) / blockSize;
  FailureOr<Value> packed =
      packedBytes(ctx, 1, "MatMulNBits B", {n, blocks, blockSize * bits / 8});
  if (failed(packed))
    return failure();
  // Scales are [N * blocks] or [N, blocks], of A's type.
  Value scales;
  SmallVector<int64_t> scaleShape = {n, blocks};
  if (const HostTensor *constant = ctx.getConstant(2)) {
    if (constant->getNumElements() != n * blocks ||
        constant->dataType != getDataType(aType.getElementType()))
      return ctx.emitError() << "MatMulNBits scales must hold " << n * blocks
                             << " values of A's type";
    HostTensor shaped = *constant;
    shaped.shape = scaleShape;
    scales = ctx.createConstantView(2, shaped);
  } else {
    scales = ctx.getInput(2);
    if (!scales)
      return failure();
    if (typeOf(scales).getNumElements() != n * blocks ||
        typeOf(scales).getElementType() != aType.getElementType())
      return ctx.emitError() << "MatMulNBits scales must hold " << n * blocks
                             << " values of A's type";
    scales = reshape(ctx, scales, scaleShape);
  }
  Value zeroPoints;
  if (ctx.hasInput(3)) {
    if (ctx.getInputDataType(3) != onnx::TensorProto_DataType_UINT8)
      return ctx.emitError() << "MatMulNBits zero_points of type "
                             << dataTypeName(ctx.getInputDataType(3))
                             << " are not supported (packed uint8 ones are)";
    FailureOr<Value> zp = packedBytes(ctx, 3, "MatMulNBits zero_points",
                                      {n, (blocks * bits + 7) / 8});
    if (failed(zp))
      return failure();
    zeroPoints = *zp;
  }
  Value bias;
  if (ctx.hasInput(5)) {
    bias = ctx.getInput(5);
    if (!bias)
      return failure();
    if (typeOf(bias).getShape() != ArrayRef<int64_t>{n})
      return ctx.emitError() << "MatMulNBits bias must be [" << n << "]";
  }
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto weightType = RankedTensorType::get({k, n}, aType.getElementType());
  Value weight = nn::DequantizeOp::create(b, loc, weightType, *packed, scales,
                                          zeroPoints, b.getI64IntegerAttr(bits),
                                          b.getI64IntegerAttr(blockSize));
  SmallVector<int64_t> shape(aType.getShape());
  shape.back() = n;
  Value lhs = a;
  if (aType.getRank() == 1)
    lhs = reshape(ctx, a, {1, k});
  Value product = nn::MatmulOp::create(
      b, loc,
      aType.clone(aType.getRank() == 1 ? SmallVector<int64_t>{1, n} : shape),
      lhs, weight, bias);
  ctx.setOutput(0, aType.getRank() == 1 ? reshape(ctx, product, {n}) : product);
  return success();
}

} // namespace

void mlir::partita::onnx_import::registerContribOps(OpRegistry &registry) {
  registry.add("com.microsoft.SkipLayerNormalization",
               {1, nullptr, skipNormHandler<nn::LayerNormOp>});
  registry.add("com.microsoft.SkipSimplifiedLayerNormalization",
               {1, nullptr, skipNormHandler<nn::RmsNormOp>});
  registry.add("com.microsoft.RotaryEmbedding",
               {1, nullptr, contribRotaryHandler});
  registry.add("com.microsoft.GroupQueryAttention",
               {1, nullptr, groupQueryAttentionHandler});
  registry.add("com.microsoft.MatMulNBits", {1, nullptr, matMulNBitsHandler});
  registry.add("com.microsoft.MoE", {1, nullptr, moeHandler});
  registry.add("com.microsoft.QMoE", {1, nullptr, qmoeHandler});
}
