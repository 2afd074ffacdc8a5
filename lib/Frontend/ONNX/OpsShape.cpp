//===- OpsShape.cpp - shape and data-movement ONNX ops --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Exporters compute shapes at run time: Shape, Gather, Unsqueeze, Concat,
// ConstantOfShape, Range... With every dimension bound those computations
// are constant and fold here, so Reshape, Expand, Slice and friends see
// constant operands and become static nn ops.
//
//===----------------------------------------------------------------------===//

#include "Folding.h"

#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

HostTensor intVector(ArrayRef<int64_t> values) {
  HostTensor t(onnx::TensorProto_DataType_INT64,
               {static_cast<int64_t>(values.size())});
  t.mutableInts().assign(values.begin(), values.end());
  return t;
}

/// Elements of `shape`, saturating: for comparisons with size limits. The
/// shapes a node makes are checked (NodeContext::checkShape) before use.
int64_t product(ArrayRef<int64_t> shape) {
  return getElementCountSaturated(shape);
}

/// Sets output 0 to `input` reshaped to `shape`: a folded constant when the
/// input is one, else nn.reshape.
LogicalResult setReshaped(NodeContext &ctx, ArrayRef<int64_t> shape) {
  if (const HostTensor *in = ctx.getConstant(0)) {
    if (in->hasRawBytes()) {
      ctx.setOutput(0, HostTensor::fromRaw(in->dataType,
                                           SmallVector<int64_t>(shape),
                                           in->getRawBytes()));
      return success();
    }
    if (in->getNumElements() <= kMaxFoldedElements) {
      ctx.setOutput(0, reshapeTensor(*in, shape));
      return success();
    }
  }
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType()).clone(shape);
  ctx.setOutput(
      0, type == x.getType()
             ? x
             : nn::ReshapeOp::create(ctx.getBuilder(), ctx.getLoc(), type, x)
                   .getResult());
  return success();
}

//===----------------------------------------------------------------------===//
// Shape computations
//===----------------------------------------------------------------------===//

