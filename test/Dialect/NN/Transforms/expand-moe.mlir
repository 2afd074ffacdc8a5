// RUN: partita-opt %s --pass-pipeline='builtin.module(func.func(partita-expand-moe))' | FileCheck %s

// nn.moe written densely, for a back end without its kernel: every expert
// on every token (one batched matmul per projection over the stacked
// weights, read transposed), the swiglu of fc1's halves, and each token's
// routed experts selected by where, weighted and summed over the experts.
// The reads of the stacked weights are marked partita.experts: an ep axis
// splits them on their experts (a training step's mixture is this form).

// CHECK-LABEL: func.func @dense
// CHECK-NOT: nn.moe
// CHECK: %[[X:.*]] = nn.reshape %arg0 : tensor<4x8xf32> -> tensor<1x4x8xf32>
// CHECK: %[[T1:.*]] = nn.transpose %arg3 permutation = [0, 2, 1] {partita.experts} : tensor<3x12x8xf32> -> tensor<3x8x12xf32>
// CHECK: %[[H:.*]] = nn.matmul %[[X]], %[[T1]] : (tensor<1x4x8xf32>, tensor<3x8x12xf32>) -> tensor<3x4x12xf32>
// CHECK: nn.slice %[[H]] start = [0, 0, 0] limit = [3, 4, 6] stride = [1, 1, 1]
// CHECK: nn.slice %[[H]] start = [0, 0, 6] limit = [3, 4, 12] stride = [1, 1, 1]
// CHECK: nn.sigmoid
// CHECK: nn.matmul %{{.*}}, %{{.*}} : (tensor<3x4x6xf32>, tensor<3x6x8xf32>) -> tensor<3x4x8xf32>
// CHECK: nn.compare eq, %{{.*}}, %{{.*}} : (tensor<1x3xi64>, tensor<4x1xi64>) -> tensor<4x3xi1>
// CHECK: nn.compare eq
// CHECK: %[[KEPT:.*]] = nn.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<3x4x1xi1>, tensor<3x4x8xf32>, tensor<f32>) -> tensor<3x4x8xf32>
// CHECK: %[[SUM:.*]] = nn.reduce sum %[[KEPT]] axes = [0] keepdims : tensor<3x4x8xf32> -> tensor<1x4x8xf32>
// CHECK: %[[Y:.*]] = nn.reshape %[[SUM]] : tensor<1x4x8xf32> -> tensor<4x8xf32>
// CHECK: return %[[Y]]
func.func @dense(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x12x8xf32>, %fc2: tensor<3x8x6xf32>) -> tensor<4x8xf32> {
  %y = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x12x8xf32>, tensor<3x8x6xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
