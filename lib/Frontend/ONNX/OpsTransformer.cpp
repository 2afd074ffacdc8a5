//===- OpsTransformer.cpp - contractions, norms, reductions, attention ----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "Folding.h"

#include "partita/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

LogicalResult checkFloat(NodeContext &ctx, Value v) {
  if (!isa<FloatType>(typeOf(v).getElementType()))
    return ctx.emitError() << ctx.getNode().op_type() << " of "
                           << typeOf(v).getElementType()
                           << " is not supported (floating point only)";
  return success();
}

/// Folds a MatMul of two constants (rotary tables are computed as
/// `inv_freq @ positions` in exported graphs).
LogicalResult foldMatmul(NodeContext &ctx, const HostTensor &a,
                         const HostTensor &b) {
  SmallVector<int64_t> as(a.shape), bs(b.shape);
  bool aVector = as.size() == 1, bVector = bs.size() == 1;
  if (as.empty() || bs.empty())
    return failure();
  if (aVector)
    as.insert(as.begin(), 1);
  if (bVector)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    return failure();
  FailureOr<SmallVector<int64_t>> batch = broadcast(
      ArrayRef<int64_t>(as).drop_back(2), ArrayRef<int64_t>(bs).drop_back(2));
  if (failed(batch))
    return failure();
  SmallVector<int64_t> counted(*batch);
  counted.append({m, n, k});
  if (getElementCountSaturated(counted) > (1 << 26) ||
      getElementCountSaturated(ArrayRef<int64_t>(counted).drop_back()) >
          kMaxFoldedElements)
    return failure();
  SmallVector<int64_t> aBatch =
      broadcastIndices(ArrayRef<int64_t>(as).drop_back(2), *batch);
  SmallVector<int64_t> bBatch =
      broadcastIndices(ArrayRef<int64_t>(bs).drop_back(2), *batch);
  SmallVector<int64_t> shape(*batch);
  if (!aVector)
    shape.push_back(m);
  if (!bVector)
    shape.push_back(n);
  ctx.setOutput(0, makeTensor(a.dataType, shape, [&](int64_t i) {
                  int64_t col = i % n, row = (i / n) % m, bi = i / (m * n);
                  double sum = 0;
                  for (int64_t kk = 0; kk < k; ++kk)
                    sum += a.getAsDouble(aBatch[bi] * m * k + row * k + kk) *
                           b.getAsDouble(bBatch[bi] * k * n + kk * n + col);
                  return sum;
                }));
  return success();
}

/// MatMul with numpy semantics: 1-D operands gain a unit dimension that the
/// result drops again.
LogicalResult matmulHandler(NodeContext &ctx) {
  if (const HostTensor *ca = ctx.getConstant(0), *cb = ctx.getConstant(1);
      ca && cb && succeeded(foldMatmul(ctx, *ca, *cb)))
    return success();
  Value a = ctx.getInput(0), b = ctx.getInput(1);
  if (!a || !b || failed(checkFloat(ctx, a)))
    return failure();
  ArrayRef<int64_t> as = typeOf(a).getShape(), bs = typeOf(b).getShape();
  if (as.empty() || bs.empty())
    return ctx.emitError() << "MatMul of a scalar";
  bool aVector = as.size() == 1, bVector = bs.size() == 1;
  if (aVector)
    a = reshape(ctx, a, {1, as[0]});
  if (bVector)
    b = reshape(ctx, b, {bs[0], 1});
  ArrayRef<int64_t> a2 = typeOf(a).getShape(), b2 = typeOf(b).getShape();
  if (a2.back() != b2[b2.size() - 2])
    return ctx.emitError() << "MatMul contracts " << a2.back() << " with "
                           << b2[b2.size() - 2];
  FailureOr<SmallVector<int64_t>> batch =
      broadcast(a2.drop_back(2), b2.drop_back(2));
  if (failed(batch))
    return ctx.emitError() << "MatMul batch dimensions do not broadcast";
  if (typeOf(a).getElementType() != typeOf(b).getElementType())
    return ctx.emitError() << "MatMul operands have different element types";
  SmallVector<int64_t> shape = *batch;
  shape.push_back(a2[a2.size() - 2]);
  shape.push_back(b2.back());
  Value r = nn::MatmulOp::create(ctx.getBuilder(), ctx.getLoc(),
                                 typeOf(a).clone(shape), a, b, Value());
  SmallVector<int64_t> outShape(*batch);
  if (!aVector)
    outShape.push_back(a2[a2.size() - 2]);
  if (!bVector)
    outShape.push_back(b2.back());
  ctx.setOutput(0, reshape(ctx, r, outShape));
  return success();
}

Value scalarConstant(NodeContext &ctx, Type elementType, double value) {
  auto type = RankedTensorType::get({}, elementType);
  return nn::ConstantOp::create(
      ctx.getBuilder(), ctx.getLoc(),
      cast<ElementsAttr>(DenseElementsAttr::get(
          type, ctx.getBuilder().getFloatAttr(elementType, value))));
}

/// Gemm: alpha * A' B' + beta * C, A' and B' optionally transposed. A bias C
/// of shape [N] (or [1, N]) with beta = 1 becomes the matmul's epilogue.
LogicalResult gemmHandler(NodeContext &ctx) {
  Value a = ctx.getInput(0), b = ctx.getInput(1);
  if (!a || !b || failed(checkFloat(ctx, a)))
    return failure();
  OpBuilder &builder = ctx.getBuilder();
  Location loc = ctx.getLoc();
  if (typeOf(a).getRank() != 2 || typeOf(b).getRank() != 2)
    return ctx.emitError() << "Gemm operands must have rank 2";
  auto transpose = [&](Value v) -> Value {
    auto t = typeOf(v);
    return nn::TransposeOp::create(builder, loc,
                                   t.clone({t.getDimSize(1), t.getDimSize(0)}),
                                   v, ArrayRef<int64_t>{1, 0});
  };
  if (ctx.getAttrInt("transA", 0))
    a = transpose(a);
  if (ctx.getAttrInt("transB", 0))
    b = transpose(b);
  int64_t m = typeOf(a).getDimSize(0), k = typeOf(a).getDimSize(1);
  int64_t n = typeOf(b).getDimSize(1);
  if (typeOf(b).getDimSize(0) != k)
    return ctx.emitError() << "Gemm contracts " << k << " with "
                           << typeOf(b).getDimSize(0);
  Type element = typeOf(a).getElementType();
  float alpha = ctx.getAttrFloat("alpha", 1.0f);
  float beta = ctx.getAttrFloat("beta", 1.0f);
  Value bias;
  Value c = ctx.hasInput(2) ? ctx.getInput(2) : Value();
  if (c && beta == 1.0f && alpha == 1.0f) {
    ArrayRef<int64_t> cs = typeOf(c).getShape();
    if ((cs.size() == 1 && cs[0] == n) ||
        (cs.size() == 2 && cs[0] == 1 && cs[1] == n)) {
      bias = reshape(ctx, c, {n});
      c = Value();
    }
  }
  auto type = RankedTensorType::get({m, n}, element);
  Value r = nn::MatmulOp::create(builder, loc, type, a, b, bias);
  if (alpha != 1.0f)
    r = nn::MulOp::create(builder, loc, r, scalarConstant(ctx, element, alpha));
  if (c) {
    if (failed(broadcast(typeOf(c).getShape(), {m, n})))
      return ctx.emitError()
             << "Gemm C does not broadcast to [" << m << ", " << n << "]";
    if (beta != 1.0f)
      c = nn::MulOp::create(builder, loc, c,
                            scalarConstant(ctx, element, beta));
    r = nn::AddOp::create(builder, loc, r, c);
  }
  ctx.setOutput(0, r);
  return success();
}

