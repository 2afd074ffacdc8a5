//===- NNInterpreter.cpp - nn functions evaluated in double ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "NNInterpreter.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::test;

namespace {

using Shape = std::vector<int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();

Shape shapeOf(Value v) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
  return Shape(shape.begin(), shape.end());
}

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// The product of shape[from, to).
int64_t product(ArrayRef<int64_t> shape, size_t from = 0,
                size_t to = std::numeric_limits<size_t>::max()) {
  int64_t n = 1;
  for (size_t d = from; d < std::min(to, shape.size()); ++d)
    n *= shape[d];
  return n;
}

/// Index `linear` of a row-major tensor of `shape`, as coordinates.
void unravel(int64_t linear, ArrayRef<int64_t> shape, Shape &index) {
  index.assign(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = linear % shape[d];
    linear /= shape[d];
  }
}

/// The row-major offset of `index` in `shape`.
int64_t offsetOf(ArrayRef<int64_t> index, ArrayRef<int64_t> shape) {
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    offset = offset * shape[d] + index[d];
  return offset;
}

/// The element of a tensor of `shape` that numpy broadcasting (shapes
/// aligned at their last dimension, a dimension of 1 repeated) puts at
/// `index` of the broadcast shape.
int64_t broadcastOffset(ArrayRef<int64_t> index, ArrayRef<int64_t> shape) {
  size_t lead = index.size() - shape.size();
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    offset = offset * shape[d] + (shape[d] == 1 ? 0 : index[lead + d]);
  return offset;
}

/// `x` as an element of type `element`. Floats stay as they are, whatever
/// their width: the fp64 check is of the rules' algebra, and the rounding
/// of an f16 or bf16 cast is the f32 check's business. Integers round
/// toward zero (C++'s conversion, and integer division's), bools are
/// x != 0.
double toElement(double x, Type element) {
  if (isa<FloatType>(element))
    return x;
  if (element.isInteger(1))
    return x != 0 ? 1.0 : 0.0;
  return std::trunc(x);
}

/// The operands of attention or attention_grad, and the shape they make.
struct AttentionInputs {
  const DoubleTensor *q, *k, *v, *mask;
  bool boolMask, causal;
  double scale;
  /// 0 without one: the scores are then not capped.
  double softcap = 0;
  /// With causal: a row sees only the keys less than `window` before its
  /// last one; 0 without one.
  int64_t window = 0;
  int64_t batch, qHeads, kvHeads, sq, skv, d, dv;

  int64_t qAt(int64_t b, int64_t h, int64_t i) const {
    return ((b * qHeads + h) * sq + i) * d;
  }
  int64_t kAt(int64_t b, int64_t hk, int64_t j) const {
    return ((b * kvHeads + hk) * skv + j) * d;
  }
  int64_t vAt(int64_t b, int64_t hk, int64_t j) const {
    return ((b * kvHeads + hk) * skv + j) * dv;
  }
  /// Where row i of query head h of batch b starts in the result (and in
  /// attention_grad's out and dout).
  int64_t outAt(int64_t b, int64_t h, int64_t i) const {
    return ((b * qHeads + h) * sq + i) * dv;
  }
  int64_t kvHeadOf(int64_t h) const { return h / (qHeads / kvHeads); }
  /// A scaled score, capped as softcap * tanh(x / softcap).
  double capped(double x) const {
    return softcap > 0 ? softcap * std::tanh(x / softcap) : x;
  }
  /// The slope of capped() at x.
  double capSlope(double x) const {
    if (softcap <= 0)
      return 1;
    double t = std::tanh(x / softcap);
    return 1 - t * t;
  }
  double dot(int64_t b, int64_t h, int64_t i, int64_t j) const {
    double sum = 0;
    for (int64_t t = 0; t < d; ++t)
      sum +=
          q->values[qAt(b, h, i) + t] * k->values[kAt(b, kvHeadOf(h), j) + t];
    return sum;
  }

