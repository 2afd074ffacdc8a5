//===- OpsElementwise.cpp - elementwise ONNX ops --------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Arithmetic, comparisons, logic, unary math, Where, Cast, Identity and
// Dropout: each folded on constants and otherwise mapped to the nn op of the
// same meaning (numpy broadcasting is native to nn).
//
//===----------------------------------------------------------------------===//

#include "Folding.h"

#include "mlir/IR/TypeUtilities.h"
#include "partita/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

using FloatFn = double (*)(double, double);
using IntFn = std::optional<int64_t> (*)(int64_t, int64_t);

/// Folds a binary (or, pairwise, variadic) elementwise node.
LogicalResult foldBinary(NodeContext &ctx, FloatFn floatFn, IntFn intFn,
                         bool resultIsBool) {
  const HostTensor *acc = ctx.getConstant(0);
  if (!acc)
    return failure();
  HostTensor result = *acc;
  for (unsigned k = 1; k < ctx.getNumInputs(); ++k) {
    const HostTensor *rhs = ctx.getConstant(k);
    if (!rhs)
      return failure();
    FailureOr<SmallVector<int64_t>> shape = broadcast(result.shape, rhs->shape);
    if (failed(shape))
      return failure();
    int64_t n = getElementCountSaturated(*shape);
    if (n > kMaxFoldedElements)
      return failure();
    SmallVector<int64_t> li = broadcastIndices(result.shape, *shape);
    SmallVector<int64_t> ri = broadcastIndices(rhs->shape, *shape);
    bool useFloat = result.isFloat() || rhs->isFloat();
    int dataType =
        resultIsBool ? onnx::TensorProto_DataType_BOOL : result.dataType;
    bool failedInt = false;
    HostTensor next = makeTensor(dataType, *shape, [&](int64_t i) -> double {
      if (useFloat)
        return floatFn(result.getAsDouble(li[i]), rhs->getAsDouble(ri[i]));
      std::optional<int64_t> v =
          intFn(result.getAsInt(li[i]), rhs->getAsInt(ri[i]));
      failedInt |= !v;
      return v ? static_cast<double>(*v) : 0.0;
    });
    // Integer results beyond 2^53 lose precision through double; recompute
    // them exactly.
    if (!useFloat && !resultIsBool) {
      std::vector<int64_t> &out = next.mutableInts();
      for (int64_t i = 0; i < n; ++i) {
        std::optional<int64_t> v =
            intFn(result.getAsInt(li[i]), rhs->getAsInt(ri[i]));
        failedInt |= !v;
        out[i] = v ? wrapToType(*v, dataType) : 0;
      }
    }
    if (failedInt)
      return failure();
    result = std::move(next);
  }
  ctx.setOutput(0, std::move(result));
  return success();
}

/// Folds a binary node with a bool result: `fn(a, i, b, j)` compares element
/// i of a with element j of b, broadcasting numpy-style.
template <typename Fn> LogicalResult foldToBool(NodeContext &ctx, Fn fn) {
  const HostTensor *a = ctx.getConstant(0), *b = ctx.getConstant(1);
  if (!a || !b)
    return failure();
  FailureOr<SmallVector<int64_t>> shape = broadcast(a->shape, b->shape);
  if (failed(shape) || getElementCountSaturated(*shape) > kMaxFoldedElements)
    return failure();
  SmallVector<int64_t> ai = broadcastIndices(a->shape, *shape);
  SmallVector<int64_t> bi = broadcastIndices(b->shape, *shape);
  ctx.setOutput(
      0, makeTensor(onnx::TensorProto_DataType_BOOL, *shape,
                    [&](int64_t i) { return fn(*a, ai[i], *b, bi[i]); }));
  return success();
}

/// Checks that the operands of an elementwise node broadcast and agree on
/// element type; nn would otherwise reject the op less clearly.
LogicalResult checkOperands(NodeContext &ctx, ArrayRef<Value> operands) {
  SmallVector<int64_t> shape;
  Type elementType = getElementTypeOrSelf(operands.front().getType());
  for (Value v : operands) {
    auto type = cast<RankedTensorType>(v.getType());
    FailureOr<SmallVector<int64_t>> next = broadcast(shape, type.getShape());
    if (failed(next)) {
      InFlightDiagnostic diag = ctx.emitError()
                                << ctx.getNode().op_type() << " operands of "
                                << "shapes ";
      llvm::interleave(
          operands,
          [&](Value o) {
            diag << "[";
            llvm::interleaveComma(
                cast<RankedTensorType>(o.getType()).getShape(), diag);
            diag << "]";
          },
          [&] { diag << ", "; });
      return diag << " do not broadcast";
    }
    shape = *next;
    if (type.getElementType() != elementType)
      return ctx.emitError()
             << ctx.getNode().op_type()
             << " operands have different element types (" << elementType
             << " and " << type.getElementType() << ")";
  }
  return success();
}

