// RUN: partita-opt %s --split-input-file --partita-pipeline-split=microbatches=2 --partita-verify-pipeline | FileCheck %s -enable-var-scope

// Pipeline cuts in programs real exports write (issue 15).

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

// -----

// A decoder step with a KV cache returns every layer's present keys: they
// do not limit the cuts, but travel with the activation to the last stage,
// which returns them, so the layers split evenly (the cut once fell before
// the first layer's present, leaving stage 0 a single matmul).
// CHECK-LABEL: func.func @presents
// CHECK: dist.stage 0
// CHECK: nn.matmul
// CHECK-NOT: nn.matmul
// CHECK: %[[PRESENT:.*]] = nn.exp
// CHECK: %[[ACT:.*]] = nn.relu
// CHECK: dist.send %[[PRESENT]] on @mesh axis pp to 1 tag 0 : tensor<2x8xf32>
// CHECK: dist.send %[[ACT]] on @mesh axis pp to 1 tag 1024 : tensor<2x8xf32>
// CHECK: dist.stage 1 on @mesh axis pp -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: %[[CACHE0:.*]] = dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x8xf32>
// CHECK: %[[IN:.*]] = dist.recv on @mesh axis pp from 0 tag 1024 : tensor<2x8xf32>
// CHECK: nn.matmul %[[IN]]
// CHECK: %[[CACHE1:.*]] = dist.recv on @mesh axis pp from 0 tag 1 : tensor<2x8xf32>
// CHECK: %[[OUT:.*]] = nn.concat %{{.*}}, %{{.*}} axis = 0
// CHECK: %[[CACHE:.*]] = nn.concat %[[CACHE0]], %[[CACHE1]] axis = 0
// CHECK: %[[NEXT:.*]] = nn.concat
// CHECK: dist.yield %[[OUT]], %[[CACHE]], %[[NEXT]]
dist.mesh @mesh [pp = 2]
func.func @presents(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> (tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}, tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}, tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) {
  %w1 = nn.constant dense<0.5> : tensor<8x8xf32>
  %w2 = nn.constant dense<0.25> : tensor<8x8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p1 = nn.exp %h1 : tensor<4x8xf32>
  %r1 = nn.relu %h1 : tensor<4x8xf32>
  %h2 = nn.matmul %r1, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p2 = nn.exp %h2 : tensor<4x8xf32>
  %r2 = nn.relu %h2 : tensor<4x8xf32>
  return %r2, %p1, %p2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
