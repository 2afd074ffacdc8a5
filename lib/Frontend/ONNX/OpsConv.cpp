//===- OpsConv.cpp - convolutions as matmuls
//-------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// ONNX Conv (1-, 2- and 3-D; strides, pads, auto_pad, dilations, groups)
// lowered to the ops a transformer's projections use, so that sharding,
// fusion and the kernels need nothing new: the input's patches are laid out
// as rows ([batch, positions, channels * kernel]) and multiplied by the
// weight read as [channels * kernel, outputs]. A convolution whose stride
// equals its kernel (ViT's patch embedding) reads its patches with one
// reshape and one transpose; any other gathers each kernel offset with a
// strided slice of the zero-padded input (Whisper's Conv1d: three).
//
//===----------------------------------------------------------------------===//

#include "ImportContext.h"

#include "partita/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

Value transpose(OpBuilder &b, Location loc, Value v,
                ArrayRef<int64_t> permutation) {
  SmallVector<int64_t> shape;
  for (int64_t p : permutation)
    shape.push_back(typeOf(v).getDimSize(p));
  return nn::TransposeOp::create(b, loc, typeOf(v).clone(shape), v,
                                 permutation);
}

/// `x` with `before` and `after` zeros along `dim`.
Value padDim(OpBuilder &b, Location loc, Value x, int64_t dim, int64_t before,
             int64_t after) {
  if (before == 0 && after == 0)
    return x;
  auto type = typeOf(x);
  SmallVector<Value> parts;
  auto zeros = [&](int64_t size) {
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = size;
    auto zeroType = type.clone(shape);
    return nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            zeroType, b.getZeroAttr(type.getElementType()))));
  };
  if (before)
    parts.push_back(zeros(before));
  parts.push_back(x);
  if (after)
    parts.push_back(zeros(after));
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] += before + after;
  return nn::ConcatOp::create(b, loc, type.clone(shape), parts,
                              static_cast<uint64_t>(dim));
}