template <typename OpTy> LogicalResult softmaxHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x || failed(checkFloat(ctx, x)))
    return failure();
  FailureOr<int64_t> axis =
      ctx.normalizeAxis(ctx.getAttrInt("axis", -1), typeOf(x).getRank());
  if (failed(axis))
    return failure();
  ctx.setOutput(
      0, OpTy::create(ctx.getBuilder(), ctx.getLoc(), x.getType(), x, *axis));
  return success();
}

/// LayerNormalization's optional Mean and InvStdDev outputs (shape of the
/// input with the normalized dimensions kept as 1, in the stash type, f32 by
/// default), computed beside the nn.layer_norm that produces Y.
LogicalResult layerNormStatistics(NodeContext &ctx, Value x, int64_t axis,
                                  float epsilon) {
  if (!ctx.hasOutput(1) && !ctx.hasOutput(2))
    return success();
  if (ctx.getAttrInt("stash_type", 1) != onnx::TensorProto_DataType_FLOAT)
    return ctx.emitError() << "LayerNormalization stash_type "
                           << ctx.getAttrInt("stash_type", 1)
                           << " is not supported (float only)";
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  Type f32 = b.getF32Type();
  if (typeOf(x).getElementType() != f32)
    x = nn::CastOp::create(b, loc, typeOf(x).clone(f32), x);
  int64_t rank = typeOf(x).getRank();
  SmallVector<int64_t> axes, shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d >= axis)
      axes.push_back(d);
    shape.push_back(d >= axis ? 1 : typeOf(x).getDimSize(d));
  }
  auto statType = RankedTensorType::get(shape, f32);
  Value mean = nn::ReduceOp::create(b, loc, statType, nn::ReduceKind::Mean, x,
                                    axes, /*keepdims=*/true);
  ctx.setOutput(1, mean);
  if (!ctx.hasOutput(2))
    return success();
  Value centered = nn::SubOp::create(b, loc, x, mean);
  Value square = nn::MulOp::create(b, loc, centered, centered);
  Value variance = nn::ReduceOp::create(b, loc, statType, nn::ReduceKind::Mean,
                                        square, axes, /*keepdims=*/true);
  Value shifted =
      nn::AddOp::create(b, loc, variance, scalarConstant(ctx, f32, epsilon));
  ctx.setOutput(2, nn::RsqrtOp::create(b, loc, shifted));
  return success();
}

/// LayerNormalization (17) and RMSNormalization (23).
template <typename OpTy> LogicalResult normHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x || failed(checkFloat(ctx, x)))
    return failure();
  if (std::is_same_v<OpTy, nn::RmsNormOp>)
    for (unsigned i = 1; i < ctx.getNumOutputs(); ++i)
      if (ctx.hasOutput(i))
        return ctx.emitError()
               << ctx.getNode().op_type() << " inv_std_var output is not "
               << "supported";
  int64_t rank = typeOf(x).getRank();
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.getAttrInt("axis", -1), rank);
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = typeOf(x).getShape().drop_front(*axis);
  // Scale and bias may be given with a broadcastable shape; nn wants the
  // normalized shape exactly.
  auto param = [&](unsigned i) -> FailureOr<Value> {
    if (!ctx.hasInput(i))
      return Value();
    Value p = ctx.getInput(i);
    if (!p)
      return failure();
    if (failed(broadcast(typeOf(p).getShape(), normalized)) ||
        typeOf(p).getRank() > static_cast<int64_t>(normalized.size()))
      return ctx.emitError() << ctx.getNode().op_type() << " parameter " << i
                             << " does not match the normalized shape";
    if (typeOf(p).getShape() != normalized)
      p = nn::BroadcastToOp::create(ctx.getBuilder(), ctx.getLoc(),
                                    typeOf(p).clone(normalized), p);
    return p;
  };
  FailureOr<Value> scale = param(1);
  if (failed(scale))
    return failure();
  float epsilon = ctx.getAttrFloat("epsilon", 1e-5f);
  OpBuilder &b = ctx.getBuilder();
  if constexpr (std::is_same_v<OpTy, nn::LayerNormOp>) {
    FailureOr<Value> bias = param(2);
    if (failed(bias))
      return failure();
    ctx.setOutput(0, nn::LayerNormOp::create(b, ctx.getLoc(), x.getType(), x,
                                             *scale, *bias,
                                             b.getI64IntegerAttr(*axis),
                                             b.getF32FloatAttr(epsilon)));
    if (failed(layerNormStatistics(ctx, x, *axis, epsilon)))
      return failure();
  } else {
    ctx.setOutput(0, nn::RmsNormOp::create(b, ctx.getLoc(), x.getType(), x,
                                           *scale, b.getI64IntegerAttr(*axis),
                                           b.getF32FloatAttr(epsilon)));
  }
  return success();
}

LogicalResult geluHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x || failed(checkFloat(ctx, x)))
    return failure();
  std::string approximate = ctx.getAttrString("approximate", "none");
  nn::GeluApproximation approx;
  if (approximate == "none")
    approx = nn::GeluApproximation::None;
  else if (approximate == "tanh")
    approx = nn::GeluApproximation::Tanh;
  else
    return ctx.emitError() << "Gelu approximate='" << approximate
                           << "' is not defined";
  ctx.setOutput(0,
                nn::GeluOp::create(ctx.getBuilder(), ctx.getLoc(), x, approx));
  return success();
}

