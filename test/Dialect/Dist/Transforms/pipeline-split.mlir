// RUN: partita-opt %s --partita-pipeline-split --partita-verify-pipeline | FileCheck %s
// RUN: partita-opt %s --partita-pipeline-split=microbatches=2 --partita-verify-pipeline | FileCheck %s --check-prefix=MICRO
// RUN: not partita-opt %s --partita-pipeline-split=microbatches=3 2>&1 | FileCheck %s --check-prefix=UNEVEN
// RUN: partita-opt %s --partita-pipeline-split="microbatches=2 virtual-stages=2" --partita-verify-pipeline | FileCheck %s --check-prefix=INTERLEAVED

// Two blocks of equal cost on pp=2: the cut falls where only the first
// block's output crosses; each stage recomputes the input-derived mask and
// holds its own weight; the last stage yields the result.
// CHECK: module attributes {dist.pipeline = #dist.pipeline<stages = 2, microbatches = 1, schedule = gpipe, virtual_stages = 1, stage_seconds = {{\[}}[[COST:.*]], [[COST]]]>}
// CHECK: dist.stage 0 on @mesh axis pp {
// CHECK-NEXT: nn.constant dense<5.000000e-01>
// CHECK-NEXT: %[[MASK0:.*]] = nn.neg %arg1
// CHECK-NEXT: nn.matmul %arg0
// CHECK: %[[OUT0:.*]] = nn.relu
// CHECK-NEXT: dist.send %[[OUT0]] on @mesh axis pp to 1 tag 0 : tensor<4x8xf32>
// CHECK-NEXT: dist.yield
// CHECK: %[[R:.*]] = dist.stage 1 on @mesh axis pp -> (tensor<4x8xf32>) {
// CHECK-NEXT: nn.constant dense<2.500000e-01>
// CHECK-NEXT: nn.neg %arg1
// CHECK-NEXT: %[[IN1:.*]] = dist.recv on @mesh axis pp from 0 tag 0 : tensor<4x8xf32>
// CHECK-NEXT: nn.matmul %[[IN1]]
// CHECK: return %[[R]]

// Two microbatches: each stage runs them in turn on their rows, with one
// transfer each, and the last stage concatenates.
// MICRO: dist.stage 0
// MICRO: nn.slice %arg0 start = [0, 0] limit = [2, 8]
// MICRO: dist.send {{.*}} tag 0 : tensor<2x8xf32>
// MICRO: nn.slice %arg0 start = [2, 0] limit = [4, 8]
// MICRO: dist.send {{.*}} tag 1 : tensor<2x8xf32>
// MICRO: dist.stage 1
// MICRO: dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x8xf32>
// MICRO: dist.recv on @mesh axis pp from 0 tag 1 : tensor<2x8xf32>
// MICRO: nn.concat {{.*}} axis = 0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>

// Two chunks per rank: chunk c on rank c % 2, in interleaved order (chunk
// 0 on rank 0, 1 on rank 1, 2 on rank 0 again, 3 on rank 1), the last
// handing nothing back; inside a region the next microbatch is received
// before the current one is sent.
// INTERLEAVED: schedule = interleaved
// INTERLEAVED: dist.stage 0 on @mesh axis pp {
// INTERLEAVED: dist.send {{.*}} to 1 tag 0
// INTERLEAVED: dist.send {{.*}} to 1 tag 1
// INTERLEAVED: dist.stage 1 on @mesh axis pp {
// INTERLEAVED: dist.recv on @mesh axis pp from 0 tag 0
// INTERLEAVED: dist.recv on @mesh axis pp from 0 tag 1
// INTERLEAVED-NEXT: dist.send {{.*}} to 0 tag 65536
// INTERLEAVED: dist.send {{.*}} to 0 tag 65537
// INTERLEAVED: dist.stage 0 on @mesh axis pp {
// INTERLEAVED: dist.recv on @mesh axis pp from 1 tag 65536
// INTERLEAVED: dist.stage 1 on @mesh axis pp -> (tensor<4x8xf32>) {
// INTERLEAVED: dist.recv on @mesh axis pp from 0 tag 131072
// INTERLEAVED: nn.concat

// UNEVEN: error: --microbatches 3 does not divide the batch 4 of input '?' (per data-parallel replica)

dist.mesh @mesh [pp = 2]
func.func @two_blocks(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}, %m: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) -> (tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) {
  %w1 = nn.constant dense<0.5> : tensor<8x8xf32>
  %w2 = nn.constant dense<0.25> : tensor<8x8xf32>
  %mask = nn.neg %m : tensor<4x8xf32>
  %h1 = nn.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a1 = nn.add %h1, %mask : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r1 = nn.relu %a1 : tensor<4x8xf32>
  %h2 = nn.matmul %r1, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a2 = nn.add %h2, %mask : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r2 = nn.relu %a2 : tensor<4x8xf32>
  return %r2 : tensor<4x8xf32>
}