LogicalResult convHandler(NodeContext &ctx) {
  Value x = ctx.getInput(0), w = ctx.getInput(1);
  if (!x || !w)
    return failure();
  auto xType = typeOf(x), wType = typeOf(w);
  if (!isa<FloatType>(xType.getElementType()))
    return ctx.emitError() << "Conv of " << xType.getElementType()
                           << " is not supported (floating point only)";
  int64_t rank = xType.getRank(), spatial = rank - 2;
  if (rank < 3 || rank > 5 || wType.getRank() != rank)
    return ctx.emitError() << "Conv needs an input and a weight of rank 3 to "
                              "5 alike ([batch, channels, spatial...] and "
                              "[outputs, channels / group, kernel...])";
  int64_t batch = xType.getDimSize(0), channels = xType.getDimSize(1);
  int64_t outputs = wType.getDimSize(0);
  int64_t group = ctx.getAttrInt("group", 1);
  if (group < 1 || channels % group != 0 || outputs % group != 0 ||
      wType.getDimSize(1) != channels / group)
    return ctx.emitError() << "Conv group " << group << " does not fit "
                           << channels << " input channels, " << outputs
                           << " outputs and a weight of " << wType.getDimSize(1)
                           << " channels per group";
  ArrayRef<int64_t> in = xType.getShape().drop_front(2);
  ArrayRef<int64_t> kernel = wType.getShape().drop_front(2);
  auto attrOr = [&](StringRef name, int64_t fill,
                    size_t count) -> FailureOr<SmallVector<int64_t>> {
    std::optional<SmallVector<int64_t>> given = ctx.getAttrInts(name);
    if (!given)
      return SmallVector<int64_t>(count, fill);
    if (given->size() != count)
      return ctx.emitError() << "Conv " << name << " has " << given->size()
                             << " values for " << count;
    return *given;
  };
  FailureOr<SmallVector<int64_t>> strides = attrOr("strides", 1, spatial);
  FailureOr<SmallVector<int64_t>> dilations = attrOr("dilations", 1, spatial);
  FailureOr<SmallVector<int64_t>> pads = attrOr("pads", 0, 2 * spatial);
  FailureOr<SmallVector<int64_t>> shape = attrOr("kernel_shape", 0, spatial);
  if (failed(strides) || failed(dilations) || failed(pads) || failed(shape))
    return failure();
  if (ctx.getAttrInts("kernel_shape") && ArrayRef<int64_t>(*shape) != kernel)
    return ctx.emitError() << "Conv kernel_shape does not match the weight";
  // Bounded so that the padded extents below cannot overflow (real
  // models use single digits).
  constexpr int64_t kLargest = int64_t(1) << 20;
  for (int64_t d = 0; d < spatial; ++d) {
    if ((*strides)[d] < 1 || (*dilations)[d] < 1 || (*pads)[d] < 0 ||
        (*pads)[spatial + d] < 0 || kernel[d] < 1)
      return ctx.emitError() << "Conv strides, dilations and kernel must be "
                                "positive and pads not negative";
    if ((*strides)[d] > kLargest || (*dilations)[d] > kLargest ||
        (*pads)[d] > kLargest || (*pads)[spatial + d] > kLargest ||
        kernel[d] > kLargest || in[d] > kLargest)
      return ctx.emitError() << "Conv sizes, strides, dilations and pads "
                                "above "
                             << kLargest << " are not supported";
  }
  std::string autoPad = ctx.getAttrString("auto_pad", "NOTSET");
  SmallVector<int64_t> out(spatial);
  for (int64_t d = 0; d < spatial; ++d) {
    int64_t s = (*strides)[d], extent = ((kernel[d] - 1) * (*dilations)[d]) + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t total =
          std::max<int64_t>(0, ((in[d] + s - 1) / s - 1) * s + extent - in[d]);
      int64_t small = total / 2;
      (*pads)[d] = autoPad == "SAME_UPPER" ? small : total - small;
      (*pads)[spatial + d] = total - (*pads)[d];
    } else if (autoPad == "VALID") {
      (*pads)[d] = (*pads)[spatial + d] = 0;
    } else if (autoPad != "NOTSET") {
      return ctx.emitError() << "Conv auto_pad '" << autoPad
                             << "' is not NOTSET, SAME_UPPER, SAME_LOWER or "
                                "VALID";
    }
    int64_t padded = in[d] + (*pads)[d] + (*pads)[spatial + d];
    if (padded < extent)
      return ctx.emitError() << "Conv kernel of extent " << extent
                             << " does not fit spatial dimension " << d
                             << " of " << padded << " (padded)";
    out[d] = (padded - extent) / s + 1;
  }
  Value bias;
  if (ctx.hasInput(2)) {
    bias = ctx.getInput(2);
    if (!bias)
      return failure();
    if (typeOf(bias).getShape() != ArrayRef<int64_t>{outputs})
      return ctx.emitError() << "Conv bias must be [" << outputs << "]";
  }

  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  int64_t positions = 1, taps = 1;
  for (int64_t d = 0; d < spatial; ++d) {
    positions *= out[d];
    taps *= kernel[d];
  }
  // The patches: [batch, channels, taps, positions].
  Value patches;
  bool patchify = group == 1 &&
                  llvm::all_of(*pads, [](int64_t p) { return p == 0; }) &&
                  llvm::all_of(*dilations, [](int64_t v) { return v == 1; });
  for (int64_t d = 0; patchify && d < spatial; ++d)
    patchify = (*strides)[d] == kernel[d] && in[d] % kernel[d] == 0;
  Value rows;
  if (patchify) {
    // [n, c, o1, k1, ..., oS, kS] -> [n, o1..oS, c, k1..kS]: a row per
    // patch, its features in the weight's order.
    SmallVector<int64_t> split = {batch, channels};
    SmallVector<int64_t> permutation = {0};
    for (int64_t d = 0; d < spatial; ++d) {
      split.append({out[d], kernel[d]});
      permutation.push_back(2 + 2 * d);
    }
    permutation.push_back(1);
    for (int64_t d = 0; d < spatial; ++d)
      permutation.push_back(3 + 2 * d);
    Value grouped = reshape(b, loc, x, split);
    rows = reshape(b, loc, transpose(b, loc, grouped, permutation),
                   {batch, positions, channels * taps});
  } else {
    Value padded = x;
    for (int64_t d = 0; d < spatial; ++d)
      padded = padDim(b, loc, padded, 2 + d, (*pads)[d], (*pads)[spatial + d]);
    SmallVector<Value> pieces;
    SmallVector<int64_t> offset(spatial, 0);
    for (int64_t tap = 0; tap < taps; ++tap) {
      SmallVector<int64_t> start(rank, 0), limit(typeOf(padded).getShape()),
          step(rank, 1);
      for (int64_t d = 0; d < spatial; ++d) {
        start[2 + d] = offset[d] * (*dilations)[d];
        limit[2 + d] = start[2 + d] + (*strides)[d] * (out[d] - 1) + 1;
        step[2 + d] = (*strides)[d];
      }
      SmallVector<int64_t> sliced = {batch, channels};
      sliced.append(out.begin(), out.end());
      Value piece = nn::SliceOp::create(b, loc, xType.clone(sliced), padded,
                                        start, limit, step);
      pieces.push_back(reshape(b, loc, piece, {batch, channels, 1, positions}));
      // The next kernel offset, the last dimension fastest (the weight's
      // order).
      for (int64_t d = spatial - 1; d >= 0; --d) {
        if (++offset[d] < kernel[d])
          break;
        offset[d] = 0;
      }
    }
    patches = pieces.size() == 1
                  ? pieces.front()
                  : nn::ConcatOp::create(
                        b, loc, xType.clone({batch, channels, taps, positions}),
                        pieces, uint64_t(2))
                        .getResult();
  }

  // Each group's rows times its weight [outputs / group, channels / group
  // * taps], transposed.
  int64_t perGroup = channels / group, outPerGroup = outputs / group;
  Value weight = reshape(b, loc, w, {outputs, perGroup * taps});
  SmallVector<Value> products;
  for (int64_t g = 0; g < group; ++g) {
    Value groupRows = rows;
    if (!patchify) {
      Value channelsOf = patches;
      if (group > 1)
        channelsOf = nn::SliceOp::create(
            b, loc, xType.clone({batch, perGroup, taps, positions}), patches,
            ArrayRef<int64_t>{0, g * perGroup, 0, 0},
            ArrayRef<int64_t>{batch, (g + 1) * perGroup, taps, positions},
            ArrayRef<int64_t>{1, 1, 1, 1});
      groupRows = transpose(
          b, loc,
          reshape(b, loc, channelsOf, {batch, perGroup * taps, positions}),
          {0, 2, 1});
    }
    Value groupWeight = weight;
    if (group > 1)
      groupWeight = nn::SliceOp::create(
          b, loc, wType.clone({outPerGroup, perGroup * taps}), weight,
          ArrayRef<int64_t>{g * outPerGroup, 0},
          ArrayRef<int64_t>{(g + 1) * outPerGroup, perGroup * taps},
          ArrayRef<int64_t>{1, 1});
    products.push_back(nn::MatmulOp::create(
        b, loc, xType.clone({batch, positions, outPerGroup}), groupRows,
        transpose(b, loc, groupWeight, {1, 0}), group == 1 ? bias : Value()));
  }
  Value result = products.front();
  if (group > 1) {
    result =
        nn::ConcatOp::create(b, loc, xType.clone({batch, positions, outputs}),
                             products, uint64_t(2));
    if (bias)
      result = nn::AddOp::create(b, loc, result, bias);
  }
  // [n, positions, outputs] -> [n, outputs, o1..oS].
  SmallVector<int64_t> final = {batch, outputs};
  final.append(out.begin(), out.end());
  ctx.setOutput(0,
                reshape(b, loc, transpose(b, loc, result, {0, 2, 1}), final));
  return success();
}

} // namespace

void mlir::partita::onnx_import::registerConvOps(OpRegistry &registry) {
  registry.add("Conv", {11, nullptr, convHandler});
}