/// The reductions: those nn.reduce computes, and those decomposed around
/// it (an elementwise step before the sum, one after).
enum class Reduction {
  Sum,
  Mean,
  Max,
  Min,
  Prod,
  L1,
  L2,
  SumSquare,
  LogSumExp
};

struct ReduceAxes {
  /// Sorted, unique, within [0, rank); empty when nothing is reduced.
  SmallVector<int64_t> axes;
  bool keepdims = true;
  /// The result shape.
  SmallVector<int64_t> shape;
};

/// The axes of a Reduce* node. Axes are an attribute until opset 18
/// (ReduceSum: 13), an input since; no axes reduces everything unless
/// noop_with_empty_axes (then, and on a scalar, nothing is reduced).
FailureOr<ReduceAxes> getReduceAxes(NodeContext &ctx, ArrayRef<int64_t> in,
                                    int64_t axesInputSince) {
  int64_t rank = in.size();
  ReduceAxes r;
  if (ctx.getOpset() >= axesInputSince) {
    if (ctx.hasInput(1)) {
      FailureOr<SmallVector<int64_t>> a =
          ctx.getConstantInts(1, "axes", /*allowScalar=*/true);
      if (failed(a))
        return failure();
      r.axes = *a;
    }
  } else if (std::optional<SmallVector<int64_t>> a = ctx.getAttrInts("axes")) {
    r.axes = *a;
  }
  r.keepdims = ctx.getAttrInt("keepdims", 1) != 0;
  if (r.axes.empty()) {
    if (ctx.getAttrInt("noop_with_empty_axes", 0)) {
      r.shape.assign(in.begin(), in.end());
      return r;
    }
    for (int64_t d = 0; d < rank; ++d)
      r.axes.push_back(d);
  }
  for (int64_t &a : r.axes) {
    FailureOr<int64_t> n = ctx.normalizeAxis(a, rank);
    if (failed(n))
      return failure();
    a = *n;
  }
  llvm::sort(r.axes);
  r.axes.erase(std::unique(r.axes.begin(), r.axes.end()), r.axes.end());
  for (int64_t d = 0; d < rank; ++d) {
    if (!llvm::is_contained(r.axes, d))
      r.shape.push_back(in[d]);
    else if (r.keepdims)
      r.shape.push_back(1);
  }
  return r;
}

/// Folds a reduction of a constant (integers: sums, products, extrema and
/// L1 / sum of squares, wrapping as int64; floats: all of them, in double).
LogicalResult foldReduce(NodeContext &ctx, Reduction kind,
                         int64_t axesInputSince) {
  const HostTensor *x = ctx.getConstant(0);
  if (!x || x->getNumElements() > kMaxFoldedElements)
    return failure();
  bool isFloat = x->isFloat();
  if (!isFloat && (kind == Reduction::Mean || kind == Reduction::L2 ||
                   kind == Reduction::LogSumExp))
    return failure();
  // Declining must not leave a diagnostic: axes that getReduceAxes would
  // refuse are left to the builder, which reports them.
  ArrayRef<int64_t> in = x->shape;
  int64_t rank = in.size();
  SmallVector<int64_t> given;
  if (ctx.getOpset() >= axesInputSince) {
    if (const HostTensor *a = ctx.getConstant(1)) {
      if (a->shape.size() > 1)
        return failure();
      given.assign(a->getInts().begin(), a->getInts().end());
    }
  } else if (std::optional<SmallVector<int64_t>> a = ctx.getAttrInts("axes")) {
    given = *a;
  }
  for (int64_t a : given)
    if (a < -rank || a >= rank)
      return failure();
  FailureOr<ReduceAxes> r = getReduceAxes(ctx, in, axesInputSince);
  if (failed(r))
    return failure();
  int64_t n = x->getNumElements();
  int64_t outCount = getElementCountSaturated(r->shape);
  // The output element each input element reduces into.
  SmallVector<int64_t> inStrides = stridesOf(in);
  SmallVector<int64_t> keptShape;
  for (auto [d, size] : llvm::enumerate(in))
    keptShape.push_back(llvm::is_contained(r->axes, d) ? 1 : size);
  SmallVector<int64_t> keptStrides = stridesOf(keptShape);
  auto outIndex = [&](int64_t i) {
    int64_t o = 0;
    for (size_t d = 0; d < in.size(); ++d)
      if (!llvm::is_contained(r->axes, static_cast<int64_t>(d)))
        o += (i / inStrides[d]) % in[d] * keptStrides[d];
    return o;
  };
  int64_t perOutput = outCount ? n / outCount : 0;

  if (!isFloat) {
    std::vector<int64_t> acc(outCount);
    for (int64_t &v : acc)
      v = kind == Reduction::Prod  ? 1
          : kind == Reduction::Max ? INT64_MIN
          : kind == Reduction::Min ? INT64_MAX
                                   : 0;
    auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = x->getAsInt(i), &a = acc[outIndex(i)];
      switch (kind) {
      case Reduction::Prod:
        a = wrap(static_cast<uint64_t>(a) * static_cast<uint64_t>(v));
        break;
      case Reduction::Max:
        a = std::max(a, v);
        break;
      case Reduction::Min:
        a = std::min(a, v);
        break;
      case Reduction::L1:
        a = wrap(static_cast<uint64_t>(a) +
                 static_cast<uint64_t>(
                     v < 0 ? wrap(0 - static_cast<uint64_t>(v)) : v));
        break;
      case Reduction::SumSquare:
        a = wrap(static_cast<uint64_t>(a) +
                 static_cast<uint64_t>(v) * static_cast<uint64_t>(v));
        break;
      default:
        a = wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(v));
      }
    }
    HostTensor out(x->dataType, r->shape);
    for (int64_t v : acc)
      out.mutableInts().push_back(wrapToType(v, x->dataType));
    ctx.setOutput(0, std::move(out));
    return success();
  }

  // LogSumExp subtracts each output's finite maximum first.
  std::vector<double> shift(outCount, 0.0);
  if (kind == Reduction::LogSumExp) {
    std::vector<double> m(outCount, -INFINITY);
    for (int64_t i = 0; i < n; ++i)
      m[outIndex(i)] = std::max(m[outIndex(i)], x->getAsDouble(i));
    for (int64_t o = 0; o < outCount; ++o)
      shift[o] = std::isfinite(m[o]) ? m[o] : 0.0;
  }
  std::vector<double> acc(outCount);
  for (double &v : acc)
    v = kind == Reduction::Prod  ? 1.0
        : kind == Reduction::Max ? -INFINITY
        : kind == Reduction::Min ? INFINITY
                                 : 0.0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = outIndex(i);
    double v = x->getAsDouble(i), &a = acc[o];
    switch (kind) {
    case Reduction::Prod:
      a *= v;
      break;
    case Reduction::Max: // NaN wins.
      if (std::isnan(v) || v > a)
        a = v;
      break;
    case Reduction::Min:
      if (std::isnan(v) || v < a)
        a = v;
      break;
    case Reduction::L1:
      a += std::fabs(v);
      break;
    case Reduction::L2:
    case Reduction::SumSquare:
      a += v * v;
      break;
    case Reduction::LogSumExp:
      a += std::exp(v - shift[o]);
      break;
    default:
      a += v;
    }
  }
  ctx.setOutput(0, makeTensor(x->dataType, r->shape, [&](int64_t o) {
                  double a = acc[o];
                  switch (kind) {
                  case Reduction::Mean:
                    return a / static_cast<double>(perOutput);
                  case Reduction::L2:
                    return std::sqrt(a);
                  case Reduction::LogSumExp:
                    return std::log(a) + shift[o];
                  default:
                    return a;
                  }
                }));
  return success();
}

