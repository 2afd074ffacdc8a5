//===- NNDerivatives.cpp - vector-Jacobian products of nn ops -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The reverse-mode rule of each differentiable nn op, attached to it as a
// DifferentiableOpInterface external model. A rule builds nn ops from the
// cotangents of the op's results (g below; a null one is a zero) and its
// forward operands and results: the cotangent of each float operand,
// reduced over the dimensions the op broadcast it along, or null where an
// operand takes none. The rules are written once in nn, so that the
// backward they build is sharded and lowered as the forward is.
//
// An op absent here (compare, the logical ops, the KV-cache write, ring
// attention's partial op, and nn.attention_grad itself) is refused by
// partita-differentiate where it lies between a parameter and the loss; so
// is an operand a rule gives no cotangent (a rotary table or an attention
// mask that depends on a parameter).
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace mlir::partita::nn;

namespace {

/// Builds the nn ops of one rule at `b`, located at the op's location.
class Rule {
public:
  Rule(OpBuilder &b, Operation *op) : b(b), loc(op->getLoc()) {}

  static RankedTensorType typeOf(Value v) {
    return cast<RankedTensorType>(v.getType());
  }

  /// A scalar (rank 0) constant of `element` type.
  Value scalar(double value, Type element) {
    auto type = RankedTensorType::get({}, element);
    return ConstantOp::create(b, loc,
                              cast<ElementsAttr>(DenseElementsAttr::get(
                                  type, b.getFloatAttr(element, value))));
  }
  /// A scalar (rank 0) integer constant of `element` type.
  Value scalar(int64_t value, IntegerType element) {
    auto type = RankedTensorType::get({}, element);
    return ConstantOp::create(b, loc,
                              cast<ElementsAttr>(DenseElementsAttr::get(
                                  type, b.getIntegerAttr(element, value))));
  }
  Value scalarLike(double value, Value like) {
    return scalar(value, typeOf(like).getElementType());
  }

  /// `x op y` with numpy broadcasting, typed as the broadcast of both.
  template <typename OpTy> Value binary(Value x, Value y) {
    RankedTensorType type = inferBroadcastResultType(
        {x.getType(), y.getType()}, typeOf(x).getElementType());
    return OpTy::create(b, loc, type, x, y);
  }
  Value add(Value x, Value y) { return binary<AddOp>(x, y); }
  Value sub(Value x, Value y) { return binary<SubOp>(x, y); }
  Value mul(Value x, Value y) { return binary<MulOp>(x, y); }
  Value div(Value x, Value y) { return binary<DivOp>(x, y); }
  template <typename OpTy> Value unary(Value x) {
    return OpTy::create(b, loc, x.getType(), x);
  }

  /// `g` summed over the dimensions `target` broadcast to g's shape: the
  /// leading ones it lacks and those of size 1 that g has larger.
  Value sumTo(Value g, RankedTensorType target) {
    RankedTensorType from = typeOf(g);
    if (from.getShape() == target.getShape())
      return g;
    int64_t lead = from.getRank() - target.getRank();
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < from.getRank(); ++d)
      if (d < lead ||
          (target.getDimSize(d - lead) == 1 && from.getDimSize(d) != 1))
        axes.push_back(d);
    Value summed = g;
    if (!axes.empty()) {
      SmallVector<int64_t> kept(from.getShape());
      for (int64_t axis : axes)
        kept[axis] = 1;
      summed = ReduceOp::create(b, loc, from.clone(kept), ReduceKind::Sum, g,
                                axes, /*keepdims=*/true);
    }
    return reshape(summed, target.getShape());
  }