LogicalResult foldShape(NodeContext &ctx) {
  ArrayRef<int64_t> shape = ctx.getInputShape(0);
  int64_t rank = shape.size();
  int64_t start = ctx.getAttrInt("start", 0), end = ctx.getAttrInt("end", rank);
  auto clamp = [&](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  start = clamp(start);
  end = clamp(end);
  ctx.setOutput(
      0, intVector(shape.slice(start, std::max<int64_t>(end - start, 0))));
  return success();
}

LogicalResult foldSize(NodeContext &ctx) {
  HostTensor t(onnx::TensorProto_DataType_INT64, {});
  t.mutableInts().push_back(product(ctx.getInputShape(0)));
  ctx.setOutput(0, std::move(t));
  return success();
}

LogicalResult constantOfShapeHandler(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> shape = ctx.getConstantInts(0, "shape");
  if (failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return ctx.emitError() << "ConstantOfShape shape has a negative "
                             << "dimension " << d;
  if (failed(ctx.checkShape(*shape, "the result")))
    return failure();
  // The fill value: a one-element tensor attribute, f32 0 by default.
  HostTensor fill(onnx::TensorProto_DataType_FLOAT, {});
  fill.mutableFloats().push_back(0.0);
  if (const onnx::AttributeProto *attr = ctx.getAttr("value")) {
    FailureOr<HostTensor> value = ctx.readTensor(attr->t());
    if (failed(value))
      return failure();
    if (value->getNumElements() != 1)
      return ctx.emitError() << "ConstantOfShape value must have one element";
    fill = std::move(*value);
  }
  if (product(*shape) > kMaxFoldedElements)
    return ctx.emitError() << "ConstantOfShape of " << product(*shape)
                           << " elements is larger than Partita folds ("
                           << kMaxFoldedElements << ")";
  double value = fill.getAsDouble(0);
  ctx.setOutput(
      0, makeTensor(fill.dataType, *shape, [&](int64_t) { return value; }));
  return success();
}

LogicalResult rangeHandler(NodeContext &ctx) {
  const HostTensor *start = ctx.getConstant(0), *limit = ctx.getConstant(1),
                   *delta = ctx.getConstant(2);
  for (unsigned i = 0; i < 3; ++i)
    if (!ctx.getConstant(i))
      return ctx.emitError() << "the "
                             << (i == 0   ? "start"
                                 : i == 1 ? "limit"
                                          : "delta")
                             << " input of Range must be a constant once "
                                "shapes are bound";
  if (!start->shape.empty() || !limit->shape.empty() || !delta->shape.empty())
    return ctx.emitError() << "Range bounds must be scalars (rank 0)";
  double s = start->getAsDouble(0), l = limit->getAsDouble(0),
         d = delta->getAsDouble(0);
  if (d == 0)
    return ctx.emitError() << "Range delta is zero";
  double count = std::ceil((l - s) / d);
  if (!std::isfinite(count))
    return ctx.emitError() << "Range from " << s << " to " << l << " by " << d
                           << " has no finite length";
  if (count > static_cast<double>(kMaxFoldedElements))
    return ctx.emitError() << "Range of " << count
                           << " elements is larger than Partita folds ("
                           << kMaxFoldedElements << ")";
  int64_t n = std::max<int64_t>(static_cast<int64_t>(count), 0);
  ctx.setOutput(0, makeTensor(start->dataType, {n},
                              [&](int64_t i) { return s + i * d; }));
  return success();
}

/// Constant: a tensor attribute (read as initializers are) or one of the
/// value_float(s) / value_int(s) lists.
LogicalResult constantHandler(NodeContext &ctx) {
  const onnx::NodeProto &node = ctx.getNode();
  // The schema declares every value attribute optional; exactly one is set.
  if (node.attribute_size() != 1)
    return ctx.emitError() << "Constant needs exactly one value attribute, "
                           << "node has " << node.attribute_size();
  for (const onnx::AttributeProto &attr : node.attribute()) {
    StringRef name = attr.name();
    if (name == "value") {
      FailureOr<HostTensor> value = ctx.readTensor(attr.t());
      if (failed(value))
        return failure();
      ctx.setOutput(0, std::move(*value));
      return success();
    }
    // value_float(s) / value_int(s): a scalar, or a vector of the list.
    bool isFloat = name == "value_float" || name == "value_floats";
    bool isInt = name == "value_int" || name == "value_ints";
    if (isFloat || isInt) {
      bool scalar = name == "value_float" || name == "value_int";
      std::vector<double> floats;
      std::vector<int64_t> ints;
      if (isFloat && scalar)
        floats.push_back(attr.f());
      else if (isFloat)
        floats.assign(attr.floats().begin(), attr.floats().end());
      else if (scalar)
        ints.push_back(attr.i());
      else
        ints.assign(attr.ints().begin(), attr.ints().end());
      int64_t n = isFloat ? floats.size() : ints.size();
      HostTensor t(isFloat ? onnx::TensorProto_DataType_FLOAT
                           : onnx::TensorProto_DataType_INT64,
                   scalar ? SmallVector<int64_t>() : SmallVector<int64_t>{n});
      t.mutableFloats() = std::move(floats);
      t.mutableInts() = std::move(ints);
      ctx.setOutput(0, std::move(t));
      return success();
    }
  }
  return ctx.emitError() << "Constant has no value Partita can read (sparse "
                            "or string values are not supported)";
}

//===----------------------------------------------------------------------===//
// Reshapes
//===----------------------------------------------------------------------===//

LogicalResult reshapeHandler(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> target = ctx.getConstantInts(1, "shape");
  if (failed(target))
    return failure();
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  bool allowZero = ctx.getOpset() >= 14 && ctx.getAttrInt("allowzero", 0);
  SmallVector<int64_t> shape;
  int64_t inferred = -1, known = 1;
  for (auto [i, d] : llvm::enumerate(*target)) {
    if (d == 0 && !allowZero) {
      if (i >= in.size())
        return ctx.emitError() << "Reshape copies dimension " << i
                               << " of a rank-" << in.size() << " input";
      d = in[i];
    }
    if (d == -1) {
      if (inferred >= 0)
        return ctx.emitError() << "Reshape shape has more than one -1";
      inferred = i;
      shape.push_back(1);
      continue;
    }
    if (d < 0)
      return ctx.emitError() << "Reshape shape has a negative dimension " << d;
    shape.push_back(d);
    std::optional<int64_t> next = llvm::checkedMul(known, d);
    if (!next)
      return ctx.emitError() << "Reshape shape " << shapeText(*target)
                             << " has an element count that overflows int64";
    known = *next;
  }
  int64_t total = product(in);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0)
      return ctx.emitError() << "Reshape cannot infer the -1 dimension of "
                             << total << " elements";
    shape[inferred] = total / known;
  }
  if (product(shape) != total)
    return ctx.emitError() << "Reshape of " << total << " elements to a shape"
                           << " of " << product(shape);
  return setReshaped(ctx, shape);
}

