//===- RaiseUtils.cpp - matchers shared by the raising patterns -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "RaiseUtils.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/APFloat.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::nn;
using namespace mlir::partita::nn::raise;

namespace {

/// Constants larger than this are not read: masks are at most a few million
/// elements, and nothing here needs to look at a weight matrix.
constexpr int64_t kMaxReadElements = int64_t(1) << 24;

double toDouble(APFloat value) {
  bool losesInfo;
  value.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                &losesInfo);
  return value.convertToDouble();
}

double toDouble(Attribute element) {
  if (auto f = dyn_cast<FloatAttr>(element))
    return toDouble(f.getValue());
  const APInt &i = cast<IntegerAttr>(element).getValue();
  return i.getBitWidth() == 1 ? static_cast<double>(i.getBoolValue())
                              : static_cast<double>(i.getSExtValue());
}

std::optional<std::vector<double>> readDense(DenseElementsAttr dense) {
  int64_t n = dense.getNumElements();
  if (dense.isSplat())
    return std::vector<double>(n, toDouble(dense.getSplatValue<Attribute>()));
  std::vector<double> out;
  out.reserve(n);
  Type elementType = dense.getElementType();
  if (isa<FloatType>(elementType)) {
    for (APFloat value : dense.getValues<APFloat>())
      out.push_back(toDouble(value));
  } else if (elementType.isInteger(1)) {
    for (bool value : dense.getValues<bool>())
      out.push_back(value);
  } else if (isa<IntegerType>(elementType)) {
    for (const APInt &value : dense.getValues<APInt>())
      out.push_back(static_cast<double>(value.getSExtValue()));
  } else {
    return std::nullopt;
  }
  return out;
}

/// Decodes a resource blob's elements. Blobs that share an ONNX model's
/// bytes may be unaligned, so every element is read with memcpy.
std::optional<std::vector<double>>
readResource(DenseResourceElementsAttr attr) {
  AsmResourceBlob *blob = attr.getRawHandle().getBlob();
  if (!blob)
    return std::nullopt;
  ArrayRef<char> data = blob->getData();
  Type elementType = attr.getElementType();
  // i1 blobs hold one byte per element.
  size_t width =
      elementType.isInteger(1) ? 1 : elementType.getIntOrFloatBitWidth() / 8;
  int64_t n = attr.getNumElements();
  if (width == 0 || data.size() != static_cast<size_t>(n) * width)
    return std::nullopt;
  std::vector<double> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, data.data() + i * width, width);
    if (auto floatType = dyn_cast<FloatType>(elementType)) {
      out.push_back(toDouble(
          APFloat(floatType.getFloatSemantics(), APInt(width * 8, bits))));
    } else if (elementType.isInteger(1)) {
      out.push_back(bits != 0);
    } else {
      out.push_back(static_cast<double>(APInt(width * 8, bits).getSExtValue()));
    }
  }
  return out;
}

ConstantOp getConstant(Value value) {
  return value ? value.getDefiningOp<ConstantOp>() : ConstantOp();
}

} // namespace

std::optional<std::vector<double>> raise::readConstant(Value value) {
  ConstantOp constant = getConstant(value);
  if (!constant)
    return std::nullopt;
  ElementsAttr attr = constant.getValue();
  if (auto dense = dyn_cast<DenseElementsAttr>(attr)) {
    if (dense.getNumElements() > kMaxReadElements)
      return std::nullopt;
    return readDense(dense);
  }
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    if (resource.getNumElements() > kMaxReadElements)
      return std::nullopt;
    return readResource(resource);
  }
  return std::nullopt;
}

std::optional<double> raise::getScalarConstant(Value value) {
  ConstantOp constant = getConstant(value);
  if (!constant || constant.getType().getNumElements() != 1)
    return std::nullopt;
  std::optional<std::vector<double>> values = readConstant(value);
  if (!values || values->size() != 1)
    return std::nullopt;
  return values->front();
}

std::optional<double> raise::getUniformConstant(Value value) {
  ConstantOp constant = getConstant(value);
  if (!constant)
    return std::nullopt;
  if (auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      dense && dense.isSplat())
    return toDouble(dense.getSplatValue<Attribute>());
  std::optional<std::vector<double>> values = readConstant(value);
  if (!values || values->empty())
    return std::nullopt;
  double first = values->front();
  // NaN compares unequal to itself, so a NaN is never uniform.
  for (double element : *values)
    if (!(element == first))
      return std::nullopt;
  return first;
}