template <typename OpTy> LogicalResult buildBinary(NodeContext &ctx) {
  SmallVector<Value> operands;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
    Value v = ctx.getInput(i);
    if (!v)
      return failure();
    operands.push_back(v);
  }
  if (failed(checkOperands(ctx, operands)))
    return failure();
  if (getElementTypeOrSelf(operands[0].getType()).isInteger(1) &&
      !std::is_same_v<OpTy, nn::AndOp> && !std::is_same_v<OpTy, nn::OrOp> &&
      !std::is_same_v<OpTy, nn::XorOp>)
    return ctx.emitError() << ctx.getNode().op_type()
                           << " on booleans is not supported";
  Value acc = operands[0];
  for (Value v : ArrayRef<Value>(operands).drop_front())
    acc = OpTy::create(ctx.getBuilder(), ctx.getLoc(), acc, v);
  ctx.setOutput(0, acc);
  return success();
}

void addBinary(OpRegistry &registry, StringRef name, int64_t since,
               BuildFn build, FloatFn f, IntFn i, bool isBool = false) {
  registry.add(name,
               {since,
                [=](NodeContext &ctx) { return foldBinary(ctx, f, i, isBool); },
                build});
}

LogicalResult buildCompare(NodeContext &ctx, nn::CompareDirection direction) {
  Value a = ctx.getInput(0), b = ctx.getInput(1);
  if (!a || !b || failed(checkOperands(ctx, {a, b})))
    return failure();
  SmallVector<int64_t> shape =
      *broadcast(cast<RankedTensorType>(a.getType()).getShape(),
                 cast<RankedTensorType>(b.getType()).getShape());
  auto type = RankedTensorType::get(shape, ctx.getBuilder().getI1Type());
  ctx.setOutput(0, nn::CompareOp::create(ctx.getBuilder(), ctx.getLoc(), type,
                                         direction, a, b));
  return success();
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

LogicalResult foldUnary(NodeContext &ctx, double (*fn)(double), bool keepInts) {
  const HostTensor *in = ctx.getConstant(0);
  if (!in || in->getNumElements() > kMaxFoldedElements)
    return failure();
  if (!in->isFloat() && !keepInts)
    return failure();
  ctx.setOutput(0, makeTensor(in->dataType, in->shape, [&](int64_t i) {
                  return fn(in->getAsDouble(i));
                }));
  return success();
}

template <typename OpTy> LogicalResult buildUnary(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  ctx.setOutput(0, OpTy::create(ctx.getBuilder(), ctx.getLoc(), x));
  return success();
}

template <typename OpTy>
void addUnary(OpRegistry &registry, StringRef name, int64_t since,
              double (*fn)(double), bool keepInts = false) {
  registry.add(name,
               {since,
                [=](NodeContext &ctx) { return foldUnary(ctx, fn, keepInts); },
                buildUnary<OpTy>});
}

void addFoldOnlyUnary(OpRegistry &registry, StringRef name, int64_t since,
                      double (*fn)(double)) {
  registry.add(
      name, {since, [=](NodeContext &ctx) { return foldUnary(ctx, fn, false); },
             nullptr});
}

//===----------------------------------------------------------------------===//
// Cast, Where, Identity, Dropout
//===----------------------------------------------------------------------===//

LogicalResult foldCast(NodeContext &ctx) {
  const HostTensor *in = ctx.getConstant(0);
  int to = ctx.getAttrInt("to", 0);
  if (!in || in->getNumElements() > kMaxFoldedElements || !dataTypeSize(to))
    return failure();
  bool fromFloat = in->isFloat();
  if (fromFloat && !isFloatType(to) && to != onnx::TensorProto_DataType_BOOL) {
    // Toward zero, saturating at int64's range (NaN gives 0), then wrapped
    // to the width: what the run-time cast does (an out-of-range
    // conversion is undefined in C++, and in ONNX).
    HostTensor out(to, in->shape);
    std::vector<int64_t> &values = out.mutableInts();
    for (int64_t i = 0, n = in->getNumElements(); i < n; ++i) {
      double x = std::trunc(in->getAsDouble(i));
      int64_t v = std::isnan(x)  ? 0
                  : x >= 0x1p63  ? INT64_MAX
                  : x <= -0x1p63 ? INT64_MIN
                                 : static_cast<int64_t>(x);
      values.push_back(wrapToType(v, to));
    }
    ctx.setOutput(0, std::move(out));
    return success();
  }
  ctx.setOutput(0, makeTensor(to, in->shape, [&](int64_t i) -> double {
                  if (to == onnx::TensorProto_DataType_BOOL)
                    return in->getAsDouble(i) != 0.0;
                  return in->getAsDouble(i);
                }));
  return success();
}

LogicalResult buildCast(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  int to = ctx.getAttrInt("to", 0);
  Type element = getElementType(ctx.getContext(), to);
  if (!element)
    return ctx.emitError() << "Cast to " << dataTypeName(to)
                           << " is not supported";
  auto type = cast<RankedTensorType>(x.getType()).clone(element);
  if (type == x.getType()) {
    ctx.setOutput(0, x);
    return success();
  }
  ctx.setOutput(0, nn::CastOp::create(ctx.getBuilder(), ctx.getLoc(), type, x));
  return success();
}

LogicalResult foldWhere(NodeContext &ctx) {
  const HostTensor *c = ctx.getConstant(0), *a = ctx.getConstant(1),
                   *b = ctx.getConstant(2);
  if (!c || !a || !b)
    return failure();
  FailureOr<SmallVector<int64_t>> s1 = broadcast(c->shape, a->shape);
  if (failed(s1))
    return failure();
  FailureOr<SmallVector<int64_t>> shape = broadcast(*s1, b->shape);
  if (failed(shape))
    return failure();
  HostTensor probe(a->dataType, *shape);
  if (probe.getNumElements() > kMaxFoldedElements)
    return failure();
  SmallVector<int64_t> ci = broadcastIndices(c->shape, *shape);
  SmallVector<int64_t> ai = broadcastIndices(a->shape, *shape);
  SmallVector<int64_t> bi = broadcastIndices(b->shape, *shape);
  if (a->isFloat()) {
    ctx.setOutput(0, makeTensor(a->dataType, *shape, [&](int64_t i) {
                    return c->getAsInt(ci[i]) ? a->getAsDouble(ai[i])
                                              : b->getAsDouble(bi[i]);
                  }));
  } else {
    HostTensor out(a->dataType, *shape);
    std::vector<int64_t> &v = out.mutableInts();
    for (int64_t i = 0, e = out.getNumElements(); i < e; ++i)
      v.push_back(c->getAsInt(ci[i]) ? a->getAsInt(ai[i]) : b->getAsInt(bi[i]));
    ctx.setOutput(0, std::move(out));
  }
  return success();
}

LogicalResult buildWhere(NodeContext &ctx) {
  Value c = ctx.getInput(0), a = ctx.getInput(1), b = ctx.getInput(2);
  if (!c || !a || !b || failed(checkOperands(ctx, {a, b})))
    return failure();
  auto shapeOf = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  };
  FailureOr<SmallVector<int64_t>> s1 = broadcast(shapeOf(c), shapeOf(a));
  FailureOr<SmallVector<int64_t>> shape = failure();
  if (succeeded(s1))
    shape = broadcast(*s1, shapeOf(b));
  if (failed(shape))
    return ctx.emitError() << "Where operands do not broadcast";
  auto type = RankedTensorType::get(*shape, getElementTypeOrSelf(a.getType()));
  ctx.setOutput(
      0, nn::WhereOp::create(ctx.getBuilder(), ctx.getLoc(), type, c, a, b));
  return success();
}

