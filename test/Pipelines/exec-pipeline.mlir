// RUN: partita-opt %s --partita-exec-pipeline=rank=1 | FileCheck %s -enable-var-scope
// RUN: partita-opt %s --partita-exec-pipeline="rank=0 fuse=false" | FileCheck %s -enable-var-scope --check-prefix=NOFUSE

// Rank 1's program of a tp=2 function: specialized, its chain fused, then
// planned; the rank's block of the replicated weight is its own constant.
// CHECK-LABEL: func.func @main
// CHECK-SAME: exec.arena_bytes = {{[0-9]+}} : i64
// CHECK-SAME: exec.rank = 1 : i64, exec.world_size = 2 : i64
// CHECK: exec.slice_block %{{.*}} dim 1 block 1 of 2 {{.*}}kind = constant
// CHECK: %[[K:.*]] = exec.kernel -> tensor<4x4xf32> attributes {exec.buffers = [#exec.buffer<id = 2, kind = activation
// CHECK-NEXT: nn.matmul
// CHECK-NEXT: nn.relu
// CHECK: dist.all_gather %[[K]] {{.*}}exec.group = array<i32: 0, 1>
// NOFUSE-LABEL: func.func @main
// NOFUSE-NOT: exec.kernel
// NOFUSE: exec.slice_block %{{.*}} dim 1 block 0 of 2
dist.mesh @mesh [tp = 2]
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w = nn.constant dense<0.5> : tensor<8x8xf32>
  %b = dist.all_slice %w on @mesh axes [tp] slice_dim 1 : tensor<8x8xf32> -> tensor<8x4xf32>
  %m = nn.matmul %x, %b : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %r = nn.relu %m : tensor<4x4xf32>
  %g = dist.all_gather %r on @mesh axes [tp] gather_dim 1 : tensor<4x4xf32> -> tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}
