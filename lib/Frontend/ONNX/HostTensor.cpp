//===- HostTensor.cpp - constants known at import time --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "ImportContext.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <limits>

using namespace mlir;
using namespace mlir::partita::onnx_import;

Type mlir::partita::onnx_import::getElementType(MLIRContext *context,
                                                int dataType) {
  Builder b(context);
  switch (dataType) {
  case onnx::TensorProto_DataType_FLOAT:
    return b.getF32Type();
  case onnx::TensorProto_DataType_FLOAT16:
    return b.getF16Type();
  case onnx::TensorProto_DataType_BFLOAT16:
    return b.getBF16Type();
  case onnx::TensorProto_DataType_INT64:
    return b.getI64Type();
  case onnx::TensorProto_DataType_INT32:
    return b.getI32Type();
  case onnx::TensorProto_DataType_INT8:
    return b.getI8Type();
  case onnx::TensorProto_DataType_BOOL:
    return b.getI1Type();
  default:
    return {};
  }
}

DataType mlir::partita::onnx_import::getDataType(Type type) {
  if (type.isF32())
    return onnx::TensorProto_DataType_FLOAT;
  if (type.isF16())
    return onnx::TensorProto_DataType_FLOAT16;
  if (type.isBF16())
    return onnx::TensorProto_DataType_BFLOAT16;
  if (type.isInteger(64))
    return onnx::TensorProto_DataType_INT64;
  if (type.isInteger(32))
    return onnx::TensorProto_DataType_INT32;
  if (type.isInteger(8))
    return onnx::TensorProto_DataType_INT8;
  if (type.isInteger(1))
    return onnx::TensorProto_DataType_BOOL;
  return onnx::TensorProto_DataType_UNDEFINED;
}

std::string mlir::partita::onnx_import::dataTypeName(int dataType) {
  if (onnx::TensorProto_DataType_IsValid(dataType))
    return llvm::StringRef(
               onnx::TensorProto_DataType_Name(static_cast<DataType>(dataType)))
        .lower();
  return "data type " + std::to_string(dataType);
}

bool mlir::partita::onnx_import::isFloatType(int dataType) {
  return dataType == onnx::TensorProto_DataType_FLOAT ||
         dataType == onnx::TensorProto_DataType_FLOAT16 ||
         dataType == onnx::TensorProto_DataType_BFLOAT16 ||
         dataType == onnx::TensorProto_DataType_DOUBLE;
}

size_t mlir::partita::onnx_import::dataTypeSize(int dataType) {
  switch (dataType) {
  case onnx::TensorProto_DataType_FLOAT:
  case onnx::TensorProto_DataType_INT32:
  case onnx::TensorProto_DataType_UINT32:
    return 4;
  case onnx::TensorProto_DataType_DOUBLE:
  case onnx::TensorProto_DataType_INT64:
  case onnx::TensorProto_DataType_UINT64:
    return 8;
  case onnx::TensorProto_DataType_FLOAT16:
  case onnx::TensorProto_DataType_BFLOAT16:
  case onnx::TensorProto_DataType_INT16:
  case onnx::TensorProto_DataType_UINT16:
    return 2;
  case onnx::TensorProto_DataType_INT8:
  case onnx::TensorProto_DataType_UINT8:
  case onnx::TensorProto_DataType_BOOL:
    return 1;
  default:
    return 0;
  }
}

std::optional<int64_t>
mlir::partita::onnx_import::getElementCount(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    std::optional<int64_t> product =
        d < 0 ? std::nullopt : llvm::checkedMul(n, d);
    if (!product)
      return std::nullopt;
    n = *product;
  }
  return n;
}

int64_t
mlir::partita::onnx_import::getElementCountSaturated(ArrayRef<int64_t> shape) {
  return getElementCount(shape).value_or(std::numeric_limits<int64_t>::max());
}

std::string mlir::partita::onnx_import::shapeText(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}

int64_t HostTensor::getNumElements() const {
  return getElementCountSaturated(shape);
}

static double halfToDouble(uint16_t bits, bool isBF16) {
  if (isBF16) {
    uint32_t word = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &word, sizeof(f));
    return f;
  }
  llvm::APFloat value(llvm::APFloat::IEEEhalf(), llvm::APInt(16, bits));
  return value.convertToDouble();
}

void HostTensor::expand() const {
  if (expanded)
    return;
  expanded = true;
  if (!hasRawBytes())
    return;
  int64_t n = getNumElements();
  const char *p = raw.data;
  using namespace llvm::support;
  auto read = [&](auto tag, int64_t i) {
    using T = decltype(tag);
    return endian::read<T, llvm::endianness::little>(p + i * sizeof(T));
  };
  if (isFloat()) {
    floats.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      switch (dataType) {
      case onnx::TensorProto_DataType_FLOAT: {
        uint32_t bits = read(uint32_t(), i);
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        floats[i] = f;
        break;
      }
      case onnx::TensorProto_DataType_DOUBLE: {
        uint64_t bits = read(uint64_t(), i);
        std::memcpy(&floats[i], &bits, sizeof(double));
        break;
      }
      default:
        floats[i] =
            halfToDouble(read(uint16_t(), i),
                         dataType == onnx::TensorProto_DataType_BFLOAT16);
      }
    }
    return;
  }
  ints.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (dataType) {
    case onnx::TensorProto_DataType_INT64:
    case onnx::TensorProto_DataType_UINT64:
      ints[i] = read(int64_t(), i);
      break;
    case onnx::TensorProto_DataType_INT32:
      ints[i] = read(int32_t(), i);
      break;
    case onnx::TensorProto_DataType_UINT32:
      ints[i] = read(uint32_t(), i);
      break;
    case onnx::TensorProto_DataType_INT16:
      ints[i] = read(int16_t(), i);
      break;
    case onnx::TensorProto_DataType_UINT16:
      ints[i] = read(uint16_t(), i);
      break;
    case onnx::TensorProto_DataType_INT8:
      ints[i] = static_cast<int8_t>(p[i]);
      break;
    case onnx::TensorProto_DataType_BOOL:
      ints[i] = p[i] != 0;
      break;
    default:
      ints[i] = static_cast<uint8_t>(p[i]);
    }
  }
}

const std::vector<double> &HostTensor::getFloats() const {
  expand();
  if (!isFloat() && floats.empty() && !ints.empty())
    floats.assign(ints.begin(), ints.end());
  return floats;
}

const std::vector<int64_t> &HostTensor::getInts() const {
  expand();
  if (isFloat() && ints.empty() && !floats.empty())
    for (double f : floats)
      ints.push_back(static_cast<int64_t>(f));
  return ints;
}

double HostTensor::getAsDouble(int64_t i) const {
  return isFloat() ? getFloats()[i] : static_cast<double>(getInts()[i]);
}

int64_t HostTensor::getAsInt(int64_t i) const {
  return isFloat() ? static_cast<int64_t>(getFloats()[i]) : getInts()[i];
}