LogicalResult foldIdentity(NodeContext &ctx) {
  const HostTensor *in = ctx.getConstant(0);
  if (!in)
    return failure();
  if (ctx.getNode().op_type() == "Dropout") {
    // Only inference folds (the builder reports the rest).
    const HostTensor *training = ctx.getConstant(2);
    if ((ctx.hasInput(1) && !ctx.getInputShape(1).empty()) ||
        (training && (!training->shape.empty() || training->getAsInt(0) != 0)))
      return failure();
    if (ctx.hasOutput(1) && in->getNumElements() > kMaxFoldedElements)
      return failure();
    if (ctx.hasOutput(1))
      ctx.setOutput(1, makeTensor(onnx::TensorProto_DataType_BOOL, in->shape,
                                  [](int64_t) { return 1; }));
  }
  ctx.setOutput(0, *in);
  return success();
}

LogicalResult buildIdentity(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  if (ctx.getNode().op_type() == "Dropout") {
    // Inference: Dropout passes its input through; its mask keeps everything.
    for (unsigned i : {1u, 2u})
      if (ctx.hasInput(i) && !ctx.getInputShape(i).empty())
        return ctx.emitError()
               << "Dropout " << (i == 1 ? "ratio" : "training_mode")
               << " must be a scalar, found shape "
               << shapeText(ctx.getInputShape(i));
    const HostTensor *training = ctx.getConstant(2);
    if ((training && training->getAsInt(0)) || (ctx.hasInput(2) && !training))
      return ctx.emitError() << "Dropout in training mode is not supported";
    ArrayRef<int64_t> shape = cast<RankedTensorType>(x.getType()).getShape();
    if (ctx.hasOutput(1) &&
        getElementCountSaturated(shape) > kMaxFoldedElements)
      return ctx.emitError()
             << "the mask output of Dropout on " << shapeText(shape)
             << " is larger than Partita folds";
    if (ctx.hasOutput(1))
      ctx.setOutput(1, makeTensor(onnx::TensorProto_DataType_BOOL, shape,
                                  [](int64_t) { return 1; }));
  }
  ctx.setOutput(0, x);
  return success();
}