/// Reduce* on a run-time value: nn.reduce, with L1 (|x|), L2 (sqrt of the
/// sum of x*x), SumSquare and LogSumExp (log(sum(exp(x - m))) + m, m the
/// maximum where finite, else 0) decomposed around it.
LogicalResult reduceHandler(NodeContext &ctx, Reduction kind,
                            int64_t axesInputSince) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  StringRef op = ctx.getNode().op_type();
  if (kind == Reduction::Prod)
    return ctx.emitError() << op << " is supported only on constant inputs";
  if ((kind == Reduction::L2 || kind == Reduction::LogSumExp) &&
      failed(checkFloat(ctx, x)))
    return failure();
  FailureOr<ReduceAxes> r =
      getReduceAxes(ctx, typeOf(x).getShape(), axesInputSince);
  if (failed(r))
    return failure();
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto reduce = [&](nn::ReduceKind k, Value v, bool keepdims) -> Value {
    SmallVector<int64_t> shape;
    for (int64_t d = 0; d < typeOf(v).getRank(); ++d) {
      if (!llvm::is_contained(r->axes, d))
        shape.push_back(typeOf(v).getDimSize(d));
      else if (keepdims)
        shape.push_back(1);
    }
    return nn::ReduceOp::create(b, loc, typeOf(v).clone(shape), k, v, r->axes,
                                keepdims);
  };
  // Nothing reduced (no axes with noop_with_empty_axes, or a scalar): the
  // elementwise steps alone, as onnxruntime computes them.
  bool noop = r->axes.empty();
  Value result;
  switch (kind) {
  case Reduction::Sum:
  case Reduction::Mean:
  case Reduction::Max:
  case Reduction::Min: {
    nn::ReduceKind k = kind == Reduction::Sum    ? nn::ReduceKind::Sum
                       : kind == Reduction::Mean ? nn::ReduceKind::Mean
                       : kind == Reduction::Max  ? nn::ReduceKind::Max
                                                 : nn::ReduceKind::Min;
    result = noop ? x : reduce(k, x, r->keepdims);
    break;
  }
  case Reduction::L1: {
    Value magnitude = nn::AbsOp::create(b, loc, x);
    result =
        noop ? magnitude : reduce(nn::ReduceKind::Sum, magnitude, r->keepdims);
    break;
  }
  case Reduction::L2:
  case Reduction::SumSquare: {
    if (noop && kind == Reduction::L2) {
      result = nn::AbsOp::create(b, loc, x);
      break;
    }
    Value square = nn::MulOp::create(b, loc, x, x);
    result = noop ? square : reduce(nn::ReduceKind::Sum, square, r->keepdims);
    if (kind == Reduction::L2)
      result = nn::SqrtOp::create(b, loc, result);
    break;
  }
  case Reduction::LogSumExp: {
    if (noop) {
      result = x;
      break;
    }
    Type element = typeOf(x).getElementType();
    Value max = reduce(nn::ReduceKind::Max, x, /*keepdims=*/true);
    // m - m is 0 exactly when m is finite.
    Value self = nn::SubOp::create(b, loc, max, max);
    Value zero = scalarConstant(ctx, element, 0.0);
    Value finite =
        nn::CompareOp::create(b, loc, typeOf(max).clone(b.getI1Type()),
                              nn::CompareDirection::EQ, self, zero);
    Value shift = nn::WhereOp::create(b, loc, typeOf(max), finite, max, zero);
    Value centered = nn::SubOp::create(b, loc, x, shift);
    Value exp = nn::ExpOp::create(b, loc, centered);
    Value sum = reduce(nn::ReduceKind::Sum, exp, /*keepdims=*/true);
    Value log = nn::LogOp::create(b, loc, sum);
    result = nn::AddOp::create(b, loc, log, shift);
    result = reshape(ctx, result, r->shape);
    break;
  }
  case Reduction::Prod:
    llvm_unreachable("ReduceProd folds or is refused above");
  }
  ctx.setOutput(0, result);
  return success();
}

/// The positions 0..n-1 along `axis` of a rank-`rank` i64 constant whose
/// other dimensions are 1 (it broadcasts against a tensor of that rank).
/// Null, with an error at the node, when n exceeds what a constant made at
/// compile time may hold (kMaxFoldedElements).
Value iotaAlong(NodeContext &ctx, int64_t rank, int64_t axis, int64_t n) {
  if (n > kMaxFoldedElements) {
    ctx.emitError() << ctx.getNode().op_type() << " over " << n
                    << " positions is not supported (at most "
                    << kMaxFoldedElements << ")";
    return {};
  }
  SmallVector<int64_t> shape(rank, 1);
  shape[axis] = n;
  SmallVector<int64_t> positions(n);
  for (int64_t i = 0; i < n; ++i)
    positions[i] = i;
  return intConstant(
      ctx, RankedTensorType::get(shape, ctx.getBuilder().getI64Type()),
      positions);
}

