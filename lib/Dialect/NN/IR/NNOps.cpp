//===- NNOps.cpp - nn dialect ops: verifiers and assembly ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Every verifier message starts with the id of the constraint it checks, as
// numbered in the op's ODS description (`matmul_c2: ...`); invalid.mlir has
// one case per id.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<int64_t>>
mlir::partita::nn::broadcastShapes(ArrayRef<ArrayRef<int64_t>> shapes) {
  size_t rank = 0;
  for (ArrayRef<int64_t> shape : shapes)
    rank = std::max(rank, shape.size());
  SmallVector<int64_t> result(rank, 1);
  for (ArrayRef<int64_t> shape : shapes) {
    size_t offset = rank - shape.size();
    for (auto [i, size] : llvm::enumerate(shape)) {
      int64_t &out = result[offset + i];
      if (size == out || size == 1)
        continue;
      if (out != 1)
        return failure();
      out = size;
    }
  }
  return result;
}

RankedTensorType
mlir::partita::nn::inferBroadcastResultType(ArrayRef<Type> types,
                                            Type elementType) {
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Type type : types)
    shapes.push_back(cast<RankedTensorType>(type).getShape());
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(shapes);
  assert(succeeded(shape) && "operand shapes do not broadcast");
  return RankedTensorType::get(*shape, elementType);
}

static RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Prints `[2, 8, 768]` style shapes in messages.
static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}

static LogicalResult verifyAxisInRange(Operation *op, StringRef id,
                                       int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError()
           << id << ": axis " << axis << " is out of range [0, " << rank << ")";
  return success();
}

/// The constraints every numpy-broadcasting op shares: the `typed` operands
/// agree on element type, all operand shapes broadcast, and the result is the
/// broadcast shape with `resultElementType`. Ops whose operand types already
/// agree by their ODS type (`typed` empty) number the last two from 1.
static LogicalResult verifyBroadcasting(Operation *op, StringRef mnemonic,
                                        ValueRange typed,
                                        Type resultElementType) {
  unsigned id = 1;
  if (!typed.empty()) {
    Type elementType = getElementTypeOrSelf(typed.front().getType());
    for (Value value : typed.drop_front())
      if (getElementTypeOrSelf(value.getType()) != elementType)
        return op->emitOpError()
               << mnemonic << "_c1: operand element types differ ("
               << elementType << " vs " << getElementTypeOrSelf(value.getType())
               << ")";
    ++id;
  }
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value value : op->getOperands())
    shapes.push_back(tensorType(value).getShape());
  FailureOr<SmallVector<int64_t>> shape = broadcastShapes(shapes);
  if (failed(shape)) {
    InFlightDiagnostic diag = op->emitOpError()
                              << mnemonic << "_c" << id << ": operand shapes ";
    llvm::interleave(
        shapes, [&](ArrayRef<int64_t> s) { diag << shapeString(s); },
        [&] { diag << ", "; });
    return diag << " do not broadcast";
  }
  auto expected = RankedTensorType::get(*shape, resultElementType);
  if (op->getResult(0).getType() != expected)
    return op->emitOpError() << mnemonic << "_c" << id + 1 << ": result type "
                             << op->getResult(0).getType()
                             << " differs from the broadcast type " << expected;
  return success();
}

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

ParseResult ConstantOp::parse(OpAsmParser &parser, OperationState &result) {
  if (parser.parseOptionalAttrDict(result.attributes))
    return failure();
  Attribute value;
  if (parser.parseAttribute(value))
    return failure();
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements)
    return parser.emitError(parser.getCurrentLocation(),
                            "expected a typed elements attribute");
  result.addAttribute(getValueAttrName(result.name), elements);
  result.addTypes(elements.getType());
  return success();
}

void ConstantOp::print(OpAsmPrinter &p) {
  p.printOptionalAttrDict((*this)->getAttrs(), /*elidedAttrs=*/{"value"});
  p << " ";
  p.printAttribute(getValue());
}