  /// Zeros of `type`, one splat constant.
  Value zeros(RankedTensorType type) {
    return ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            type, b.getFloatAttr(type.getElementType(), 0.0))));
  }

  static bool isFloatTensor(Value v) {
    return isa<FloatType>(typeOf(v).getElementType());
  }

  Value reshape(Value x, ArrayRef<int64_t> shape) {
    RankedTensorType type = typeOf(x);
    if (type.getShape() == shape)
      return x;
    return ReshapeOp::create(b, loc, type.clone(shape), x);
  }

  /// `x` with its last two dimensions swapped.
  Value transposeLast(Value x) {
    RankedTensorType type = typeOf(x);
    int64_t rank = type.getRank();
    SmallVector<int64_t> permutation(rank);
    std::iota(permutation.begin(), permutation.end(), 0);
    std::swap(permutation[rank - 1], permutation[rank - 2]);
    SmallVector<int64_t> shape(type.getShape());
    std::swap(shape[rank - 1], shape[rank - 2]);
    return TransposeOp::create(b, loc, type.clone(shape), x,
                               b.getDenseI64ArrayAttr(permutation));
  }

  /// lhs @ rhs with numpy's batch broadcasting.
  Value matmul(Value lhs, Value rhs) {
    RankedTensorType l = typeOf(lhs), r = typeOf(rhs);
    FailureOr<SmallVector<int64_t>> batch =
        broadcastShapes({l.getShape().drop_back(2), r.getShape().drop_back(2)});
    SmallVector<int64_t> shape(*batch);
    shape.push_back(l.getDimSize(l.getRank() - 2));
    shape.push_back(r.getDimSize(r.getRank() - 1));
    return MatmulOp::create(b, loc, l.clone(shape), lhs, rhs, Value());
  }

  /// `x` reduced with `kind` over `axis`, the axis kept (size 1).
  Value reduceKeep(ReduceKind kind, Value x, ArrayRef<int64_t> axes) {
    SmallVector<int64_t> shape(typeOf(x).getShape());
    for (int64_t axis : axes)
      shape[axis] = 1;
    return ReduceOp::create(b, loc, typeOf(x).clone(shape), kind, x, axes,
                            /*keepdims=*/true);
  }

  /// The dimensions [axis, rank) of `x`: what the norms normalize.
  static SmallVector<int64_t> trailing(Value x, int64_t axis) {
    SmallVector<int64_t> axes;
    for (int64_t d = axis; d < typeOf(x).getRank(); ++d)
      axes.push_back(d);
    return axes;
  }

  OpBuilder &b;
  Location loc;
};

// The rules: one function per op, `g` the result's cotangent.

void elementwiseVjp(AddOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.sumTo(g, Rule::typeOf(op.getLhs())));
  out.push_back(r.sumTo(g, Rule::typeOf(op.getRhs())));
}

void elementwiseVjp(SubOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.sumTo(g, Rule::typeOf(op.getLhs())));
  out.push_back(r.sumTo(r.unary<NegOp>(g), Rule::typeOf(op.getRhs())));
}

void elementwiseVjp(MulOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.sumTo(r.mul(g, op.getRhs()), Rule::typeOf(op.getLhs())));
  out.push_back(r.sumTo(r.mul(g, op.getLhs()), Rule::typeOf(op.getRhs())));
}

/// d(x / y) = g / y and -g x / y^2 = -(g / y) * (x / y).
void elementwiseVjp(DivOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value overY = r.div(g, op.getRhs());
  out.push_back(r.sumTo(overY, Rule::typeOf(op.getLhs())));
  out.push_back(r.sumTo(r.unary<NegOp>(r.mul(overY, op.getResult())),
                        Rule::typeOf(op.getRhs())));
}

/// d x^e = e x^(e-1) (as x^(e-1), so that x = 0 gives what torch gives),
/// d e = y log x.
void elementwiseVjp(PowOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getLhs(), e = op.getRhs();
  Value lower = r.binary<PowOp>(x, r.sub(e, r.scalarLike(1.0, e)));
  out.push_back(r.sumTo(r.mul(g, r.mul(e, lower)), Rule::typeOf(x)));
  out.push_back(r.sumTo(r.mul(g, r.mul(op.getResult(), r.unary<LogOp>(x))),
                        Rule::typeOf(e)));
}

/// Elementwise max and min: g to the side chosen, half to each on a tie
/// (torch's maximum and minimum).
template <typename OpTy>
void extremeVjp(OpTy op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getLhs(), y = op.getRhs();
  auto boolType = Rule::typeOf(g).clone(r.b.getI1Type());
  auto direction =
      std::is_same_v<OpTy, MaxOp> ? CompareDirection::GT : CompareDirection::LT;
  Value xWins = CompareOp::create(r.b, r.loc, boolType, direction, x, y);
  Value tie =
      CompareOp::create(r.b, r.loc, boolType, CompareDirection::EQ, x, y);
  Value half = r.mul(g, r.scalarLike(0.5, g)), zero = r.scalarLike(0.0, g);
  Value toX = WhereOp::create(
      r.b, r.loc, g.getType(), xWins, g,
      WhereOp::create(r.b, r.loc, g.getType(), tie, half, zero));
  out.push_back(r.sumTo(toX, Rule::typeOf(x)));
  out.push_back(r.sumTo(r.sub(g, toX), Rule::typeOf(y)));
}

