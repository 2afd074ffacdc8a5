//===- OpsIndexing.cpp - GatherND, GatherElements, ScatterND --------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// nn has one gather (ONNX Gather along an axis). The other indexing ops are
// decomposed into it: the data is flattened to rows, each index tuple
// becomes one linear row index (constant strides and offsets, nn
// arithmetic on the indices), and one nn.gather on axis 0 reads the rows.
// Out-of-range indices are refused at run time as nn.gather refuses them:
// an invalid tuple maps to a row index below -rows, never to another row.
// Constant indices are resolved (and range-checked) at import time.
//
//===----------------------------------------------------------------------===//

#include "Folding.h"

#include "partita/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

int64_t product(ArrayRef<int64_t> shape) {
  return getElementCountSaturated(shape);
}

/// An i64 constant of `shape` holding `values`.
Value indexConstant(NodeContext &ctx, ArrayRef<int64_t> shape,
                    ArrayRef<int64_t> values, StringRef what) {
  HostTensor t(onnx::TensorProto_DataType_INT64, SmallVector<int64_t>(shape));
  t.mutableInts().assign(values.begin(), values.end());
  std::string name = ctx.getNumOutputs() ? ctx.getNode().output(0) : "";
  return ctx.createConstant(t, name + "." + what.str());
}

Value indexScalar(NodeContext &ctx, int64_t value) {
  return indexConstant(ctx, {}, {value}, "scalar");
}

/// Indices as i64 (nn.gather takes i32 too; the arithmetic here is i64).
Value toI64(NodeContext &ctx, Value v) {
  auto type = typeOf(v);
  if (type.getElementType().isInteger(64))
    return v;
  return nn::CastOp::create(ctx.getBuilder(), ctx.getLoc(),
                            type.clone(ctx.getBuilder().getI64Type()), v);
}

/// An index into a dimension of `size`, negative ones counted from the end:
/// the normalized index and whether it lies in [0, size).
struct NormalizedIndex {
  Value index, valid;
};

NormalizedIndex normalizeIndex(NodeContext &ctx, Value index, int64_t size) {
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  auto boolType = typeOf(index).clone(b.getI1Type());
  Value zero = indexScalar(ctx, 0);
  Value sizeValue = indexScalar(ctx, size);
  Value negative = nn::CompareOp::create(b, loc, boolType,
                                         nn::CompareDirection::LT, index, zero);
  Value wrapped = nn::AddOp::create(b, loc, index, sizeValue);
  Value adjusted =
      nn::WhereOp::create(b, loc, typeOf(index), negative, wrapped, index);
  Value atLeastZero = nn::CompareOp::create(
      b, loc, boolType, nn::CompareDirection::GE, adjusted, zero);
  Value belowSize = nn::CompareOp::create(
      b, loc, boolType, nn::CompareDirection::LT, adjusted, sizeValue);
  Value valid = nn::AndOp::create(b, loc, atLeastZero, belowSize);
  return {adjusted, valid};
}

/// `linear` where `valid`, else -(rows + 1): out of range for nn.gather on
/// `rows` rows, whatever the sign convention.
Value refuseInvalid(NodeContext &ctx, Value linear, Value valid, int64_t rows) {
  Value bad = indexScalar(ctx, -(rows + 1));
  return nn::WhereOp::create(ctx.getBuilder(), ctx.getLoc(), typeOf(linear),
                             valid, linear, bad);
}

/// The constant index at position `k` of `indices`, normalized into
/// [0, size), or an error naming it.
FailureOr<int64_t> constantIndex(NodeContext &ctx, const HostTensor &indices,
                                 int64_t k, int64_t size, StringRef where) {
  int64_t i = indices.getAsInt(k);
  if (i < -size || i >= size)
    return ctx.emitError() << ctx.getNode().op_type() << " index " << i
                           << " at position " << k << " is out of range for "
                           << where << " of size " << size;
  return i < 0 ? i + size : i;
}

//===----------------------------------------------------------------------===//
// GatherElements
//===----------------------------------------------------------------------===//