LogicalResult flattenHandler(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  int64_t rank = in.size();
  int64_t axis = ctx.getAttrInt("axis", 1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank)
    return ctx.emitError() << "Flatten axis is out of range";
  return setReshaped(
      ctx, {product(in.take_front(axis)), product(in.drop_front(axis))});
}

/// Squeeze/Unsqueeze axes: an attribute before opset 13, an input since.
FailureOr<SmallVector<int64_t>> getAxes(NodeContext &ctx, bool &present) {
  present = true;
  if (ctx.getOpset() < 13) {
    if (std::optional<SmallVector<int64_t>> axes = ctx.getAttrInts("axes"))
      return *axes;
  } else if (ctx.hasInput(1)) {
    return ctx.getConstantInts(1, "axes", /*allowScalar=*/true);
  }
  present = false;
  return SmallVector<int64_t>();
}

LogicalResult squeezeHandler(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  bool present;
  FailureOr<SmallVector<int64_t>> axes = getAxes(ctx, present);
  if (failed(axes))
    return failure();
  SmallVector<bool> drop(in.size(), false);
  if (!present) {
    for (auto [i, d] : llvm::enumerate(in))
      drop[i] = d == 1;
  }
  for (int64_t axis : *axes) {
    FailureOr<int64_t> a = ctx.normalizeAxis(axis, in.size());
    if (failed(a))
      return failure();
    if (in[*a] != 1)
      return ctx.emitError()
             << "Squeeze of dimension " << *a << " of size " << in[*a];
    drop[*a] = true;
  }
  SmallVector<int64_t> shape;
  for (auto [i, d] : llvm::enumerate(in))
    if (!drop[i])
      shape.push_back(d);
  return setReshaped(ctx, shape);
}

LogicalResult unsqueezeHandler(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  bool present;
  FailureOr<SmallVector<int64_t>> axes = getAxes(ctx, present);
  if (failed(axes))
    return failure();
  int64_t rank = in.size() + axes->size();
  SmallVector<bool> inserted(rank, false);
  for (int64_t axis : *axes) {
    FailureOr<int64_t> a = ctx.normalizeAxis(axis, rank);
    if (failed(a))
      return failure();
    if (inserted[*a])
      return ctx.emitError() << "Unsqueeze axes repeat " << *a;
    inserted[*a] = true;
  }
  SmallVector<int64_t> shape;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i)
    shape.push_back(inserted[i] ? 1 : in[next++]);
  return setReshaped(ctx, shape);
}

//===----------------------------------------------------------------------===//
// Concat, Split, Slice, Gather, Expand, Transpose, Trilu
//===----------------------------------------------------------------------===//