void elementwiseVjp(MaxOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  extremeVjp(op, r, g, out);
}

void elementwiseVjp(MinOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  extremeVjp(op, r, g, out);
}

/// d |x| = sign(x) (0 at 0, as torch).
void unaryVjp(AbsOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getInput(), zero = r.scalarLike(0.0, g);
  auto boolType = Rule::typeOf(x).clone(r.b.getI1Type());
  Value positive =
      CompareOp::create(r.b, r.loc, boolType, CompareDirection::GT, x, zero);
  Value negative =
      CompareOp::create(r.b, r.loc, boolType, CompareDirection::LT, x, zero);
  out.push_back(
      WhereOp::create(r.b, r.loc, g.getType(), positive, g,
                      WhereOp::create(r.b, r.loc, g.getType(), negative,
                                      r.unary<NegOp>(g), zero)));
}

/// d erf = 2/sqrt(pi) exp(-x^2).
void unaryVjp(ErfOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getInput();
  Value bell = r.unary<ExpOp>(r.unary<NegOp>(r.mul(x, x)));
  out.push_back(r.mul(g, r.mul(r.scalarLike(M_2_SQRTPI, x), bell)));
}

void unaryVjp(SinOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.mul(g, r.unary<CosOp>(op.getInput())));
}

void unaryVjp(CosOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.unary<NegOp>(r.mul(g, r.unary<SinOp>(op.getInput()))));
}

void unaryVjp(NegOp, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.unary<NegOp>(g));
}

void unaryVjp(ExpOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.mul(g, op.getResult()));
}

void unaryVjp(LogOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.div(g, op.getInput()));
}

/// d sqrt(x) = g / (2 sqrt(x)).
void unaryVjp(SqrtOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.div(r.mul(g, r.scalarLike(0.5, g)), op.getResult()));
}

/// d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3.
void unaryVjp(RsqrtOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value y = op.getResult();
  Value cube = r.mul(r.mul(y, y), y);
  out.push_back(r.mul(r.mul(g, r.scalarLike(-0.5, g)), cube));
}

/// d 1/x = -1/x^2 = -y^2.
void unaryVjp(ReciprocalOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value y = op.getResult();
  out.push_back(r.unary<NegOp>(r.mul(g, r.mul(y, y))));
}

/// d tanh = 1 - y^2.
void unaryVjp(TanhOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value y = op.getResult();
  out.push_back(r.mul(g, r.sub(r.scalarLike(1.0, g), r.mul(y, y))));
}

/// d sigmoid = y (1 - y).
void unaryVjp(SigmoidOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value y = op.getResult();
  out.push_back(r.mul(g, r.mul(y, r.sub(r.scalarLike(1.0, g), y))));
}

/// d relu = 1 where x > 0, else 0 (torch's: 0 at 0).
void unaryVjp(ReluOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getInput();
  auto boolType = Rule::typeOf(x).clone(r.b.getI1Type());
  Value positive = CompareOp::create(r.b, r.loc, boolType, CompareDirection::GT,
                                     x, r.scalarLike(0.0, x));
  out.push_back(WhereOp::create(r.b, r.loc, g.getType(), positive, g,
                                r.scalarLike(0.0, g)));
}

/// d (x sigmoid(x)) = s (1 + x (1 - s)).
void unaryVjp(SiluOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getInput();
  Value s = r.unary<SigmoidOp>(x);
  Value one = r.scalarLike(1.0, x);
  Value d = r.mul(s, r.add(one, r.mul(x, r.sub(one, s))));
  out.push_back(r.mul(g, d));
}