LogicalResult ConstantOp::verify() {
  if (getValue().getType() != getType())
    return emitOpError() << "constant_c1: value type " << getValue().getType()
                         << " differs from result type " << getType();
  auto dense = dyn_cast<DenseElementsAttr>(getValue());
  if (dense && !dense.isSplat() && dense.getNumElements() > kMaxInlineElements)
    return emitOpError() << "constant_c2: inline dense value has "
                         << dense.getNumElements() << " elements; values over "
                         << kMaxInlineElements
                         << " elements must be dense_resource blobs";
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

#define NN_VERIFY_BINARY(OP, MNEMONIC)                                         \
  LogicalResult OP::verify() {                                                 \
    return verifyBroadcasting(*this, MNEMONIC, getOperands(),                  \
                              getElementTypeOrSelf(getLhs().getType()));       \
  }
NN_VERIFY_BINARY(AddOp, "add")
NN_VERIFY_BINARY(SubOp, "sub")
NN_VERIFY_BINARY(MulOp, "mul")
NN_VERIFY_BINARY(DivOp, "div")
NN_VERIFY_BINARY(PowOp, "pow")
NN_VERIFY_BINARY(MaxOp, "max")
NN_VERIFY_BINARY(MinOp, "min")
#undef NN_VERIFY_BINARY

// i1 by their ODS type: no element-type constraint to check.
#define NN_VERIFY_LOGICAL(OP, MNEMONIC)                                        \
  LogicalResult OP::verify() {                                                 \
    return verifyBroadcasting(*this, MNEMONIC, ValueRange(),                   \
                              IntegerType::get(getContext(), 1));              \
  }
NN_VERIFY_LOGICAL(AndOp, "and")
NN_VERIFY_LOGICAL(OrOp, "or")
NN_VERIFY_LOGICAL(XorOp, "xor")
#undef NN_VERIFY_LOGICAL

LogicalResult CompareOp::verify() {
  return verifyBroadcasting(*this, "compare", getOperands(),
                            IntegerType::get(getContext(), 1));
}

LogicalResult WhereOp::verify() {
  return verifyBroadcasting(*this, "where", {getOnTrue(), getOnFalse()},
                            getElementTypeOrSelf(getOnTrue().getType()));
}

LogicalResult CastOp::verify() {
  if (getInput().getType().getShape() != getType().getShape())
    return emitOpError() << "cast_c1: result shape "
                         << shapeString(getType().getShape())
                         << " differs from input shape "
                         << shapeString(getInput().getType().getShape());
  if (getSaturate() &&
      (!isa<FloatType>(getInput().getType().getElementType()) ||
       !isa<FloatType>(getType().getElementType())))
    return emitOpError() << "cast_c2: saturate converts a float to a float, "
                            "not "
                         << getInput().getType().getElementType() << " to "
                         << getType().getElementType();
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

LogicalResult ReduceOp::verify() {
  ArrayRef<int64_t> axes = getAxes();
  int64_t rank = getInput().getType().getRank();
  if (axes.empty())
    return emitOpError() << "reduce_c1: axes are empty";
  for (auto [i, axis] : llvm::enumerate(axes)) {
    if (axis < 0 || axis >= rank)
      return emitOpError() << "reduce_c1: axis " << axis
                           << " is out of range [0, " << rank << ")";
    if (i > 0 && axis <= axes[i - 1])
      return emitOpError() << "reduce_c1: axes must be strictly increasing";
  }
  SmallVector<int64_t> shape;
  for (auto [d, size] : llvm::enumerate(getInput().getType().getShape())) {
    if (!llvm::is_contained(axes, static_cast<int64_t>(d)))
      shape.push_back(size);
    else if (getKeepdims())
      shape.push_back(1);
  }
  auto expected =
      RankedTensorType::get(shape, getInput().getType().getElementType());
  if (getType() != expected)
    return emitOpError() << "reduce_c2: result type " << getType()
                         << " differs from the expected " << expected;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxisInRange(*this, "softmax_c1", getAxis(),
                           getInput().getType().getRank());
}

LogicalResult LogSoftmaxOp::verify() {
  return verifyAxisInRange(*this, "log_softmax_c1", getAxis(),
                           getInput().getType().getRank());
}

LogicalResult CumsumOp::verify() {
  return verifyAxisInRange(*this, "cumsum_c1", getAxis(),
                           getInput().getType().getRank());
}

/// Shared by layer_norm and rms_norm: the axis (c1), the shape (c2) and
/// element type (c3) of the affine parameters, and epsilon (c4).
static LogicalResult verifyNormalization(Operation *op, StringRef mnemonic,
                                         RankedTensorType input, int64_t axis,
                                         ValueRange params, float epsilon) {
  std::string id = mnemonic.str() + "_c";
  if (failed(verifyAxisInRange(op, id + "1", axis, input.getRank())))
    return failure();
  ArrayRef<int64_t> normalized = input.getShape().drop_front(axis);
  for (Value param : params) {
    RankedTensorType type = tensorType(param);
    if (type.getShape() != normalized)
      return op->emitOpError()
             << id << "2: parameter shape " << shapeString(type.getShape())
             << " differs from the normalized shape "
             << shapeString(normalized);
    if (type.getElementType() != input.getElementType())
      return op->emitOpError()
             << id << "3: parameter element type " << type.getElementType()
             << " differs from the input's " << input.getElementType();
  }
  if (!(epsilon > 0.0f))
    return op->emitOpError()
           << id << "4: epsilon must be positive, got " << epsilon;
  return success();
}

LogicalResult LayerNormOp::verify() {
  SmallVector<Value> params;
  if (getScale())
    params.push_back(getScale());
  if (getBias())
    params.push_back(getBias());
  return verifyNormalization(*this, "layer_norm", getInput().getType(),
                             getAxis(), params, getEpsilon().convertToFloat());
}

LogicalResult RmsNormOp::verify() {
  SmallVector<Value> params;
  if (getScale())
    params.push_back(getScale());
  return verifyNormalization(*this, "rms_norm", getInput().getType(), getAxis(),
                             params, getEpsilon().convertToFloat());
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::verify() {
  RankedTensorType lhs = getLhs().getType(), rhs = getRhs().getType();
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOpError() << "matmul_c1: operands must have rank 2 or more, got "
                         << lhs.getRank() << " and " << rhs.getRank();
  int64_t k = lhs.getShape().back();
  if (k != rhs.getDimSize(rhs.getRank() - 2))
    return emitOpError() << "matmul_c2: contracted sizes differ: lhs has " << k
                         << ", rhs has " << rhs.getDimSize(rhs.getRank() - 2);
  FailureOr<SmallVector<int64_t>> batch = broadcastShapes(
      {lhs.getShape().drop_back(2), rhs.getShape().drop_back(2)});
  if (failed(batch))
    return emitOpError() << "matmul_c3: batch dimensions "
                         << shapeString(lhs.getShape().drop_back(2)) << " and "
                         << shapeString(rhs.getShape().drop_back(2))
                         << " do not broadcast";
  int64_t n = rhs.getShape().back();
  if (Value bias = getBias()) {
    RankedTensorType biasType = tensorType(bias);
    if (biasType.getRank() != 1 || biasType.getDimSize(0) != n)
      return emitOpError() << "matmul_c4: bias shape "
                           << shapeString(biasType.getShape()) << " must be ["
                           << n << "]";
  }
  for (Value operand : getOperands())
    if (getElementTypeOrSelf(operand.getType()) != lhs.getElementType())
      return emitOpError() << "matmul_c5: operand element types differ ("
                           << lhs.getElementType() << " vs "
                           << getElementTypeOrSelf(operand.getType()) << ")";
  SmallVector<int64_t> shape = *batch;
  shape.push_back(lhs.getDimSize(lhs.getRank() - 2));
  shape.push_back(n);
  auto expected = RankedTensorType::get(shape, lhs.getElementType());
  if (getType() != expected)
    return emitOpError() << "matmul_c6: result type " << getType()
                         << " differs from the expected " << expected;
  return success();
}

//===----------------------------------------------------------------------===//
// DequantizeOp
//===----------------------------------------------------------------------===//

/// What nn.dequantize and nn.quantized_matmul check alike of a packed
/// `[k, n]` weight of `element` type, behind the batch dimensions `batch`
/// (nn.dequantize's stacked weights); constraint ids are `stem` + `_c1`..
/// for dequantize's and `quantized_matmul_c2` for the fused op's.
static LogicalResult verifyPackedWeight(Operation *op, bool fused, Value packed,
                                        Value scales, Value zeroPoints,
                                        int64_t bits, int64_t blockSize,
                                        int64_t k, int64_t n, Type element,
                                        ArrayRef<int64_t> batch = {}) {
  auto batched = [&](ArrayRef<int64_t> shape) {
    SmallVector<int64_t> full(batch);
    llvm::append_range(full, shape);
    return full;
  };
  auto id = [&](StringRef own) {
    return fused ? std::string("quantized_matmul_c2") : own.str();
  };
  if ((bits != 4 && bits != 8) || blockSize < 16 ||
      !llvm::isPowerOf2_64(blockSize))
    return op->emitOpError()
           << id("dequantize_c1") << ": bits must be 4 or 8 and block_size a "
           << "power of two of at least 16, got " << bits << " and "
           << blockSize;
  int64_t blocks = (k + blockSize - 1) / blockSize;
  RankedTensorType packedType = tensorType(packed);
  SmallVector<int64_t> packedShape = batched({n, blocks, blockSize * bits / 8});
  if (!packedType.getElementType().isInteger(8) ||
      packedType.getShape() != ArrayRef<int64_t>(packedShape))
    return op->emitOpError() << id("dequantize_c2") << ": packed must be i8 "
                             << shapeString(packedShape) << " for a [" << k
                             << ", " << n << "] weight, got " << packedType;
  RankedTensorType scalesType = tensorType(scales);
  SmallVector<int64_t> scalesShape = batched({n, blocks});
  if (scalesType.getElementType() != element ||
      scalesType.getShape() != ArrayRef<int64_t>(scalesShape))
    return op->emitOpError() << id("dequantize_c3") << ": scales must be "
                             << shapeString(scalesShape) << " of " << element
                             << ", got " << scalesType;
  if (zeroPoints) {
    RankedTensorType type = tensorType(zeroPoints);
    SmallVector<int64_t> shape = batched({n, (blocks * bits + 7) / 8});
    if (!type.getElementType().isInteger(8) ||
        type.getShape() != ArrayRef<int64_t>(shape))
      return op->emitOpError()
             << id("dequantize_c4") << ": zero_points must be i8 "
             << shapeString(shape) << ", got " << type;
  }
  return success();
}

LogicalResult DequantizeOp::verify() {
  RankedTensorType result = getType();
  if (result.getRank() < 2)
    return emitOpError() << "dequantize_c5: result must be [B..., k, n], got "
                         << result;
  ArrayRef<int64_t> shape = result.getShape();
  return verifyPackedWeight(*this, /*fused=*/false, getPacked(), getScales(),
                            getZeroPoints(), getBits(), getBlockSize(),
                            shape[shape.size() - 2], shape.back(),
                            result.getElementType(), shape.drop_back(2));
}

//===----------------------------------------------------------------------===//
// QuantizedMatmulOp
//===----------------------------------------------------------------------===//

LogicalResult QuantizedMatmulOp::verify() {
  RankedTensorType lhs = getLhs().getType();
  int64_t n =
      getPacked().getType().getRank() ? getPacked().getType().getDimSize(0) : 0;
  SmallVector<int64_t> shape(lhs.getShape());
  if (!shape.empty())
    shape.back() = n;
  auto expected = RankedTensorType::get(shape, lhs.getElementType());
  if (lhs.getRank() < 2 || getType() != expected)
    return emitOpError() << "quantized_matmul_c1: lhs " << lhs
                         << " must have rank 2 or more and the result be "
                         << expected << ", got " << getType();
  if (failed(verifyPackedWeight(*this, /*fused=*/true, getPacked(), getScales(),
                                getZeroPoints(), getBits(), getBlockSize(),
                                lhs.getShape().back(), n,
                                lhs.getElementType())))
    return failure();
  if (Value bias = getBias())
    if (tensorType(bias) != RankedTensorType::get({n}, lhs.getElementType()))
      return emitOpError() << "quantized_matmul_c3: bias must be "
                           << RankedTensorType::get({n}, lhs.getElementType())
                           << ", got " << bias.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

namespace {
/// What nn.attention, nn.attention_partial and nn.attention_grad check
/// alike; constraint ids are `<stem>_c1` to `<stem>_c10`. `outputs` are the
/// tensors shaped like attention's result (c9), each with its name.
template <typename OpTy>
LogicalResult
verifyAttentionLike(OpTy op, StringRef stem,
                    ArrayRef<std::pair<StringRef, Value>> outputs) {
  auto error = [&](unsigned n) {
    return op.emitOpError() << stem << "_c" << n << ": ";
  };
  RankedTensorType q = op.getQuery().getType(), k = op.getKey().getType(),
                   v = op.getValue().getType();
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return error(1) << "query, key and value must have rank 4 [batch, heads, "
                       "sequence, head size]";
  int64_t b = q.getDimSize(0), hq = q.getDimSize(1), sq = q.getDimSize(2);
  int64_t hkv = k.getDimSize(1), skv = k.getDimSize(2);
  if (k.getDimSize(0) != b || v.getDimSize(0) != b)
    return error(2) << "batch sizes differ (" << b << ", " << k.getDimSize(0)
                    << ", " << v.getDimSize(0) << ")";
  if (v.getDimSize(1) != hkv || hq % hkv != 0)
    return error(3) << "key/value heads (" << hkv << ", " << v.getDimSize(1)
                    << ") must be equal and divide the " << hq
                    << " query heads";
  if (q.getDimSize(3) != k.getDimSize(3))
    return error(4) << "query head size " << q.getDimSize(3)
                    << " differs from key head size " << k.getDimSize(3);
  if (v.getDimSize(2) != skv)
    return error(5) << "key sequence " << skv << " differs from value sequence "
                    << v.getDimSize(2);
  if (Value mask = op.getMask()) {
    RankedTensorType m = tensorType(mask);
    SmallVector<int64_t> scores = {b, hq, sq, skv};
    FailureOr<SmallVector<int64_t>> shape =
        broadcastShapes({m.getShape(), ArrayRef<int64_t>(scores)});
    if (m.getRank() > 4 || failed(shape) ||
        ArrayRef<int64_t>(*shape) != ArrayRef<int64_t>(scores))
      return error(6) << "mask shape " << shapeString(m.getShape())
                      << " does not broadcast to the scores' shape "
                      << shapeString(scores);
    if (!m.getElementType().isInteger(1) &&
        m.getElementType() != q.getElementType())
      return error(7) << "mask element type " << m.getElementType()
                      << " must be i1 or " << q.getElementType();
  }
  if (k.getElementType() != q.getElementType() ||
      v.getElementType() != q.getElementType())
    return error(8) << "query, key and value element types differ";
  auto expected =
      RankedTensorType::get({b, hq, sq, v.getDimSize(3)}, q.getElementType());
  for (auto [name, output] : outputs)
    if (output.getType() != expected)
      return error(9) << name << " type " << output.getType()
                      << " differs from the expected " << expected;
  if (std::optional<APFloat> scale = op.getScale())
    if (!(scale->convertToDouble() > 0.0))
      return error(10) << "scale must be positive, got "
                       << scale->convertToDouble();
  if (std::optional<APFloat> softcap = op.getSoftcap())
    if (!(softcap->convertToDouble() > 0.0) ||
        !std::isfinite(softcap->convertToDouble()))
      return error(10) << "softcap must be positive and finite, got "
                       << softcap->convertToDouble();
  return success();
}

/// Constraint `id`: `window`, when given, is positive and comes with
/// `needs` (`present`: causal, or attention_partial's positions).
template <typename OpTy>
LogicalResult verifyWindow(OpTy op, StringRef id, bool present,
                           StringRef needs) {
  std::optional<int64_t> window = op.getWindow();
  if (!window)
    return success();
  if (*window <= 0)
    return op.emitOpError()
           << id << ": window must be positive, got " << *window;
  if (!present)
    return op.emitOpError() << id << ": a window needs " << needs;
  return success();
}

template <typename OpTy> double effectiveScale(OpTy op) {
  if (std::optional<APFloat> scale = op.getScale())
    return scale->convertToDouble();
  return 1.0 / std::sqrt(static_cast<double>(
                   op.getQuery().getType().getShape().back()));
}
} // namespace

double AttentionOp::getEffectiveScale() { return effectiveScale(*this); }

LogicalResult AttentionOp::verify() {
  if (failed(
          verifyAttentionLike(*this, "attention", {{"result", getResult()}})))
    return failure();
  return verifyWindow(*this, "attention_c11", getCausal(), "causal");
}

//===----------------------------------------------------------------------===//
// AttentionPartialOp
//===----------------------------------------------------------------------===//

double AttentionPartialOp::getEffectiveScale() { return effectiveScale(*this); }

LogicalResult AttentionPartialOp::verify() {
  if (failed(verifyAttentionLike(*this, "attention_partial",
                                 {{"result", getResult()}})))
    return failure();
  RankedTensorType q = getQuery().getType();
  int64_t sq = q.getDimSize(2), skv = getKey().getType().getDimSize(2);
  Value qpos = getQueryPositions(), kpos = getKeyPositions();
  if (static_cast<bool>(qpos) != static_cast<bool>(kpos))
    return emitOpError() << "attention_partial_c11: give both query and key "
                            "positions or neither";
  if (qpos) {
    RankedTensorType qp = tensorType(qpos), kp = tensorType(kpos);
    auto expectedQ =
        RankedTensorType::get({sq}, IntegerType::get(getContext(), 64));
    auto expectedK =
        RankedTensorType::get({skv}, IntegerType::get(getContext(), 64));
    if (qp != expectedQ || kp != expectedK)
      return emitOpError() << "attention_partial_c11: positions must be "
                           << expectedQ << " and " << expectedK << ", got "
                           << qp << " and " << kp;
  }
  auto stats = RankedTensorType::get({q.getDimSize(0), q.getDimSize(1), sq},
                                     Float32Type::get(getContext()));
  for (auto [name, value] :
       {std::pair<StringRef, Value>{"row_max", getRowMax()},
        std::pair<StringRef, Value>{"row_sum", getRowSum()}})
    if (value.getType() != stats)
      return emitOpError() << "attention_partial_c12: " << name << " type "
                           << value.getType() << " differs from the expected "
                           << stats;
  return verifyWindow(*this, "attention_partial_c13", static_cast<bool>(qpos),
                      "positions");
}

//===----------------------------------------------------------------------===//
// AttentionGradOp
//===----------------------------------------------------------------------===//

double AttentionGradOp::getEffectiveScale() { return effectiveScale(*this); }

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionLike(*this, "attention_grad",
                                 {{"out", getOut()}, {"dout", getDout()}})))
    return failure();
  for (auto [name, grad, primal] :
       {std::tuple<StringRef, Value, Value>{"dq", getDq(), getQuery()},
        std::tuple<StringRef, Value, Value>{"dk", getDk(), getKey()},
        std::tuple<StringRef, Value, Value>{"dv", getDv(), getValue()}})
    if (grad.getType() != primal.getType())
      return emitOpError() << "attention_grad_c11: " << name << " type "
                           << grad.getType() << " differs from the expected "
                           << primal.getType();
  return verifyWindow(*this, "attention_grad_c12", getCausal(), "causal");
}

//===----------------------------------------------------------------------===//
// RopeOp
//===----------------------------------------------------------------------===//

LogicalResult RopeOp::verify() {
  RankedTensorType x = getInput().getType();
  if (x.getRank() != 4)
    return emitOpError() << "rope_c1: input must have rank 4 [batch, heads, "
                            "sequence, head size], got rank "
                         << x.getRank();
  RankedTensorType cos = getCos().getType(), sin = getSin().getType();
  bool valid =
      cos == sin && cos.getRank() == 3 &&
      cos.getElementType() == x.getElementType() &&
      (cos.getDimSize(0) == 1 || cos.getDimSize(0) == x.getDimSize(0)) &&
      cos.getDimSize(1) == x.getDimSize(2);
  if (!valid)
    return emitOpError() << "rope_c2: cos " << cos << " and sin " << sin
                         << " must both be [" << x.getDimSize(0) << " or 1, "
                         << x.getDimSize(2) << ", r/2] of "
                         << x.getElementType();
  if (2 * cos.getDimSize(2) > x.getDimSize(3))
    return emitOpError() << "rope_c3: " << 2 * cos.getDimSize(2)
                         << " rotary features exceed the head size "
                         << x.getDimSize(3);
  return success();
}

//===----------------------------------------------------------------------===//
// Mixtures of experts
//===----------------------------------------------------------------------===//

LogicalResult MoeOp::verify() {
  RankedTensorType x = getInput().getType();
  RankedTensorType ids = getExpertIds().getType();
  RankedTensorType weights = getRoutingWeights().getType();
  if (x.getRank() != 2 || ids.getRank() != 2 ||
      ids.getDimSize(0) != x.getDimSize(0) || ids.getDimSize(1) < 1 ||
      weights != ids.clone(x.getElementType()) || getType() != x)
    return emitOpError() << "moe_c1: input " << x
                         << " must be [tokens, hidden], expert_ids " << ids
                         << " and routing_weights " << weights
                         << " [tokens, k] (k >= 1), the weights and the "
                            "result of the input's type";
  Type element = x.getElementType();
  int64_t hidden = x.getDimSize(1);
  RankedTensorType fc1 = getFc1().getType(), fc2 = getFc2().getType();
  bool swiglu = getActivation() == MoeActivation::Swiglu;
  int64_t experts = fc1.getRank() == 3 ? fc1.getDimSize(0) : -1;
  int64_t ffn = fc2.getRank() == 3 ? fc2.getDimSize(2) : -1;
  int64_t fused = hasFusedGate() ? 2 * ffn : ffn;
  auto expertType = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, element);
  };
  if (fc1.getRank() != 3 || fc2.getRank() != 3 ||
      fc1 != expertType({experts, fused, hidden}) ||
      fc2 != expertType({experts, hidden, ffn}))
    return emitOpError() << "moe_c2: fc1 " << fc1 << " and fc2 " << fc2
                         << " must be [E, F1, " << hidden << "] and [E, "
                         << hidden << ", F] of " << element << ", with F1 = "
                         << (hasFusedGate() ? "2F (a fused swiglu)" : "F");
  if (getFc3() && !swiglu)
    return emitOpError() << "moe_c3: fc3 is the up projection of a swiglu, "
                            "not of "
                         << stringifyMoeActivation(getActivation());
  if (getInterleaved() && !hasFusedGate())
    return emitOpError() << "moe_c3: interleaved describes fc1's gate and up "
                            "halves of a swiglu without fc3";
  if (!swiglu && (getAlpha() || getBeta() || getLimit()))
    return emitOpError() << "moe_c3: alpha, beta and limit are a swiglu's, "
                            "not "
                         << stringifyMoeActivation(getActivation()) << "'s";
  if (std::optional<APFloat> limit = getLimit();
      limit && !(limit->convertToDouble() > 0))
    return emitOpError() << "moe_c3: limit must be positive";
  if (getFc3() && getFc3().getType() != expertType({experts, ffn, hidden}))
    return emitOpError() << "moe_c3: fc3 " << getFc3().getType() << " must be "
                         << expertType({experts, ffn, hidden});
  if (getFc3Bias() && !getFc3())
    return emitOpError() << "moe_c4: fc3_bias needs fc3";
  std::pair<Value, RankedTensorType> biases[] = {
      {getFc1Bias(), expertType({experts, fused})},
      {getFc2Bias(), expertType({experts, hidden})},
      {getFc3Bias(), expertType({experts, ffn})}};
  for (auto [bias, type] : biases)
    if (bias && bias.getType() != type)
      return emitOpError() << "moe_c4: bias " << bias.getType() << " must be "
                           << type;
  return success();
}