  /// The attention probabilities of query row i of head h of batch b over
  /// the keys: softmax(q k^T * scale + mask), the keys after
  /// i + (skv - sq) left out when causal (the rows aligned at the last
  /// key) and those a bool mask holds false. A row that sees no key has
  /// all zeros, as attention gives such a row zeros.
  void probabilities(int64_t b, int64_t h, int64_t i,
                     std::vector<double> &p) const {
    int64_t hk = kvHeadOf(h);
    p.assign(skv, 0.0);
    std::vector<double> scores(skv, -kInf);
    double top = -kInf;
    for (int64_t j = 0; j < skv; ++j) {
      if (causal &&
          (j > i + (skv - sq) || (window > 0 && i + (skv - sq) - j >= window)))
        continue;
      double dot = 0;
      for (int64_t t = 0; t < d; ++t)
        dot += q->values[qAt(b, h, i) + t] * k->values[kAt(b, hk, j) + t];
      double score = capped(dot * scale);
      if (mask) {
        double m = mask->values[broadcastOffset({b, h, i, j}, mask->shape)];
        if (boolMask && m == 0)
          continue;
        if (!boolMask)
          score += m;
      }
      scores[j] = score;
      top = std::max(top, score);
    }
    if (top == -kInf)
      return;
    double sum = 0;
    for (int64_t j = 0; j < skv; ++j)
      sum += p[j] = scores[j] == -kInf ? 0.0 : std::exp(scores[j] - top);
    for (double &x : p)
      x /= sum;
  }
};

class Interpreter {
public:
  /// Binds `value` to `tensor`, which must have its type's shape.
  llvm::Error bind(Value value, DoubleTensor tensor) {
    if (tensor.shape != shapeOf(value) ||
        static_cast<int64_t>(tensor.values.size()) != product(tensor.shape))
      return llvm::createStringError("a value of type " + typeString(value) +
                                     " is bound to a tensor of another shape");
    values[value] = std::move(tensor);
    return llvm::Error::success();
  }

  const DoubleTensor &get(Value value) const {
    auto it = values.find(value);
    assert(it != values.end() && "operands are evaluated before their users");
    return it->second;
  }

  llvm::Error evaluate(Operation *op);

private:
  static std::string typeString(Value value) {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << value.getType();
    return s;
  }

  static llvm::Error fail(Operation *op, const Twine &why) {
    return llvm::createStringError(op->getName().getStringRef().str() + ": " +
                                   why.str());
  }

  /// A zero tensor of `value`'s shape.
  static DoubleTensor zerosLike(Value value) {
    DoubleTensor t;
    t.shape = shapeOf(value);
    t.values.assign(product(t.shape), 0.0);
    return t;
  }

  /// The op's one result, each element `fn` of the operands' elements
  /// there (broadcast numpy-style), as the result's element type.
  llvm::Error elementwise(Operation *op,
                          llvm::function_ref<double(ArrayRef<double>)> fn) {
    Value result = op->getResult(0);
    DoubleTensor r = zerosLike(result);
    Type element = elementOf(result);
    SmallVector<const DoubleTensor *> operands;
    for (Value operand : op->getOperands())
      operands.push_back(&get(operand));
    Shape index;
    SmallVector<double> args(operands.size());
    for (int64_t i = 0; i < static_cast<int64_t>(r.values.size()); ++i) {
      unravel(i, r.shape, index);
      for (size_t o = 0; o < operands.size(); ++o)
        args[o] =
            operands[o]->values[broadcastOffset(index, operands[o]->shape)];
      r.values[i] = toElement(fn(args), element);
    }
    return bind(result, std::move(r));
  }

  llvm::Error constant(nn::ConstantOp op);
  llvm::Error reduce(nn::ReduceOp op);
  llvm::Error cumsum(nn::CumsumOp op);
  template <typename OpTy> llvm::Error softmax(OpTy op, bool logarithm);
  llvm::Error layerNorm(Operation *op, Value input, Value scale, Value bias,
                        int64_t axis, double epsilon, bool centered);
  llvm::Error matmul(nn::MatmulOp op);
  llvm::Error attentionInputs(Operation *op, Value q, Value k, Value v,
                              Value mask, bool causal,
                              std::optional<APFloat> scale, AttentionInputs &a);
  llvm::Error attention(nn::AttentionOp op);
  llvm::Error attentionGrad(nn::AttentionGradOp op);
  llvm::Error rope(nn::RopeOp op);
  llvm::Error gather(Operation *op, Value data, Value indices, int64_t axis,
                     bool wrapNegative);
  llvm::Error transpose(nn::TransposeOp op);
  llvm::Error slice(nn::SliceOp op);
  llvm::Error concat(nn::ConcatOp op);
  llvm::Error split(nn::SplitOp op);