/// Exact: d (x Phi(x)) = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2.
/// Tanh: y = x/2 (1 + tanh(u)), u = c (x + 0.044715 x^3), c = sqrt(2/pi):
/// dy = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 * 0.044715 x^2).
void unaryVjp(GeluOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getInput();
  Value one = r.scalarLike(1.0, x), half = r.scalarLike(0.5, x);
  Value d;
  if (op.getApproximation() == GeluApproximation::Tanh) {
    const double c = std::sqrt(2.0 / M_PI), k = 0.044715;
    Value x2 = r.mul(x, x);
    Value inner = r.mul(r.scalarLike(c, x),
                        r.add(x, r.mul(r.scalarLike(k, x), r.mul(x2, x))));
    Value t = r.unary<TanhOp>(inner);
    Value du = r.mul(r.scalarLike(c, x),
                     r.add(one, r.mul(r.scalarLike(3 * k, x), x2)));
    d = r.add(r.mul(half, r.add(one, t)),
              r.mul(r.mul(half, x), r.mul(r.sub(one, r.mul(t, t)), du)));
  } else {
    Value cdf = r.mul(
        half, r.add(one, r.unary<ErfOp>(r.mul(x, r.scalarLike(M_SQRT1_2, x)))));
    Value pdf =
        r.mul(r.scalarLike(1.0 / std::sqrt(2.0 * M_PI), x),
              r.unary<ExpOp>(r.mul(r.scalarLike(-0.5, x), r.mul(x, x))));
    d = r.add(cdf, r.mul(x, pdf));
  }
  out.push_back(r.mul(g, d));
}

/// A float-to-float cast's cotangent is cast back; others take none.
void unaryVjp(CastOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  RankedTensorType from = Rule::typeOf(op.getInput());
  if (!isa<FloatType>(from.getElementType()) ||
      !isa<FloatType>(Rule::typeOf(op.getResult()).getElementType())) {
    out.push_back(Value());
    return;
  }
  out.push_back(CastOp::create(r.b, r.loc, from, g));
}

void shapeVjp(ReshapeOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.reshape(g, Rule::typeOf(op.getInput()).getShape()));
}

void shapeVjp(TransposeOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  ArrayRef<int64_t> permutation = op.getPermutation();
  SmallVector<int64_t> inverse(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i)
    inverse[permutation[i]] = static_cast<int64_t>(i);
  out.push_back(TransposeOp::create(r.b, r.loc, op.getInput().getType(), g,
                                    r.b.getDenseI64ArrayAttr(inverse)));
}

void shapeVjp(BroadcastToOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(r.sumTo(g, Rule::typeOf(op.getInput())));
}

/// Sum: g broadcast back over the reduced axes; mean: also divided by
/// their element count; max and min: g shared equally by the elements
/// equal to the result (torch's amax and amin; one element without ties).
LogicalResult reduceVjp(ReduceOp op, Rule &r, Value g,
                        SmallVectorImpl<Value> &out) {
  RankedTensorType in = Rule::typeOf(op.getInput());
  if (!isa<FloatType>(in.getElementType())) {
    out.push_back(Value());
    return success();
  }
  SmallVector<int64_t> kept(in.getShape());
  int64_t count = 1;
  for (int64_t axis : op.getAxes()) {
    int64_t a = axis < 0 ? axis + in.getRank() : axis;
    count *= in.getDimSize(a);
    kept[a] = 1;
  }
  Value grad = r.reshape(g, kept);
  if (op.getKind() == ReduceKind::Mean)
    grad = r.mul(grad, r.scalarLike(1.0 / static_cast<double>(count), g));
  if (op.getKind() == ReduceKind::Max || op.getKind() == ReduceKind::Min) {
    Value x = op.getInput();
    Value extreme = r.reshape(op.getResult(), kept);
    Value hit = CompareOp::create(r.b, r.loc, in.clone(r.b.getI1Type()),
                                  CompareDirection::EQ, x, extreme);
    Value ones = CastOp::create(r.b, r.loc, in, hit);
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < in.getRank(); ++d)
      if (kept[d] == 1 && in.getDimSize(d) != 1)
        axes.push_back(d);
    Value ties = r.reduceKeep(ReduceKind::Sum, ones, axes);
    out.push_back(r.mul(r.div(grad, ties), ones));
    return success();
  }
  out.push_back(BroadcastToOp::create(r.b, r.loc, in, grad));
  return success();
}

/// dx = y (g - sum(g y)) over the axis.
void softmaxVjp(SoftmaxOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value y = op.getResult();
  Value dot = r.reduceKeep(ReduceKind::Sum, r.mul(g, y),
                           {static_cast<int64_t>(op.getAxis())});
  out.push_back(r.mul(y, r.sub(g, dot)));
}

/// dx = g - exp(y) sum(g) over the axis.
void softmaxVjp(LogSoftmaxOp op, Rule &r, Value g,
                SmallVectorImpl<Value> &out) {
  Value y = op.getResult();
  Value total =
      r.reduceKeep(ReduceKind::Sum, g, {static_cast<int64_t>(op.getAxis())});
  out.push_back(r.sub(g, r.mul(r.unary<ExpOp>(y), total)));
}