LogicalResult concatHandler(NodeContext &ctx) {
  ArrayRef<int64_t> first = ctx.getInputShape(0);
  FailureOr<int64_t> axis =
      ctx.normalizeAxis(ctx.getAttrInt("axis", 0), first.size());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(first);
  shape[*axis] = 0;
  bool allConstant = true;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
    ArrayRef<int64_t> s = ctx.getInputShape(i);
    if (s.size() != first.size())
      return ctx.emitError() << "Concat inputs have different ranks";
    for (size_t d = 0; d < s.size(); ++d)
      if (static_cast<int64_t>(d) != *axis && s[d] != first[d])
        return ctx.emitError()
               << "Concat input " << i << " of shape " << shapeText(s)
               << " does not match input 0 of shape " << shapeText(first)
               << " outside axis " << *axis;
    std::optional<int64_t> size = llvm::checkedAdd(shape[*axis], s[*axis]);
    if (!size)
      return ctx.emitError()
             << "Concat result dimension " << *axis << " overflows int64";
    shape[*axis] = *size;
    allConstant &= ctx.getConstant(i) != nullptr;
  }
  if (allConstant && product(shape) <= kMaxFoldedElements) {
    int64_t outer = product(ArrayRef<int64_t>(shape).take_front(*axis));
    HostTensor out(ctx.getConstant(0)->dataType, shape);
    bool isFloat = out.isFloat();
    for (int64_t o = 0; o < outer; ++o) {
      for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
        const HostTensor *t = ctx.getConstant(i);
        int64_t block = t->getNumElements() / std::max<int64_t>(outer, 1);
        for (int64_t k = 0; k < block; ++k) {
          if (isFloat)
            out.mutableFloats().push_back(t->getAsDouble(o * block + k));
          else
            out.mutableInts().push_back(t->getAsInt(o * block + k));
        }
      }
    }
    ctx.setOutput(0, std::move(out));
    return success();
  }
  SmallVector<Value> inputs;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i) {
    Value v = ctx.getInput(i);
    if (!v)
      return failure();
    inputs.push_back(v);
  }
  auto type = cast<RankedTensorType>(inputs[0].getType()).clone(shape);
  ctx.setOutput(0, nn::ConcatOp::create(ctx.getBuilder(), ctx.getLoc(), type,
                                        inputs, *axis));
  return success();
}

LogicalResult splitHandler(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  FailureOr<int64_t> axis =
      ctx.normalizeAxis(ctx.getAttrInt("axis", 0), in.size());
  if (failed(axis))
    return failure();
  unsigned numOutputs = ctx.getNumOutputs();
  SmallVector<int64_t> sizes;
  if (ctx.hasInput(1) && ctx.getAttr("num_outputs"))
    return ctx.emitError() << "Split takes a split input or num_outputs, "
                              "not both";
  if (ctx.getOpset() >= 13 && ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> split = ctx.getConstantInts(1, "split");
    if (failed(split))
      return failure();
    sizes = *split;
  } else if (std::optional<SmallVector<int64_t>> split =
                 ctx.getAttrInts("split")) {
    sizes = *split;
  } else {
    // Equal pieces; with opset 18's num_outputs the last may be smaller.
    if (ctx.getOpset() >= 18 && !ctx.getAttr("num_outputs"))
      return ctx.emitError() << "Split needs a split input or num_outputs "
                                "since opset 18";
    int64_t n = ctx.getAttrInt("num_outputs", numOutputs);
    if (n != numOutputs)
      return ctx.emitError() << "Split num_outputs " << n << " but the node "
                             << "has " << numOutputs << " outputs";
    int64_t piece = (in[*axis] + n - 1) / n;
    for (int64_t i = 0; i < n; ++i)
      sizes.push_back(std::min(piece, in[*axis] - i * piece));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return ctx.emitError() << "Split size " << s << " is negative";
    std::optional<int64_t> sum = llvm::checkedAdd(total, s);
    if (!sum)
      return ctx.emitError() << "Split sizes overflow int64";
    total = *sum;
  }
  if (sizes.size() != numOutputs || total != in[*axis])
    return ctx.emitError() << "Split sizes do not cover dimension " << *axis
                           << " of size " << in[*axis] << " with " << numOutputs
                           << " outputs";
  if (const HostTensor *t = ctx.getConstant(0);
      t && t->getNumElements() <= kMaxFoldedElements) {
    SmallVector<int64_t> inStrides = stridesOf(in);
    int64_t offset = 0;
    for (unsigned o = 0; o < numOutputs; ++o) {
      SmallVector<int64_t> shape(in);
      shape[*axis] = sizes[o];
      SmallVector<int64_t> outStrides = stridesOf(shape);
      ctx.setOutput(o, gatherTensor(*t, shape, [&](int64_t i) {
                      int64_t index = 0;
                      for (size_t d = 0; d < shape.size(); ++d) {
                        int64_t c = (i / outStrides[d]) % shape[d];
                        if (static_cast<int64_t>(d) == *axis)
                          c += offset;
                        index += c * inStrides[d];
                      }
                      return index;
                    }));
      offset += sizes[o];
    }
    return success();
  }
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  SmallVector<Type> types;
  for (int64_t s : sizes) {
    SmallVector<int64_t> shape(in);
    shape[*axis] = s;
    types.push_back(cast<RankedTensorType>(x.getType()).clone(shape));
  }
  auto split =
      nn::SplitOp::create(ctx.getBuilder(), ctx.getLoc(), types, x, *axis);
  for (unsigned o = 0; o < numOutputs; ++o)
    ctx.setOutput(o, split.getResult(o));
  return success();
}