  llvm::DenseMap<Value, DoubleTensor> values;
};

llvm::Error Interpreter::constant(nn::ConstantOp op) {
  DoubleTensor r = zerosLike(op.getResult());
  Type element = elementOf(op.getResult());
  ElementsAttr value = op.getValue();
  if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    size_t i = 0;
    if (isa<FloatType>(element)) {
      for (const APFloat &x : dense.getValues<APFloat>())
        r.values[i++] = x.convertToDouble();
    } else if (element.isInteger(1)) {
      for (bool x : dense.getValues<bool>())
        r.values[i++] = x ? 1.0 : 0.0;
    } else {
      for (const APInt &x : dense.getValues<APInt>())
        r.values[i++] = static_cast<double>(x.getSExtValue());
    }
    return bind(op.getResult(), std::move(r));
  }
  // A blob or a weight view: a case keeps its constants inline (up to
  // nn.constant's inline limit, which the rules' index tables stay under).
  return fail(op, "a value other than an inline dense one");
}

llvm::Error Interpreter::reduce(nn::ReduceOp op) {
  const DoubleTensor &x = get(op.getInput());
  int64_t rank = static_cast<int64_t>(x.shape.size()), count = 1;
  // The input's shape with the reduced dimensions 1: the result's element
  // order, with or without keepdims.
  Shape kept = x.shape;
  for (int64_t axis : op.getAxes()) {
    if (axis < 0 || axis >= rank)
      return fail(op, "an axis out of range");
    kept[axis] = 1;
    count *= x.shape[axis];
  }
  DoubleTensor r = zerosLike(op.getResult());
  if (product(kept) != static_cast<int64_t>(r.values.size()))
    return fail(op, "a result of the wrong size");
  nn::ReduceKind kind = op.getKind();
  double start = kind == nn::ReduceKind::Max   ? -kInf
                 : kind == nn::ReduceKind::Min ? kInf
                                               : 0.0;
  r.values.assign(r.values.size(), start);
  Shape index;
  for (int64_t i = 0; i < static_cast<int64_t>(x.values.size()); ++i) {
    unravel(i, x.shape, index);
    for (int64_t d = 0; d < rank; ++d)
      if (kept[d] == 1)
        index[d] = 0;
    double &acc = r.values[offsetOf(index, kept)];
    double v = x.values[i];
    switch (kind) {
    case nn::ReduceKind::Sum:
    case nn::ReduceKind::Mean:
      acc += v;
      break;
    case nn::ReduceKind::Max:
      acc = std::max(acc, v);
      break;
    case nn::ReduceKind::Min:
      acc = std::min(acc, v);
      break;
    }
  }
  Type element = elementOf(op.getResult());
  for (double &v : r.values)
    v = toElement(kind == nn::ReduceKind::Mean ? v / count : v, element);
  return bind(op.getResult(), std::move(r));
}

llvm::Error Interpreter::cumsum(nn::CumsumOp op) {
  const DoubleTensor &x = get(op.getInput());
  int64_t axis = static_cast<int64_t>(op.getAxis());
  int64_t outer = product(x.shape, 0, axis), n = x.shape[axis],
          inner = product(x.shape, axis + 1);
  DoubleTensor r = zerosLike(op.getResult());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      double acc = 0;
      for (int64_t step = 0; step < n; ++step) {
        int64_t at =
            (o * n + (op.getReverse() ? n - 1 - step : step)) * inner + c;
        if (op.getExclusive()) {
          r.values[at] = acc;
          acc += x.values[at];
        } else {
          acc += x.values[at];
          r.values[at] = acc;
        }
      }
    }
  return bind(op.getResult(), std::move(r));
}

template <typename OpTy>
llvm::Error Interpreter::softmax(OpTy op, bool logarithm) {
  const DoubleTensor &x = get(op.getInput());
  int64_t axis = static_cast<int64_t>(op.getAxis());
  int64_t outer = product(x.shape, 0, axis), n = x.shape[axis],
          inner = product(x.shape, axis + 1);
  DoubleTensor r = zerosLike(op.getResult());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + c; };
      double top = -kInf, sum = 0;
      for (int64_t j = 0; j < n; ++j)
        top = std::max(top, x.values[at(j)]);
      for (int64_t j = 0; j < n; ++j)
        sum += std::exp(x.values[at(j)] - top);
      for (int64_t j = 0; j < n; ++j)
        r.values[at(j)] = logarithm ? x.values[at(j)] - top - std::log(sum)
                                    : std::exp(x.values[at(j)] - top) / sum;
    }
  return bind(op.getResult(), std::move(r));
}

