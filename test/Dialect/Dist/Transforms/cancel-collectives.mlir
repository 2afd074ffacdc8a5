// RUN: partita-opt %s --partita-cancel-collectives | FileCheck %s

dist.mesh @mesh [dp = 2, tp = 4]

// A gather sliced back, and a slice gathered back, are the value itself.
// CHECK-LABEL: func.func @inverses
// CHECK-SAME: (%[[X:.*]]: tensor<8x4xf32>, %[[Y:.*]]: tensor<8x16xf32>)
// CHECK-NOT: dist.
// CHECK: return %[[X]], %[[Y]]
func.func @inverses(%x: tensor<8x4xf32>, %y: tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<8x16xf32>) {
  %g = dist.all_gather %x on @mesh axes [tp] gather_dim 1 : tensor<8x4xf32> -> tensor<8x16xf32>
  %s = dist.all_slice %g on @mesh axes [tp] slice_dim 1 : tensor<8x16xf32> -> tensor<8x4xf32>
  %t = dist.all_slice %y on @mesh axes [dp] slice_dim 0 : tensor<8x16xf32> -> tensor<4x16xf32>
  %u = dist.all_gather %t on @mesh axes [dp] gather_dim 0 : tensor<4x16xf32> -> tensor<8x16xf32>
  return %s, %u : tensor<8x4xf32>, tensor<8x16xf32>
}

// Over other axes or dimensions they do not cancel.
// CHECK-LABEL: func.func @different
// CHECK: dist.all_gather
// CHECK: dist.all_slice
// CHECK: dist.all_gather
// CHECK: dist.all_slice
func.func @different(%x: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<16x2xf32>) {
  %g = dist.all_gather %x on @mesh axes [tp] gather_dim 1 : tensor<8x4xf32> -> tensor<8x16xf32>
  %s = dist.all_slice %g on @mesh axes [dp] slice_dim 1 : tensor<8x16xf32> -> tensor<8x8xf32>
  %h = dist.all_gather %x on @mesh axes [tp] gather_dim 0 : tensor<8x4xf32> -> tensor<32x4xf32>
  %t = dist.all_slice %h on @mesh axes [tp] slice_dim 1 : tensor<32x4xf32> -> tensor<32x1xf32>
  %0 = nn.reshape %s : tensor<8x8xf32> -> tensor<8x4x2xf32>
  %1 = nn.reshape %t : tensor<32x1xf32> -> tensor<16x2xf32>
  %2 = nn.reduce sum %0 axes = [2] : tensor<8x4x2xf32> -> tensor<8x4xf32>
  return %2, %1 : tensor<8x4xf32>, tensor<16x2xf32>
}

// A summed value sliced over the same axes is one reduce-scatter, which
// keeps the reason of the all-reduce.
// CHECK-LABEL: func.func @reduce_then_slice
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32>)
// CHECK: %[[R:.*]] = dist.reduce_scatter sum %[[X]] on @mesh axes [tp] scatter_dim 1 {dist.reason = "why"} : tensor<8x16xf32> -> tensor<8x4xf32>
// CHECK: return %[[R]]
func.func @reduce_then_slice(%x: tensor<8x16xf32>) -> tensor<8x4xf32> {
  %r = dist.all_reduce sum %x on @mesh axes [tp] {dist.reason = "why"} : tensor<8x16xf32>
  %s = dist.all_slice %r on @mesh axes [tp] slice_dim 1 : tensor<8x16xf32> -> tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}

// The maximum over devices that hold the same value is that value; a sum
// over them is not.
// CHECK-LABEL: func.func @idempotent
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32>)
// CHECK: %[[G:.*]] = dist.all_reduce sum %[[X]] on @mesh axes [dp, tp]
// CHECK-NEXT: %[[S:.*]] = dist.all_reduce sum %[[G]] on @mesh axes [tp]
// CHECK-NEXT: return %[[G]], %[[S]]
func.func @idempotent(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %g = dist.all_reduce sum %x on @mesh axes [dp, tp] : tensor<8x16xf32>
  %m = dist.all_reduce max %g on @mesh axes [tp] : tensor<8x16xf32>
  %s = dist.all_reduce sum %g on @mesh axes [tp] : tensor<8x16xf32>
  return %m, %s : tensor<8x16xf32>, tensor<8x16xf32>
}
