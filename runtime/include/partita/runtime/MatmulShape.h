//===- MatmulShape.h - batch broadcasting of a matrix product ---*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// How an exec `matmul` (lhs [..., m, k] x rhs [..., k, n]) broadcasts its
// batch dimensions, NumPy style. Header-only, so the host kernel
// (runtime/src/kernels/MatMul.cpp) and the CUDA generator
// (lib/Target/CUDA/CodeGen.cpp) check and fold batches by one rule.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_MATMULSHAPE_H
#define PARTITA_RUNTIME_MATMULSHAPE_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace partita::runtime {

struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  /// The operands' batch dimensions and the result's (their broadcast).
  std::vector<int64_t> lhsBatch, rhsBatch, batch;
  /// Matrices in each: the products of the dimensions above.
  int64_t lhsBatches = 1, rhsBatches = 1, batches = 1;

  /// The result's shape: batch..., m, n.
  std::vector<int64_t> resultShape() const {
    std::vector<int64_t> shape = batch;
    shape.push_back(m);
    shape.push_back(n);
    return shape;
  }
  /// A weight shared by every batch of an unbroadcast lhs: the batch folds
  /// into the rows, one [batches * m, k] x [k, n] product.
  bool batchFoldsIntoRows() const {
    return rhsBatches == 1 && lhsBatches == batches;
  }
};

/// Reads m, n, k and the batch broadcast from the operand shapes; an error
/// when either operand has rank below 2, the contracted sizes differ or the
/// batch dimensions do not broadcast.
inline Status matmulShape(const std::vector<int64_t> &lhs,
                          const std::vector<int64_t> &rhs, MatmulShape &shape) {
  if (lhs.size() < 2 || rhs.size() < 2)
    return Status::error("operands need rank 2 or more, got " +
                         shapeString(lhs) + " and " + shapeString(rhs));
  size_t lr = lhs.size(), rr = rhs.size();
  shape.m = lhs[lr - 2];
  shape.k = lhs[lr - 1];
  shape.n = rhs[rr - 1];
  if (rhs[rr - 2] != shape.k)
    return Status::error("contracted sizes differ: lhs " + shapeString(lhs) +
                         ", rhs " + shapeString(rhs));
  shape.lhsBatch.assign(lhs.begin(), lhs.end() - 2);
  shape.rhsBatch.assign(rhs.begin(), rhs.end() - 2);
  const std::vector<int64_t> &lb = shape.lhsBatch, &rb = shape.rhsBatch;
  shape.batch.assign(std::max(lb.size(), rb.size()), 1);
  for (size_t i = 0; i < shape.batch.size(); ++i) {
    size_t fromEnd = shape.batch.size() - i;
    int64_t l = fromEnd <= lb.size() ? lb[lb.size() - fromEnd] : 1;
    int64_t r = fromEnd <= rb.size() ? rb[rb.size() - fromEnd] : 1;
    if (l != r && l != 1 && r != 1)
      return Status::error("batch dimensions do not broadcast: lhs " +
                           shapeString(lhs) + ", rhs " + shapeString(rhs));
    shape.batch[i] = l == 1 ? r : l;
  }
  auto product = [](const std::vector<int64_t> &dims) {
    int64_t count = 1;
    for (int64_t d : dims)
      count *= d;
    return count;
  };
  shape.lhsBatches = product(lb);
  shape.rhsBatches = product(rb);
  shape.batches = product(shape.batch);
  return Status::ok();
}

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_MATMULSHAPE_H