/// ArgMax and ArgMin (CLIP's pooler: the position of the end-of-text
/// token): the extreme along the axis, then the first position that holds
/// it (the last with select_last_index), as i64: where(x == extreme,
/// position, past-the-end), reduced by min (max, with -1, for the last).
/// NaN as onnxruntime's scan treats it: a NaN never replaces the best
/// value so far, so NaNs are passed over, unless the first element is one
/// (then nothing replaces it and the result is 0).
template <nn::ReduceKind Kind>
LogicalResult argExtremeHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = typeOf(x);
  int64_t rank = type.getRank();
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.getAttrInt("axis", 0), rank);
  if (failed(axis))
    return failure();
  bool keep = ctx.getAttrInt("keepdims", 1);
  bool last = ctx.getAttrInt("select_last_index", 0);
  int64_t n = type.getDimSize(*axis);
  if (n == 0)
    return ctx.emitError() << ctx.getNode().op_type()
                           << " over an empty axis has no position";
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  SmallVector<int64_t> kept(type.getShape());
  kept[*axis] = 1;
  SmallVector<int64_t> axes = {*axis};
  bool isFloat = isa<FloatType>(type.getElementType());
  auto i1Type = type.clone(b.getI1Type());
  Value clean = x, nan;
  if (isFloat) {
    nan = nn::CompareOp::create(b, loc, i1Type, nn::CompareDirection::NE, x, x);
    double passed = Kind == nn::ReduceKind::Max
                        ? -std::numeric_limits<double>::infinity()
                        : std::numeric_limits<double>::infinity();
    clean = nn::WhereOp::create(
        b, loc, type, nan, scalarConstant(ctx, type.getElementType(), passed),
        x);
  }
  Value extreme = nn::ReduceOp::create(b, loc, type.clone(kept), Kind, clean,
                                       axes, /*keepdims=*/true);
  auto i64 = b.getI64Type();
  Value same = nn::CompareOp::create(b, loc, type.clone(b.getI1Type()),
                                     nn::CompareDirection::EQ, x, extreme);
  Value iota = iotaAlong(ctx, rank, *axis, n);
  if (!iota)
    return failure();
  auto scalarType = RankedTensorType::get({}, i64);
  Value beyond = nn::ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(
          scalarType, b.getI64IntegerAttr(last ? -1 : n).getValue())));
  Value candidates =
      nn::WhereOp::create(b, loc, type.clone(i64), same, iota, beyond);
  SmallVector<int64_t> out(type.getShape());
  if (keep)
    out[*axis] = 1;
  else
    out.erase(out.begin() + *axis);
  auto outType = RankedTensorType::get(out, i64);
  Value index = nn::ReduceOp::create(
      b, loc, outType, last ? nn::ReduceKind::Max : nn::ReduceKind::Min,
      candidates, axes, keep);
  if (isFloat) {
    // A NaN first: position 0.
    SmallVector<int64_t> start(rank, 0), limit(type.getShape()), step(rank, 1);
    limit[*axis] = 1;
    Value first = nn::SliceOp::create(b, loc, i1Type.clone(kept), nan, start,
                                      limit, step);
    first = nn::ReshapeOp::create(b, loc, outType.clone(b.getI1Type()), first);
    Value zero = nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            scalarType, b.getI64IntegerAttr(0).getValue())));
    index = nn::WhereOp::create(b, loc, outType, first, zero, index);
  }
  ctx.setOutput(0, index);
  return success();
}

/// The lowest (or highest) value of `element` as a scalar constant: -inf
/// (+inf) for floats, the signed minimum (maximum) for integers.
static Value extremeConstant(NodeContext &ctx, Type element, bool lowest) {
  if (isa<FloatType>(element))
    return scalarConstant(ctx, element,
                          lowest ? -std::numeric_limits<double>::infinity()
                                 : std::numeric_limits<double>::infinity());
  unsigned width = element.getIntOrFloatBitWidth();
  APInt value = lowest ? APInt::getSignedMinValue(width)
                       : APInt::getSignedMaxValue(width);
  auto type = RankedTensorType::get({}, element);
  return nn::ConstantOp::create(
      ctx.getBuilder(), ctx.getLoc(),
      cast<ElementsAttr>(DenseElementsAttr::get(type, value)));
}

/// TopK (the router of a mixture of experts: the k experts of highest
/// probability): k rounds, each taking the extreme of what is left and the
/// first position holding it, then marking that position taken; the
/// rounds' values and positions are concatenated along the axis. So the
/// results are sorted, equal values by lower position first, as the
/// specification asks (with sorted = 0 the order is free; this order is
/// given too). NaN ranks above every number, as torch.topk ranks it: first
/// with largest, last without. k must be a constant between 1 and the
/// axis's size.
LogicalResult topKHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = typeOf(x);
  Type element = type.getElementType();
  if (!isa<FloatType>(element) && !element.isSignlessInteger(32) &&
      !element.isSignlessInteger(64))
    return ctx.emitError() << "TopK supports float, int32 and int64 inputs, "
                              "not "
                           << element;
  int64_t rank = type.getRank();
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.getAttrInt("axis", -1), rank);
  if (failed(axis))
    return failure();
  const HostTensor *kTensor = ctx.getConstant(1);
  if (!kTensor || kTensor->getNumElements() != 1)
    return ctx.emitError()
           << "TopK's k must be a constant of one element (it sets the "
              "shape of the results)";
  int64_t k = kTensor->getAsInt(0), n = type.getDimSize(*axis);
  if (k < 1 || k > n)
    return ctx.emitError() << "TopK's k is " << k << ", but the axis " << *axis
                           << " has " << n
                           << " elements (k must be between 1 and that)";
  auto [values, indices] =
      buildTopK(ctx, x, *axis, k, ctx.getAttrInt("largest", 1));
  if (!values)
    return failure();
  ctx.setOutput(0, values);
  ctx.setOutput(1, indices);
  return success();
}

/// OneHot of constant operands (transformers' dynamic export computes Tile's
/// repeats with one), as oneHotHandler builds it.
LogicalResult foldOneHot(NodeContext &ctx) {
  const HostTensor *indices = ctx.getConstant(0),
                   *depthTensor = ctx.getConstant(1),
                   *values = ctx.getConstant(2);
  if (!indices || !depthTensor || !values || indices->isFloat() ||
      depthTensor->getNumElements() != 1 || values->getNumElements() != 2 ||
      values->shape.size() != 1)
    return failure();
  int64_t depth = depthTensor->getAsInt(0);
  int64_t rank = indices->shape.size() + 1;
  int64_t axis = ctx.getAttrInt("axis", -1);
  if (axis < 0)
    axis += rank;
  if (depth < 1 || axis < 0 || axis >= rank)
    return failure();
  SmallVector<int64_t> shape(indices->shape);
  shape.insert(shape.begin() + axis, depth);
  if (getElementCountSaturated(shape) > kMaxFoldedElements)
    return failure();
  // Element i sits at position `p` of the new axis and reads index `j`.
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= shape[d];
  auto isHot = [&](int64_t i) {
    int64_t position = (i / inner) % depth;
    int64_t j = (i / (inner * depth)) * inner + i % inner;
    int64_t index = indices->getAsInt(j);
    return (index < 0 ? index + depth : index) == position;
  };
  if (values->isFloat()) {
    ctx.setOutput(0, makeTensor(values->dataType, shape, [&](int64_t i) {
                    return values->getAsDouble(isHot(i) ? 1 : 0);
                  }));
  } else {
    HostTensor out(values->dataType, shape);
    std::vector<int64_t> &v = out.mutableInts();
    for (int64_t i = 0, e = out.getNumElements(); i < e; ++i)
      v.push_back(values->getAsInt(isHot(i) ? 1 : 0));
    ctx.setOutput(0, std::move(out));
  }
  return success();
}

