// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s

// Llama's RMSNorm as torch exports it: pow, mean, add eps, sqrt, reciprocal,
// then the weight.
// CHECK-LABEL: func.func @llama
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16xf32>)
func.func @llama(%x: tensor<2x8x16xf32>, %w: tensor<16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.reduce
  // CHECK: %[[Y:.*]] = nn.rms_norm %[[X]] scale(%[[W]] : tensor<16xf32>) axis = 2 epsilon = 9.99999997E-7
  // CHECK-NEXT: return %[[Y]]
  %two = nn.constant dense<2.0> : tensor<f32>
  %sq = nn.pow %x, %two : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
  %ms = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %se = nn.add %ms, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = nn.sqrt %se : tensor<2x8x1xf32>
  %r = nn.reciprocal %s : tensor<2x8x1xf32>
  %y = nn.mul %x, %r : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %yw = nn.mul %w, %y : (tensor<16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %yw : tensor<2x8x16xf32>
}

// -----

// x * x, and rsqrt spelled 1 / sqrt; no weight.
// CHECK-LABEL: func.func @one_over_sqrt
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>)
func.func @one_over_sqrt(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // CHECK: %[[Y:.*]] = nn.rms_norm %[[X]] axis = 1 epsilon = 9.99999974E-6 : tensor<4x16xf32>
  // CHECK-NEXT: return %[[Y]]
  %sq = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %ms = nn.reduce mean %sq axes = [1] keepdims : tensor<4x16xf32> -> tensor<4x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<1xf32>
  %se = nn.add %eps, %ms : (tensor<1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %s = nn.sqrt %se : tensor<4x1xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %r = nn.div %one, %s : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %y = nn.mul %r, %x : (tensor<4x1xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// rsqrt, and a weight [1, 1, 16] reshaped to the normalized shape.
// CHECK-LABEL: func.func @rsqrt_weight_reshaped
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<1x1x16xf32>)
func.func @rsqrt_weight_reshaped(%x: tensor<2x8x16xf32>, %w: tensor<1x1x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK: %[[WR:.*]] = nn.reshape %[[W]] : tensor<1x1x16xf32> -> tensor<16xf32>
  // CHECK: nn.rms_norm %[[X]] scale(%[[WR]] : tensor<16xf32>) axis = 2
  %sq = nn.mul %x, %x : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %ms = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %se = nn.add %ms, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %r = nn.rsqrt %se : tensor<2x8x1xf32>
  %y = nn.mul %x, %r : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %yw = nn.mul %y, %w : (tensor<2x8x16xf32>, tensor<1x1x16xf32>) -> tensor<2x8x16xf32>
  return %yw : tensor<2x8x16xf32>
}

// -----

// The mean of another tensor's square: not an RMS norm.
// CHECK-LABEL: func.func @other_square
func.func @other_square(%x: tensor<2x8x16xf32>, %z: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.rms_norm
  // CHECK: nn.mul
  %sq = nn.mul %z, %z : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %ms = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %se = nn.add %ms, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %r = nn.rsqrt %se : tensor<2x8x1xf32>
  %y = nn.mul %x, %r : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// Statistics over a leading dimension: not an RMS norm.
// CHECK-LABEL: func.func @non_trailing_axes
func.func @non_trailing_axes(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.rms_norm
  // CHECK: nn.rsqrt
  %sq = nn.mul %x, %x : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %ms = nn.reduce mean %sq axes = [1] keepdims : tensor<2x8x16xf32> -> tensor<2x1x16xf32>
  %eps = nn.constant dense<1.0e-6> : tensor<f32>
  %se = nn.add %ms, %eps : (tensor<2x1x16xf32>, tensor<f32>) -> tensor<2x1x16xf32>
  %r = nn.rsqrt %se : tensor<2x1x16xf32>
  %y = nn.mul %x, %r : (tensor<2x8x16xf32>, tensor<2x1x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// A zero epsilon is not a valid rms_norm epsilon: left alone.
// CHECK-LABEL: func.func @zero_eps
func.func @zero_eps(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.rms_norm
  // CHECK: nn.rsqrt
  %sq = nn.mul %x, %x : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %ms = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<0.0> : tensor<f32>
  %se = nn.add %ms, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %r = nn.rsqrt %se : tensor<2x8x1xf32>
  %y = nn.mul %x, %r : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}