bool raise::isNear(double value, double expected, double tolerance) {
  return std::fabs(value - expected) <= tolerance;
}

static void flattenInto(Value value, ArrayRef<Value> stopAt, Product &product,
                        unsigned depth) {
  // Exported activations nest a handful of products; the bound only keeps
  // a pathological graph from recursing deeply.
  constexpr unsigned kMaxDepth = 16;
  if (!llvm::is_contained(stopAt, value) && depth < kMaxDepth) {
    if (std::optional<double> constant = getScalarConstant(value)) {
      product.constant *= *constant;
      return;
    }
    if (auto mul = value.getDefiningOp<MulOp>()) {
      flattenInto(mul.getLhs(), stopAt, product, depth + 1);
      flattenInto(mul.getRhs(), stopAt, product, depth + 1);
      return;
    }
    if (auto div = value.getDefiningOp<DivOp>()) {
      std::optional<double> divisor = getScalarConstant(div.getRhs());
      if (divisor && *divisor != 0.0) {
        flattenInto(div.getLhs(), stopAt, product, depth + 1);
        product.constant /= *divisor;
        return;
      }
    }
  }
  product.factors.push_back(value);
}

raise::Product raise::flattenProduct(Value value, ArrayRef<Value> stopAt) {
  Product product;
  flattenInto(value, stopAt, product, 0);
  return product;
}

std::optional<int64_t> raise::getPowerOf(ArrayRef<Value> factors, Value base) {
  int64_t total = 0;
  for (Value factor : factors) {
    if (factor == base) {
      ++total;
      continue;
    }
    std::optional<std::pair<Value, double>> pow =
        matchScalarOperand<PowOp>(factor, /*commutative=*/false);
    if (!pow || pow->first != base || pow->second != std::round(pow->second))
      return std::nullopt;
    total += static_cast<int64_t>(pow->second);
  }
  return total;
}

bool raise::isPowerOf(Value value, Value base, int64_t exponent) {
  Product product = flattenProduct(value, base);
  return product.constant == 1.0 &&
         getPowerOf(product.factors, base) == exponent;
}

std::optional<int64_t> raise::getTrailingAxis(ArrayRef<int64_t> axes,
                                              int64_t rank) {
  if (axes.empty())
    return std::nullopt;
  int64_t axis = rank - static_cast<int64_t>(axes.size());
  for (auto [i, a] : llvm::enumerate(axes))
    if (a != axis + static_cast<int64_t>(i))
      return std::nullopt;
  return axis;
}

bool raise::isNormParameter(Value param, RankedTensorType inputType,
                            int64_t axis) {
  auto type = cast<RankedTensorType>(param.getType());
  int64_t rank = inputType.getRank(), offset = rank - type.getRank();
  if (offset < 0 || type.getElementType() != inputType.getElementType())
    return false;
  for (auto [i, size] : llvm::enumerate(type.getShape())) {
    int64_t d = offset + static_cast<int64_t>(i);
    if (size == 1)
      continue;
    if (d < axis || size != inputType.getDimSize(d))
      return false;
  }
  return true;
}

Value raise::conformNormParameter(PatternRewriter &rewriter, Location loc,
                                  Value param, RankedTensorType inputType,
                                  int64_t axis) {
  auto type = cast<RankedTensorType>(param.getType());
  ArrayRef<int64_t> normalized = inputType.getShape().drop_front(axis);
  Type elementType = type.getElementType();
  Value result = param;
  // Sizes aligned before the normalized dimensions are all 1
  // (isNormParameter): drop them, then broadcast what remains.
  int64_t extra = type.getRank() - static_cast<int64_t>(normalized.size());
  if (extra > 0)
    result = ReshapeOp::create(
        rewriter, loc,
        RankedTensorType::get(type.getShape().drop_front(extra), elementType),
        result);
  if (cast<RankedTensorType>(result.getType()).getShape() != normalized)
    result = BroadcastToOp::create(
        rewriter, loc, RankedTensorType::get(normalized, elementType), result);
  return result;
}