//===----------------------------------------------------------------------===//
// IsNaN, Clip, Mod
//===----------------------------------------------------------------------===//

/// A rank-0 constant of `elementType` holding `value`.
Value scalarOf(NodeContext &ctx, Type elementType, double value) {
  HostTensor t(getDataType(elementType), {});
  if (t.isFloat())
    t.mutableFloats().push_back(value);
  else
    t.mutableInts().push_back(static_cast<int64_t>(value));
  return ctx.createConstant(t, "");
}

LogicalResult foldIsNaN(NodeContext &ctx) {
  const HostTensor *in = ctx.getConstant(0);
  if (!in || in->getNumElements() > kMaxFoldedElements)
    return failure();
  ctx.setOutput(
      0, makeTensor(onnx::TensorProto_DataType_BOOL, in->shape, [&](int64_t i) {
        return std::isnan(in->getAsDouble(i)) ? 1 : 0;
      }));
  return success();
}

/// IsNaN is `x != x`: true exactly for NaN under IEEE comparison.
LogicalResult buildIsNaN(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  ctx.setOutput(0,
                nn::CompareOp::create(ctx.getBuilder(), ctx.getLoc(),
                                      type.clone(ctx.getBuilder().getI1Type()),
                                      nn::CompareDirection::NE, x, x));
  return success();
}

/// Clip's bounds (inputs 1 and 2, each optional) are scalars; onnxruntime
/// also takes one-element tensors.
LogicalResult checkClipBounds(NodeContext &ctx) {
  for (unsigned i : {1u, 2u})
    if (ctx.hasInput(i) && getElementCountSaturated(ctx.getInputShape(i)) != 1)
      return ctx.emitError() << "Clip " << (i == 1 ? "min" : "max")
                             << " must be a scalar, found shape "
                             << shapeText(ctx.getInputShape(i));
  return success();
}

LogicalResult foldClip(NodeContext &ctx) {
  const HostTensor *x = ctx.getConstant(0);
  if (!x || x->getNumElements() > kMaxFoldedElements)
    return failure();
  for (unsigned i : {1u, 2u})
    if (ctx.hasInput(i) &&
        (!ctx.getConstant(i) || ctx.getConstant(i)->getNumElements() != 1))
      return failure();
  const HostTensor *lo = ctx.getConstant(1), *hi = ctx.getConstant(2);
  HostTensor out(x->dataType, x->shape);
  int64_t n = x->getNumElements();
  if (x->isFloat()) {
    std::vector<double> &v = out.mutableFloats();
    for (int64_t i = 0; i < n; ++i) {
      double e = x->getAsDouble(i);
      if (lo && e < lo->getAsDouble(0))
        e = lo->getAsDouble(0);
      if (hi && e > hi->getAsDouble(0))
        e = hi->getAsDouble(0);
      v.push_back(e);
    }
  } else {
    std::vector<int64_t> &v = out.mutableInts();
    for (int64_t i = 0; i < n; ++i) {
      int64_t e = x->getAsInt(i);
      if (lo)
        e = std::max(e, lo->getAsInt(0));
      if (hi)
        e = std::min(e, hi->getAsInt(0));
      v.push_back(e);
    }
  }
  ctx.setOutput(0, std::move(out));
  return success();
}