//===----------------------------------------------------------------------===//
// Lookups
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  RankedTensorType table = getTable().getType();
  if (table.getRank() != 2)
    return emitOpError() << "embedding_c1: table must have rank 2, got "
                         << table.getRank();
  SmallVector<int64_t> shape(getIndices().getType().getShape());
  shape.push_back(table.getDimSize(1));
  auto expected = RankedTensorType::get(shape, table.getElementType());
  if (getType() != expected)
    return emitOpError() << "embedding_c2: result type " << getType()
                         << " differs from the expected " << expected;
  return success();
}

LogicalResult KvCacheWriteOp::verify() {
  RankedTensorType cache = getCache().getType();
  RankedTensorType update = getUpdate().getType();
  int64_t axis = getAxis();
  if (failed(
          verifyAxisInRange(*this, "kv_cache_write_c1", axis, cache.getRank())))
    return failure();
  bool fits = update.getElementType() == cache.getElementType() &&
              update.getRank() == cache.getRank();
  for (int64_t d = 0; fits && d < cache.getRank(); ++d)
    fits = d == axis ? update.getDimSize(d) <= cache.getDimSize(d)
                     : update.getDimSize(d) == cache.getDimSize(d);
  if (!fits)
    return emitOpError() << "kv_cache_write_c2: update " << update
                         << " does not fit cache " << cache << " along axis "
                         << axis;
  RankedTensorType position = getPosition().getType();
  bool perRow = axis != 0 && position.getRank() == 1 &&
                position.getDimSize(0) == cache.getDimSize(0);
  if (!position.getElementType().isInteger(64) ||
      (position.getNumElements() != 1 && !perRow))
    return emitOpError() << "kv_cache_write_c3: position must be i64 with "
                            "one element or one per row of the batch, got "
                         << position;
  if (getType() != cache)
    return emitOpError() << "kv_cache_write_c4: result type " << getType()
                         << " differs from the cache's " << cache;
  return success();
}

