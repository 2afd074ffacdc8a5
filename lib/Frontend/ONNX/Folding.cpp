//===- Folding.cpp - evaluating ONNX nodes on constants -------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "Folding.h"

using namespace mlir;
using namespace mlir::partita::onnx_import;

SmallVector<int64_t>
mlir::partita::onnx_import::stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

FailureOr<SmallVector<int64_t>>
mlir::partita::onnx_import::broadcast(ArrayRef<int64_t> a,
                                      ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1)
      return failure();
    out[i] = x == 1 ? y : x;
  }
  return out;
}

SmallVector<int64_t>
mlir::partita::onnx_import::broadcastIndices(ArrayRef<int64_t> from,
                                             ArrayRef<int64_t> to) {
  int64_t n = 1;
  for (int64_t d : to)
    n *= d;
  SmallVector<int64_t> toStrides = stridesOf(to);
  SmallVector<int64_t> fromStrides = stridesOf(from);
  size_t offset = to.size() - from.size();
  SmallVector<int64_t> indices(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t index = 0;
    for (size_t d = offset; d < to.size(); ++d) {
      int64_t fd = d - offset;
      if (from[fd] != 1)
        index += (i / toStrides[d]) % to[d] * fromStrides[fd];
    }
    indices[i] = index;
  }
  return indices;
}

double mlir::partita::onnx_import::roundToType(double v, int dataType) {
  if (dataType == onnx::TensorProto_DataType_FLOAT)
    return static_cast<float>(v);
  if (dataType == onnx::TensorProto_DataType_FLOAT16 ||
      dataType == onnx::TensorProto_DataType_BFLOAT16) {
    APFloat f(v);
    bool losesInfo;
    f.convert(dataType == onnx::TensorProto_DataType_FLOAT16
                  ? APFloat::IEEEhalf()
                  : APFloat::BFloat(),
              APFloat::rmNearestTiesToEven, &losesInfo);
    return f.convertToDouble();
  }
  return v;
}

int64_t mlir::partita::onnx_import::wrapToType(int64_t v, int dataType) {
  switch (dataType) {
  case onnx::TensorProto_DataType_BOOL:
    return v != 0;
  case onnx::TensorProto_DataType_INT32:
    return static_cast<int32_t>(v);
  case onnx::TensorProto_DataType_INT8:
    return static_cast<int8_t>(v);
  case onnx::TensorProto_DataType_UINT8:
    return static_cast<uint8_t>(v);
  case onnx::TensorProto_DataType_INT16:
    return static_cast<int16_t>(v);
  case onnx::TensorProto_DataType_UINT16:
    return static_cast<uint16_t>(v);
  case onnx::TensorProto_DataType_UINT32:
    return static_cast<uint32_t>(v);
  default:
    return v;
  }
}

bool mlir::partita::onnx_import::canFold(NodeContext &ctx,
                                         int64_t resultElements) {
  if (resultElements > kMaxFoldedElements)
    return false;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i)
    if (ctx.hasInput(i) && !ctx.getConstant(i))
      return false;
  return true;
}

HostTensor mlir::partita::onnx_import::reshapeTensor(const HostTensor &source,
                                                     ArrayRef<int64_t> shape) {
  return gatherTensor(source, shape, [](int64_t i) { return i; });
}