/// Layer norm (`centered`) or RMS norm of the dimensions [axis, rank).
llvm::Error Interpreter::layerNorm(Operation *op, Value input, Value scale,
                                   Value bias, int64_t axis, double epsilon,
                                   bool centered) {
  const DoubleTensor &x = get(input);
  const DoubleTensor *g = scale ? &get(scale) : nullptr;
  const DoubleTensor *b = bias ? &get(bias) : nullptr;
  int64_t rows = product(x.shape, 0, axis), n = product(x.shape, axis);
  if ((g && g->values.size() != size_t(n)) ||
      (b && b->values.size() != size_t(n)))
    return fail(op, "a scale or bias of the wrong size");
  DoubleTensor r = zerosLike(op->getResult(0));
  for (int64_t row = 0; row < rows; ++row) {
    const double *xr = x.values.data() + row * n;
    double mean = 0, squares = 0;
    if (centered) {
      for (int64_t j = 0; j < n; ++j)
        mean += xr[j];
      mean /= n;
    }
    for (int64_t j = 0; j < n; ++j)
      squares += (xr[j] - mean) * (xr[j] - mean);
    double rstd = 1.0 / std::sqrt(squares / n + epsilon);
    for (int64_t j = 0; j < n; ++j)
      r.values[row * n + j] = (xr[j] - mean) * rstd * (g ? g->values[j] : 1.0) +
                              (b ? b->values[j] : 0.0);
  }
  return bind(op->getResult(0), std::move(r));
}

llvm::Error Interpreter::matmul(nn::MatmulOp op) {
  const DoubleTensor &lhs = get(op.getLhs()), &rhs = get(op.getRhs());
  const DoubleTensor *bias = op.getBias() ? &get(op.getBias()) : nullptr;
  size_t lr = lhs.shape.size(), rr = rhs.shape.size();
  int64_t m = lhs.shape[lr - 2], k = lhs.shape[lr - 1], n = rhs.shape[rr - 1];
  if (rhs.shape[rr - 2] != k || (bias && bias->values.size() != size_t(n)))
    return fail(op, "operands whose sizes do not agree");
  DoubleTensor r = zerosLike(op.getResult());
  ArrayRef<int64_t> batch = ArrayRef<int64_t>(r.shape).drop_back(2);
  ArrayRef<int64_t> lhsBatch = ArrayRef<int64_t>(lhs.shape).drop_back(2);
  ArrayRef<int64_t> rhsBatch = ArrayRef<int64_t>(rhs.shape).drop_back(2);
  Shape index;
  for (int64_t bi = 0; bi < product(batch); ++bi) {
    unravel(bi, batch, index);
    const double *l =
        lhs.values.data() + broadcastOffset(index, lhsBatch) * m * k;
    const double *rt =
        rhs.values.data() + broadcastOffset(index, rhsBatch) * k * n;
    double *y = r.values.data() + bi * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = bias ? bias->values[j] : 0.0;
        for (int64_t t = 0; t < k; ++t)
          sum += l[i * k + t] * rt[t * n + j];
        y[i * n + j] = sum;
      }
  }
  return bind(op.getResult(), std::move(r));
}

llvm::Error Interpreter::attentionInputs(Operation *op, Value q, Value k,
                                         Value v, Value mask, bool causal,
                                         std::optional<APFloat> scale,
                                         AttentionInputs &a) {
  if (auto softcap = op->getAttrOfType<FloatAttr>("softcap"))
    a.softcap = softcap.getValueAsDouble();
  if (auto window = op->getAttrOfType<IntegerAttr>("window"))
    a.window = window.getInt();
  a.q = &get(q);
  a.k = &get(k);
  a.v = &get(v);
  a.mask = mask ? &get(mask) : nullptr;
  a.boolMask = mask && elementOf(mask).isInteger(1);
  a.causal = causal;
  a.batch = a.q->shape[0];
  a.qHeads = a.q->shape[1];
  a.sq = a.q->shape[2];
  a.d = a.q->shape[3];
  a.kvHeads = a.k->shape[1];
  a.skv = a.k->shape[2];
  a.dv = a.v->shape[3];
  if (a.kvHeads == 0 || a.qHeads % a.kvHeads != 0 || a.k->shape[3] != a.d ||
      a.v->shape[2] != a.skv || a.v->shape[1] != a.kvHeads)
    return fail(op, "q, k and v of shapes that do not agree");
  if (a.mask && a.mask->shape.size() > 4)
    return fail(op, "a mask of rank above 4");
  // The attribute is an f32: the rule copies it, so both sides use its
  // value as it is.
  a.scale = scale ? scale->convertToDouble()
                  : 1.0 / std::sqrt(static_cast<double>(a.d));
  return llvm::Error::success();
}