LogicalResult GatherOp::verify() {
  RankedTensorType data = getData().getType();
  int64_t axis = getAxis();
  if (failed(verifyAxisInRange(*this, "gather_c1", axis, data.getRank())))
    return failure();
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, getIndices().getType().getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  auto expected = RankedTensorType::get(shape, data.getElementType());
  if (getType() != expected)
    return emitOpError() << "gather_c2: result type " << getType()
                         << " differs from the expected " << expected;
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  RankedTensorType input = getInput().getType();
  if (input.getElementType() != getType().getElementType() ||
      input.getNumElements() != getType().getNumElements())
    return emitOpError() << "reshape_c1: cannot reshape " << input << " ("
                         << input.getNumElements() << " elements) to "
                         << getType() << " (" << getType().getNumElements()
                         << " elements)";
  return success();
}

LogicalResult TransposeOp::verify() {
  RankedTensorType input = getInput().getType();
  ArrayRef<int64_t> perm = getPermutation();
  llvm::SmallSet<int64_t, 8> seen;
  bool valid = static_cast<int64_t>(perm.size()) == input.getRank();
  for (int64_t p : perm)
    valid &= p >= 0 && p < input.getRank() && seen.insert(p).second;
  if (!valid)
    return emitOpError() << "transpose_c1: " << shapeString(perm)
                         << " is not a permutation of [0, " << input.getRank()
                         << ")";
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(input.getDimSize(p));
  auto expected = RankedTensorType::get(shape, input.getElementType());
  if (getType() != expected)
    return emitOpError() << "transpose_c2: result type " << getType()
                         << " differs from the expected " << expected;
  return success();
}