/// Layer norm over A = [axis, rank), x^ = (x - mean) rstd: with gs = g scale,
/// dx = rstd (gs - mean(gs) - x^ mean(gs x^)), d scale = sum g x^, d bias =
/// sum g (the means over A, the sums over the leading dimensions). The
/// statistics are recomputed from x.
void normVjp(LayerNormOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getInput();
  SmallVector<int64_t> axes = Rule::trailing(x, op.getAxis());
  Value centered = r.sub(x, r.reduceKeep(ReduceKind::Mean, x, axes));
  Value variance =
      r.reduceKeep(ReduceKind::Mean, r.mul(centered, centered), axes);
  Value rstd = r.unary<RsqrtOp>(
      r.add(variance, r.scalarLike(op.getEpsilon().convertToDouble(), x)));
  Value normalized = r.mul(centered, rstd);
  Value gs = op.getScale() ? r.mul(g, op.getScale()) : g;
  Value inner =
      r.sub(r.sub(gs, r.reduceKeep(ReduceKind::Mean, gs, axes)),
            r.mul(normalized,
                  r.reduceKeep(ReduceKind::Mean, r.mul(gs, normalized), axes)));
  out.push_back(r.mul(rstd, inner));
  if (Value scale = op.getScale())
    out.push_back(r.sumTo(r.mul(g, normalized), Rule::typeOf(scale)));
  if (Value bias = op.getBias())
    out.push_back(r.sumTo(g, Rule::typeOf(bias)));
}

/// RMS norm, x^ = x r, r = rsqrt(mean(x^2) + eps): dx = r (gs - x^
/// mean(gs x^)), d scale = sum g x^.
void normVjp(RmsNormOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value x = op.getInput();
  SmallVector<int64_t> axes = Rule::trailing(x, op.getAxis());
  Value rms = r.unary<RsqrtOp>(
      r.add(r.reduceKeep(ReduceKind::Mean, r.mul(x, x), axes),
            r.scalarLike(op.getEpsilon().convertToDouble(), x)));
  Value normalized = r.mul(x, rms);
  Value gs = op.getScale() ? r.mul(g, op.getScale()) : g;
  Value inner =
      r.sub(gs, r.mul(normalized, r.reduceKeep(ReduceKind::Mean,
                                               r.mul(gs, normalized), axes)));
  out.push_back(r.mul(rms, inner));
  if (Value scale = op.getScale())
    out.push_back(r.sumTo(r.mul(g, normalized), Rule::typeOf(scale)));
}

/// The adjoint of a running sum is the running sum the other way: the
/// same exclusiveness, the direction reversed.
void scanVjp(CumsumOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(
      CumsumOp::create(r.b, r.loc, g.getType(), g, op.getAxisAttr(),
                       op.getExclusive() ? r.b.getUnitAttr() : UnitAttr(),
                       op.getReverse() ? UnitAttr() : r.b.getUnitAttr()));
}

/// Each pair is rotated by [[c, -s], [s, c]], whose adjoint rotates by -s:
/// the input's cotangent is rope(g, cos, -sin). The tables (gathered at
/// positions, computed from constants) take none: the pass refuses them
/// should one depend on a parameter.
void ropeVjp(RopeOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  out.push_back(RopeOp::create(
      r.b, r.loc, g.getType(), g, op.getCos(), r.unary<NegOp>(op.getSin()),
      op.getInterleaved() ? r.b.getUnitAttr() : UnitAttr()));
  out.push_back(Value());
  out.push_back(Value());
}