llvm::Error Interpreter::attention(nn::AttentionOp op) {
  AttentionInputs a;
  if (llvm::Error e =
          attentionInputs(op, op.getQuery(), op.getKey(), op.getValue(),
                          op.getMask(), op.getCausal(), op.getScale(), a))
    return e;
  DoubleTensor r = zerosLike(op.getResult());
  std::vector<double> p;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.qHeads; ++h)
      for (int64_t i = 0; i < a.sq; ++i) {
        a.probabilities(b, h, i, p);
        for (int64_t j = 0; j < a.skv; ++j)
          for (int64_t c = 0; c < a.dv; ++c)
            r.values[a.outAt(b, h, i) + c] +=
                p[j] * a.v->values[a.vAt(b, a.kvHeadOf(h), j) + c];
      }
  return bind(op.getResult(), std::move(r));
}

/// With P the probabilities of a row, D = dout . out, dP_j = dout . v_j and
/// dS = P (dP - D): dq = scale dS k, dk = scale dS^T q and dv = P^T dout,
/// dk and dv summed over the query heads of each kv head.
llvm::Error Interpreter::attentionGrad(nn::AttentionGradOp op) {
  AttentionInputs a;
  if (llvm::Error e =
          attentionInputs(op, op.getQuery(), op.getKey(), op.getValue(),
                          op.getMask(), op.getCausal(), op.getScale(), a))
    return e;
  const DoubleTensor &out = get(op.getOut()), &dout = get(op.getDout());
  DoubleTensor dq = zerosLike(op.getDq()), dk = zerosLike(op.getDk()),
               dv = zerosLike(op.getDv());
  std::vector<double> p;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.qHeads; ++h)
      for (int64_t i = 0; i < a.sq; ++i) {
        int64_t hk = a.kvHeadOf(h), row = a.outAt(b, h, i);
        a.probabilities(b, h, i, p);
        double rowD = 0;
        for (int64_t c = 0; c < a.dv; ++c)
          rowD += dout.values[row + c] * out.values[row + c];
        for (int64_t j = 0; j < a.skv; ++j) {
          double dp = 0;
          for (int64_t c = 0; c < a.dv; ++c)
            dp += dout.values[row + c] * a.v->values[a.vAt(b, hk, j) + c];
          double ds =
              p[j] * (dp - rowD) * a.capSlope(a.dot(b, h, i, j) * a.scale);
          for (int64_t t = 0; t < a.d; ++t) {
            dq.values[a.qAt(b, h, i) + t] +=
                a.scale * ds * a.k->values[a.kAt(b, hk, j) + t];
            dk.values[a.kAt(b, hk, j) + t] +=
                a.scale * ds * a.q->values[a.qAt(b, h, i) + t];
          }
          for (int64_t c = 0; c < a.dv; ++c)
            dv.values[a.vAt(b, hk, j) + c] += p[j] * dout.values[row + c];
        }
      }
  if (llvm::Error e = bind(op.getDq(), std::move(dq)))
    return e;
  if (llvm::Error e = bind(op.getDk(), std::move(dk)))
    return e;
  return bind(op.getDv(), std::move(dv));
}

