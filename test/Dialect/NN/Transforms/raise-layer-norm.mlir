// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s

// GPT-2's hand-written LayerNorm: d / sqrt(mean(d * d) + eps) * g + b.
// CHECK-LABEL: func.func @affine
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[G:.*]]: tensor<16xf32>, %[[B:.*]]: tensor<16xf32>)
func.func @affine(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.reduce
  // CHECK: %[[Y:.*]] = nn.layer_norm %[[X]] scale(%[[G]] : tensor<16xf32>) bias(%[[B]] : tensor<16xf32>) axis = 2 epsilon = 9.99999974E-6
  // CHECK-NEXT: return %[[Y]]
  %m = nn.reduce mean %x axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %d = nn.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %sq = nn.mul %d, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %v = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = nn.sqrt %ve : tensor<2x8x1xf32>
  %y = nn.div %d, %s : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %yg = nn.mul %g, %y : (tensor<16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %yb = nn.add %yg, %b : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return %yb : tensor<2x8x16xf32>
}

// -----

// pow(d, 2), eps first in the sum, and d * reciprocal(sqrt(...)); the
// centering is recomputed for the variance rather than shared. No gamma or
// beta.
// CHECK-LABEL: func.func @reciprocal_pow
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>)
func.func @reciprocal_pow(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // CHECK: %[[Y:.*]] = nn.layer_norm %[[X]] axis = 1 epsilon = 9.99999997E-7 : tensor<4x16xf32>
  // CHECK-NEXT: return %[[Y]]
  %m = nn.reduce mean %x axes = [1] keepdims : tensor<4x16xf32> -> tensor<4x1xf32>
  %d = nn.sub %x, %m : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %d2 = nn.sub %x, %m : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %two = nn.constant dense<2.0> : tensor<1xf32>
  %sq = nn.pow %d2, %two : (tensor<4x16xf32>, tensor<1xf32>) -> tensor<4x16xf32>
  %v = nn.reduce mean %sq axes = [1] keepdims : tensor<4x16xf32> -> tensor<4x1xf32>
  %eps = nn.constant dense<1.0e-6> : tensor<1xf32>
  %ve = nn.add %eps, %v : (tensor<1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %s = nn.sqrt %ve : tensor<4x1xf32>
  %r = nn.reciprocal %s : tensor<4x1xf32>
  %y = nn.mul %r, %d : (tensor<4x1xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// rsqrt, two normalized dimensions, and gamma/beta that need a reshape and a
// broadcast to the normalized shape [4, 16].
// CHECK-LABEL: func.func @rsqrt_two_axes
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x16xf32>, %[[G:.*]]: tensor<1x4x16xf32>, %[[B:.*]]: tensor<16xf32>)
func.func @rsqrt_two_axes(%x: tensor<2x4x16xf32>, %g: tensor<1x4x16xf32>, %b: tensor<16xf32>) -> tensor<2x4x16xf32> {
  // CHECK-DAG: %[[GR:.*]] = nn.reshape %[[G]] : tensor<1x4x16xf32> -> tensor<4x16xf32>
  // CHECK-DAG: %[[BB:.*]] = nn.broadcast_to %[[B]] : tensor<16xf32> -> tensor<4x16xf32>
  // CHECK: nn.layer_norm %[[X]] scale(%[[GR]] : tensor<4x16xf32>) bias(%[[BB]] : tensor<4x16xf32>) axis = 1
  %m = nn.reduce mean %x axes = [1, 2] keepdims : tensor<2x4x16xf32> -> tensor<2x1x1xf32>
  %d = nn.sub %x, %m : (tensor<2x4x16xf32>, tensor<2x1x1xf32>) -> tensor<2x4x16xf32>
  %sq = nn.mul %d, %d : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %v = nn.reduce mean %sq axes = [1, 2] keepdims : tensor<2x4x16xf32> -> tensor<2x1x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
  %r = nn.rsqrt %ve : tensor<2x1x1xf32>
  %y = nn.mul %d, %r : (tensor<2x4x16xf32>, tensor<2x1x1xf32>) -> tensor<2x4x16xf32>
  %yg = nn.mul %y, %g : (tensor<2x4x16xf32>, tensor<1x4x16xf32>) -> tensor<2x4x16xf32>
  %yb = nn.add %yg, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  return %yb : tensor<2x4x16xf32>
}

// -----

// A gamma that varies along a non-normalized dimension cannot be the scale:
// the norm is raised and the product stays.
// CHECK-LABEL: func.func @gamma_not_normalized_shape
func.func @gamma_not_normalized_shape(%x: tensor<2x8x16xf32>, %g: tensor<8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK: %[[Y:.*]] = nn.layer_norm %{{.*}} axis = 2
  // CHECK: nn.mul %[[Y]], %{{.*}} : (tensor<2x8x16xf32>, tensor<8x16xf32>)
  %m = nn.reduce mean %x axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %d = nn.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %sq = nn.mul %d, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %v = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = nn.sqrt %ve : tensor<2x8x1xf32>
  %y = nn.div %d, %s : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %yg = nn.mul %y, %g : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  return %yg : tensor<2x8x16xf32>
}

// -----

// Statistics over a dimension that is not trailing: not a layer norm.
// CHECK-LABEL: func.func @non_trailing_axes
func.func @non_trailing_axes(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.layer_norm
  // CHECK-NOT: nn.rms_norm
  // CHECK: nn.div
  %m = nn.reduce mean %x axes = [1] keepdims : tensor<2x8x16xf32> -> tensor<2x1x16xf32>
  %d = nn.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x1x16xf32>) -> tensor<2x8x16xf32>
  %sq = nn.mul %d, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %v = nn.reduce mean %sq axes = [1] keepdims : tensor<2x8x16xf32> -> tensor<2x1x16xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<2x1x16xf32>, tensor<f32>) -> tensor<2x1x16xf32>
  %s = nn.sqrt %ve : tensor<2x1x16xf32>
  %y = nn.div %d, %s : (tensor<2x8x16xf32>, tensor<2x1x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// An epsilon that is not a scalar: not a layer norm.
// CHECK-LABEL: func.func @vector_eps
func.func @vector_eps(%x: tensor<2x8x16xf32>, %eps: tensor<16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.layer_norm
  // CHECK: nn.div
  %m = nn.reduce mean %x axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %d = nn.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %sq = nn.mul %d, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %v = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %ve = nn.add %v, %eps : (tensor<2x8x1xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %s = nn.sqrt %ve : tensor<2x8x16xf32>
  %y = nn.div %d, %s : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// A constant epsilon of the wrong shape (one per feature): not a layer norm.
// CHECK-LABEL: func.func @constant_vector_eps
func.func @constant_vector_eps(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.layer_norm
  // CHECK: nn.div
  %m = nn.reduce mean %x axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %d = nn.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %sq = nn.mul %d, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %v = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<2x8x1xf32>
  %ve = nn.add %v, %eps : (tensor<2x8x1xf32>, tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %s = nn.sqrt %ve : tensor<2x8x1xf32>
  %y = nn.div %d, %s : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// The variance of another tensor: not a layer norm.
// CHECK-LABEL: func.func @other_variance
func.func @other_variance(%x: tensor<2x8x16xf32>, %z: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NOT: nn.layer_norm
  // CHECK: nn.div
  %m = nn.reduce mean %x axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %d = nn.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %sq = nn.mul %z, %z : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %v = nn.reduce mean %sq axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %eps = nn.constant dense<1.0e-5> : tensor<f32>
  %ve = nn.add %v, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = nn.sqrt %ve : tensor<2x8x1xf32>
  %y = nn.div %d, %s : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}
