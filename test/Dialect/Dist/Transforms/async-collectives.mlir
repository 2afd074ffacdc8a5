// RUN: partita-opt %s -split-input-file --partita-async-collectives | FileCheck %s
// RUN: partita-opt %s -split-input-file --partita-async-collectives=max-bytes-in-flight=100 | FileCheck %s --check-prefix=LIMIT

dist.mesh @mesh [tp = 2]

// The all-reduce starts as soon as its operand exists and is waited for
// just before its first use, so the independent matmul runs in between.
// CHECK-LABEL: func.func @overlap
// CHECK: %[[P:.*]] = nn.matmul %arg0, %arg1
// CHECK-NEXT: %[[T:.*]] = dist.all_reduce_start sum %[[P]] on @mesh axes [tp] : tensor<4x8xf32> -> !dist.token<tensor<4x8xf32>>
// CHECK-NEXT: %[[Q:.*]] = nn.matmul %arg2, %arg1
// CHECK-NEXT: %[[R:.*]] = dist.wait %[[T]] : !dist.token<tensor<4x8xf32>>
// CHECK-NEXT: nn.add %[[R]], %[[Q]]
// LIMIT-LABEL: func.func @overlap
// LIMIT: nn.matmul %arg2, %arg1
// LIMIT-NEXT: dist.all_reduce_start
// LIMIT-NEXT: dist.wait
func.func @overlap(%x: tensor<4x4xf32>, %w: tensor<4x8xf32>, %y: tensor<4x4xf32>) -> tensor<4x8xf32> {
  %p = nn.matmul %x, %w : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %q = nn.matmul %y, %w : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = dist.all_reduce sum %p on @mesh axes [tp] : tensor<4x8xf32>
  %s = nn.add %r, %q : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

// -----

dist.mesh @mesh [tp = 2]

// Starts keep the order of the collectives (every rank issues them alike),
// each after its operand; a collective of a function argument starts at the
// top.
// CHECK-LABEL: func.func @order
// CHECK: %[[G:.*]] = dist.all_gather_start %arg0 on @mesh axes [tp] gather_dim 0
// CHECK: %[[A:.*]] = nn.relu %arg1
// CHECK-NEXT: %[[S:.*]] = dist.reduce_scatter_start sum %[[A]] on @mesh axes [tp] scatter_dim 0
// CHECK: dist.wait %[[G]]
// CHECK: dist.wait %[[S]]
func.func @order(%x: tensor<2x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<2x8xf32>) {
  %a = nn.relu %y : tensor<4x8xf32>
  %g = dist.all_gather %x on @mesh axes [tp] gather_dim 0 : tensor<2x8xf32> -> tensor<4x8xf32>
  %s = dist.reduce_scatter sum %a on @mesh axes [tp] scatter_dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %n = nn.neg %g : tensor<4x8xf32>
  %m = nn.neg %s : tensor<2x8xf32>
  return %n, %m : tensor<4x8xf32>, tensor<2x8xf32>
}

// -----

dist.mesh @mesh [pp = 2, tp = 2]

// Inside a pipeline stage too.
// CHECK-LABEL: func.func @in_stage
// CHECK: dist.stage 0
// CHECK: dist.all_reduce_start
// CHECK: dist.wait
func.func @in_stage(%x: tensor<4xf32>) {
  dist.stage 0 on @mesh axis pp {
    %r = dist.all_reduce sum %x on @mesh axes [tp] : tensor<4xf32>
    dist.send %r on @mesh axis pp to 1 tag 0 : tensor<4xf32>
    dist.yield
  }
  return
}