/// A unit-stride slice's input cotangent is g padded back with zeros, one
/// concatenation per dimension it cut; a strided one has no rule yet.
LogicalResult sliceVjp(SliceOp op, Rule &r, Value g,
                       SmallVectorImpl<Value> &out) {
  if (!Rule::isFloatTensor(op.getInput())) {
    out.push_back(Value());
    return success();
  }
  RankedTensorType in = Rule::typeOf(op.getInput());
  Value grad = g;
  SmallVector<int64_t> shape(Rule::typeOf(g).getShape());
  auto zeros = [&](int64_t d, int64_t size) {
    SmallVector<int64_t> piece(shape);
    piece[d] = size;
    return r.zeros(in.clone(piece));
  };
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t start = op.getStart()[d], stride = op.getStride()[d];
    int64_t taken = shape[d];
    if (stride != 1) {
      // Element i of g goes to position i * stride of a run of
      // taken * stride: each followed by stride - 1 zeros, ([taken, 1]
      // beside [taken, stride - 1], flattened), cut where the input ends.
      SmallVector<int64_t> split(shape);
      split.insert(split.begin() + d + 1, 1);
      Value column = ReshapeOp::create(r.b, r.loc, in.clone(split), grad);
      split[d + 1] = stride - 1;
      Value gaps = r.zeros(in.clone(split));
      split[d + 1] = stride;
      Value spread = ConcatOp::create(r.b, r.loc, in.clone(split),
                                      ValueRange{column, gaps},
                                      static_cast<uint64_t>(d + 1));
      shape[d] = taken * stride;
      grad = ReshapeOp::create(r.b, r.loc, in.clone(shape), spread);
      int64_t kept = std::min(shape[d], in.getDimSize(d) - start);
      if (kept < shape[d]) {
        SmallVector<int64_t> from(shape.size(), 0), to(shape),
            step(shape.size(), 1);
        to[d] = kept;
        shape[d] = kept;
        grad =
            SliceOp::create(r.b, r.loc, in.clone(shape), grad, from, to, step);
      }
    }
    int64_t after = in.getDimSize(d) - start - shape[d];
    if (start == 0 && after == 0)
      continue;
    SmallVector<Value> pieces;
    if (start)
      pieces.push_back(zeros(d, start));
    pieces.push_back(grad);
    if (after)
      pieces.push_back(zeros(d, after));
    shape[d] = in.getDimSize(d);
    grad = ConcatOp::create(r.b, r.loc, in.clone(shape), pieces,
                            static_cast<uint64_t>(d));
  }
  out.push_back(grad);
  return success();
}

/// Each input's cotangent is its block of g along the axis.
void concatVjp(ConcatOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  int64_t axis = op.getAxis(), offset = 0;
  RankedTensorType type = Rule::typeOf(g);
  for (Value input : op.getInputs()) {
    RankedTensorType in = Rule::typeOf(input);
    int64_t size = in.getDimSize(axis);
    if (!Rule::isFloatTensor(input)) {
      out.push_back(Value());
      offset += size;
      continue;
    }
    SmallVector<int64_t> start(type.getRank(), 0), limit(type.getShape()),
        stride(type.getRank(), 1);
    start[axis] = offset;
    limit[axis] = offset + size;
    out.push_back(SliceOp::create(r.b, r.loc, in, g, start, limit, stride));
    offset += size;
  }
}

/// The pieces' cotangents put back together (zeros for a piece that has
/// none).
LogicalResult splitVjp(SplitOp op, Rule &r, ArrayRef<Value> grads,
                       SmallVectorImpl<Value> &out) {
  if (!Rule::isFloatTensor(op.getInput()) ||
      llvm::none_of(grads, [](Value g) { return static_cast<bool>(g); })) {
    out.push_back(Value());
    return success();
  }
  SmallVector<Value> pieces;
  for (auto [result, g] : llvm::zip(op.getResults(), grads))
    pieces.push_back(g ? g : r.zeros(Rule::typeOf(result)));
  out.push_back(ConcatOp::create(r.b, r.loc, op.getInput().getType(), pieces,
                                 static_cast<uint64_t>(op.getAxis())));
  return success();
}