LogicalResult gatherElementsHandler(NodeContext &ctx) {
  ArrayRef<int64_t> data = ctx.getInputShape(0);
  ArrayRef<int64_t> indices = ctx.getInputShape(1);
  int64_t rank = data.size();
  if (static_cast<int64_t>(indices.size()) != rank)
    return ctx.emitError() << "GatherElements data of rank " << rank
                           << " and indices of rank " << indices.size()
                           << " differ in rank";
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.getAttrInt("axis", 0), rank);
  if (failed(axis))
    return failure();
  // Beyond the data's size another dimension's index would alias.
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indices[d] > data[d])
      return ctx.emitError() << "GatherElements indices of shape "
                             << shapeText(indices) << " exceed data of shape "
                             << shapeText(data) << " in dimension " << d;
  SmallVector<int64_t> strides = stridesOf(data);
  int64_t total = product(data), n = product(indices);
  const HostTensor *dc = ctx.getConstant(0), *ic = ctx.getConstant(1);

  if (ic && n <= kMaxFoldedElements) {
    SmallVector<int64_t> indexStrides = stridesOf(indices);
    std::vector<int64_t> linear(n);
    for (int64_t k = 0; k < n; ++k) {
      FailureOr<int64_t> i =
          constantIndex(ctx, *ic, k, data[*axis], "axis " + Twine(*axis).str());
      if (failed(i))
        return failure();
      int64_t l = 0;
      for (int64_t d = 0; d < rank; ++d)
        l +=
            (d == *axis ? *i : (k / indexStrides[d]) % indices[d]) * strides[d];
      linear[k] = l;
    }
    if (dc && total <= kMaxFoldedElements) {
      ctx.setOutput(
          0, gatherTensor(*dc, indices, [&](int64_t k) { return linear[k]; }));
      return success();
    }
    Value x = ctx.getInput(0);
    Value index = indexConstant(ctx, indices, linear, "index");
    if (!x || !index)
      return failure();
    Value flat = reshape(ctx, x, {total});
    ctx.setOutput(0, nn::GatherOp::create(ctx.getBuilder(), ctx.getLoc(),
                                          typeOf(x).clone(indices), flat, index,
                                          0));
    return success();
  }

  Value x = ctx.getInput(0), idx = ctx.getInput(1);
  if (!x || !idx)
    return failure();
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  idx = toI64(ctx, idx);
  NormalizedIndex norm = normalizeIndex(ctx, idx, data[*axis]);
  Value linear = norm.index;
  if (strides[*axis] != 1) {
    Value stride = indexScalar(ctx, strides[*axis]);
    linear = nn::MulOp::create(b, loc, linear, stride);
  }
  // Every other dimension adds its coordinate times its stride: a small
  // constant along that dimension, broadcast.
  for (int64_t d = 0; d < rank; ++d) {
    if (d == *axis || indices[d] <= 1)
      continue;
    SmallVector<int64_t> shape(rank, 1), values;
    shape[d] = indices[d];
    for (int64_t c = 0; c < indices[d]; ++c)
      values.push_back(c * strides[d]);
    Value offsets =
        indexConstant(ctx, shape, values, "offsets" + std::to_string(d));
    if (!offsets)
      return failure();
    linear = nn::AddOp::create(b, loc, linear, offsets);
  }
  linear = refuseInvalid(ctx, linear, norm.valid, total);
  Value flat = reshape(ctx, x, {total});
  ctx.setOutput(0, nn::GatherOp::create(b, loc, typeOf(x).clone(indices), flat,
                                        linear, 0));
  return success();
}

//===----------------------------------------------------------------------===//
// GatherND
//===----------------------------------------------------------------------===//

/// The shapes GatherND and ScatterND index with: `indices` of shape
/// [..., k] addresses the first k dimensions of `data` after `batch` batch
/// dimensions; the data is read as rows of the remaining dimensions.
struct TupleIndexing {
  int64_t batch = 0, k = 0;
  /// Rows: product of the batch and the addressed dimensions; inner: the
  /// elements of one row.
  int64_t rows = 1, inner = 1, perBatch = 1;
  /// The stride (in rows) of each addressed dimension.
  SmallVector<int64_t> strides;
  /// indices.shape[:-1].
  SmallVector<int64_t> tuples;
};

FailureOr<TupleIndexing> getTupleIndexing(NodeContext &ctx,
                                          ArrayRef<int64_t> data,
                                          ArrayRef<int64_t> indices,
                                          int64_t batch) {
  StringRef op = ctx.getNode().op_type();
  int64_t r = data.size(), q = indices.size();
  if (r < 1 || q < 1)
    return ctx.emitError() << op << " needs data and indices of rank 1 or more";
  if (batch < 0 || batch >= std::min(r, q))
    return ctx.emitError() << op << " batch_dims " << batch
                           << " is out of range for data of rank " << r
                           << " and indices of rank " << q;
  for (int64_t d = 0; d < batch; ++d)
    if (data[d] != indices[d])
      return ctx.emitError()
             << op << " batch dimension " << d << " is " << data[d]
             << " in the data and " << indices[d] << " in the indices";
  TupleIndexing t;
  t.batch = batch;
  t.k = indices.back();
  if (t.k < 1 || t.k > r - batch)
    return ctx.emitError() << op << " index tuples of length " << t.k
                           << " do not address data of shape "
                           << shapeText(data)
                           << (batch ? " after its batch dimensions" : "");
  t.tuples.assign(indices.begin(), indices.end() - 1);
  t.perBatch = product(data.slice(batch, t.k));
  t.rows = product(data.take_front(batch + t.k));
  t.inner = product(data.drop_front(batch + t.k));
  t.strides.assign(t.k, 1);
  for (int64_t c = t.k - 2; c >= 0; --c)
    t.strides[c] = t.strides[c + 1] * data[batch + c + 1];
  return t;
}