/// Clip is max(x, min) then min(.., max), x first so that NaN stays NaN.
LogicalResult buildClip(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x || failed(checkClipBounds(ctx)))
    return failure();
  OpBuilder &b = ctx.getBuilder();
  Value result = x;
  for (unsigned i : {1u, 2u}) {
    if (!ctx.hasInput(i))
      continue;
    Value bound = ctx.getInput(i);
    if (!bound)
      return failure();
    auto boundType = cast<RankedTensorType>(bound.getType());
    if (boundType.getRank() != 0)
      bound = nn::ReshapeOp::create(
          b, ctx.getLoc(),
          RankedTensorType::get({}, boundType.getElementType()), bound);
    if (failed(checkOperands(ctx, {x, bound})))
      return failure();
    result =
        i == 1 ? nn::MaxOp::create(b, ctx.getLoc(), result, bound).getResult()
               : nn::MinOp::create(b, ctx.getLoc(), result, bound).getResult();
  }
  ctx.setOutput(0, result);
  return success();
}

LogicalResult foldMod(NodeContext &ctx) {
  bool fmod = ctx.getAttrInt("fmod", 0) != 0;
  const HostTensor *a = ctx.getConstant(0);
  if (!a || (a->isFloat() && !fmod))
    return failure();
  return foldBinary(
      ctx, [](double x, double y) { return std::fmod(x, y); },
      fmod ? IntFn([](int64_t x, int64_t y) -> std::optional<int64_t> {
        if (y == 0)
          return std::nullopt;
        return y == -1 ? 0 : x % y;
      })
           : IntFn([](int64_t x, int64_t y) -> std::optional<int64_t> {
               if (y == 0)
                 return std::nullopt;
               int64_t r = y == -1 ? 0 : x % y;
               return r != 0 && (r < 0) != (y < 0) ? r + y : r;
             }),
      false);
}

/// `remainder + step` where `remainder` is non-zero and its sign differs
/// from `reference`'s, `remainder` elsewhere: how both Mod forms move a
/// truncated remainder to the sign they promise.
Value moveWhereSignDiffers(NodeContext &ctx, Value remainder, Value reference,
                           Value step) {
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto type = cast<RankedTensorType>(remainder.getType());
  auto referenceBool =
      cast<RankedTensorType>(reference.getType()).clone(b.getI1Type());
  Value zero = scalarOf(ctx, type.getElementType(), 0);
  Value nonZero =
      nn::CompareOp::create(b, loc, type.clone(b.getI1Type()),
                            nn::CompareDirection::NE, remainder, zero);
  Value negative =
      nn::CompareOp::create(b, loc, type.clone(b.getI1Type()),
                            nn::CompareDirection::LT, remainder, zero);
  Value referenceNegative = nn::CompareOp::create(
      b, loc, referenceBool, nn::CompareDirection::LT, reference, zero);
  Value signsDiffer = nn::XorOp::create(b, loc, negative, referenceNegative);
  Value fix = nn::AndOp::create(b, loc, nonZero, signsDiffer);
  Value moved = nn::AddOp::create(b, loc, remainder, step);
  return nn::WhereOp::create(b, loc, type, fix, moved, remainder);
}

