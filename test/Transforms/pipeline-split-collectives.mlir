// RUN: partita-opt %s --split-input-file --partita-pipeline-split=microbatches=2 --partita-verify-pipeline | FileCheck %s -enable-var-scope

// Microbatches split the batch through collectives that resize other
// dimensions: Ulysses' all-to-alls (sequence <-> heads over sp) keep
// dimension 0, so each microbatch's exchange has half the rows.
// CHECK-LABEL: func.func @ulysses
// CHECK: dist.stage 0
// CHECK: dist.all_to_all %{{.*}} on @mesh axes [sp] split_dim 2 concat_dim 1 : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
// CHECK: dist.all_to_all %{{.*}} on @mesh axes [sp] split_dim 2 concat_dim 1 : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
// CHECK: dist.stage 1
// CHECK: dist.all_to_all %{{.*}} on @mesh axes [sp] split_dim 1 concat_dim 2 : tensor<2x8x4xf32> -> tensor<2x4x8xf32>
// CHECK: dist.all_to_all %{{.*}} on @mesh axes [sp] split_dim 1 concat_dim 2 : tensor<2x8x4xf32> -> tensor<2x4x8xf32>
// CHECK: nn.concat {{.*}} axis = 0 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<4x4x8xf32>
dist.mesh @mesh [pp = 2, sp = 2]
func.func @ulysses(%x: tensor<4x4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {sp}, {}]>}) -> (tensor<4x4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {sp}, {}]>}) {
  %w1 = nn.constant dense<0.5> : tensor<8x8xf32>
  %w2 = nn.constant dense<0.25> : tensor<8x8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<4x4x8xf32>, tensor<8x8xf32>) -> tensor<4x4x8xf32>
  %a = dist.all_to_all %h1 on @mesh axes [sp] split_dim 2 concat_dim 1 : tensor<4x4x8xf32> -> tensor<4x8x4xf32>
  %r = nn.relu %a : tensor<4x8x4xf32>
  %e = nn.exp %r : tensor<4x8x4xf32>
  %b = dist.all_to_all %e on @mesh axes [sp] split_dim 1 concat_dim 2 : tensor<4x8x4xf32> -> tensor<4x4x8xf32>
  %h2 = nn.matmul %b, %w2 : (tensor<4x4x8xf32>, tensor<8x8xf32>) -> tensor<4x4x8xf32>
  return %h2 : tensor<4x4x8xf32>
}