/// OneHot (a mixture of experts' dispatch mask: which tokens each expert
/// was routed): `on` where a position along the new axis equals the
/// index, `off` elsewhere, as `where(iota == index, on, off)`. Negative
/// indices count from the end of the depth; an index outside [-depth,
/// depth) gives a row of `off`, as the specification says. The depth must
/// be a positive constant (it sets the shape); values are [off, on].
LogicalResult oneHotHandler(NodeContext &ctx) {
  Value indices = ctx.getInput(0), values = ctx.getInput(2);
  if (!indices || !values)
    return failure();
  auto indexType = typeOf(indices);
  Type indexElement = indexType.getElementType();
  if (!indexElement.isSignlessInteger(32) &&
      !indexElement.isSignlessInteger(64))
    return ctx.emitError() << "OneHot supports int32 and int64 indices, not "
                           << indexElement;
  auto valuesType = typeOf(values);
  if (valuesType.getRank() != 1 || valuesType.getDimSize(0) != 2)
    return ctx.emitError() << "OneHot's values must be [off, on] (shape "
                              "[2]), not of shape "
                           << shapeText(valuesType.getShape());
  const HostTensor *depthTensor = ctx.getConstant(1);
  if (!depthTensor || depthTensor->getNumElements() != 1)
    return ctx.emitError() << "OneHot's depth must be a constant of one "
                              "element (it sets the shape of the result)";
  int64_t depth = depthTensor->getAsInt(0);
  if (depth < 1)
    return ctx.emitError() << "OneHot's depth is " << depth
                           << "; it must be at least 1";
  int64_t rank = indexType.getRank() + 1;
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.getAttrInt("axis", -1), rank);
  if (failed(axis))
    return failure();
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto i64 = b.getI64Type();
  Value index = indices;
  if (!indexElement.isSignlessInteger(64))
    index = nn::CastOp::create(b, loc, indexType.clone(i64), indices);
  auto scalar = [&](int64_t value) {
    return intConstant(ctx, RankedTensorType::get({}, i64), {value});
  };
  auto indexI64 = indexType.clone(i64);
  Value negative =
      nn::CompareOp::create(b, loc, indexI64.clone(b.getI1Type()),
                            nn::CompareDirection::LT, index, scalar(0));
  index = nn::WhereOp::create(b, loc, indexI64, negative,
                              nn::AddOp::create(b, loc, index, scalar(depth)),
                              index);
  SmallVector<int64_t> out(indexType.getShape());
  out.insert(out.begin() + *axis, depth);
  SmallVector<int64_t> spread(indexType.getShape());
  spread.insert(spread.begin() + *axis, 1);
  Value iota = iotaAlong(ctx, rank, *axis, depth);
  if (!iota)
    return failure();
  auto outType = RankedTensorType::get(out, valuesType.getElementType());
  Value hot = nn::CompareOp::create(b, loc, outType.clone(b.getI1Type()),
                                    nn::CompareDirection::EQ, iota,
                                    reshape(ctx, index, spread));
  auto pick = [&](int64_t i) {
    auto one = valuesType.clone({1});
    Value slice =
        nn::SliceOp::create(b, loc, one, values, ArrayRef<int64_t>{i},
                            ArrayRef<int64_t>{i + 1}, ArrayRef<int64_t>{1});
    return reshape(ctx, slice, {});
  };
  ctx.setOutput(0, nn::WhereOp::create(b, loc, outType, hot, pick(1), pick(0)));
  return success();
}

/// ONNX Attention (opset 23): Q, K, V as [B, heads, S, D], or as [B, S,
/// heads * D] with q_num_heads / kv_num_heads; an optional bool or additive
/// mask; is_causal; scale. Past key/value, softcap and the QK output are not
/// supported.
LogicalResult attentionHandler(NodeContext &ctx) {
  Value q = ctx.getInput(0), k = ctx.getInput(1), v = ctx.getInput(2);
  if (!q || !k || !v || failed(checkFloat(ctx, q)))
    return failure();
  if (ctx.hasInput(4) || ctx.hasInput(5) || ctx.hasOutput(1) ||
      ctx.hasOutput(2) || ctx.hasOutput(3))
    return ctx.emitError() << "Attention with a key/value cache or extra "
                              "outputs is not supported";
  if (ctx.getAttrFloat("softcap", 0.0f) != 0.0f)
    return ctx.emitError() << "Attention softcap is not supported";
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  bool threeD = typeOf(q).getRank() == 3;
  for (Value operand : {q, k, v})
    if (typeOf(operand).getRank() != typeOf(q).getRank())
      return ctx.emitError() << "Attention Q, K and V must have the same rank "
                                "(3 or 4)";
  auto toHeads = [&](Value x, int64_t heads) -> FailureOr<Value> {
    ArrayRef<int64_t> s = typeOf(x).getShape();
    if (heads <= 0 || s[2] % heads != 0)
      return ctx.emitError() << "Attention hidden size " << s[2]
                             << " is not divisible by " << heads << " heads";
    Value r = reshape(ctx, x, {s[0], s[1], heads, s[2] / heads});
    return Value(nn::TransposeOp::create(
        b, loc, typeOf(r).clone({s[0], heads, s[1], s[2] / heads}), r,
        ArrayRef<int64_t>{0, 2, 1, 3}));
  };
  if (threeD) {
    FailureOr<Value> q4 = toHeads(q, ctx.getAttrInt("q_num_heads", 0));
    FailureOr<Value> k4 = toHeads(k, ctx.getAttrInt("kv_num_heads", 0));
    FailureOr<Value> v4 = toHeads(v, ctx.getAttrInt("kv_num_heads", 0));
    if (failed(q4) || failed(k4) || failed(v4))
      return failure();
    q = *q4;
    k = *k4;
    v = *v4;
  }
  if (typeOf(q).getRank() != 4 || typeOf(k).getRank() != 4 ||
      typeOf(v).getRank() != 4)
    return ctx.emitError() << "Attention inputs must have rank 3 or 4";
  ArrayRef<int64_t> qs = typeOf(q).getShape();
  auto resultType =
      typeOf(q).clone({qs[0], qs[1], qs[2], typeOf(v).getDimSize(3)});
  Value mask = ctx.hasInput(3) ? ctx.getInput(3) : Value();
  // ONNX aligns is_causal at the top left, nn at the bottom right; they agree
  // when the query and key sequences have the same length.
  if (ctx.getAttrInt("is_causal", 0) &&
      typeOf(q).getDimSize(2) != typeOf(k).getDimSize(2))
    return ctx.emitError() << "Attention is_causal with query length "
                           << typeOf(q).getDimSize(2) << " and key length "
                           << typeOf(k).getDimSize(2) << " is not supported";
  auto op = nn::AttentionOp::create(
      b, loc, resultType, q, k, v, mask,
      ctx.getAttrInt("is_causal", 0) ? b.getUnitAttr() : UnitAttr(),
      FloatAttr(), FloatAttr(), IntegerAttr());
  if (const onnx::AttributeProto *scale = ctx.getAttr("scale"))
    op.setScaleAttr(b.getF32FloatAttr(scale->f()));
  Value out = op;
  if (threeD) {
    ArrayRef<int64_t> os = resultType.getShape();
    Value t = nn::TransposeOp::create(
        b, loc, resultType.clone({os[0], os[2], os[1], os[3]}), out,
        ArrayRef<int64_t>{0, 2, 1, 3});
    out = reshape(ctx, t, {os[0], os[2], os[1] * os[3]});
  }
  ctx.setOutput(0, out);
  return success();
}

