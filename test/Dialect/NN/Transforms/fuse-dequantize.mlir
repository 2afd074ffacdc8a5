// RUN: partita-opt %s --split-input-file --partita-fuse-dequantize | FileCheck %s

// A matmul by a dequantized weight read by nothing else multiplies by the
// packed operands; the bias comes along.
// CHECK-LABEL: func.func @fused
// CHECK-SAME: (%[[X:.*]]: tensor<2x6x64xf32>, %[[Q:.*]]: tensor<128x2x16xi8>, %[[S:.*]]: tensor<128x2xf32>, %[[Z:.*]]: tensor<128x1xi8>, %[[B:.*]]: tensor<128xf32>)
// CHECK-NEXT: %[[Y:.*]] = nn.quantized_matmul %[[X]], %[[Q]], %[[S]] zero_points %[[Z]] bias %[[B]] {bits = 4 : i64, block_size = 32 : i64} : (tensor<2x6x64xf32>, tensor<128x2x16xi8>, tensor<128x2xf32>, tensor<128x1xi8>, tensor<128xf32>) -> tensor<2x6x128xf32>
// CHECK-NEXT: return %[[Y]]
func.func @fused(%x: tensor<2x6x64xf32>, %q: tensor<128x2x16xi8>, %s: tensor<128x2xf32>, %z: tensor<128x1xi8>, %b: tensor<128xf32>) -> tensor<2x6x128xf32> {
  %w = nn.dequantize %q, %s zero_points %z {bits = 4 : i64, block_size = 32 : i64} : (tensor<128x2x16xi8>, tensor<128x2xf32>, tensor<128x1xi8>) -> tensor<64x128xf32>
  %y = nn.matmul %x, %w bias %b : (tensor<2x6x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x6x128xf32>
  return %y : tensor<2x6x128xf32>
}

// -----

// A weight read twice is dequantized once; both matmuls read it.
// CHECK-LABEL: func.func @shared
// CHECK: %[[W:.*]] = nn.dequantize
// CHECK: nn.matmul %{{.*}}, %[[W]]
// CHECK: nn.matmul %{{.*}}, %[[W]]
// CHECK-NOT: nn.quantized_matmul
func.func @shared(%x: tensor<6x64xf32>, %q: tensor<128x4x8xi8>, %s: tensor<128x4xf32>) -> (tensor<6x128xf32>, tensor<6x128xf32>) {
  %w = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<128x4x8xi8>, tensor<128x4xf32>) -> tensor<64x128xf32>
  %y = nn.matmul %x, %w : (tensor<6x64xf32>, tensor<64x128xf32>) -> tensor<6x128xf32>
  %z = nn.matmul %x, %w : (tensor<6x64xf32>, tensor<64x128xf32>) -> tensor<6x128xf32>
  return %y, %z : tensor<6x128xf32>, tensor<6x128xf32>
}

// -----

// Stacked weights (QMoE's experts) are not one quantized_matmul's weight:
// a batched matmul by them is left alone.
// CHECK-LABEL: func.func @batched
// CHECK: nn.dequantize
// CHECK-NOT: nn.quantized_matmul
func.func @batched(%x: tensor<4x6x32xf32>, %q: tensor<4x8x2x8xi8>, %s: tensor<4x8x2xf32>) -> tensor<4x6x8xf32> {
  %w = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<4x8x2x8xi8>, tensor<4x8x2xf32>) -> tensor<4x32x8xf32>
  %y = nn.matmul %x, %w : (tensor<4x6x32xf32>, tensor<4x32x8xf32>) -> tensor<4x6x8xf32>
  return %y : tensor<4x6x8xf32>
}