/// The float remainder `a - t * d` exact where `remainder` (computed with
/// the rounded `product` = fl(t * d)) is not: the product's rounding error
/// comes from Dekker's two-product (operands split with Veltkamp's
/// constant, 2^ceil(p/2) + 1 for a p-bit significand) and is subtracted;
/// when the quotient rounded up to the next integer (|t * d| > |a|, the
/// exact remainder then has the other sign than `a`), one `|d|` with the
/// sign of `a` is added back. A finite `a` by an infinite `d` is `a`, as
/// std::fmod gives (t * d is NaN there).
Value correctFloatRemainder(NodeContext &ctx, Value a, Value d, Value t,
                            Value product, Value remainder) {
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto type = cast<RankedTensorType>(remainder.getType());
  Type element = type.getElementType();
  auto boolType = type.clone(b.getI1Type());
  int precision =
      APFloat::semanticsPrecision(cast<FloatType>(element).getFloatSemantics());
  double splitter = std::ldexp(1.0, (precision + 1) / 2) + 1.0;
  Value split = scalarOf(ctx, element, splitter);
  Value zero = scalarOf(ctx, element, 0.0);
  Value infinity = scalarOf(ctx, element, INFINITY);
  auto halves = [&](Value x) -> std::pair<Value, Value> {
    Value scaled = nn::MulOp::create(b, loc, split, x);
    Value rest = nn::SubOp::create(b, loc, scaled, x);
    Value hi = nn::SubOp::create(b, loc, scaled, rest);
    Value lo = nn::SubOp::create(b, loc, x, hi);
    return {hi, lo};
  };
  auto [tHi, tLo] = halves(t);
  auto [dHi, dLo] = halves(d);
  Value hiHi = nn::MulOp::create(b, loc, tHi, dHi);
  Value hiLo = nn::MulOp::create(b, loc, tHi, dLo);
  Value loHi = nn::MulOp::create(b, loc, tLo, dHi);
  Value loLo = nn::MulOp::create(b, loc, tLo, dLo);
  Value error = nn::SubOp::create(b, loc, hiHi, product);
  error = nn::AddOp::create(b, loc, error, hiLo);
  error = nn::AddOp::create(b, loc, error, loHi);
  error = nn::AddOp::create(b, loc, error, loLo);
  // Where a split overflowed (operands near the largest float) the error
  // is not finite: keep the rounded remainder there.
  Value errorMagnitude = nn::AbsOp::create(b, loc, error);
  Value errorFinite = nn::CompareOp::create(
      b, loc, boolType, nn::CompareDirection::LT, errorMagnitude, infinity);
  Value exact = nn::SubOp::create(b, loc, remainder, error);
  remainder = nn::WhereOp::create(b, loc, type, errorFinite, exact, remainder);

  // The quotient rounded up (the remainder has the other sign than a):
  // add sign(a) * |d| back.
  auto aBool = cast<RankedTensorType>(a.getType()).clone(b.getI1Type());
  auto dBool = cast<RankedTensorType>(d.getType()).clone(b.getI1Type());
  Value aNegative =
      nn::CompareOp::create(b, loc, aBool, nn::CompareDirection::LT, a, zero);
  Value dNegative =
      nn::CompareOp::create(b, loc, dBool, nn::CompareDirection::LT, d, zero);
  Value signsDiffer = nn::XorOp::create(b, loc, aNegative, dNegative);
  Value negD = nn::NegOp::create(b, loc, d);
  Value step = nn::WhereOp::create(b, loc, type, signsDiffer, negD, d);
  remainder = moveWhereSignDiffers(ctx, remainder, a, step);

  // fmod(a, ±inf) = a for a finite a.
  Value dMagnitude = nn::AbsOp::create(b, loc, d);
  Value aMagnitude = nn::AbsOp::create(b, loc, a);
  Value dInfinite = nn::CompareOp::create(
      b, loc, dBool, nn::CompareDirection::EQ, dMagnitude, infinity);
  Value aFinite = nn::CompareOp::create(b, loc, aBool, nn::CompareDirection::LT,
                                        aMagnitude, infinity);
  Value keepA = nn::AndOp::create(b, loc, dInfinite, aFinite);
  return nn::WhereOp::create(b, loc, type, keepA, a, remainder);
}

/// Mod from nn arithmetic. Integers: the C remainder a - trunc(a / b) * b
/// (fmod = 1), moved to the divisor's sign when they differ (fmod = 0, as
/// Python's %). Floats (fmod = 1 only): a - trunc(a / b) * b with trunc a
/// round trip through i64, corrected by correctFloatRemainder: exact while
/// |a / b| < 2^23 (beyond, the quotient itself is not an exact integer).
LogicalResult buildMod(NodeContext &ctx) {
  // A constant divisor is checked before getInput makes it an nn value.
  if (const HostTensor *divisor = ctx.getConstant(1);
      divisor && !divisor->isFloat())
    for (int64_t i = 0, n = divisor->getNumElements(); i < n; ++i)
      if (divisor->getAsInt(i) == 0)
        return ctx.emitError()
               << "Mod of integers by zero (divisor element " << i << ")";
  Value a = ctx.getInput(0), d = ctx.getInput(1);
  if (!a || !d || failed(checkOperands(ctx, {a, d})))
    return failure();
  bool fmod = ctx.getAttrInt("fmod", 0) != 0;
  Type element = getElementTypeOrSelf(a.getType());
  bool isFloat = isa<FloatType>(element);
  if (isFloat && !fmod)
    return ctx.emitError() << "Mod of floating-point values needs fmod = 1";
  if (element.isInteger(1))
    return ctx.emitError() << "Mod on booleans is not supported";
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  Value quotient = nn::DivOp::create(b, loc, a, d);
  Value truncated = quotient;
  if (isFloat) {
    auto type = cast<RankedTensorType>(quotient.getType());
    Value magnitude = nn::AbsOp::create(b, loc, quotient);
    Value limit = scalarOf(ctx, element, 8388608.0); // 2^23
    Value small =
        nn::CompareOp::create(b, loc, type.clone(b.getI1Type()),
                              nn::CompareDirection::LT, magnitude, limit);
    Value asInt =
        nn::CastOp::create(b, loc, type.clone(b.getI64Type()), quotient);
    Value back = nn::CastOp::create(b, loc, type, asInt);
    truncated = nn::WhereOp::create(b, loc, type, small, back, quotient);
  }
  Value product = nn::MulOp::create(b, loc, truncated, d);
  Value remainder = nn::SubOp::create(b, loc, a, product);
  if (isFloat)
    remainder = correctFloatRemainder(ctx, a, d, truncated, product, remainder);
  if (!fmod)
    remainder = moveWhereSignDiffers(ctx, remainder, d, d);
  ctx.setOutput(0, remainder);
  return success();
}