/// Pairs of features rotated by the tables' angles: (i, i + r/2) or, when
/// interleaved, (2i, 2i + 1); the features from r on pass through.
llvm::Error Interpreter::rope(nn::RopeOp op) {
  const DoubleTensor &x = get(op.getInput()), &cos = get(op.getCos()),
                     &sin = get(op.getSin());
  int64_t batch = x.shape[0], heads = x.shape[1], seq = x.shape[2],
          d = x.shape[3], half = cos.shape[2];
  bool perBatch = cos.shape[0] != 1;
  if (cos.shape[1] != seq || 2 * half > d || sin.shape != cos.shape ||
      (perBatch && cos.shape[0] != batch))
    return fail(op, "tables of a shape that does not fit the input");
  DoubleTensor r = zerosLike(op.getResult());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s) {
        int64_t at = ((b * heads + h) * seq + s) * d;
        int64_t table = ((perBatch ? b : 0) * seq + s) * half;
        for (int64_t i = 0; i < half; ++i) {
          int64_t i1 = op.getInterleaved() ? 2 * i : i;
          int64_t i2 = op.getInterleaved() ? 2 * i + 1 : i + half;
          double x1 = x.values[at + i1], x2 = x.values[at + i2];
          double c = cos.values[table + i], sn = sin.values[table + i];
          r.values[at + i1] = x1 * c - x2 * sn;
          r.values[at + i2] = x2 * c + x1 * sn;
        }
        for (int64_t i = 2 * half; i < d; ++i)
          r.values[at + i] = x.values[at + i];
      }
  return bind(op.getResult(), std::move(r));
}

/// result = data[:axis] ++ indices ++ data[axis+1:]; gather's negative
/// indices count from the end (`wrapNegative`), embedding's are out of
/// range.
llvm::Error Interpreter::gather(Operation *op, Value data, Value indices,
                                int64_t axis, bool wrapNegative) {
  const DoubleTensor &x = get(data), &ids = get(indices);
  int64_t outer = product(x.shape, 0, axis), size = x.shape[axis],
          inner = product(x.shape, axis + 1);
  int64_t count = static_cast<int64_t>(ids.values.size());
  DoubleTensor r = zerosLike(op->getResult(0));
  for (int64_t n = 0; n < count; ++n) {
    auto id = static_cast<int64_t>(ids.values[n]);
    if (wrapNegative && id < 0)
      id += size;
    if (id < 0 || id >= size)
      return fail(op, "index " + Twine(static_cast<int64_t>(ids.values[n])) +
                          " out of range for a dimension of " + Twine(size));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < inner; ++c)
        r.values[(o * count + n) * inner + c] =
            x.values[(o * size + id) * inner + c];
  }
  return bind(op->getResult(0), std::move(r));
}

llvm::Error Interpreter::transpose(nn::TransposeOp op) {
  const DoubleTensor &x = get(op.getInput());
  ArrayRef<int64_t> permutation = op.getPermutation();
  DoubleTensor r = zerosLike(op.getResult());
  Shape index, from(x.shape.size());
  for (int64_t i = 0; i < static_cast<int64_t>(r.values.size()); ++i) {
    unravel(i, r.shape, index);
    for (size_t d = 0; d < index.size(); ++d)
      from[permutation[d]] = index[d];
    r.values[i] = x.values[offsetOf(from, x.shape)];
  }
  return bind(op.getResult(), std::move(r));
}

llvm::Error Interpreter::slice(nn::SliceOp op) {
  const DoubleTensor &x = get(op.getInput());
  ArrayRef<int64_t> start = op.getStart(), stride = op.getStride();
  DoubleTensor r = zerosLike(op.getResult());
  Shape index;
  for (int64_t i = 0; i < static_cast<int64_t>(r.values.size()); ++i) {
    unravel(i, r.shape, index);
    for (size_t d = 0; d < index.size(); ++d)
      index[d] = start[d] + index[d] * stride[d];
    r.values[i] = x.values[offsetOf(index, x.shape)];
  }
  return bind(op.getResult(), std::move(r));
}

llvm::Error Interpreter::concat(nn::ConcatOp op) {
  auto axis = static_cast<size_t>(op.getAxis());
  DoubleTensor r = zerosLike(op.getResult());
  int64_t offset = 0;
  Shape index;
  for (Value input : op.getInputs()) {
    const DoubleTensor &x = get(input);
    for (int64_t i = 0; i < static_cast<int64_t>(x.values.size()); ++i) {
      unravel(i, x.shape, index);
      index[axis] += offset;
      r.values[offsetOf(index, r.shape)] = x.values[i];
    }
    offset += x.shape[axis];
  }
  if (offset != r.shape[axis])
    return fail(op, "pieces that do not add up to the result");
  return bind(op.getResult(), std::move(r));
}