/// g scattered back into `data`'s shape along `axis` at `indices` (ONNX
/// Gather's: negative ones count from the end), summing where an index
/// repeats: with data [P, D, Q] and N indices, g [P, N, Q] becomes
/// [P, Q, N] x onehot [N, D], then [P, D, Q]. The one-hot, against the row
/// index, shards with the rows as a tp-split table does; it holds N x D
/// elements, which a scatter-add kernel is to replace.
Value scatterBack(Rule &r, RankedTensorType data, Value indices, int64_t axis,
                  Value g) {
  RankedTensorType indexType = Rule::typeOf(indices);
  int64_t before = 1, after = 1, rows = data.getDimSize(axis);
  for (int64_t d = 0; d < axis; ++d)
    before *= data.getDimSize(d);
  for (int64_t d = axis + 1; d < data.getRank(); ++d)
    after *= data.getDimSize(d);
  int64_t count = indexType.getNumElements();
  auto i64 = r.b.getI64Type();
  Value ids = indices;
  if (!indexType.getElementType().isInteger(64))
    ids = CastOp::create(r.b, r.loc, indexType.clone(i64), ids);
  ids = r.reshape(ids, {count, 1});
  auto column = RankedTensorType::get({count, 1}, i64);
  Value negative =
      CompareOp::create(r.b, r.loc, column.clone(r.b.getI1Type()),
                        CompareDirection::LT, ids, r.scalar(0, i64));
  Value wrapped = AddOp::create(r.b, r.loc, column, ids, r.scalar(rows, i64));
  ids = WhereOp::create(r.b, r.loc, column, negative, wrapped, ids);
  SmallVector<int64_t> rowIndex(rows);
  std::iota(rowIndex.begin(), rowIndex.end(), 0);
  Value rowIds = ConstantOp::create(
      r.b, r.loc,
      getIndexConstant(r.b.getContext(), {rows}, rowIndex, "scatter_rows"));
  Type element = data.getElementType();
  Value oneHot = CastOp::create(
      r.b, r.loc, RankedTensorType::get({count, rows}, element),
      CompareOp::create(r.b, r.loc,
                        RankedTensorType::get({count, rows}, r.b.getI1Type()),
                        CompareDirection::EQ, ids, rowIds));
  Value pnq = r.reshape(g, {before, count, after});
  Value pqn = TransposeOp::create(
      r.b, r.loc, RankedTensorType::get({before, after, count}, element), pnq,
      r.b.getDenseI64ArrayAttr({0, 2, 1}));
  Value pqd = r.matmul(pqn, oneHot);
  Value pdq = TransposeOp::create(
      r.b, r.loc, RankedTensorType::get({before, rows, after}, element), pqd,
      r.b.getDenseI64ArrayAttr({0, 2, 1}));
  return r.reshape(pdq, data.getShape());
}

/// The data's cotangent is g scattered back along the axis; the indices
/// take none.
void gatherVjp(GatherOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  if (!Rule::isFloatTensor(op.getData())) {
    out.append(2, Value());
    return;
  }
  out.push_back(scatterBack(r, Rule::typeOf(op.getData()), op.getIndices(),
                            op.getAxis(), g));
  out.push_back(Value());
}

/// The table's cotangent is g's rows added at the indices (a gather along
/// rows); the indices take none.
void embeddingVjp(EmbeddingOp op, Rule &r, Value g,
                  SmallVectorImpl<Value> &out) {
  out.push_back(
      scatterBack(r, Rule::typeOf(op.getTable()), op.getIndices(), 0, g));
  out.push_back(Value());
}

/// d lhs = g rhs^T, d rhs = lhs^T g, each summed over the batch dimensions
/// it was broadcast along; d bias = g summed to [n].
void matmulVjp(MatmulOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value lhs = op.getLhs(), rhs = op.getRhs();
  out.push_back(r.sumTo(r.matmul(g, r.transposeLast(rhs)), Rule::typeOf(lhs)));
  out.push_back(r.sumTo(r.matmul(r.transposeLast(lhs), g), Rule::typeOf(rhs)));
  if (Value bias = op.getBias())
    out.push_back(r.sumTo(g, Rule::typeOf(bias)));
}

/// The flash-attention backward, one op (nn.attention_grad) that
/// recomputes the probabilities from q and k; it reads the forward's
/// result for D = sum(dout * out). The mask takes none: the pass refuses
/// one that depends on a parameter.
void attentionVjp(AttentionOp op, Rule &r, Value g,
                  SmallVectorImpl<Value> &out) {
  auto grad = AttentionGradOp::create(
      r.b, r.loc,
      TypeRange{op.getQuery().getType(), op.getKey().getType(),
                op.getValue().getType()},
      op.getQuery(), op.getKey(), op.getValue(), op.getMask(), op.getResult(),
      g, op.getCausalAttr(), op.getScaleAttr(), op.getSoftcapAttr(),
      op.getWindowAttr());
  out.append(grad.getResults().begin(), grad.getResults().end());
  if (op.getMask())
    out.push_back(Value());
}

