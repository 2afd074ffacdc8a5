// RUN: partita-opt %s -split-input-file --partita-collective-matmul=force | FileCheck %s
// RUN: partita-opt %s -split-input-file --partita-collective-matmul | FileCheck %s --check-prefix=AUTO

dist.mesh @mesh [tp = 2]

// all_gather of the rows, then a matmul: each rank multiplies the block it
// holds while passing it on; the blocks are put in row order at the end.
// CHECK-LABEL: func.func @gather_matmul
// CHECK-SAME: (%[[X:.*]]: tensor<1x4x8xf32>, %[[W:.*]]: tensor<8x6xf32>)
// CHECK-NOT: dist.all_gather
// CHECK: %[[NEXT:.*]] = dist.collective_permute %[[X]] on @mesh axes [tp] shift 1 : tensor<1x4x8xf32>
// CHECK: %[[Y0:.*]] = nn.matmul %[[X]], %[[W]] : (tensor<1x4x8xf32>, tensor<8x6xf32>) -> tensor<1x4x6xf32>
// CHECK: %[[Y1:.*]] = nn.matmul %[[NEXT]], %[[W]]
// CHECK: dist.axis_index on @mesh axes [tp]
// CHECK: %[[ALL:.*]] = nn.concat %[[Y0]], %[[Y1]] axis = 1 : (tensor<1x4x6xf32>, tensor<1x4x6xf32>) -> tensor<1x8x6xf32>
// CHECK: %[[R:.*]] = nn.gather %[[ALL]], %{{.*}} axis = 1 : (tensor<1x8x6xf32>, tensor<8xi64>) -> tensor<1x8x6xf32>
// CHECK: return %[[R]]
// The cost model finds these shapes too small to pay.
// AUTO-LABEL: func.func @gather_matmul
// AUTO: dist.all_gather
func.func @gather_matmul(%x: tensor<1x4x8xf32>, %w: tensor<8x6xf32>) -> tensor<1x8x6xf32> {
  %g = dist.all_gather %x on @mesh axes [tp] gather_dim 1 : tensor<1x4x8xf32> -> tensor<1x8x8xf32>
  %y = nn.matmul %g, %w : (tensor<1x8x8xf32>, tensor<8x6xf32>) -> tensor<1x8x6xf32>
  return %y : tensor<1x8x6xf32>
}

// -----

dist.mesh @mesh [tp = 2]

// A partial matmul reduce-scattered over its rows: step t computes the block
// rank r - t - 1 will own and adds the running sum from the previous rank.
// CHECK-LABEL: func.func @matmul_scatter
// CHECK-SAME: (%[[X:.*]]: tensor<1x8x4xf32>, %[[W:.*]]: tensor<4x6xf32>)
// CHECK-NOT: dist.reduce_scatter
// CHECK: %[[B0:.*]] = nn.gather %[[X]], %{{.*}} axis = 1 : (tensor<1x8x4xf32>, tensor<4xi64>) -> tensor<1x4x4xf32>
// CHECK: %[[P0:.*]] = nn.matmul %[[B0]], %[[W]]
// CHECK: %[[B1:.*]] = nn.gather %[[X]]
// CHECK: %[[P1:.*]] = nn.matmul %[[B1]], %[[W]]
// CHECK: %[[RECV:.*]] = dist.collective_permute %[[P0]] on @mesh axes [tp] shift 1
// CHECK: %[[SUM:.*]] = nn.add %[[RECV]], %[[P1]]
// CHECK: return %[[SUM]]
func.func @matmul_scatter(%x: tensor<1x8x4xf32>, %w: tensor<4x6xf32>) -> tensor<1x4x6xf32> {
  %p = nn.matmul %x, %w : (tensor<1x8x4xf32>, tensor<4x6xf32>) -> tensor<1x8x6xf32>
  %s = dist.reduce_scatter sum %p on @mesh axes [tp] scatter_dim 1 : tensor<1x8x6xf32> -> tensor<1x4x6xf32>
  return %s : tensor<1x4x6xf32>
}

// -----

dist.mesh @mesh [tp = 2]

// Separate projections of one gathered input share one ring: each step
// multiplies the block by every weight.
// CHECK-LABEL: func.func @shared_gather
// CHECK-NOT: dist.all_gather
// CHECK: dist.collective_permute
// CHECK-NOT: dist.collective_permute
// CHECK-COUNT-4: nn.matmul
// CHECK-COUNT-2: nn.gather
func.func @shared_gather(%x: tensor<1x4x8xf32>, %wq: tensor<8x6xf32>, %wk: tensor<8x6xf32>) -> (tensor<1x8x6xf32>, tensor<1x8x6xf32>) {
  %g = dist.all_gather %x on @mesh axes [tp] gather_dim 1 : tensor<1x4x8xf32> -> tensor<1x8x8xf32>
  %q = nn.matmul %g, %wq : (tensor<1x8x8xf32>, tensor<8x6xf32>) -> tensor<1x8x6xf32>
  %k = nn.matmul %g, %wk : (tensor<1x8x8xf32>, tensor<8x6xf32>) -> tensor<1x8x6xf32>
  return %q, %k : tensor<1x8x6xf32>, tensor<1x8x6xf32>
}