/// ONNX RotaryEmbedding (opset 23): X as [B, H, S, D] or [B, S, H*D] (with
/// num_heads); cos/sin caches indexed by position_ids ([max_pos, r/2]) or
/// already per token ([B, S, r/2]).
LogicalResult rotaryHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0), cos = ctx.getInput(1), sin = ctx.getInput(2);
  if (!x || !cos || !sin || failed(checkFloat(ctx, x)))
    return failure();
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  ArrayRef<int64_t> xs = typeOf(x).getShape();
  bool threeD = xs.size() == 3;
  int64_t heads = ctx.getAttrInt("num_heads", 0);
  if (threeD) {
    if (heads <= 0 || xs[2] % heads != 0)
      return ctx.emitError() << "RotaryEmbedding of a 3-D input needs "
                                "num_heads dividing its hidden size "
                             << xs[2];
    Value r = reshape(ctx, x, {xs[0], xs[1], heads, xs[2] / heads});
    x = nn::TransposeOp::create(
        b, loc, typeOf(r).clone({xs[0], heads, xs[1], xs[2] / heads}), r,
        ArrayRef<int64_t>{0, 2, 1, 3});
  } else if (xs.size() != 4) {
    return ctx.emitError() << "RotaryEmbedding input must have rank 3 or 4";
  }
  ArrayRef<int64_t> x4 = typeOf(x).getShape();
  if (!ctx.hasInput(3) &&
      (typeOf(cos).getRank() != 3 || typeOf(sin).getRank() != 3))
    return ctx.emitError() << "RotaryEmbedding without position_ids needs "
                              "[batch, sequence, rotary/2] caches";
  // Gather each token's row of the caches.
  if (ctx.hasInput(3)) {
    // Read before getInput, which makes the constant a value.
    const HostTensor *constantIds = ctx.getConstant(3);
    Value ids = ctx.getInput(3);
    if (!ids)
      return failure();
    auto gather = [&](Value table) -> Value {
      ArrayRef<int64_t> ts = typeOf(table).getShape();
      ArrayRef<int64_t> is = typeOf(ids).getShape();
      return nn::GatherOp::create(
          b, loc, typeOf(table).clone({is[0], is[1], ts[1]}), table, ids, 0);
    };
    if (typeOf(cos).getRank() != 2 || typeOf(sin).getRank() != 2 ||
        typeOf(ids).getRank() != 2)
      return ctx.emitError() << "RotaryEmbedding with position_ids needs 2-D "
                                "caches and [batch, sequence] positions";
    // Positions index the caches' rows and, unlike Gather's indices, may not
    // count from the end: constant ones are checked here, and a negative
    // one at run time becomes -rows - 1, which the gather refuses.
    int64_t rows = typeOf(cos).getDimSize(0);
    if (constantIds) {
      for (int64_t k = 0, n = constantIds->getNumElements(); k < n; ++k)
        if (int64_t id = constantIds->getAsInt(k); id < 0 || id >= rows)
          return ctx.emitError() << "RotaryEmbedding position_ids value " << id
                                 << " at position " << k
                                 << " is out of range [0, " << rows << ")";
    } else {
      auto idsType = typeOf(ids);
      auto scalar = [&](int64_t value) -> Value {
        auto type = RankedTensorType::get({}, idsType.getElementType());
        return nn::ConstantOp::create(
            b, loc,
            cast<ElementsAttr>(DenseElementsAttr::get(
                type, b.getIntegerAttr(idsType.getElementType(), value))));
      };
      Value negative =
          nn::CompareOp::create(b, loc, idsType.clone(b.getI1Type()),
                                nn::CompareDirection::LT, ids, scalar(0));
      Value refused = scalar(-rows - 1);
      ids = nn::WhereOp::create(b, loc, idsType, negative, refused, ids);
    }
    cos = gather(cos);
    sin = gather(sin);
  }
  int64_t rotary = ctx.getAttrInt("rotary_embedding_dim", 0);
  int64_t half = typeOf(cos).getShape().back();
  if (rotary != 0 && rotary != 2 * half)
    return ctx.emitError() << "RotaryEmbedding rotary_embedding_dim " << rotary
                           << " does not match caches of width " << half;
  auto op = nn::RopeOp::create(
      b, loc, x.getType(), x, cos, sin,
      ctx.getAttrInt("interleaved", 0) ? b.getUnitAttr() : UnitAttr());
  Value out = op;
  if (threeD) {
    Value t = nn::TransposeOp::create(
        b, loc, typeOf(out).clone({x4[0], x4[2], x4[1], x4[3]}), out,
        ArrayRef<int64_t>{0, 2, 1, 3});
    out = reshape(ctx, t, xs);
  }
  ctx.setOutput(0, out);
  return success();
}

} // namespace

Value mlir::partita::onnx_import::intConstant(NodeContext &ctx,
                                              RankedTensorType type,
                                              ArrayRef<int64_t> values) {
  SmallVector<APInt> bits;
  for (int64_t v : values)
    bits.push_back(APInt(type.getElementTypeBitWidth(), v, /*isSigned=*/true));
  return nn::ConstantOp::create(
      ctx.getBuilder(), ctx.getLoc(),
      cast<ElementsAttr>(DenseElementsAttr::get(type, bits)));
}