LogicalResult BroadcastToOp::verify() {
  RankedTensorType input = getInput().getType();
  int64_t offset = getType().getRank() - input.getRank();
  if (offset < 0 || input.getElementType() != getType().getElementType())
    return emitOpError() << "broadcast_to_c1: cannot broadcast " << input
                         << " to " << getType();
  for (auto [d, size] : llvm::enumerate(input.getShape())) {
    int64_t target = getType().getDimSize(offset + d);
    if (size != 1 && size != target)
      return emitOpError() << "broadcast_to_c2: input dimension " << d
                           << " has size " << size << ", which is neither 1 "
                           << "nor the result's " << target;
  }
  return success();
}

LogicalResult SliceOp::verify() {
  RankedTensorType input = getInput().getType();
  int64_t rank = input.getRank();
  ArrayRef<int64_t> start = getStart(), limit = getLimit(),
                    stride = getStride();
  if (static_cast<int64_t>(start.size()) != rank ||
      static_cast<int64_t>(limit.size()) != rank ||
      static_cast<int64_t>(stride.size()) != rank)
    return emitOpError() << "slice_c1: start, limit and stride need " << rank
                         << " entries each";
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (start[d] < 0 || start[d] > limit[d] || limit[d] > input.getDimSize(d))
      return emitOpError() << "slice_c2: dimension " << d << " bounds ["
                           << start[d] << ", " << limit[d]
                           << ") are not within [0, " << input.getDimSize(d)
                           << "]";
    if (stride[d] < 1)
      return emitOpError() << "slice_c3: stride " << stride[d]
                           << " of dimension " << d << " is below 1";
    shape.push_back(llvm::divideCeil(limit[d] - start[d], stride[d]));
  }
  auto expected = RankedTensorType::get(shape, input.getElementType());
  if (getType() != expected)
    return emitOpError() << "slice_c4: result type " << getType()
                         << " differs from the expected " << expected;
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "concat_c1: needs at least one operand";
  RankedTensorType first = tensorType(getInputs().front());
  int64_t axis = getAxis();
  if (failed(verifyAxisInRange(*this, "concat_c2", axis, first.getRank())))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value input : getInputs()) {
    RankedTensorType type = tensorType(input);
    bool compatible = type.getRank() == first.getRank() &&
                      type.getElementType() == first.getElementType();
    for (int64_t d = 0; compatible && d < first.getRank(); ++d)
      compatible = d == axis || type.getDimSize(d) == first.getDimSize(d);
    if (!compatible)
      return emitOpError() << "concat_c3: operand " << type
                           << " is incompatible with " << first
                           << " along axis " << axis;
    shape[axis] += type.getDimSize(axis);
  }
  auto expected = RankedTensorType::get(shape, first.getElementType());
  if (getType() != expected)
    return emitOpError() << "concat_c4: result type " << getType()
                         << " differs from the expected " << expected;
  return success();
}

