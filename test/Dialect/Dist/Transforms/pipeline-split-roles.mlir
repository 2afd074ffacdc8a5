// RUN: partita-opt %s --partita-pipeline-split --partita-verify-pipeline | FileCheck %s -enable-var-scope

// The stages run over the axis of the pipeline role, whatever its name, and
// an activation every rank of the tensor role holds whole travels in 1/2
// slices over that axis, gathered on arrival.
// CHECK: dist.stage 0 on @mesh axis stages {
// CHECK: %[[SLICE:.*]] = dist.all_slice %{{.*}} on @mesh axes [model] slice_dim 1
// CHECK-NEXT: dist.send %[[SLICE]] on @mesh axis stages to 1 tag 0 : tensor<4x4xf32>
// CHECK: dist.stage 1 on @mesh axis stages
// CHECK: %[[IN:.*]] = dist.recv on @mesh axis stages from 0 tag 0 : tensor<4x4xf32>
// CHECK-NEXT: dist.all_gather %[[IN]] on @mesh axes [model] gather_dim 1 {dist.reason = "pipeline stage 1: each model rank received 1/2 of the activation"}
dist.mesh @mesh [stages = 2 : pp, model = 2 : tp]
func.func @two_blocks(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> (tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) {
  %w1 = nn.constant dense<0.5> : tensor<8x8xf32>
  %w2 = nn.constant dense<0.25> : tensor<8x8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %h1 : tensor<4x8xf32>
  %h2 = nn.matmul %r1, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %h2 : tensor<4x8xf32>
  return %r2 : tensor<4x8xf32>
}