std::pair<Value, Value>
mlir::partita::onnx_import::buildTopK(NodeContext &ctx, Value x, int64_t axis,
                                      int64_t k, bool largest) {
  auto type = typeOf(x);
  Type element = type.getElementType();
  int64_t rank = type.getRank(), n = type.getDimSize(axis);
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto i64 = b.getI64Type();
  auto i1Type = type.clone(b.getI1Type());
  SmallVector<int64_t> kept(type.getShape());
  kept[axis] = 1;
  auto keptType = type.clone(kept);
  auto keptIndexType = keptType.clone(i64);
  SmallVector<int64_t> axes = {axis};
  Value iota = iotaAlong(ctx, rank, axis, n);
  if (!iota)
    return {};
  Value none = intConstant(ctx, RankedTensorType::get({}, i64), {n});
  bool isFloat = isa<FloatType>(element);
  Value nan;
  if (isFloat)
    nan = nn::CompareOp::create(b, loc, i1Type, nn::CompareDirection::NE, x, x);
  Value outside = extremeConstant(ctx, element, /*lowest=*/largest);
  // The first position of `where` (i1) along the axis; n where none is.
  auto firstOf = [&](Value where) {
    Value candidates =
        nn::WhereOp::create(b, loc, type.clone(i64), where, iota, none);
    return nn::ReduceOp::create(b, loc, keptIndexType, nn::ReduceKind::Min,
                                candidates, axes, /*keepdims=*/true)
        .getResult();
  };
  auto found = [&](Value first) {
    return nn::CompareOp::create(b, loc, keptIndexType.clone(b.getI1Type()),
                                 nn::CompareDirection::LT, first, none)
        .getResult();
  };
  Value available = nn::ConstantOp::create(
      b, loc,
      cast<ElementsAttr>(DenseElementsAttr::get(i1Type, b.getBoolAttr(true))));
  SmallVector<Value> values, indices;
  for (int64_t round = 0; round < k; ++round) {
    Value numeric = available;
    if (isFloat)
      numeric =
          nn::AndOp::create(b, loc, available, nn::NotOp::create(b, loc, nan));
    Value clean = nn::WhereOp::create(b, loc, type, numeric, x, outside);
    Value extreme = nn::ReduceOp::create(
        b, loc, keptType, largest ? nn::ReduceKind::Max : nn::ReduceKind::Min,
        clean, axes,
        /*keepdims=*/true);
    Value holds = nn::AndOp::create(
        b, loc,
        nn::CompareOp::create(b, loc, i1Type, nn::CompareDirection::EQ, clean,
                              extreme),
        numeric);
    Value number = firstOf(holds);
    Value index = number, tookNan;
    if (isFloat) {
      Value firstNan = firstOf(nn::AndOp::create(b, loc, nan, available));
      // Largest: a NaN left goes first; smallest: only when no number is.
      tookNan = largest ? found(firstNan)
                        : nn::NotOp::create(b, loc, found(number)).getResult();
      index =
          nn::WhereOp::create(b, loc, keptIndexType, tookNan, firstNan, number);
    }
    Value taken = nn::CompareOp::create(b, loc, i1Type,
                                        nn::CompareDirection::EQ, iota, index);
    Value value = extreme;
    if (isFloat)
      value = nn::WhereOp::create(
          b, loc, keptType, tookNan,
          scalarConstant(ctx, element,
                         std::numeric_limits<double>::quiet_NaN()),
          extreme);
    values.push_back(value);
    indices.push_back(index);
    available =
        nn::AndOp::create(b, loc, available, nn::NotOp::create(b, loc, taken));
  }
  SmallVector<int64_t> out(type.getShape());
  out[axis] = k;
  auto join = [&](ArrayRef<Value> parts, Type elementType) -> Value {
    if (parts.size() == 1)
      return parts.front();
    return nn::ConcatOp::create(b, loc, type.clone(out).clone(elementType),
                                parts, static_cast<uint64_t>(axis))
        .getResult();
  };
  return {join(values, element), join(indices, i64)};
}

void mlir::partita::onnx_import::registerTransformerOps(OpRegistry &registry) {
  registry.add("MatMul", {13, nullptr, matmulHandler});
  registry.add("Gemm", {13, nullptr, gemmHandler});
  registry.add("Softmax", {13, nullptr, softmaxHandler<nn::SoftmaxOp>});
  registry.add("LogSoftmax", {13, nullptr, softmaxHandler<nn::LogSoftmaxOp>});
  registry.add("LayerNormalization",
               {17, nullptr, normHandler<nn::LayerNormOp>});
  registry.add("RMSNormalization", {23, nullptr, normHandler<nn::RmsNormOp>});
  // onnxruntime's RMS normalization of the default domain, which its
  // transformer optimizer and the model builder write.
  registry.add("SimplifiedLayerNormalization",
               {1, nullptr, normHandler<nn::RmsNormOp>});
  registry.add("Gelu", {20, nullptr, geluHandler});
  registry.add("Attention", {23, nullptr, attentionHandler});
  registry.add("ArgMax", {13, nullptr, argExtremeHandler<nn::ReduceKind::Max>});
  registry.add("ArgMin", {13, nullptr, argExtremeHandler<nn::ReduceKind::Min>});
  // Versions 11 and 24 take k as an input, with largest and sorted.
  registry.add("TopK", {11, nullptr, topKHandler});
  registry.add("OneHot", {11, foldOneHot, oneHotHandler});
  registry.add("RotaryEmbedding", {23, nullptr, rotaryHandler});
  struct Reduce {
    const char *name;
    Reduction kind;
    int64_t axesInputSince;
  };
  for (Reduce r : {Reduce{"ReduceMean", Reduction::Mean, 18},
                   Reduce{"ReduceSum", Reduction::Sum, 13},
                   Reduce{"ReduceMax", Reduction::Max, 18},
                   Reduce{"ReduceMin", Reduction::Min, 18},
                   Reduce{"ReduceProd", Reduction::Prod, 18},
                   Reduce{"ReduceL1", Reduction::L1, 18},
                   Reduce{"ReduceL2", Reduction::L2, 18},
                   Reduce{"ReduceSumSquare", Reduction::SumSquare, 18},
                   Reduce{"ReduceLogSumExp", Reduction::LogSumExp, 18}})
    registry.add(r.name, {13,
                          [r](NodeContext &ctx) {
                            return foldReduce(ctx, r.kind, r.axesInputSince);
                          },
                          [r](NodeContext &ctx) {
                            return reduceHandler(ctx, r.kind, r.axesInputSince);
                          }});
}
