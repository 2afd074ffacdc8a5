// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s

// A linear layer: MatMul then Add of the bias vector, in either order.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16x32xf32>, %[[B:.*]]: tensor<32xf32>)
func.func @linear(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  // CHECK: %[[Y:.*]] = nn.matmul %[[X]], %[[W]] bias %[[B]]
  // CHECK: %[[Z:.*]] = nn.matmul %[[X]], %[[W]] bias %[[B]]
  // CHECK-NOT: nn.add
  // CHECK: return %[[Y]], %[[Z]]
  %p = nn.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %y = nn.add %p, %b : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %q = nn.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %z = nn.add %b, %q : (tensor<32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return %y, %z : tensor<2x8x32xf32>, tensor<2x8x32xf32>
}

// -----

// A bias [1, 1, n] is reshaped to [n].
// CHECK-LABEL: func.func @bias_with_unit_dims
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16x32xf32>, %[[B:.*]]: tensor<1x1x32xf32>)
func.func @bias_with_unit_dims(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<1x1x32xf32>) -> tensor<2x8x32xf32> {
  // CHECK: %[[BR:.*]] = nn.reshape %[[B]] : tensor<1x1x32xf32> -> tensor<32xf32>
  // CHECK: nn.matmul %[[X]], %[[W]] bias %[[BR]]
  %p = nn.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %y = nn.add %p, %b : (tensor<2x8x32xf32>, tensor<1x1x32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

// The product has another use: folding the bias would compute it twice.
// CHECK-LABEL: func.func @product_used_twice
func.func @product_used_twice(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  // CHECK-NOT: bias
  // CHECK: nn.add
  %p = nn.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %y = nn.add %p, %b : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  return %y, %p : tensor<8x32xf32>, tensor<8x32xf32>
}

// -----

// A bias that varies by row is no bias epilogue.
// CHECK-LABEL: func.func @matrix_addend
func.func @matrix_addend(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %r: tensor<8x32xf32>) -> tensor<8x32xf32> {
  // CHECK-NOT: bias
  // CHECK: nn.add
  %p = nn.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %y = nn.add %p, %r : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}

// -----

// A bias of higher rank than the product would broadcast it: left alone.
// CHECK-LABEL: func.func @bias_broadcasts_product
func.func @bias_broadcasts_product(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<1x1x32xf32>) -> tensor<1x8x32xf32> {
  // CHECK-NOT: bias
  // CHECK: nn.add
  %p = nn.matmul %x, %w : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %y = nn.add %p, %b : (tensor<8x32xf32>, tensor<1x1x32xf32>) -> tensor<1x8x32xf32>
  return %y : tensor<1x8x32xf32>
}
