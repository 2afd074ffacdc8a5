// RUN: partita-opt %s --partita-schedule | FileCheck %s

dist.mesh @mesh [tp = 2]

// Two microbatches in program order: each all-reduce is waited for right
// away. The scheduler starts the first, computes the second microbatch while
// it is in flight, and waits only when nothing else can run.
// CHECK-LABEL: func.func @two_microbatches
// CHECK: %[[P0:.*]] = nn.matmul %arg0
// CHECK-NEXT: %[[T0:.*]] = dist.all_reduce_start sum %[[P0]]
// CHECK-NEXT: %[[P1:.*]] = nn.matmul %arg1
// CHECK-NEXT: %[[T1:.*]] = dist.all_reduce_start sum %[[P1]]
// CHECK-NEXT: %[[R0:.*]] = dist.wait %[[T0]]
// CHECK-NEXT: nn.relu %[[R0]]
// CHECK-NEXT: %[[R1:.*]] = dist.wait %[[T1]]
// CHECK-NEXT: nn.relu %[[R1]]
func.func @two_microbatches(%x0: tensor<64x64xf32>, %x1: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %p0 = nn.matmul %x0, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %t0 = dist.all_reduce_start sum %p0 on @mesh axes [tp] : tensor<64x64xf32> -> !dist.token<tensor<64x64xf32>>
  %r0 = dist.wait %t0 : !dist.token<tensor<64x64xf32>>
  %y0 = nn.relu %r0 : tensor<64x64xf32>
  %p1 = nn.matmul %x1, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %t1 = dist.all_reduce_start sum %p1 on @mesh axes [tp] : tensor<64x64xf32> -> !dist.token<tensor<64x64xf32>>
  %r1 = dist.wait %t1 : !dist.token<tensor<64x64xf32>>
  %y1 = nn.relu %r1 : tensor<64x64xf32>
  return %y0, %y1 : tensor<64x64xf32>, tensor<64x64xf32>
}