/// The row of each index tuple of constant `indices`, range-checked.
FailureOr<std::vector<int64_t>> constantRows(NodeContext &ctx,
                                             const TupleIndexing &t,
                                             ArrayRef<int64_t> data,
                                             const HostTensor &indices) {
  int64_t count = product(t.tuples);
  int64_t perBatchTuples =
      product(ArrayRef<int64_t>(t.tuples).drop_front(t.batch));
  std::vector<int64_t> rows(count);
  for (int64_t j = 0; j < count; ++j) {
    int64_t row = perBatchTuples ? j / perBatchTuples * t.perBatch : 0;
    for (int64_t c = 0; c < t.k; ++c) {
      FailureOr<int64_t> i =
          constantIndex(ctx, indices, j * t.k + c, data[t.batch + c],
                        "dimension " + Twine(t.batch + c).str());
      if (failed(i))
        return failure();
      row += *i * t.strides[c];
    }
    rows[j] = row;
  }
  return rows;
}

LogicalResult gatherNDHandler(NodeContext &ctx) {
  ArrayRef<int64_t> data = ctx.getInputShape(0);
  ArrayRef<int64_t> indices = ctx.getInputShape(1);
  FailureOr<TupleIndexing> t =
      getTupleIndexing(ctx, data, indices, ctx.getAttrInt("batch_dims", 0));
  if (failed(t))
    return failure();
  SmallVector<int64_t> shape(t->tuples);
  llvm::append_range(shape, data.drop_front(t->batch + t->k));
  SmallVector<int64_t> rowShape(t->tuples);
  rowShape.push_back(t->inner);
  const HostTensor *dc = ctx.getConstant(0), *ic = ctx.getConstant(1);
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();

  if (ic && ic->getNumElements() <= kMaxFoldedElements) {
    FailureOr<std::vector<int64_t>> rows = constantRows(ctx, *t, data, *ic);
    if (failed(rows))
      return failure();
    int64_t inner = t->inner;
    if (dc && product(data) <= kMaxFoldedElements &&
        product(shape) <= kMaxFoldedElements) {
      ctx.setOutput(0, gatherTensor(*dc, shape, [&](int64_t i) {
                      return (*rows)[i / inner] * inner + i % inner;
                    }));
      return success();
    }
    Value x = ctx.getInput(0);
    Value index = indexConstant(ctx, t->tuples, *rows, "rows");
    if (!x || !index)
      return failure();
    Value table = reshape(ctx, x, {t->rows, t->inner});
    Value gathered = nn::GatherOp::create(b, loc, typeOf(x).clone(rowShape),
                                          table, index, 0);
    ctx.setOutput(0, reshape(ctx, gathered, shape));
    return success();
  }

  Value x = ctx.getInput(0), idx = ctx.getInput(1);
  if (!x || !idx)
    return failure();
  idx = toI64(ctx, idx);
  int64_t q = indices.size();
  SmallVector<int64_t> componentShape(t->tuples);
  componentShape.push_back(1);
  Value linear, valid;
  for (int64_t c = 0; c < t->k; ++c) {
    SmallVector<int64_t> start(q, 0), limit(indices), stride(q, 1);
    start[q - 1] = c;
    limit[q - 1] = c + 1;
    Value component =
        t->k == 1
            ? idx
            : nn::SliceOp::create(b, loc, typeOf(idx).clone(componentShape),
                                  idx, start, limit, stride)
                  .getResult();
    NormalizedIndex norm = normalizeIndex(ctx, component, data[t->batch + c]);
    Value term = norm.index;
    if (t->strides[c] != 1) {
      Value stride = indexScalar(ctx, t->strides[c]);
      term = nn::MulOp::create(b, loc, term, stride);
    }
    linear =
        linear ? nn::AddOp::create(b, loc, linear, term).getResult() : term;
    valid = valid ? nn::AndOp::create(b, loc, valid, norm.valid).getResult()
                  : norm.valid;
  }
  // Each batch starts perBatch rows after the previous one.
  int64_t batches = product(data.take_front(t->batch));
  if (batches > 1) {
    SmallVector<int64_t> offsetShape(indices.take_front(t->batch)), values;
    offsetShape.append(q - t->batch, 1);
    for (int64_t i = 0; i < batches; ++i)
      values.push_back(i * t->perBatch);
    Value offsets = indexConstant(ctx, offsetShape, values, "batch_offsets");
    if (!offsets)
      return failure();
    linear = nn::AddOp::create(b, loc, linear, offsets);
  }
  linear = refuseInvalid(ctx, linear, valid, t->rows);
  linear = reshape(ctx, linear, t->tuples);
  Value table = reshape(ctx, x, {t->rows, t->inner});
  Value gathered =
      nn::GatherOp::create(b, loc, typeOf(x).clone(rowShape), table, linear, 0);
  ctx.setOutput(0, reshape(ctx, gathered, shape));
  return success();
}