double erfFn(double x) { return std::erf(x); }
double sigmoidFn(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double reluFn(double x) { return x > 0 ? x : 0; }
double negFn(double x) { return -x; }
double absFn(double x) { return std::fabs(x); }
double sqrtFn(double x) { return std::sqrt(x); }
double reciprocalFn(double x) { return 1.0 / x; }
double expFn(double x) { return std::exp(x); }
double logFn(double x) { return std::log(x); }
double tanhFn(double x) { return std::tanh(x); }
double cosFn(double x) { return std::cos(x); }
double sinFn(double x) { return std::sin(x); }
double floorFn(double x) { return std::floor(x); }
double ceilFn(double x) { return std::ceil(x); }
double notFn(double x) { return x == 0.0; }

} // namespace

void mlir::partita::onnx_import::registerElementwiseOps(OpRegistry &registry) {
  addBinary(
      registry, "Add", 7, buildBinary<nn::AddOp>,
      [](double a, double b) { return a + b; },
      [](int64_t a, int64_t b) -> std::optional<int64_t> {
        return static_cast<int64_t>(static_cast<uint64_t>(a) +
                                    static_cast<uint64_t>(b));
      });
  addBinary(
      registry, "Sub", 7, buildBinary<nn::SubOp>,
      [](double a, double b) { return a - b; },
      [](int64_t a, int64_t b) -> std::optional<int64_t> {
        return static_cast<int64_t>(static_cast<uint64_t>(a) -
                                    static_cast<uint64_t>(b));
      });
  addBinary(
      registry, "Mul", 7, buildBinary<nn::MulOp>,
      [](double a, double b) { return a * b; },
      [](int64_t a, int64_t b) -> std::optional<int64_t> {
        return static_cast<int64_t>(static_cast<uint64_t>(a) *
                                    static_cast<uint64_t>(b));
      });
  addBinary(
      registry, "Div", 7, buildBinary<nn::DivOp>,
      [](double a, double b) { return a / b; },
      [](int64_t a, int64_t b) -> std::optional<int64_t> {
        if (b == 0 || (a == INT64_MIN && b == -1))
          return std::nullopt;
        return a / b;
      });
  addBinary(
      registry, "Max", 8, buildBinary<nn::MaxOp>,
      [](double a, double b) { return std::isnan(a) ? a : std::max(a, b); },
      [](int64_t a, int64_t b) -> std::optional<int64_t> {
        return std::max(a, b);
      });
  addBinary(
      registry, "Min", 8, buildBinary<nn::MinOp>,
      [](double a, double b) { return std::isnan(a) ? a : std::min(a, b); },
      [](int64_t a, int64_t b) -> std::optional<int64_t> {
        return std::min(a, b);
      });
  auto logical = [&](StringRef name, BuildFn build, bool (*fn)(bool, bool)) {
    registry.add(name, {7,
                        [fn](NodeContext &ctx) {
                          return foldToBool(
                              ctx, [fn](const HostTensor &a, int64_t i,
                                        const HostTensor &b, int64_t j) {
                                return fn(a.getAsInt(i), b.getAsInt(j));
                              });
                        },
                        build});
  };
  logical("And", buildBinary<nn::AndOp>, [](bool a, bool b) { return a && b; });
  logical("Or", buildBinary<nn::OrOp>, [](bool a, bool b) { return a || b; });
  logical("Xor", buildBinary<nn::XorOp>, [](bool a, bool b) { return a != b; });

  // Pow: the exponent may have another type than the base; nn.pow takes the
  // base's.
  registry.add(
      "Pow",
      {7,
       [](NodeContext &ctx) {
         return foldBinary(
             ctx, [](double a, double b) { return std::pow(a, b); },
             [](int64_t a, int64_t b) -> std::optional<int64_t> {
               if (b < 0)
                 return std::nullopt;
               return static_cast<int64_t>(std::pow(a, b));
             },
             false);
       },
       [](NodeContext &ctx) -> LogicalResult {
         Value x = ctx.getInput(0), y = ctx.getInput(1);
         if (!x || !y)
           return failure();
         auto xType = cast<RankedTensorType>(x.getType());
         if (!isa<FloatType>(xType.getElementType()))
           return ctx.emitError() << "Pow of integers is supported only on "
                                     "constants";
         auto yType = cast<RankedTensorType>(y.getType());
         if (yType.getElementType() != xType.getElementType())
           y = nn::CastOp::create(ctx.getBuilder(), ctx.getLoc(),
                                  yType.clone(xType.getElementType()), y);
         if (failed(checkOperands(ctx, {x, y})))
           return failure();
         ctx.setOutput(0,
                       nn::PowOp::create(ctx.getBuilder(), ctx.getLoc(), x, y));
         return success();
       }});

  auto compare = [&](StringRef name, nn::CompareDirection dir,
                     bool (*fn)(double, double)) {
    registry.add(
        name, {7,
               [fn](NodeContext &ctx) {
                 return foldToBool(ctx, [fn](const HostTensor &a, int64_t i,
                                             const HostTensor &b, int64_t j) {
                   // Integers compare exactly (through their
                   // sign).
                   if (!a.isFloat() && !b.isFloat()) {
                     int64_t x = a.getAsInt(i), y = b.getAsInt(j);
                     return fn(x < y ? -1 : x > y, 0);
                   }
                   return fn(a.getAsDouble(i), b.getAsDouble(j));
                 });
               },
               [dir](NodeContext &ctx) { return buildCompare(ctx, dir); }});
  };
  compare("Equal", nn::CompareDirection::EQ,
          [](double a, double b) { return a == b; });
  compare("Less", nn::CompareDirection::LT,
          [](double a, double b) { return a < b; });
  compare("Greater", nn::CompareDirection::GT,
          [](double a, double b) { return a > b; });
  compare("LessOrEqual", nn::CompareDirection::LE,
          [](double a, double b) { return a <= b; });
  compare("GreaterOrEqual", nn::CompareDirection::GE,
          [](double a, double b) { return a >= b; });

  addUnary<nn::NegOp>(registry, "Neg", 6, negFn, /*keepInts=*/true);
  addUnary<nn::AbsOp>(registry, "Abs", 6, absFn, /*keepInts=*/true);
  addUnary<nn::SqrtOp>(registry, "Sqrt", 6, sqrtFn);
  addUnary<nn::ReciprocalOp>(registry, "Reciprocal", 6, reciprocalFn);
  addUnary<nn::ExpOp>(registry, "Exp", 6, expFn);
  addUnary<nn::LogOp>(registry, "Log", 6, logFn);
  addUnary<nn::TanhOp>(registry, "Tanh", 6, tanhFn);
  addUnary<nn::ErfOp>(registry, "Erf", 9, erfFn);
  addUnary<nn::SigmoidOp>(registry, "Sigmoid", 6, sigmoidFn);
  addUnary<nn::ReluOp>(registry, "Relu", 6, reluFn, /*keepInts=*/true);
  addUnary<nn::NotOp>(registry, "Not", 1, notFn, /*keepInts=*/true);
  // Rotary tables: folded when the positions are constant, nn.sin/nn.cos
  // when they are an input (position_ids).
  addUnary<nn::CosOp>(registry, "Cos", 7, cosFn);
  addUnary<nn::SinOp>(registry, "Sin", 7, sinFn);
  // Only seen on constants in exported graphs (rounding).
  addFoldOnlyUnary(registry, "Floor", 6, floorFn);
  addFoldOnlyUnary(registry, "Ceil", 6, ceilFn);

  registry.add("Cast", {6, foldCast, buildCast});
  registry.add("Where", {9, foldWhere, buildWhere});
  registry.add("Identity", {1, foldIdentity, buildIdentity});
  registry.add("Dropout", {7, foldIdentity, buildIdentity});
  // Exporters' neighbours of the ops above: IsNaN (torch's sdpa lowering),
  // Clip (sentence-transformers' normalization), Mod (position arithmetic).
  registry.add("IsNaN", {13, foldIsNaN, buildIsNaN});
  registry.add("Clip", {13, foldClip, buildClip});
  registry.add("Mod", {13, foldMod, buildMod});
}
