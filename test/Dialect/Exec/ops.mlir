// RUN: partita-opt -split-input-file %s | partita-opt -split-input-file | FileCheck %s -enable-var-scope

// CHECK-LABEL: func.func @kernel
// CHECK: %[[K:.*]] = exec.kernel -> tensor<4xf32> {
// CHECK-NEXT: %[[N:.*]] = nn.neg %arg0
// CHECK-NEXT: %[[E:.*]] = nn.exp %[[N]]
// CHECK-NEXT: exec.yield %[[E]] : tensor<4xf32>
func.func @kernel(%x: tensor<4xf32>) -> tensor<4xf32> {
  %k = exec.kernel -> tensor<4xf32> {
    %n = nn.neg %x : tensor<4xf32>
    %e = nn.exp %n : tensor<4xf32>
    exec.yield %e : tensor<4xf32>
  }
  return %k : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @block_and_copy
// CHECK: exec.slice_block %arg0 dim 1 block 1 of 2 : tensor<4x8xf32> -> tensor<4x4xf32>
// CHECK: exec.copy %{{.*}} : tensor<4x4xf32>
func.func @block_and_copy(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  %b = exec.slice_block %x dim 1 block 1 of 2 : tensor<4x8xf32> -> tensor<4x4xf32>
  %c = exec.copy %b : tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}

// -----

// CHECK-LABEL: func.func @planned
// CHECK-SAME: exec.buffer = #exec.buffer<id = 0, kind = input>
// CHECK-SAME: exec.arena_bytes = 64 : i64
// CHECK: #exec.buffer<id = 1, kind = activation, first_write = 0, last_read = 0>
// CHECK: #exec.buffer<id = 2, kind = weight, weight = "w">
func.func @planned(%x: tensor<4xf32> {exec.buffer = #exec.buffer<id = 0, kind = input>}) -> tensor<4xf32> attributes {exec.arena_bytes = 64 : i64, exec.rank = 0 : i64, exec.world_size = 1 : i64} {
  %n = nn.neg %x {exec.buffers = [#exec.buffer<id = 1, kind = activation, first_write = 0, last_read = 0>]} : tensor<4xf32>
  %w = nn.constant {exec.buffers = [#exec.buffer<id = 2, kind = weight, weight = "w">]} dense<1.0> : tensor<4xf32>
  return %n : tensor<4xf32>
}
