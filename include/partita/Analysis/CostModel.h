//===- CostModel.h - What an op costs on a device --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A small roofline model of nn ops on their (local) types: the floating-
// point operations an op performs and the bytes it reads and writes, and
// from them a time on a device given its peak compute rate and memory
// bandwidth. Pipeline splitting balances stages with it; the overlap
// scheduler will weigh compute against communication with it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_ANALYSIS_COSTMODEL_H
#define PARTITA_ANALYSIS_COSTMODEL_H

#include "mlir/IR/Operation.h"

namespace mlir::partita {

struct OpCost {
  double flops = 0;
  double bytes = 0;

  OpCost &operator+=(const OpCost &other) {
    flops += other.flops;
    bytes += other.bytes;
    return *this;
  }
};

/// A device as the roofline sees it. The defaults are an H100/H200-class
/// GPU at fp32-accumulated bf16 tensor-core rate.
struct DeviceModel {
  double flopsPerSecond = 700e12;
  double bytesPerSecond = 3.3e12;
};

/// The bytes of a ranked tensor type (one byte per i1); 0 for other types.
int64_t tensorBytes(Type type);

/// The work of `op`: 2mnk for a matmul (per batch), 4·b·h·sq·skv·d for
/// attention (halved when causal), a few flops per element for elementwise
/// ops, normalizations and softmax; bytes of its tensor operands and
/// results. Constants and ops outside the nn dialect cost nothing.
OpCost estimateCost(Operation *op);

/// The roofline time of `cost` on `device`, in seconds.
double estimateSeconds(const OpCost &cost, const DeviceModel &device = {});

} // namespace mlir::partita

#endif // PARTITA_ANALYSIS_COSTMODEL_H