/// The where's condition takes none; each side g where it was chosen.
void whereVjp(WhereOp op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  Value zero = r.scalarLike(0.0, g);
  out.push_back(Value());
  if (!isa<FloatType>(Rule::typeOf(op.getOnTrue()).getElementType())) {
    out.push_back(Value());
    out.push_back(Value());
    return;
  }
  Value c = op.getCondition();
  out.push_back(r.sumTo(WhereOp::create(r.b, r.loc, g.getType(), c, g, zero),
                        Rule::typeOf(op.getOnTrue())));
  out.push_back(r.sumTo(WhereOp::create(r.b, r.loc, g.getType(), c, zero, g),
                        Rule::typeOf(op.getOnFalse())));
}

/// Dispatches to the op's rule: one result, whose cotangent is non-null
/// (the pass calls a rule only for an op with one).
template <typename OpTy>
LogicalResult callRule(OpTy op, Rule &r, Value g, SmallVectorImpl<Value> &out) {
  if constexpr (std::is_same_v<OpTy, ReduceOp>)
    return reduceVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, SliceOp>)
    return sliceVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, ConcatOp>)
    concatVjp(op, r, g, out);
  else if constexpr (llvm::is_one_of<OpTy, AddOp, SubOp, MulOp, DivOp, PowOp,
                                     MaxOp, MinOp>::value)
    elementwiseVjp(op, r, g, out);
  else if constexpr (llvm::is_one_of<OpTy, ReshapeOp, TransposeOp,
                                     BroadcastToOp>::value)
    shapeVjp(op, r, g, out);
  else if constexpr (llvm::is_one_of<OpTy, SoftmaxOp, LogSoftmaxOp>::value)
    softmaxVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, MatmulOp>)
    matmulVjp(op, r, g, out);
  else if constexpr (llvm::is_one_of<OpTy, LayerNormOp, RmsNormOp>::value)
    normVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, CumsumOp>)
    scanVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, RopeOp>)
    ropeVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, EmbeddingOp>)
    embeddingVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, GatherOp>)
    gatherVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, WhereOp>)
    whereVjp(op, r, g, out);
  else if constexpr (std::is_same_v<OpTy, AttentionOp>)
    attentionVjp(op, r, g, out);
  else
    unaryVjp(op, r, g, out);
  return success();
}

template <typename OpTy>
struct VjpModel
    : public DifferentiableOpInterface::ExternalModel<VjpModel<OpTy>, OpTy> {
  LogicalResult buildVjp(Operation *op, OpBuilder &builder,
                         ArrayRef<Value> resultGrads,
                         SmallVectorImpl<Value> &operandGrads) const {
    Rule rule(builder, op);
    if constexpr (std::is_same_v<OpTy, SplitOp>) {
      return splitVjp(cast<SplitOp>(op), rule, resultGrads, operandGrads);
    } else {
      Value g = resultGrads.front();
      if (!g) { // No cotangent: none for the operands either.
        operandGrads.append(op->getNumOperands(), Value());
        return success();
      }
      size_t before = operandGrads.size();
      if (failed(callRule(cast<OpTy>(op), rule, g, operandGrads)))
        return failure();
      assert(operandGrads.size() - before == op->getNumOperands() &&
             "a rule gives one cotangent (or null) per operand");
      (void)before;
      return success();
    }
  }
};

/// nn.constant: no operands, nothing to give.
struct ConstantVjp
    : public DifferentiableOpInterface::ExternalModel<ConstantVjp, ConstantOp> {
  LogicalResult buildVjp(Operation *, OpBuilder &, ArrayRef<Value>,
                         SmallVectorImpl<Value> &) const {
    return success();
  }
};

template <typename... Ops> void attach(MLIRContext *context) {
  (Ops::template attachInterface<VjpModel<Ops>>(*context), ...);
}

} // namespace

void mlir::partita::nn::registerDerivatives(MLIRContext *context) {
  attach<AddOp, SubOp, MulOp, DivOp, NegOp, ExpOp, LogOp, SqrtOp, RsqrtOp,
         ReciprocalOp, TanhOp, SigmoidOp, ReluOp, SiluOp, GeluOp, CastOp,
         ReshapeOp, TransposeOp, BroadcastToOp, ReduceOp, SoftmaxOp,
         LogSoftmaxOp, MatmulOp, WhereOp, LayerNormOp, RmsNormOp, CumsumOp,
         RopeOp, EmbeddingOp, SliceOp, ConcatOp, SplitOp, GatherOp, PowOp,
         MaxOp, MinOp, AbsOp, ErfOp, SinOp, CosOp, AttentionOp>(context);
  ConstantOp::attachInterface<ConstantVjp>(*context);
}
