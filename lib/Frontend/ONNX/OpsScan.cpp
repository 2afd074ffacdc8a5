//===- OpsScan.cpp - CumSum -----------------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// CumSum becomes nn.cumsum. Exporters write it for position ids
// (`attention_mask.cumsum(-1) - 1` in transformers' dynamic exports); the
// axis is a constant input there, and a non-constant axis is refused at the
// node. A constant input folds, in the order and precision the run-time
// kernel uses (fp32 accumulation along the axis, integers wrapping).
//
//===----------------------------------------------------------------------===//

#include "Folding.h"

#include "partita/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

/// The axis input as one integer in [-rank, rank): a scalar or a 1-D tensor
/// of one element, as onnxruntime accepts.
FailureOr<int64_t> cumsumAxis(NodeContext &ctx, int64_t rank, bool quiet) {
  const HostTensor *axis = ctx.hasInput(1) ? ctx.getConstant(1) : nullptr;
  if (!axis) {
    if (quiet)
      return failure();
    return ctx.emitError() << "the axis input of CumSum must be a constant "
                              "(a scalar or a 1-element tensor)";
  }
  if (axis->shape.size() > 1 || axis->getNumElements() != 1) {
    if (quiet)
      return failure();
    return ctx.emitError() << "the axis input of CumSum must hold one "
                              "integer, not a tensor of shape "
                           << shapeText(axis->shape);
  }
  int64_t value = axis->getAsInt(0);
  if (quiet && (rank == 0 || value < -rank || value >= rank))
    return failure();
  return ctx.normalizeAxis(value, rank);
}

LogicalResult foldCumsum(NodeContext &ctx) {
  const HostTensor *in = ctx.getConstant(0);
  if (!in || !canFold(ctx, in->getNumElements()))
    return failure();
  // The types nn.cumsum has; the builder refuses the others.
  switch (in->dataType) {
  case onnx::TensorProto_DataType_FLOAT:
  case onnx::TensorProto_DataType_FLOAT16:
  case onnx::TensorProto_DataType_BFLOAT16:
  case onnx::TensorProto_DataType_INT32:
  case onnx::TensorProto_DataType_INT64:
    break;
  default:
    return failure();
  }
  int64_t rank = in->shape.size();
  FailureOr<int64_t> axis = cumsumAxis(ctx, rank, /*quiet=*/true);
  if (failed(axis))
    return failure();
  bool exclusive = ctx.getAttrInt("exclusive", 0) != 0;
  bool reverse = ctx.getAttrInt("reverse", 0) != 0;
  int64_t size = in->shape[*axis], inner = 1, outer = 1;
  for (int64_t d = *axis + 1; d < rank; ++d)
    inner *= in->shape[d];
  for (int64_t d = 0; d < *axis; ++d)
    outer *= in->shape[d];
  bool isFloat = in->isFloat();
  std::vector<double> floats(isFloat ? in->getNumElements() : 0);
  std::vector<int64_t> ints(isFloat ? 0 : in->getNumElements());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < inner; ++c) {
      float floatAcc = 0;
      uint64_t intAcc = 0;
      for (int64_t step = 0; step < size; ++step) {
        int64_t k = reverse ? size - 1 - step : step;
        int64_t at = (o * size + k) * inner + c;
        if (isFloat) {
          float x = static_cast<float>(in->getAsDouble(at));
          if (!exclusive)
            floatAcc += x;
          floats[at] = floatAcc;
          if (exclusive)
            floatAcc += x;
        } else {
          uint64_t x = static_cast<uint64_t>(in->getAsInt(at));
          if (!exclusive)
            intAcc += x;
          ints[at] = static_cast<int64_t>(intAcc);
          if (exclusive)
            intAcc += x;
        }
      }
    }
  }
  HostTensor out(in->dataType, in->shape);
  for (double &v : floats)
    v = roundToType(v, in->dataType);
  for (int64_t &v : ints)
    v = wrapToType(v, in->dataType);
  out.mutableFloats() = std::move(floats);
  out.mutableInts() = std::move(ints);
  ctx.setOutput(0, std::move(out));
  return success();
}

LogicalResult buildCumsum(NodeContext &ctx) {
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  Type element = type.getElementType();
  if (!element.isF32() && !element.isF16() && !element.isBF16() &&
      !element.isInteger(32) && !element.isInteger(64))
    return ctx.emitError() << "CumSum of " << element
                           << " is not supported (f32, f16, bf16, int32 or "
                              "int64)";
  FailureOr<int64_t> axis = cumsumAxis(ctx, type.getRank(), /*quiet=*/false);
  if (failed(axis))
    return failure();
  bool exclusive = ctx.getAttrInt("exclusive", 0) != 0;
  bool reverse = ctx.getAttrInt("reverse", 0) != 0;
  ctx.setOutput(0, nn::CumsumOp::create(ctx.getBuilder(), ctx.getLoc(), type, x,
                                        *axis, exclusive, reverse));
  return success();
}

} // namespace

void mlir::partita::onnx_import::registerScanOps(OpRegistry &registry) {
  registry.add("CumSum", {11, foldCumsum, buildCumsum});
}