llvm::Error Interpreter::split(nn::SplitOp op) {
  const DoubleTensor &x = get(op.getInput());
  auto axis = static_cast<size_t>(op.getAxis());
  int64_t offset = 0;
  Shape index;
  for (Value result : op.getResults()) {
    DoubleTensor r = zerosLike(result);
    for (int64_t i = 0; i < static_cast<int64_t>(r.values.size()); ++i) {
      unravel(i, r.shape, index);
      index[axis] += offset;
      r.values[i] = x.values[offsetOf(index, x.shape)];
    }
    offset += r.shape[axis];
    if (llvm::Error e = bind(result, std::move(r)))
      return e;
  }
  if (offset != x.shape[axis])
    return fail(op, "pieces that do not add up to the input");
  return llvm::Error::success();
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

bool compare(nn::CompareDirection direction, double a, double b) {
  switch (direction) {
  case nn::CompareDirection::EQ:
    return a == b;
  case nn::CompareDirection::NE:
    return a != b;
  case nn::CompareDirection::LT:
    return a < b;
  case nn::CompareDirection::LE:
    return a <= b;
  case nn::CompareDirection::GT:
    return a > b;
  case nn::CompareDirection::GE:
    return a >= b;
  }
  llvm_unreachable("a compare direction");
}

llvm::Error Interpreter::evaluate(Operation *op) {
  using Args = ArrayRef<double>;
  auto unary = [&](double (*fn)(double)) {
    return elementwise(op, [fn](Args x) { return fn(x[0]); });
  };
  return llvm::TypeSwitch<Operation *, llvm::Error>(op)
      .Case([&](nn::ConstantOp o) { return constant(o); })
      // Elementwise, numpy broadcasting.
      .Case([&](nn::AddOp) {
        return elementwise(op, [](Args x) { return x[0] + x[1]; });
      })
      .Case([&](nn::SubOp) {
        return elementwise(op, [](Args x) { return x[0] - x[1]; });
      })
      .Case([&](nn::MulOp) {
        return elementwise(op, [](Args x) { return x[0] * x[1]; });
      })
      .Case([&](nn::DivOp) {
        return elementwise(op, [](Args x) { return x[0] / x[1]; });
      })
      .Case([&](nn::PowOp) {
        return elementwise(op, [](Args x) { return std::pow(x[0], x[1]); });
      })
      .Case([&](nn::MaxOp) {
        return elementwise(op, [](Args x) { return std::max(x[0], x[1]); });
      })
      .Case([&](nn::MinOp) {
        return elementwise(op, [](Args x) { return std::min(x[0], x[1]); });
      })
      .Case([&](nn::AndOp) {
        return elementwise(
            op, [](Args x) { return double(x[0] != 0 && x[1] != 0); });
      })
      .Case([&](nn::OrOp) {
        return elementwise(
            op, [](Args x) { return double(x[0] != 0 || x[1] != 0); });
      })
      .Case([&](nn::XorOp) {
        return elementwise(
            op, [](Args x) { return double((x[0] != 0) != (x[1] != 0)); });
      })
      .Case([&](nn::CompareOp o) {
        nn::CompareDirection direction = o.getDirection();
        return elementwise(op, [direction](Args x) {
          return double(compare(direction, x[0], x[1]));
        });
      })
      .Case([&](nn::WhereOp) {
        return elementwise(op, [](Args x) { return x[0] != 0 ? x[1] : x[2]; });
      })
      .Case([&](nn::NegOp) { return unary([](double x) { return -x; }); })
      .Case([&](nn::AbsOp) {
        return unary([](double x) { return std::fabs(x); });
      })
      .Case([&](nn::ExpOp) {
        return unary([](double x) { return std::exp(x); });
      })
      .Case([&](nn::LogOp) {
        return unary([](double x) { return std::log(x); });
      })
      .Case([&](nn::SqrtOp) {
        return unary([](double x) { return std::sqrt(x); });
      })
      .Case([&](nn::RsqrtOp) {
        return unary([](double x) { return 1.0 / std::sqrt(x); });
      })
      .Case([&](nn::ReciprocalOp) {
        return unary([](double x) { return 1.0 / x; });
      })
      .Case([&](nn::TanhOp) {
        return unary([](double x) { return std::tanh(x); });
      })
      .Case([&](nn::ErfOp) {
        return unary([](double x) { return std::erf(x); });
      })
      .Case([&](nn::SinOp) {
        return unary([](double x) { return std::sin(x); });
      })
      .Case([&](nn::CosOp) {
        return unary([](double x) { return std::cos(x); });
      })
      .Case([&](nn::SigmoidOp) { return unary(sigmoid); })
      .Case([&](nn::ReluOp) {
        return unary([](double x) { return std::max(x, 0.0); });
      })
      .Case([&](nn::SiluOp) {
        return unary([](double x) { return x * sigmoid(x); });
      })
      .Case([&](nn::NotOp) {
        return unary([](double x) { return double(x == 0); });
      })
      .Case([&](nn::GeluOp o) {
        if (o.getApproximation() == nn::GeluApproximation::Tanh)
          return unary([](double x) {
            const double c = std::sqrt(2.0 / M_PI);
            return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
          });
        return unary([](double x) {
          return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        });
      })
      // To the result's element type (toElement): a float-to-float cast,
      // saturated or not, is the identity in double.
      .Case([&](nn::CastOp) { return unary([](double x) { return x; }); })
      .Case([&](nn::ReduceOp o) { return reduce(o); })
      .Case([&](nn::CumsumOp o) { return cumsum(o); })
      .Case([&](nn::SoftmaxOp o) { return softmax(o, false); })
      .Case([&](nn::LogSoftmaxOp o) { return softmax(o, true); })
      .Case([&](nn::LayerNormOp o) {
        return layerNorm(op, o.getInput(), o.getScale(), o.getBias(),
                         static_cast<int64_t>(o.getAxis()),
                         o.getEpsilon().convertToDouble(), true);
      })
      .Case([&](nn::RmsNormOp o) {
        return layerNorm(op, o.getInput(), o.getScale(), Value(),
                         static_cast<int64_t>(o.getAxis()),
                         o.getEpsilon().convertToDouble(), false);
      })
      .Case([&](nn::MatmulOp o) { return matmul(o); })
      .Case([&](nn::AttentionOp o) { return attention(o); })
      .Case([&](nn::AttentionGradOp o) { return attentionGrad(o); })
      .Case([&](nn::RopeOp o) { return rope(o); })
      .Case([&](nn::EmbeddingOp o) {
        return gather(op, o.getTable(), o.getIndices(), 0, false);
      })
      .Case([&](nn::GatherOp o) {
        return gather(op, o.getData(), o.getIndices(),
                      static_cast<int64_t>(o.getAxis()), true);
      })
      .Case([&](nn::ReshapeOp o) {
        DoubleTensor r = get(o.getInput());
        r.shape = shapeOf(o.getResult());
        return bind(o.getResult(), std::move(r));
      })
      .Case([&](nn::TransposeOp o) { return transpose(o); })
      .Case([&](nn::BroadcastToOp) {
        return elementwise(op, [](Args x) { return x[0]; });
      })
      .Case([&](nn::SliceOp o) { return slice(o); })
      .Case([&](nn::ConcatOp o) { return concat(o); })
      .Case([&](nn::SplitOp o) { return split(o); })
      .Default([&](Operation *) {
        return fail(op, "the fp64 interpreter does not know this op");
      });
}

} // namespace

llvm::Expected<std::vector<DoubleTensor>>
mlir::partita::test::interpretInDouble(
    func::FuncOp func, const std::vector<DoubleTensor> &arguments) {
  if (!func.getBody().hasOneBlock())
    return llvm::createStringError("a function of more than one block");
  Block &body = func.getBody().front();
  if (arguments.size() != body.getNumArguments())
    return llvm::createStringError("@" + func.getSymName().str() + " takes " +
                                   std::to_string(body.getNumArguments()) +
                                   " arguments, given " +
                                   std::to_string(arguments.size()));
  Interpreter interpreter;
  for (auto [argument, tensor] : llvm::zip(body.getArguments(), arguments))
    if (llvm::Error e = interpreter.bind(argument, tensor))
      return std::move(e);
  for (Operation &op : body.without_terminator())
    if (llvm::Error e = interpreter.evaluate(&op))
      return std::move(e);
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret)
    return llvm::createStringError("a function that does not end in a return");
  std::vector<DoubleTensor> results;
  for (Value v : ret.getOperands())
    results.push_back(interpreter.get(v));
  return results;
}
