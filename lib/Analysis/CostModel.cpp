//===- CostModel.cpp - What an op costs on a device -----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Analysis/CostModel.h"

#include "mlir/IR/BuiltinTypes.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::partita;

namespace {

double bytesOf(Type type) { return static_cast<double>(tensorBytes(type)); }

double elementsOf(Value value) {
  auto tensor = dyn_cast<RankedTensorType>(value.getType());
  return tensor ? static_cast<double>(tensor.getNumElements()) : 0;
}

/// The share of the [sq, skv] scores a causal attention computes: about
/// half, or with a sliding window of w keys, at most w per row.
template <typename OpTy> double causalShare(OpTy op) {
  double keys = static_cast<double>(op.getKey().getType().getDimSize(2));
  std::optional<int64_t> window = op.getWindow();
  if (!window || keys <= 0)
    return 0.5;
  return std::min(0.5, static_cast<double>(*window) / keys);
}

template <typename OpTy> double attentionFlops(OpTy op, bool causal) {
  ArrayRef<int64_t> q = op.getQuery().getType().getShape();
  ArrayRef<int64_t> k = op.getKey().getType().getShape();
  ArrayRef<int64_t> v = op.getValue().getType().getShape();
  // Q K^T and P V per head, plus the softmax's few flops per score.
  double scores = static_cast<double>(q[0]) * q[1] * q[2] * k[2];
  double flops = scores * (2.0 * q[3] + 2.0 * v[3] + 5.0);
  return causal ? flops * causalShare(op) : flops;
}

/// The flash-attention backward as the kernels run it: Q K^T twice (the
/// statistics, then the probabilities), dout V^T, dS K, dS^T Q and
/// P^T dout per head, plus a few flops per score.
double attentionGradFlops(nn::AttentionGradOp op) {
  ArrayRef<int64_t> q = op.getQuery().getType().getShape();
  ArrayRef<int64_t> k = op.getKey().getType().getShape();
  ArrayRef<int64_t> v = op.getValue().getType().getShape();
  double scores = static_cast<double>(q[0]) * q[1] * q[2] * k[2];
  double flops = scores * (8.0 * q[3] + 4.0 * v[3] + 10.0);
  return op.getCausal() ? flops * causalShare(op) : flops;
}

/// The routed work of nn.moe: per (token, slot), the expert's products,
/// its activation, and the weighted add.
double moeFlops(nn::MoeOp op) {
  double slots = elementsOf(op.getExpertIds());
  double hidden = op.getInput().getType().getDimSize(1);
  return op.getProductFlops() + slots * (8.0 * op.getFfnSize() + 2.0 * hidden);
}

} // namespace

int64_t mlir::partita::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  Type element = tensor.getElementType();
  int64_t width =
      element.isInteger(1) ? 1 : (element.getIntOrFloatBitWidth() + 7) / 8;
  return tensor.getNumElements() * width;
}

OpCost mlir::partita::estimateCost(Operation *op) {
  OpCost cost;
  if (!isa_and_nonnull<nn::NNDialect>(op->getDialect()) ||
      isa<nn::ConstantOp, nn::ReshapeOp>(op))
    return cost;
  for (Value operand : op->getOperands())
    cost.bytes += bytesOf(operand.getType());
  if (auto moe = dyn_cast<nn::MoeOp>(op)) {
    // Only the experts some slot reaches are read: at most T * k of them.
    double experts = moe.getNumExperts();
    double reached = std::min(experts, double(elementsOf(moe.getExpertIds())));
    for (Value weight : moe->getOperands().drop_front(3))
      cost.bytes -= bytesOf(weight.getType()) * (1.0 - reached / experts);
  }
  for (Value result : op->getResults())
    cost.bytes += bytesOf(result.getType());
  double out = op->getNumResults() ? elementsOf(op->getResult(0)) : 0;
  cost.flops =
      llvm::TypeSwitch<Operation *, double>(op)
          .Case([](nn::MatmulOp m) {
            return 2.0 * elementsOf(m.getResult()) *
                   m.getLhs().getType().getShape().back();
          })
          .Case([](nn::AttentionOp a) {
            return attentionFlops(a, a.getCausal());
          })
          .Case(
              [](nn::AttentionPartialOp a) { return attentionFlops(a, false); })
          .Case([](nn::AttentionGradOp a) { return attentionGradFlops(a); })
          .Case([](nn::MoeOp m) { return moeFlops(m); })
          .Case<nn::LayerNormOp, nn::RmsNormOp, nn::SoftmaxOp,
                nn::LogSoftmaxOp>([&](Operation *) { return 8 * out; })
          .Case<nn::GeluOp, nn::SiluOp, nn::ErfOp, nn::TanhOp, nn::ExpOp,
                nn::SigmoidOp>([&](Operation *) { return 8 * out; })
          .Case<nn::SinOp, nn::CosOp>([&](Operation *) { return 8 * out; })
          // cumsum, like the elementwise ops: one add per element.
          .Default([&](Operation *) { return out; });
  return cost;
}

double mlir::partita::estimateSeconds(const OpCost &cost,
                                      const DeviceModel &device) {
  return std::max(cost.flops / device.flopsPerSecond,
                  cost.bytes / device.bytesPerSecond);
}