LogicalResult sliceHandler(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  int64_t rank = in.size();
  FailureOr<SmallVector<int64_t>> starts = ctx.getConstantInts(1, "starts");
  FailureOr<SmallVector<int64_t>> ends = ctx.getConstantInts(2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  SmallVector<int64_t> axes, steps(starts->size(), 1);
  if (ctx.hasInput(3)) {
    FailureOr<SmallVector<int64_t>> a = ctx.getConstantInts(3, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    for (size_t i = 0; i < starts->size(); ++i)
      axes.push_back(i);
  }
  if (ctx.hasInput(4)) {
    FailureOr<SmallVector<int64_t>> s = ctx.getConstantInts(4, "steps");
    if (failed(s))
      return failure();
    steps = *s;
  }
  if (axes.size() != starts->size() || ends->size() != starts->size() ||
      steps.size() != starts->size())
    return ctx.emitError() << "Slice starts, ends, axes and steps differ in "
                              "length";
  SmallVector<int64_t> start(rank, 0), limit(in), stride(rank, 1);
  SmallVector<bool> sliced(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    FailureOr<int64_t> axis = ctx.normalizeAxis(axes[i], rank);
    if (failed(axis))
      return failure();
    if (sliced[*axis])
      return ctx.emitError() << "Slice axes repeat " << *axis;
    sliced[*axis] = true;
    int64_t size = in[*axis], step = steps[i];
    if (step <= 0)
      return ctx.emitError() << "Slice with step " << step
                             << " is not supported (only positive steps)";
    auto clampIndex = [&](int64_t v) {
      if (v < 0)
        v += size;
      return std::clamp<int64_t>(v, 0, size);
    };
    start[*axis] = clampIndex((*starts)[i]);
    limit[*axis] = std::max(start[*axis], clampIndex((*ends)[i]));
    stride[*axis] = step;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(
        limit[d] > start[d] ? 1 + (limit[d] - start[d] - 1) / stride[d] : 0);
  if (const HostTensor *t = ctx.getConstant(0);
      t && product(shape) <= kMaxFoldedElements) {
    SmallVector<int64_t> inStrides = stridesOf(in),
                         outStrides = stridesOf(shape);
    ctx.setOutput(0, gatherTensor(*t, shape, [&](int64_t i) {
                    int64_t index = 0;
                    for (int64_t d = 0; d < rank; ++d)
                      index += (start[d] +
                                (i / outStrides[d]) % shape[d] * stride[d]) *
                               inStrides[d];
                    return index;
                  }));
    return success();
  }
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType()).clone(shape);
  ctx.setOutput(0, type == x.getType()
                       ? x
                       : nn::SliceOp::create(ctx.getBuilder(), ctx.getLoc(),
                                             type, x, start, limit, stride)
                             .getResult());
  return success();
}

LogicalResult gatherHandler(NodeContext &ctx) {
  ArrayRef<int64_t> data = ctx.getInputShape(0);
  ArrayRef<int64_t> indices = ctx.getInputShape(1);
  FailureOr<int64_t> axis =
      ctx.normalizeAxis(ctx.getAttrInt("axis", 0), data.size());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(data.take_front(*axis));
  llvm::append_range(shape, indices);
  llvm::append_range(shape, data.drop_front(*axis + 1));
  const HostTensor *d = ctx.getConstant(0), *idx = ctx.getConstant(1);
  int64_t size = data[*axis];
  // Constant indices are checked here whether or not the gather folds: a
  // model that indexes out of range is refused at compile time, as
  // onnxruntime refuses it on every input.
  if (idx)
    for (int64_t k = 0, n = idx->getNumElements(); k < n; ++k) {
      int64_t i = idx->getAsInt(k);
      if (i < -size || i >= size)
        return ctx.emitError() << "Gather index " << i << " at position " << k
                               << " is out of range for size " << size;
    }
  if (d && idx && product(shape) <= kMaxFoldedElements) {
    int64_t inner = product(data.drop_front(*axis + 1));
    int64_t n = idx->getNumElements();
    ctx.setOutput(0, gatherTensor(*d, shape, [&](int64_t linear) {
                    int64_t innerIndex = linear % inner;
                    int64_t rest = linear / inner;
                    int64_t i = idx->getAsInt(rest % n);
                    if (i < 0)
                      i += size;
                    return ((rest / n) * size + i) * inner + innerIndex;
                  }));
    return success();
  }
  Value x = ctx.getInput(0), i = ctx.getInput(1);
  if (!x || !i)
    return failure();
  auto dataType = cast<RankedTensorType>(x.getType());
  auto type = dataType.clone(shape);
  // A lookup of rows of a float table is an embedding.
  if (*axis == 0 && data.size() == 2 &&
      isa<FloatType>(dataType.getElementType()) && !ctx.getConstant(1)) {
    ctx.setOutput(
        0, nn::EmbeddingOp::create(ctx.getBuilder(), ctx.getLoc(), type, x, i));
    return success();
  }
  ctx.setOutput(0, nn::GatherOp::create(ctx.getBuilder(), ctx.getLoc(), type, x,
                                        i, *axis));
  return success();
}

LogicalResult expandHandler(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> target = ctx.getConstantInts(1, "shape");
  if (failed(target))
    return failure();
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  FailureOr<SmallVector<int64_t>> shape = broadcast(in, *target);
  if (failed(shape))
    return ctx.emitError() << "Expand of a tensor that does not broadcast to "
                              "the target shape";
  if (failed(ctx.checkShape(*shape, "the result")))
    return failure();
  if (const HostTensor *t = ctx.getConstant(0);
      t && product(*shape) <= kMaxFoldedElements) {
    SmallVector<int64_t> indices = broadcastIndices(in, *shape);
    ctx.setOutput(
        0, gatherTensor(*t, *shape, [&](int64_t i) { return indices[i]; }));
    return success();
  }
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType()).clone(*shape);
  ctx.setOutput(0, type == x.getType()
                       ? x
                       : nn::BroadcastToOp::create(ctx.getBuilder(),
                                                   ctx.getLoc(), type, x)
                             .getResult());
  return success();
}

/// Tile: the input repeated `repeats[d]` times along each dimension d
/// (constant repeats). A constant input folds; otherwise each dimension d
/// gains a repeat dimension before it, broadcast to repeats[d], and the
/// pairs merge: [r0 * d0, r1 * d1, ...].
LogicalResult tileHandler(NodeContext &ctx) {
  FailureOr<SmallVector<int64_t>> repeats = ctx.getConstantInts(1, "repeats");
  if (failed(repeats))
    return failure();
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  if (repeats->size() != in.size())
    return ctx.emitError() << "Tile has " << repeats->size()
                           << " repeats for an input of rank " << in.size();
  SmallVector<int64_t> shape, pairs, expanded;
  for (auto [size, repeat] : llvm::zip(in, *repeats)) {
    if (repeat < 0)
      return ctx.emitError() << "Tile repeats " << repeat << " is negative";
    if (repeat != 0 && size > std::numeric_limits<int64_t>::max() / repeat)
      return ctx.emitError() << "Tile of a dimension of " << size << " by "
                             << repeat << " overflows";
    shape.push_back(size * repeat);
    pairs.append({1, size});
    expanded.append({repeat, size});
  }
  if (failed(ctx.checkShape(shape, "the result")))
    return failure();
  if (const HostTensor *t = ctx.getConstant(0);
      t && product(shape) <= kMaxFoldedElements) {
    SmallVector<int64_t> strides(in.size(), 1);
    for (int64_t d = static_cast<int64_t>(in.size()) - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * in[d + 1];
    ctx.setOutput(0, gatherTensor(*t, shape, [&](int64_t i) {
                    int64_t index = 0;
                    for (int64_t d = static_cast<int64_t>(shape.size()) - 1;
                         d >= 0; --d) {
                      index += (i % shape[d]) % in[d] * strides[d];
                      i /= shape[d];
                    }
                    return index;
                  }));
    return success();
  }
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType());
  if (llvm::all_of(*repeats, [](int64_t r) { return r == 1; })) {
    ctx.setOutput(0, x);
    return success();
  }
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  Value paired = nn::ReshapeOp::create(b, loc, type.clone(pairs), x);
  Value spread =
      nn::BroadcastToOp::create(b, loc, type.clone(expanded), paired);
  ctx.setOutput(0, nn::ReshapeOp::create(b, loc, type.clone(shape), spread));
  return success();
}

LogicalResult transposeHandler(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  int64_t rank = in.size();
  SmallVector<int64_t> perm;
  if (std::optional<SmallVector<int64_t>> p = ctx.getAttrInts("perm"))
    perm = *p;
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  SmallVector<bool> seen(rank, false);
  if (static_cast<int64_t>(perm.size()) != rank)
    return ctx.emitError() << "Transpose perm has " << perm.size()
                           << " entries for rank " << rank;
  // Unlike axes, perm entries are never negative.
  for (int64_t p : perm) {
    if (p < 0 || p >= rank)
      return ctx.emitError() << "Transpose perm entry " << p
                             << " is out of range [0, " << rank << ")";
    if (seen[p])
      return ctx.emitError() << "Transpose perm repeats " << p;
    seen[p] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(in[p]);
  if (const HostTensor *t = ctx.getConstant(0);
      t && t->getNumElements() <= kMaxFoldedElements && !t->hasRawBytes()) {
    SmallVector<int64_t> inStrides = stridesOf(in),
                         outStrides = stridesOf(shape);
    ctx.setOutput(0, gatherTensor(*t, shape, [&](int64_t i) {
                    int64_t index = 0;
                    for (int64_t d = 0; d < rank; ++d)
                      index +=
                          (i / outStrides[d]) % shape[d] * inStrides[perm[d]];
                    return index;
                  }));
    return success();
  }
  // Weights stay shared with the model; their transpose is an op.
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  auto type = cast<RankedTensorType>(x.getType()).clone(shape);
  ctx.setOutput(0, nn::TransposeOp::create(ctx.getBuilder(), ctx.getLoc(), type,
                                           x, perm));
  return success();
}

/// Trilu keeps the lower (upper = 0) or upper triangle of the last two
/// dimensions, shifted by the diagonal offset k.
bool triluKeeps(bool upper, int64_t k, int64_t row, int64_t col) {
  return upper ? col - row >= k : col - row <= k;
}

LogicalResult triluHandler(NodeContext &ctx) {
  ArrayRef<int64_t> in = ctx.getInputShape(0);
  if (in.size() < 2)
    return ctx.emitError() << "Trilu needs rank 2 or more";
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> kv =
        ctx.getConstantInts(1, "k", /*allowScalar=*/true);
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return ctx.emitError()
             << "Trilu k must have one element, found " << kv->size();
    k = (*kv)[0];
  }
  bool upper = ctx.getAttrInt("upper", 1) != 0;
  int64_t rows = in[in.size() - 2], cols = in.back();
  if (const HostTensor *t = ctx.getConstant(0);
      t && t->getNumElements() <= kMaxFoldedElements) {
    ctx.setOutput(0, makeTensor(t->dataType, in, [&](int64_t i) {
                    int64_t col = i % cols, row = (i / cols) % rows;
                    return triluKeeps(upper, k, row, col) ? t->getAsDouble(i)
                                                          : 0.0;
                  }));
    return success();
  }
  // x * mask as a where against zero, the mask a constant.
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  OpBuilder &b = ctx.getBuilder();
  auto type = cast<RankedTensorType>(x.getType());
  if (getElementCountSaturated({rows, cols}) >
      nn::ConstantOp::kMaxInlineElements)
    return ctx.emitError() << "Trilu of a non-constant " << rows << "x" << cols
                           << " matrix is not supported";
  SmallVector<bool> keep;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      keep.push_back(triluKeeps(upper, k, r, c));
  auto maskType = RankedTensorType::get({rows, cols}, b.getI1Type());
  Value mask = nn::ConstantOp::create(
      b, ctx.getLoc(), DenseElementsAttr::get(maskType, ArrayRef<bool>(keep)));
  Value zero = nn::ConstantOp::create(
      b, ctx.getLoc(),
      cast<ElementsAttr>(DenseElementsAttr::get(
          RankedTensorType::get({}, type.getElementType()),
          b.getZeroAttr(type.getElementType()))));
  ctx.setOutput(0, nn::WhereOp::create(b, ctx.getLoc(), type, mask, x, zero));
  return success();
}

void add(OpRegistry &registry, StringRef name, int64_t since,
         LogicalResult (*handler)(NodeContext &)) {
  // These handlers fold when their data input is constant and build
  // otherwise, so the same function serves both.
  registry.add(name, {since, nullptr, handler});
}

} // namespace

void mlir::partita::onnx_import::registerShapeOps(OpRegistry &registry) {
  registry.add("Shape", {1, foldShape, nullptr, /*evaluatesFromTypes=*/true});
  registry.add("Size", {1, foldSize, nullptr, /*evaluatesFromTypes=*/true});
  add(registry, "ConstantOfShape", 9, constantOfShapeHandler);
  add(registry, "Range", 11, rangeHandler);
  add(registry, "Constant", 1, constantHandler);
  add(registry, "Reshape", 5, reshapeHandler);
  add(registry, "Flatten", 1, flattenHandler);
  add(registry, "Squeeze", 1, squeezeHandler);
  add(registry, "Unsqueeze", 1, unsqueezeHandler);
  add(registry, "Concat", 4, concatHandler);
  add(registry, "Split", 2, splitHandler);
  add(registry, "Slice", 10, sliceHandler);
  add(registry, "Gather", 1, gatherHandler);
  add(registry, "Expand", 8, expandHandler);
  add(registry, "Tile", 6, tileHandler);
  add(registry, "Transpose", 1, transposeHandler);
  add(registry, "Trilu", 14, triluHandler);
}
