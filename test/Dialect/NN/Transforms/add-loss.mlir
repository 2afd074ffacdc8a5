// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-add-loss{kind=cross_entropy output=logits}))' | FileCheck %s
// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-add-loss{kind=mse output=logits}))' | FileCheck %s --check-prefix=MSE

// Cross-entropy over the last dimension: an i64 `labels` input shaped like
// the logits without it; the one-hot compare against the class index; the
// mean over the labels that are not -100. The loss is the one output.
// CHECK-LABEL: func.func @classifier
// CHECK-SAME: %[[LABELS:arg[0-9]+]]: tensor<2x4xi64> {onnx.name = "labels"}) -> (tensor<f32> {onnx.name = "loss", partita.loss})
// The output that went takes what fed only it along.
// CHECK-NOT: nn.tanh
// log_softmax spelled out, so that a split vocabulary reduces two
// per-position scalars instead of gathering the logits.
// CHECK: %[[MAX:.*]] = nn.reduce max %{{.*}} axes = [2] keepdims : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
// CHECK: %[[SH:.*]] = nn.sub %{{.*}}, %[[MAX]]
// CHECK: %[[E:.*]] = nn.exp %[[SH]]
// CHECK: %[[SUM:.*]] = nn.reduce sum %[[E]] axes = [2] keepdims
// CHECK: %[[LOG:.*]] = nn.log %[[SUM]]
// CHECK: %[[LP:.*]] = nn.sub %[[SH]], %[[LOG]]
// CHECK: %[[COL:.*]] = nn.reshape %[[LABELS]] : tensor<2x4xi64> -> tensor<2x4x1xi64>
// CHECK: %[[IDX:.*]] = nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi64>
// CHECK: %[[HIT:.*]] = nn.compare eq, %[[COL]], %[[IDX]] : (tensor<2x4x1xi64>, tensor<8xi64>) -> tensor<2x4x8xi1>
// CHECK: nn.compare ne, %[[LABELS]], %{{.*}} : (tensor<2x4xi64>, tensor<i64>) -> tensor<2x4xi1>
// CHECK: %[[MEAN:.*]] = nn.div
// CHECK: %[[LOSS:.*]] = nn.neg %[[MEAN]] : tensor<f32>
// CHECK: return %[[LOSS]] : tensor<f32>
// MSE-LABEL: func.func @classifier
// MSE-SAME: %{{.*}}: tensor<2x4x8xf32> {onnx.name = "target"}) -> (tensor<f32> {onnx.name = "loss", partita.loss})
// MSE: nn.sub
// MSE: nn.reduce sum
// MSE: nn.constant dense<6.400000e+01> : tensor<f32>
// MSE: nn.div
func.func @classifier(%x: tensor<2x4x8xf32> {onnx.name = "x"})
    -> (tensor<2x4x8xf32> {onnx.name = "logits"}, tensor<2x4x8xf32> {onnx.name = "probs"}) {
  %e = nn.tanh %x : tensor<2x4x8xf32>
  return %x, %e : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