//===----------------------------------------------------------------------===//
// ScatterND
//===----------------------------------------------------------------------===//

/// ScatterND with constant indices: the rows of the data and of the updates
/// side by side, and a constant map that picks, for each row of the result,
/// the update written to it or else the data's row. ONNX leaves repeated
/// indices undefined; the last update wins, as in onnxruntime's CPU kernel.
LogicalResult scatterNDHandler(NodeContext &ctx) {
  std::string reduction = ctx.getAttrString("reduction", "none");
  if (reduction != "none")
    return ctx.emitError() << "ScatterND reduction '" << reduction
                           << "' is not supported (only 'none')";
  ArrayRef<int64_t> data = ctx.getInputShape(0);
  ArrayRef<int64_t> indices = ctx.getInputShape(1);
  ArrayRef<int64_t> updates = ctx.getInputShape(2);
  FailureOr<TupleIndexing> t = getTupleIndexing(ctx, data, indices, 0);
  if (failed(t))
    return failure();
  SmallVector<int64_t> expected(t->tuples);
  llvm::append_range(expected, data.drop_front(t->k));
  if (updates != ArrayRef<int64_t>(expected))
    return ctx.emitError() << "ScatterND updates of shape "
                           << shapeText(updates) << " do not match the "
                           << shapeText(expected)
                           << " that the data and indices address";
  const HostTensor *ic = ctx.getConstant(1);
  if (!ic)
    return ctx.emitError() << "ScatterND is supported only with constant "
                              "indices (they are computed at run time here)";
  if (t->rows > kMaxFoldedElements || ic->getNumElements() > kMaxFoldedElements)
    return ctx.emitError() << "ScatterND into " << t->rows
                           << " rows is larger than Partita folds ("
                           << kMaxFoldedElements << ")";
  FailureOr<std::vector<int64_t>> rows = constantRows(ctx, *t, data, *ic);
  if (failed(rows))
    return failure();
  std::vector<int64_t> source(t->rows);
  for (int64_t r = 0; r < t->rows; ++r)
    source[r] = r;
  for (auto [j, row] : llvm::enumerate(*rows))
    source[row] = t->rows + static_cast<int64_t>(j);

  int64_t inner = t->inner, numRows = t->rows;
  const HostTensor *dc = ctx.getConstant(0), *uc = ctx.getConstant(2);
  if (dc && uc && product(data) <= kMaxFoldedElements) {
    HostTensor out(dc->dataType, SmallVector<int64_t>(data));
    int64_t n = product(data);
    for (int64_t i = 0; i < n; ++i) {
      int64_t s = source[i / inner];
      const HostTensor &from = s < numRows ? *dc : *uc;
      int64_t at = (s < numRows ? s : s - numRows) * inner + i % inner;
      if (out.isFloat())
        out.mutableFloats().push_back(from.getAsDouble(at));
      else
        out.mutableInts().push_back(from.getAsInt(at));
    }
    ctx.setOutput(0, std::move(out));
    return success();
  }
  Value x = ctx.getInput(0);
  if (!x)
    return failure();
  if (rows->empty()) {
    ctx.setOutput(0, x);
    return success();
  }
  Value u = ctx.getInput(2);
  Value map = indexConstant(ctx, {numRows}, source, "rows");
  if (!u || !map)
    return failure();
  OpBuilder &b = ctx.getBuilder();
  Location loc = ctx.getLoc();
  int64_t count = rows->size();
  Value dataRows = reshape(ctx, x, {numRows, inner});
  Value updateRows = reshape(ctx, u, {count, inner});
  Value both =
      nn::ConcatOp::create(b, loc, typeOf(x).clone({numRows + count, inner}),
                           ValueRange{dataRows, updateRows}, 0);
  Value gathered = nn::GatherOp::create(
      b, loc, typeOf(x).clone({numRows, inner}), both, map, 0);
  ctx.setOutput(0, reshape(ctx, gathered, data));
  return success();
}

} // namespace

void mlir::partita::onnx_import::registerIndexingOps(OpRegistry &registry) {
  // One handler per op serves every version in force at opsets 13 to 23
  // (ScatterND 16 and 18 only add reductions, which are refused).
  registry.add("GatherElements", {13, nullptr, gatherElementsHandler});
  registry.add("GatherND", {13, nullptr, gatherNDHandler});
  registry.add("ScatterND", {13, nullptr, scatterNDHandler});
}
