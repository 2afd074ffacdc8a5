// RUN: partita-opt %s --split-input-file --partita-specialize-rank=rank=1 | FileCheck %s -enable-var-scope
// RUN: partita-opt %s --split-input-file --partita-specialize-rank=rank=0 -verify-diagnostics | FileCheck %s -enable-var-scope --check-prefix=RANK0
// RUN: not partita-opt %s --split-input-file --partita-specialize-rank=rank=3 2>&1 | FileCheck %s --check-prefix=RANGE

// RANGE: error: rank 3 is not one of the 2 ranks of the mesh

// Rank 1 of tp=2: the axis index is the constant 1, so the guard that
// keeps a partial sum's bias on group member 0 only folds to zeros (the
// scalar broadcast), and the compare goes; the group becomes global ranks.
// CHECK-LABEL: func.func @bias_guard
// CHECK-SAME: exec.rank = 1 : i64, exec.world_size = 2 : i64
// CHECK: nn.constant dense<1> : tensor<i64>
// CHECK-NOT: nn.compare
// CHECK-NOT: nn.where
// CHECK: %[[ZERO:.*]] = nn.constant dense<0.000000e+00> : tensor<4x8xf32>
// CHECK: dist.all_reduce sum %[[ZERO]] on @mesh axes [tp] {exec.group = array<i32: 0, 1>}
// RANK0-LABEL: func.func @bias_guard
// RANK0-NOT: nn.where
// RANK0: dist.all_reduce sum %arg0
module {
dist.mesh @mesh [tp = 2]
func.func @bias_guard(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %i = dist.axis_index on @mesh axes [tp] : tensor<i64>
  %c0 = nn.constant dense<0> : tensor<i64>
  %first = nn.compare eq, %i, %c0 : (tensor<i64>, tensor<i64>) -> tensor<i1>
  %z = nn.constant dense<0.0> : tensor<f32>
  %guarded = nn.where %first, %x, %z : (tensor<i1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %r = dist.all_reduce sum %guarded on @mesh axes [tp] : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
}

// -----

// A where whose chosen side has the result type folds to that value.
// CHECK-LABEL: func.func @same_type
// CHECK-NOT: nn.where
// CHECK: return %arg0
// RANK0-LABEL: func.func @same_type
// RANK0: return %arg1
module {
dist.mesh @mesh [tp = 2]
func.func @same_type(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %i = dist.axis_index on @mesh axes [tp] : tensor<i64>
  %c0 = nn.constant dense<0> : tensor<i64>
  %ne = nn.compare ne, %i, %c0 : (tensor<i64>, tensor<i64>) -> tensor<i1>
  %w = nn.where %ne, %a, %b : (tensor<i1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %w : tensor<4xf32>
}
}

// -----

// Rank 1 of pp=2 runs stage 1 where it stood; stage 0's output leaves the
// function, named in exec.outputs_elsewhere; peers are global ranks.
// CHECK-LABEL: func.func @stages
// CHECK-SAME: tensor<4xf32> {exec.binding = "x",{{.*}}-> (tensor<4xf32> {exec.binding = "y",
// CHECK-SAME: exec.outputs_elsewhere = ["early"]
// CHECK-NOT: dist.stage
// CHECK: %[[IN:.*]] = dist.recv on @mesh axis pp from 0 tag 0 {exec.peer = 0 : i32}
// CHECK: %[[OUT:.*]] = nn.relu %[[IN]]
// CHECK: return %[[OUT]]
// RANK0-LABEL: func.func @stages
// RANK0-SAME: -> (tensor<4xf32> {exec.binding = "early",
// RANK0-SAME: exec.outputs_elsewhere = ["y"]
// RANK0: dist.send %{{.*}} on @mesh axis pp to 1 tag 0 {exec.peer = 1 : i32}
module {
dist.mesh @mesh [pp = 2]
func.func @stages(%x: tensor<4xf32> {onnx.name = "x"}) -> (tensor<4xf32> {onnx.name = "early"}, tensor<4xf32> {onnx.name = "y"}) {
  %e = dist.stage 0 on @mesh axis pp -> (tensor<4xf32>) {
    %h = nn.neg %x : tensor<4xf32>
    dist.send %h on @mesh axis pp to 1 tag 0 : tensor<4xf32>
    dist.yield %h : tensor<4xf32>
  }
  %y = dist.stage 1 on @mesh axis pp -> (tensor<4xf32>) {
    %h = dist.recv on @mesh axis pp from 0 tag 0 : tensor<4xf32>
    %r = nn.relu %h : tensor<4xf32>
    dist.yield %r : tensor<4xf32>
  }
  return %e, %y : tensor<4xf32>, tensor<4xf32>
}
}

// -----

// A replicated value's slice is the rank's block; unnamed results are
// bound by position.
// CHECK-LABEL: func.func @slices
// CHECK-SAME: -> (tensor<4x2xf32> {exec.binding = "output0"})
// CHECK: exec.slice_block %{{.*}} dim 1 block 1 of 2 : tensor<4x4xf32> -> tensor<4x2xf32>
// RANK0: exec.slice_block %{{.*}} dim 1 block 0 of 2
module {
dist.mesh @mesh [tp = 2]
func.func @slices(%x: tensor<4x4xf32>) -> tensor<4x2xf32> {
  %s = dist.all_slice %x on @mesh axes [tp] slice_dim 1 : tensor<4x4xf32> -> tensor<4x2xf32>
  return %s : tensor<4x2xf32>
}
}

// -----

// Interleaved chunks: the second chunk of stage 1 reads the first's result.
// Rank 1 runs both in order; rank 0 drops both.
// CHECK-LABEL: func.func @chunks
// CHECK: %[[A:.*]] = nn.neg %arg0
// CHECK: nn.exp %[[A]]
// RANK0-LABEL: func.func @chunks
// RANK0-NOT: nn.neg
// RANK0-NOT: nn.exp
module {
dist.mesh @mesh [pp = 2]
func.func @chunks(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = dist.stage 1 on @mesh axis pp -> (tensor<4xf32>) {
    %n = nn.neg %x : tensor<4xf32>
    dist.yield %n : tensor<4xf32>
  }
  %b = dist.stage 1 on @mesh axis pp -> (tensor<4xf32>) {
    %e = nn.exp %a : tensor<4xf32>
    dist.yield %e : tensor<4xf32>
  }
  return %b : tensor<4xf32>
}
}

// -----

// Code every rank runs may not read a stage's result (rank 0 does not
// compute it).
// CHECK-LABEL: func.func @outside
// CHECK: nn.abs
module {
dist.mesh @mesh [pp = 2]
func.func @outside(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = dist.stage 1 on @mesh axis pp -> (tensor<4xf32>) {
    %n = nn.neg %x : tensor<4xf32>
    dist.yield %n : tensor<4xf32>
  }
  // expected-error@+1 {{uses a value of pipeline stage 1, which rank 0 does not run}}
  %b = nn.abs %a : tensor<4xf32>
  return %b : tensor<4xf32>
}
}
