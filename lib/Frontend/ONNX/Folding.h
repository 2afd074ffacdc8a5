//===- Folding.h - evaluating ONNX nodes on constants -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_FRONTEND_ONNX_FOLDING_H
#define PARTITA_LIB_FRONTEND_ONNX_FOLDING_H

#include "ImportContext.h"

#include <cmath>

namespace mlir::partita::onnx_import {

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape);

/// The numpy broadcast of two shapes, or failure.
FailureOr<SmallVector<int64_t>> broadcast(ArrayRef<int64_t> a,
                                          ArrayRef<int64_t> b);

/// For each element of `to` (row-major), the index into a tensor of shape
/// `from` that numpy broadcasting reads.
SmallVector<int64_t> broadcastIndices(ArrayRef<int64_t> from,
                                      ArrayRef<int64_t> to);

/// Rounds `v` to what `dataType` can hold (float32 rounding, integer
/// wrap-around), so folded chains match what run time would compute.
double roundToType(double v, int dataType);
int64_t wrapToType(int64_t v, int dataType);

/// Whether every input that is present is constant and the node's result
/// would be small enough to fold.
bool canFold(NodeContext &ctx, int64_t resultElements);

/// A tensor of `shape` and `dataType` with every element produced by `fn(i)`.
template <typename Fn>
HostTensor makeTensor(int dataType, ArrayRef<int64_t> shape, Fn fn) {
  HostTensor t(dataType, SmallVector<int64_t>(shape));
  int64_t n = t.getNumElements();
  if (t.isFloat()) {
    std::vector<double> &out = t.mutableFloats();
    out.resize(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = roundToType(static_cast<double>(fn(i)), dataType);
  } else {
    std::vector<int64_t> &out = t.mutableInts();
    out.resize(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = wrapToType(static_cast<int64_t>(fn(i)), dataType);
  }
  return t;
}

/// A copy of `source` with element `i` taken from `source[index(i)]`
/// (transpose, slice, gather, expand...).
template <typename Fn>
HostTensor gatherTensor(const HostTensor &source, ArrayRef<int64_t> shape,
                        Fn index) {
  HostTensor t(source.dataType, SmallVector<int64_t>(shape));
  int64_t n = t.getNumElements();
  if (source.isFloat()) {
    const std::vector<double> &in = source.getFloats();
    std::vector<double> &out = t.mutableFloats();
    out.resize(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[index(i)];
  } else {
    const std::vector<int64_t> &in = source.getInts();
    std::vector<int64_t> &out = t.mutableInts();
    out.resize(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[index(i)];
  }
  return t;
}

/// A tensor with `source`'s elements and another shape.
HostTensor reshapeTensor(const HostTensor &source, ArrayRef<int64_t> shape);

} // namespace mlir::partita::onnx_import

#endif // PARTITA_LIB_FRONTEND_ONNX_FOLDING_H