LogicalResult SplitOp::verify() {
  if (getResults().empty())
    return emitOpError() << "split_c1: needs at least one result";
  RankedTensorType input = getInput().getType();
  int64_t axis = getAxis();
  if (failed(verifyAxisInRange(*this, "split_c2", axis, input.getRank())))
    return failure();
  int64_t total = 0;
  for (Value result : getResults()) {
    RankedTensorType type = tensorType(result);
    bool compatible = type.getRank() == input.getRank() &&
                      type.getElementType() == input.getElementType();
    for (int64_t d = 0; compatible && d < input.getRank(); ++d)
      compatible = d == axis || type.getDimSize(d) == input.getDimSize(d);
    if (!compatible)
      return emitOpError() << "split_c3: result " << type
                           << " is incompatible with the input " << input
                           << " along axis " << axis;
    total += type.getDimSize(axis);
  }
  if (total != input.getDimSize(axis))
    return emitOpError() << "split_c4: result sizes along axis " << axis
                         << " sum to " << total << ", not "
                         << input.getDimSize(axis);
  return success();
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

#define GET_OP_CLASSES
#include "partita/Dialect/NN/IR/NNOps.cpp.inc"

void NNDialect::registerOps() {
  addOperations<
#define GET_OP_LIST
#include "partita/Dialect/NN/IR/NNOps.cpp.inc"
      >();
}
